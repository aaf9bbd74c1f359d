//! A job's report (CSV) on shared storage, written so that a reader never sees a partial file:
//! into a temporary file in the same directory, fsync, then `rename` over the final name (atomic
//! on POSIX file systems and on NFS), then fsync of the directory so the rename itself survives
//! a crash. A reader opens either the previous complete report or the new complete one.
//!
//! The reports are opened in spreadsheets, and their cells hold what people typed (a product's
//! name, a closure's reason): a cell a spreadsheet would run as a formula is written as text
//! ([`csv_field`]).

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `contents` to `dir/name` atomically (see the module).
pub fn write_atomically(dir: &Path, name: &str, contents: &[u8]) -> std::io::Result<PathBuf> {
    let target = dir.join(name);
    // Hidden, and unique per writer: two writers never share a temporary file.
    let temporary = dir.join(format!(".{name}.{}.tmp", crate::idempotency::IdempotencyKey::fresh()));
    let written = (|| {
        let mut file = File::create_new(&temporary)?;
        file.write_all(contents)?;
        file.sync_all()?;
        fs::rename(&temporary, &target)?;
        File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temporary);
    }
    written.map(|()| target)
}

/// One CSV field, quoted when it must be (RFC 4180), and never a formula: a value starting
/// with `=`, `+`, `-`, `@`, a tab or a carriage return gets a leading `'` (OWASP's advice on CSV
/// injection), so a spreadsheet shows `=HYPERLINK(…)` typed as a product name instead of running
/// it. A plain negative number (`-5`, `-12.50`) is no formula and stays a number.
pub fn csv_field(value: &str) -> String {
    let value = if starts_like_a_formula(value) { format!("'{value}") } else { value.to_string() };
    if value.contains([',', '"', '\n', '\r']) { format!("\"{}\"", value.replace('"', "\"\"")) } else { value }
}

fn starts_like_a_formula(value: &str) -> bool {
    let number = |text: &str| {
        let (whole, fraction) = text.split_once('.').unwrap_or((text, "0"));
        !whole.is_empty() && [whole, fraction].iter().all(|part| part.bytes().all(|b| b.is_ascii_digit()))
    };
    match value.as_bytes().first() {
        Some(b'-') => !number(&value[1..]),
        Some(b'=' | b'+' | b'@' | b'\t' | b'\r') => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// A reader polls the report while it is rewritten 50 times with reports of different
    /// lengths; every read is one whole report (its first line says how many lines follow).
    #[test]
    fn a_reader_polling_during_fifty_writes_never_reads_a_partial_report() {
        let dir = std::env::temp_dir()
            .join(format!("haita-report-{}", crate::idempotency::IdempotencyKey::fresh()));
        fs::create_dir_all(&dir).expect("dir");
        let report = |n: usize| {
            let mut text = format!("rows,{n}\n");
            for i in 0..n {
                text.push_str(&format!("{i},{}\n", "x".repeat(200)));
            }
            text
        };
        write_atomically(&dir, "report.csv", report(1).as_bytes()).expect("first");
        let done = Arc::new(AtomicBool::new(false));
        let reader = {
            let (dir, done) = (dir.clone(), done.clone());
            std::thread::spawn(move || {
                let mut reads = 0;
                while !done.load(Ordering::Relaxed) {
                    let text = fs::read_to_string(dir.join("report.csv")).expect("the report always exists");
                    let (head, rest) = text.split_once('\n').expect("a header line");
                    let rows: usize = head.trim_start_matches("rows,").parse().expect("row count");
                    assert_eq!(rest.lines().count(), rows, "a partial report was read");
                    reads += 1;
                }
                reads
            })
        };
        for i in 0..50 {
            write_atomically(&dir, "report.csv", report(1 + (i * 37) % 400).as_bytes()).expect("write");
        }
        done.store(true, Ordering::Relaxed);
        let reads = reader.join().expect("reader");
        assert!(reads > 0);
        let leftovers: Vec<_> = fs::read_dir(&dir).expect("dir").filter_map(Result::ok).collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left behind");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn csv_fields_are_quoted_only_when_needed() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }

    /// OWASP's CSV injection advice: a cell a spreadsheet would read as a formula (starting with
    /// `=`, `+`, `-`, `@`, a tab or a carriage return) starts with a single quote instead, so it
    /// is shown as text. Numbers stay numbers.
    #[test]
    fn cells_a_spreadsheet_would_run_as_formulas_are_neutralised() {
        assert_eq!(csv_field("=HYPERLINK(\"http://x\")"), "\"'=HYPERLINK(\"\"http://x\"\")\"");
        assert_eq!(csv_field("+1+cmd|' /C calc'!A0"), "'+1+cmd|' /C calc'!A0");
        assert_eq!(csv_field("-2+3"), "'-2+3");
        assert_eq!(csv_field("@SUM(A1:A9)"), "'@SUM(A1:A9)");
        assert_eq!(csv_field("\t=1"), "'\t=1");
        assert_eq!(csv_field("\r=1"), "\"'\r=1\"");
        assert_eq!(csv_field("=1,2"), "\"'=1,2\"");
        for plain in ["-5", "-12.50", "0", "Room = 1", "a-b", ""] {
            assert_eq!(csv_field(plain), plain, "left as it is");
        }
    }
}

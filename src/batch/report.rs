//! A job's report (CSV) on shared storage, written so that a reader never sees a partial file:
//! into a temporary file in the same directory, fsync, then `rename` over the final name (atomic
//! on POSIX file systems and on NFS), then fsync of the directory so the rename itself survives
//! a crash. A reader opens either the previous complete report or the new complete one.

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

/// One CSV field, quoted when it must be (RFC 4180).
pub fn csv_field(value: &str) -> String {
    if value.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", value.replace('"', "\"\""))
    } else {
        value.to_string()
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
}

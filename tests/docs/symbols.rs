//! Symbols named in the prose resolve against the tree.
//!
//! Every inline code span outside fenced blocks and HTML comments is sorted by its shape, and
//! checked if it has one of these:
//! - a **repository path** (`src/…`, `tests/…`, `docs/…`, `migrations/…`, `scripts/…`,
//!   `templates/…`, `static/…`, `docker/…`, or a file of the root such as `Cargo.toml`): it
//!   exists; an `#anchor` is dropped, a `:line` is refused (lines move; name the item);
//! - a **Rust path** (`Namespace::booking`, `haita::locking::Turn`, `BookingError::Quota`,
//!   `cached_sql::<ST>(text)`): its last segment is declared in `src/` or `tests/` (an item, an
//!   impl's or trait's member, a variant, a field, a module) and the segments before it appear,
//!   in order, on the path it is declared under (so re-exports and `crate::`/`haita::` pass);
//!   paths into another crate (`diesel::…`, `std::…`, a dependency of Cargo.toml) are not
//!   checked;
//! - a **setting** (`LOCK_WAIT_SECS`, `DEMO_MODE=1`: upper case with an underscore, or a name
//!   being assigned): an environment variable of `src/config/mod.rs` or one read anywhere
//!   (`src/`, `tests/`, `scripts/`), a `const` or `static`, or one of [`SQL_WORDS`];
//! - an **answer** (`409 fully_booked`, `503 busy`): that status with that code is declared
//!   (`answers!`, `Answer::new(StatusCode::…, "…")`);
//! - a **test name** (snake case of four words or more): a fn of `tests/` or a `#[test]` fn;
//! - another **snake_case identifier** (`on_hand`, `insert_if_free`): declared in the tree (fn,
//!   field, variant, module, parameter, const in lower case), a word of a string literal of the
//!   tree (SQL columns and aliases, error codes, text keys, metric names, which the pages write
//!   with the registry's `haita_` prefix), a word of `migrations/` (tables, columns), or one of
//!   [`ALLOWED`].
//!
//! - a **CamelCase name** (`NamedLockGuard`): a type, trait or variant of the tree, or one of
//!   [`ALLOWED`] (diesel's).
//!
//! A call (`insert_if_free(…)`) is checked as its name. A single lower-case word (`book`) is
//! checked like any snake-case name, and passes as easily: most are words of some literal.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use crate::source::{self, Names, Source};

/// Words of the servers and of SQL written like settings, which the tree need not declare.
/// Kept short: anything of the project's own must resolve.
const SQL_WORDS: &[&str] = &[
    "GET_LOCK",
    "RELEASE_LOCK",
    "RELEASE_ALL_LOCKS",
    "IS_USED_LOCK",
    "IS_FREE_LOCK",
    "LAST_INSERT_ID",
    "COM_SET_OPTION",
    "COM_STMT_EXECUTE",
    "COM_STMT_PREPARE",
    "COM_STMT_CLOSE",
    "READ_COMMITTED",
    "REPEATABLE_READ",
    "LOCK_TIMEOUT",
    "O_EXCL",
    "O_NOFOLLOW",
    "O_CREAT",
    "ER_USER_LOCK_DEADLOCK",
];

/// Names of the prose that are not the project's identifiers but are written as code: the
/// servers' variables and functions, and other crates' items.
const ALLOWED: &[&str] = &[
    "innodb_lock_wait_timeout",
    "lock_timeout",
    "wait_timeout",
    "max_prepared_stmt_count",
    "metadata_lock_info",
    "performance_schema",
    "information_schema",
    "pg_locks",
    "pg_advisory_lock",
    "pg_try_advisory_lock",
    "pg_advisory_xact_lock",
    "pg_try_advisory_xact_lock",
    "pg_advisory_unlock",
    "pg_prepared_statements",
    "idle_in_transaction_session_timeout",
    "statement_timeout",
    "tx_isolation",
    "transaction_isolation",
    "wsrep_on",
    "group_replication",
    "sql_query",
    "batch_execute",
    "eq_any",
    "innodb_rollback_on_timeout",
    "web::block",
    "File::try_lock",
    // diesel's types and traits, named where the pages explain what the app builds on.
    "Insertable",
    "Integer",
    "Timestamp",
    "MysqlConnection",
    "PgConnection",
];

/// The root's files a span may name without a folder.
const ROOT_FILES: &[&str] = &[
    "Cargo.toml",
    "Cargo.lock",
    "Dockerfile",
    "docker-compose.yml",
    ".env.example",
    "README.md",
    "diesel.toml",
    "rustfmt.toml",
];

const PATH_PREFIXES: &[&str] =
    &["src/", "tests/", "docs/", "migrations/", "scripts/", "templates/", "static/", "docker/"];

/// What the tree declares, gathered once.
pub struct Index {
    root: std::path::PathBuf,
    names: Names,
    /// Environment variables read anywhere, and every upper-case word of `scripts/`.
    settings: BTreeSet<String>,
    /// Words of string literals and of `migrations/`.
    words: BTreeSet<String>,
    /// Crates other than this one whose paths are not checked.
    crates: BTreeSet<String>,
    answers: std::collections::HashMap<String, BTreeSet<u16>>,
}

/// Identifier-like words of `text`.
fn words_of(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty())
}

fn files_under(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

impl Index {
    pub fn build(source: &Source) -> Self {
        let names = Names::collect(source);
        let root = source.root.clone();
        let mut settings = BTreeSet::new();
        let mut words = BTreeSet::new();
        for literal in &names.strings {
            for word in words_of(literal) {
                if word.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_') {
                    settings.insert(word.to_string());
                }
                words.insert(word.to_string());
            }
        }
        let mut others = Vec::new();
        files_under(&root.join("scripts"), &mut others);
        others.extend(["Dockerfile", "docker-compose.yml", ".env.example"].iter().map(|f| root.join(f)));
        for file in &others {
            let text = fs::read_to_string(file).unwrap_or_default();
            words.extend(words_of(&text).map(str::to_string));
            settings.extend(
                words_of(&text)
                    .filter(|w| w.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                    .map(str::to_string),
            );
        }
        let mut migrations = Vec::new();
        files_under(&root.join("migrations"), &mut migrations);
        files_under(&root.join("src/lab/migrations"), &mut migrations);
        for file in migrations {
            let text = fs::read_to_string(file).unwrap_or_default();
            words.extend(words_of(&text).map(str::to_lowercase));
        }
        let mut crates: BTreeSet<String> = ["std", "core", "alloc", "proc_macro"].map(String::from).into();
        let manifest = fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
        let mut in_deps = false;
        for line in manifest.lines() {
            if line.starts_with('[') {
                in_deps = line.contains("dependencies");
            } else if in_deps && let Some((name, _)) = line.split_once('=') {
                crates.insert(name.trim().replace('-', "_"));
            }
        }
        let answers = source::answer_pairs(&names);
        Self { root, names, settings, words, crates, answers }
    }

    /// `(line, span, what was expected)` for each span of `page` that does not resolve.
    pub fn problems(&self, page: &str) -> Vec<(usize, String, String)> {
        spans(page)
            .into_iter()
            .filter_map(|(line, span)| self.check(&span).err().map(|what| (line, span, what)))
            .collect()
    }

    /// `Err(what was expected)` when `span` has a checked shape and does not resolve.
    fn check(&self, span: &str) -> Result<(), String> {
        let span = span.trim();
        if let Some(path) = repository_path(span) {
            return self.check_path(path);
        }
        if let Some((status, code)) = answer(span) {
            return match self.answers.get(code) {
                Some(statuses) if statuses.contains(&status) => Ok(()),
                Some(statuses) => Err(format!(
                    "`{code}` is answered with {}, not {status}",
                    statuses.iter().map(u16::to_string).collect::<Vec<_>>().join(" or ")
                )),
                None => Err(format!("no answers! declaration answers {status} with the code `{code}`")),
            };
        }
        if let Some(segments) = rust_path(span) {
            if self.crates.contains(&segments[0]) && !["haita", "crate"].contains(&segments[0].as_str()) {
                return Ok(());
            }
            let segments: Vec<&str> = segments
                .iter()
                .map(String::as_str)
                .skip_while(|s| ["crate", "haita", "self", "super"].contains(s))
                .collect();
            if segments.is_empty() || self.names.resolves(&segments) || ALLOWED.contains(&span) {
                return Ok(());
            }
            return Err(format!(
                "`{}` is declared nowhere in src/ or tests/ under that path",
                segments.join("::")
            ));
        }
        if let Some(name) = setting(span) {
            return if self.settings.contains(name)
                || self.names.consts.contains(name)
                || SQL_WORDS.contains(&name)
            {
                Ok(())
            } else {
                Err(format!(
                    "`{name}` is no environment variable read by the app, its tests or scripts/, no const, \
                     and not in SQL_WORDS (tests/docs/symbols.rs)"
                ))
            };
        }
        // `name(…)`: a call, checked as its name.
        let name = match span.split_once('(') {
            Some((name, _)) if span.ends_with(')') => name,
            _ => span,
        };
        if is_snake(name) {
            let known = self.names.declared.contains(name)
                || self.names.tests.contains(name)
                || self.words.contains(name)
                // A metric: the registry's `haita` prefix and a name registered in src/metrics.rs.
                || name.strip_prefix("haita_").is_some_and(|m| self.words.contains(m))
                || self.settings.contains(&name.to_uppercase())
                || self.names.consts.contains(&name.to_uppercase())
                || ALLOWED.contains(&name);
            return match (known, name.split('_').count() >= 4) {
                (true, _) => Ok(()),
                (false, true) => {
                    Err("no test (a fn of tests/, a #[test], or one declared by a macro of tests/) \
                                      and no identifier of the tree has this name"
                        .to_string())
                }
                (false, false) => {
                    Err("no identifier of src/ or tests/, column of migrations/, setting, or word of \
                                       ALLOWED (tests/docs/symbols.rs) is called this"
                        .to_string())
                }
            };
        }
        if is_camel(name) {
            return if self.names.declared.contains(name)
                || self.words.contains(name)
                || ALLOWED.contains(&name)
            {
                Ok(())
            } else {
                Err("no type, trait or variant of src/ or tests/ (or word of ALLOWED) is called this"
                    .to_string())
            };
        }
        Ok(())
    }

    fn check_path(&self, path: &str) -> Result<(), String> {
        let file = path.split('#').next().unwrap_or(path);
        if let Some((_, line)) = file.rsplit_once(':')
            && !line.is_empty()
            && line.chars().all(|c| c.is_ascii_digit() || c == '-')
        {
            return Err(
                "a line number goes stale with the next edit above it: name the item instead".to_string()
            );
        }
        if self.root.join(file).exists() { Ok(()) } else { Err(format!("{file} does not exist")) }
    }
}

/// The path of a span that names a file or folder of the repository (its first word), unless
/// it is a pattern (`*`, `{…}`, `…`, `<…>`).
fn repository_path(span: &str) -> Option<&str> {
    let first = span.split_whitespace().next()?;
    let named = PATH_PREFIXES.iter().any(|p| first.starts_with(p)) || ROOT_FILES.contains(&first);
    if !named || first.contains(['*', '{', '…', '<', '$']) {
        return None;
    }
    Some(first)
}

/// `409 fully_booked` or `409: fully_booked`.
fn answer(span: &str) -> Option<(u16, &str)> {
    let (status, code) = span.split_once(' ')?;
    let status = status.strip_suffix(':').unwrap_or(status);
    if status.len() != 3 || !status.chars().all(|c| c.is_ascii_digit()) || !is_snake(code) {
        return None;
    }
    Some((status.parse().ok()?, code))
}

/// The segments of a span shaped like a Rust path with `::`: `a::b::C`, `C::f()`, `m::f(x)`,
/// `f::<T>(…)`, `m!`, `&T::x` — nothing with spaces outside its parentheses.
fn rust_path(span: &str) -> Option<Vec<String>> {
    let span = span.trim_start_matches('&');
    // Cut arguments, a turbofish and a `!`.
    let head = span.split(['(', '{', '!', ' ']).next()?;
    let head = head.split("::<").next()?;
    if !head.contains("::") || head.ends_with("::") {
        return None;
    }
    if span.len() > head.len() {
        let rest = &span[head.len()..];
        let balanced = rest.starts_with('(')
            || rest.starts_with("::<")
            || rest.starts_with('!')
            || rest.starts_with('{');
        if !balanced {
            return None;
        }
    }
    let segments: Vec<String> = head.split("::").map(str::to_string).collect();
    let ident = |s: &String| {
        s.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_alphanumeric() || c == '_')
    };
    segments.iter().all(ident).then_some(segments)
}

/// The setting a span names: `LOCK_WAIT_SECS`, or `NAME` of `NAME=value`.
fn setting(span: &str) -> Option<&str> {
    let screaming = |s: &str| {
        s.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && s.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    };
    if let Some((name, _)) = span.split_once('=')
        && screaming(name)
        && name.len() > 1
    {
        return Some(name);
    }
    (screaming(span) && span.contains('_') && !span.starts_with('_') && !span.ends_with('_')).then_some(span)
}

/// `NamedLockGuard`, `Turn`: an upper-case letter, then letters and digits with a lower-case one.
fn is_camel(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && s.chars().any(|c| c.is_ascii_lowercase())
        && s.chars().all(|c| c.is_ascii_alphanumeric())
}

fn is_snake(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !s.ends_with('_')
        && !s.contains("__")
}

/// The inline code spans of a page outside fenced blocks and HTML comments, with their lines.
pub fn spans(page: &str) -> Vec<(usize, String)> {
    // Fenced blocks and comments blanked out, line breaks kept.
    let mut visible = crate::markdown::blank_fences(page);
    while let Some(start) = visible.find("<!--") {
        let end = visible[start..].find("-->").map_or(visible.len(), |e| start + e + 3);
        let blank: String = visible[start..end].chars().map(|c| if c == '\n' { '\n' } else { ' ' }).collect();
        visible.replace_range(start..end, &blank);
    }
    let chars: Vec<char> = visible.chars().collect();
    let mut found = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\n' => {
                line += 1;
                i += 1;
            }
            '`' => {
                let run = chars[i..].iter().take_while(|c| **c == '`').count();
                let mut j = i + run;
                let mut closed = None;
                while j < chars.len() {
                    if chars[j] == '`' {
                        let closing = chars[j..].iter().take_while(|c| **c == '`').count();
                        if closing == run {
                            closed = Some(j);
                            break;
                        }
                        j += closing;
                    } else {
                        j += 1;
                    }
                }
                match closed {
                    Some(end) => {
                        let inner: String = chars[i + run..end].iter().collect();
                        found.push((line, inner.trim().to_string()));
                        line += inner.matches('\n').count();
                        i = end + run;
                    }
                    None => i += run,
                }
            }
            _ => i += 1,
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_sorted_by_their_shape() {
        assert_eq!(rust_path("cached_sql::<ST>(text)"), None);
        assert_eq!(
            rust_path("db::transaction(conn, |conn| …)"),
            Some(vec!["db".into(), "transaction".into()])
        );
        assert_eq!(rust_path("Namespace::booking"), Some(vec!["Namespace".into(), "booking".into()]));
        assert_eq!(rust_path("a :: b"), None);
        assert_eq!(setting("DEMO_MODE=1"), Some("DEMO_MODE"));
        assert_eq!(setting("LOCK_WAIT_SECS"), Some("LOCK_WAIT_SECS"));
        assert_eq!(setting("COMMIT"), None);
        assert_eq!(answer("409 fully_booked"), Some((409, "fully_booked")));
        assert_eq!(answer("409: fully_booked"), Some((409, "fully_booked")));
        assert_eq!(repository_path("src/db/cached.rs#L3"), Some("src/db/cached.rs#L3"));
        assert_eq!(repository_path("migrations/*/"), None);
        assert_eq!(
            spans("a `x` b\n```\n`y`\n```\n<!-- `z` -->\n``c `d` e``\n"),
            [(1, "x".into()), (6, "c `d` e".into())]
        );
    }
}

//! The pages (`README.md`, `docs/*.md`, `docs/ja/*.md`) cannot drift from the code: this test
//! fails when they have, and `scripts/dev docs` (`HAITA_WRITE_DOCS=1`) rewrites what can be
//! rewritten. Needs no database. The formats are documented for contributors in
//! `docs/layout.md`.
//!
//! What is checked:
//! - **Code blocks.** A marker line directly before a fenced block names what it shows, and the
//!   block's content is generated from the source:
//!   - `<!-- code: PATH ITEM -->`: the item's lines as in the file, doc comments and attributes
//!     included, dedented. `ITEM` is `name` (a top-level fn, const, static, struct, enum, trait,
//!     type, `macro_rules!`), `Type::name` (an associated item of `impl Type`, `impl Trait for
//!     Type`, or a trait's), `module::name` (an inline `mod`'s), or `macro!First` (a macro call
//!     at item level, `First` being the first identifier inside it: `answers!BookingError`).
//!     A last word `body` shows only a fn's body lines; `head` its doc comments, attributes and
//!     signature, up to the line that opens the body.
//!   - `<!-- sql: PATH ITEM [N] [mysql|postgres] -->`: the `N`th (default first) statement among
//!     the item's string literals (`format!` and `concat!` resolved, a `{}` taking the `const`
//!     it names), laid out one clause per line ([`sql::format`]). Dialect tokens (`{now}`,
//!     `{share}`, `{? microseconds}`) are expanded by the app's own `db::dialect::expand` when an
//!     engine is named, and shown as written otherwise; `{list}` (a list of placeholders) always
//!     as written.
//!   - `<!-- checked: PATH [PATH…] -->`: a hand-written block (the statements of one request in
//!     order): each line, its `-- comment` dropped and split at `…`, must be found in a string
//!     literal of those files, compared with values, `$n` and lists as `?` ([`sql::normalise`]).
//!     A migration's `.sql` file counts as one literal, its statements without their comments;
//!     a block traced to migrations alone must be found there line by line.
//!   - `<!-- illustration -->`: SQL or Rust that is deliberately not the project's (the broken
//!     version of a race, a server's quirk). Not checked.
//!
//!   A ```` ```sql ```` or ```` ```rust ```` block without one of these markers fails.
//! - **Figures.** `<!-- figure: booking.mysql -->8<!-- /figure -->`: the number is the figure of
//!   `tests/it/figures.rs`, the table `tests/it/statements.rs` asserts against.
//! - **Symbols in prose** (`symbols`): inline code spans outside fenced blocks that name a
//!   repository path, a Rust path, a setting, an answer, a test or an identifier must resolve
//!   against the tree.
//!
//! Not checked: prose that states a number without a figure marker, text/shell/HTTP blocks,
//! spans that fit none of the symbol shapes (URLs, commands, values).

mod links;
mod markdown;
mod source;
mod sql;
mod symbols;

#[path = "../it/figures.rs"]
mod figures;

use std::fs;
use std::path::{Path, PathBuf};

use source::{Part, Source};

/// `README.md`, every `docs/*.md` and every `docs/ja/*.md`.
pub fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![root.join("README.md")];
    pages.extend(markdown::markdown_in(&root.join("docs")));
    pages.extend(markdown::markdown_in(&root.join("docs/ja")));
    pages
}

/// What a marker line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Marker {
    Code { path: String, item: String, part: Part },
    Sql { path: String, item: String, nth: usize, engine: Option<String> },
    Checked { paths: Vec<String> },
    Illustration,
}

/// The marker of a line, if it is one: `None` for any other line, an error for a marker that
/// does not parse.
fn parse_marker(line: &str) -> Option<Result<Marker, String>> {
    let inner = line.trim().strip_prefix("<!--")?.strip_suffix("-->")?.trim();
    let (kind, rest) = inner.split_once(':').map_or((inner, ""), |(k, r)| (k.trim(), r.trim()));
    let words: Vec<&str> = rest.split_whitespace().collect();
    let marker = match kind {
        "illustration" => Ok(Marker::Illustration),
        "code" => match words.as_slice() {
            [path, item] => {
                Ok(Marker::Code { path: path.to_string(), item: item.to_string(), part: Part::Whole })
            }
            [path, item, "body"] => {
                Ok(Marker::Code { path: path.to_string(), item: item.to_string(), part: Part::Body })
            }
            [path, item, "head"] => {
                Ok(Marker::Code { path: path.to_string(), item: item.to_string(), part: Part::Head })
            }
            _ => Err(format!("`{inner}`: expected `code: PATH ITEM [body|head]`")),
        },
        "sql" => {
            let mut marker = None;
            if let [path, item, options @ ..] = words.as_slice() {
                let (mut nth, mut engine, mut bad) = (1, None, false);
                for option in options {
                    match *option {
                        "mysql" | "postgres" => engine = Some(option.to_string()),
                        n => match n.parse::<usize>() {
                            Ok(n) if n >= 1 => nth = n,
                            _ => bad = true,
                        },
                    }
                }
                if !bad {
                    marker =
                        Some(Marker::Sql { path: path.to_string(), item: item.to_string(), nth, engine });
                }
            }
            marker.ok_or_else(|| format!("`{inner}`: expected `sql: PATH ITEM [N] [mysql|postgres]`"))
        }
        "checked" if !words.is_empty() => {
            Ok(Marker::Checked { paths: words.iter().map(|w| w.to_string()).collect() })
        }
        "checked" => Err(format!("`{inner}`: expected `checked: PATH [PATH…]`")),
        // Other comments (figures, notes) are not block markers.
        _ => return None,
    };
    Some(marker)
}

/// A fenced block: the line of its marker (if the line before it is one), the lines of its
/// opening and closing fences (0-based), its language and its content.
struct Block {
    marker: Option<(usize, Result<Marker, String>)>,
    open: usize,
    close: usize,
    lang: String,
    content: String,
}

/// The fenced blocks of a page, and markers not followed by a block (as problems).
fn blocks(lines: &[&str]) -> (Vec<Block>, Vec<(usize, String)>) {
    let mut found = Vec::new();
    let mut stray = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        if let Some(fence) = ["```", "~~~"].into_iter().find(|f| trimmed.starts_with(f)) {
            let lang = trimmed[fence.len()..].trim().to_string();
            let close = (i + 1..lines.len()).find(|&j| lines[j].trim() == fence).unwrap_or(lines.len());
            let marker = i.checked_sub(1).and_then(|m| parse_marker(lines[m]).map(|parsed| (m, parsed)));
            let content: String =
                lines[i + 1..close.min(lines.len())].iter().map(|l| format!("{l}\n")).collect();
            found.push(Block { marker, open: i, close, lang, content });
            i = close + 1;
            continue;
        }
        if parse_marker(lines[i]).is_some()
            && !lines.get(i + 1).is_some_and(|n| n.trim_start().starts_with("```"))
        {
            stray.push((
                i,
                "a block marker must stand on the line directly before a fenced block".to_string(),
            ));
        }
        i += 1;
    }
    (found, stray)
}

/// What a marker's block must hold, generated from the source.
fn generate(source: &Source, marker: &Marker) -> Result<Option<String>, String> {
    match marker {
        Marker::Code { path, item, part } => source::item_text(source, path, item, *part).map(Some),
        Marker::Sql { path, item, nth, engine } => {
            let text = source::item_sql(source, path, item, *nth)?;
            // `{list}` is a list statement's, filled in with its placeholders before the dialect's
            // tokens (`db::cached::ListStatements`); a page shows it as written.
            const LIST: &str = "\u{1}list\u{1}";
            let expand = |engine: haita::db::Engine| {
                haita::db::dialect::expand(engine.dialect(), &text.replace("{list}", LIST))
                    .map(|sql| sql.replace(LIST, "{list}"))
                    .map_err(|e| e.to_string())
            };
            let text = match engine.as_deref() {
                Some("mysql") => expand(haita::db::Engine::Mysql)?,
                Some(_) => expand(haita::db::Engine::Postgres)?,
                None => text.clone(),
            };
            Ok(Some(sql::format(&text)))
        }
        Marker::Checked { .. } | Marker::Illustration => Ok(None),
    }
}

/// The lines of a `checked` block that cannot be traced to its files. A line, its `-- comment`
/// dropped and split at `…`, is traced when each piece is part of a string literal of the files
/// (compared in [`sql::normalise`]'s form, each literal also as each engine's dialect sends it);
/// or, for statements diesel's query builder writes (no literal of the files starts with the
/// same verb on the same table, [`sql::statement_key`]), when every name in
/// it — lower-case words (tables, columns, aliases) and upper-case words with an underscore
/// (`GET_LOCK`, `LAST_INSERT_ID`) — is named in those files' code or string literals.
fn unchecked_lines(source: &Source, paths: &[String], content: &str) -> Result<Vec<String>, String> {
    let mut literals = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    for path in paths {
        if path.ends_with(".sql") {
            // A migration: its statements, comments left out, are the one literal it holds.
            let text = std::fs::read_to_string(source.root.join(path)).map_err(|e| format!("{path}: {e}"))?;
            let statements: String =
                text.lines().map(|l| l.split("--").next().unwrap_or("")).collect::<Vec<_>>().join(" ");
            names.extend(sql::names(&statements).into_iter().map(str::to_string));
            literals.push(sql::normalise(&statements));
            continue;
        }
        for literal in source::literals_of_file(source, path)? {
            // Each literal as written and as each engine sends it (a literal with a `{…}` no
            // dialect knows, a format string, is kept as written only).
            for engine in [haita::db::Engine::Mysql, haita::db::Engine::Postgres] {
                if let Ok(sent) = haita::db::dialect::expand(engine.dialect(), &literal) {
                    literals.push(sql::normalise(&sent));
                }
            }
            literals.push(sql::normalise(&literal));
        }
        names.extend(source::names_in_code(source, path)?);
    }
    let mut missing = Vec::new();
    for line in content.lines() {
        let statement = line.split("--").next().unwrap_or("").trim();
        for piece in statement.split('…') {
            // Edges cut by an elision: `x IN (?, …)` leaves `x IN (?,`.
            let piece =
                piece.trim().trim_end_matches([';', ',', '(', ' ']).trim_start_matches([')', ',', ';', ' ']);
            let wanted = sql::normalise(piece);
            // Pieces that are only punctuation (`(`, `);`) say nothing.
            if !wanted.chars().any(char::is_alphanumeric) {
                continue;
            }
            if literals.iter().any(|l| l.contains(&wanted)) {
                continue;
            }
            // A migration holds its statements as written: nothing there is built by diesel.
            if paths.iter().all(|p| p.ends_with(".sql")) {
                missing.push(format!("`{piece}` is not in {}", paths.join(", ")));
                break;
            }
            // A statement the files write as a literal (same verb, same table) must be found
            // as written: only builder-made statements are traced by their names.
            if let Some(key) = sql::statement_key(&wanted)
                && literals.iter().any(|l| sql::statement_key(l).as_ref() == Some(&key))
            {
                missing.push(format!(
                    "`{piece}` is not as {} write it (a statement {} … is there, in other words)",
                    paths.join(", "),
                    key.join(" ")
                ));
                break;
            }
            let unknown: Vec<&str> = sql::names(piece).into_iter().filter(|n| !names.contains(*n)).collect();
            if !unknown.is_empty() {
                missing.push(format!(
                    "`{piece}` is in no string literal of {}, which do not name {}",
                    paths.join(", "),
                    unknown.join(", ")
                ));
                break;
            }
        }
    }
    Ok(missing)
}

/// A few lines saying how `old` and `new` differ (a line-level LCS).
fn short_diff(old: &str, new: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let (mut i, mut j, mut out, mut shown) = (0, 0, String::new(), 0);
    while (i < a.len() || j < b.len()) && shown < 12 {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push_str(&format!("    + {}\n", b[j]));
            j += 1;
            shown += 1;
        } else {
            out.push_str(&format!("    - {}\n", a[i]));
            i += 1;
            shown += 1;
        }
    }
    if shown == 12 {
        out.push_str("    …\n");
    }
    out
}

/// A figure marker's name and engine: `booking.mysql`, or a read budget's: `reads/booking.mysql`.
fn figure_value(name: &str) -> Result<u64, String> {
    let (figure, engine) =
        name.rsplit_once('.').ok_or_else(|| format!("figure {name:?}: expected NAME.ENGINE"))?;
    // `reads/NAME.ENGINE` is a read budget's overhead (`figures::READS`), the rest statements.
    let (table, figure) = match figure.strip_prefix("reads/") {
        Some(budget) => (figures::READS, budget),
        None => (figures::STATEMENTS, figure),
    };
    let found = table
        .iter()
        .find(|f| f.name == figure)
        .ok_or_else(|| format!("figure {name:?}: tests/it/figures.rs has no figure {figure:?}"))?;
    found.on_engine(engine).ok_or_else(|| format!("figure {name:?}: the engine is mysql or postgres"))
}

const FIGURE_OPEN: &str = "<!-- figure:";
const FIGURE_CLOSE: &str = "<!-- /figure -->";

/// The line with each figure's number replaced by the table's, and the problems met.
fn rewrite_figures(line: &str) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut problems = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find(FIGURE_OPEN) {
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        let Some(head_end) = after.find("-->") else { break };
        let head = &after[..head_end + 3];
        let name = after[FIGURE_OPEN.len()..head_end].trim();
        let Some(close) = after[head.len()..].find(FIGURE_CLOSE) else {
            problems.push(format!("figure {name:?} has no {FIGURE_CLOSE}"));
            out.push_str(after);
            return (out, problems);
        };
        let stated = &after[head.len()..head.len() + close];
        out.push_str(head);
        match figure_value(name) {
            Ok(value) => {
                if stated.trim() != value.to_string() {
                    problems.push(format!("figure {name} says {stated:?}, tests/it/figures.rs says {value}"));
                }
                out.push_str(&value.to_string());
            }
            Err(e) => {
                problems.push(e);
                out.push_str(stated);
            }
        }
        out.push_str(FIGURE_CLOSE);
        rest = &after[head.len() + close + FIGURE_CLOSE.len()..];
    }
    out.push_str(rest);
    (out, problems)
}

/// A page checked against the source: the page as it should be, and every problem as
/// `page:line: what` (a stale block's with its diff).
fn check_page(source: &Source, shown: &str, text: &str) -> (String, Vec<String>) {
    let lines: Vec<&str> = text.lines().collect();
    let mut problems = Vec::new();
    let (blocks, stray) = blocks(&lines);
    for (line, what) in stray {
        problems.push(format!("{shown}:{}: {what}", line + 1));
    }
    // Replacement content per block, by its opening line.
    let mut replaced: Vec<(usize, usize, String)> = Vec::new();
    for block in &blocks {
        let project_code = block.lang == "sql" || block.lang == "rust";
        let Some((at, marker)) = &block.marker else {
            if project_code {
                problems.push(format!(
                    "{shown}:{}: a ```{} block without a marker: mark it `<!-- code: … -->`, `<!-- sql: … -->`, \
                     `<!-- checked: … -->` or `<!-- illustration -->` (see tests/docs/main.rs)",
                    block.open + 1,
                    block.lang
                ));
            }
            continue;
        };
        let marker = match marker {
            Ok(m) => m,
            Err(e) => {
                problems.push(format!("{shown}:{}: {e}", at + 1));
                continue;
            }
        };
        match generate(source, marker) {
            Err(e) => problems.push(format!("{shown}:{}: {e}", at + 1)),
            Ok(Some(wanted)) => {
                // A block inside a list item is indented as its fence is.
                let indent =
                    &lines[block.open][..lines[block.open].len() - lines[block.open].trim_start().len()];
                let wanted: String = wanted
                    .lines()
                    .map(|l| if l.is_empty() { "\n".to_string() } else { format!("{indent}{l}\n") })
                    .collect();
                if wanted != block.content {
                    problems.push(format!(
                        "{shown}:{}: {} is not what the block shows — run scripts/dev docs\n{}",
                        at + 1,
                        lines[*at].trim(),
                        short_diff(&block.content, &wanted)
                    ));
                    replaced.push((block.open, block.close, wanted));
                }
            }
            Ok(None) => {
                if let Marker::Checked { paths } = marker {
                    match unchecked_lines(source, paths, &block.content) {
                        Err(e) => problems.push(format!("{shown}:{}: {e}", at + 1)),
                        Ok(missing) => problems.extend(
                            missing
                                .into_iter()
                                .map(|m| format!("{shown}:{}: {} {m}", at + 1, lines[*at].trim())),
                        ),
                    }
                }
            }
        }
    }
    // The page rewritten: replaced blocks, and every line's figures.
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        if let Some((open, close, wanted)) = replaced.iter().find(|(open, _, _)| *open == i) {
            out.push_str(lines[*open]);
            out.push('\n');
            out.push_str(wanted);
            i = *close;
            continue;
        }
        let (line, figure_problems) = rewrite_figures(lines[i]);
        for p in figure_problems {
            problems.push(format!("{shown}:{}: {p} — run scripts/dev docs", i + 1));
        }
        out.push_str(&line);
        out.push('\n');
        i += 1;
    }
    if !text.ends_with('\n') {
        out.pop();
    }
    (out, problems)
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn shown(path: &Path) -> String {
    path.strip_prefix(root()).unwrap_or(path).display().to_string()
}

/// Checks every page; with `HAITA_WRITE_DOCS=1` (`scripts/dev docs`), writes the generated
/// blocks and figures into the pages first, and fails only on what it could not rewrite.
#[test]
fn every_marked_block_and_figure_matches_the_source() {
    let source = Source::load(root());
    let write = std::env::var("HAITA_WRITE_DOCS").is_ok_and(|v| v == "1");
    let mut problems = Vec::new();
    for page in pages(root()) {
        let text = fs::read_to_string(&page).expect("page");
        let (wanted, found) = check_page(&source, &shown(&page), &text);
        if write && wanted != text {
            fs::write(&page, &wanted).expect("rewrite page");
            eprintln!("rewrote {}", shown(&page));
            let (_, left) = check_page(&source, &shown(&page), &wanted);
            problems.extend(left);
        } else {
            problems.extend(found);
        }
    }
    assert!(
        problems.is_empty(),
        "{} problem(s) in the pages' code blocks and figures (run scripts/dev docs to rewrite what can be):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// Every code span of the prose that names something of the tree names something that exists
/// (see `symbols`), except the entries of `tests/docs/known_stale.txt`, each of which must still
/// fail (so the list only shrinks).
#[test]
fn every_symbol_in_the_prose_resolves() {
    let source = Source::load(root());
    let index = symbols::Index::build(&source);
    let known = fs::read_to_string(root().join("tests/docs/known_stale.txt")).unwrap_or_default();
    let known: Vec<(String, String)> = known
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('\t').map(|(p, s)| (p.to_string(), s.to_string())))
        .collect();
    let mut used = vec![false; known.len()];
    let mut problems = Vec::new();
    for page in pages(root()) {
        let text = fs::read_to_string(&page).expect("page");
        let page_name = shown(&page);
        for (line, span, what) in index.problems(&text) {
            if let Some(k) = known.iter().position(|(p, s)| *p == page_name && *s == span) {
                used[k] = true;
                continue;
            }
            problems.push(format!("{page_name}:{line}: `{span}`: {what}"));
        }
    }
    for (k, (page, span)) in known.iter().enumerate() {
        if !used[k] {
            problems.push(format!(
                "tests/docs/known_stale.txt lists `{span}` in {page}, which no longer fails: remove the entry"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{} stale reference(s) in the prose:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[cfg(test)]
mod proofs {
    //! The checks report what they exist to catch, fed stale snippets of the real tree.
    use super::*;

    fn checked(page: &str) -> Vec<String> {
        check_page(&Source::load(root()), "stale.md", page).1
    }

    #[test]
    fn a_block_that_differs_from_its_item_is_reported_and_rewritten() {
        let source = Source::load(root());
        let current =
            source::item_text(&source, "src/config/mod.rs", "DEMO_DATABASE_URL", Part::Whole).expect("item");
        assert!(current.contains("pub const DEMO_DATABASE_URL"), "{current}");
        let stale = "<!-- code: src/config/mod.rs DEMO_DATABASE_URL -->\n```rust\npub const DEMO_DATABASE_URL: &str = \"x\";\n```\n";
        let (rewritten, problems) = check_page(&source, "stale.md", stale);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("run scripts/dev docs") && problems[0].contains("- pub const"),
            "{}",
            problems[0]
        );
        assert!(rewritten.contains(&current), "{rewritten}");
        assert!(check_page(&source, "stale.md", &rewritten).1.is_empty());
    }

    #[test]
    fn a_missing_item_an_unmarked_block_and_an_untraceable_statement_are_reported() {
        let problems = checked("<!-- code: src/config/mod.rs NO_SUCH_ITEM -->\n```rust\nx\n```\n");
        assert!(problems.iter().any(|p| p.contains("has no item NO_SUCH_ITEM")), "{problems:?}");
        let problems = checked("```sql\nSELECT 1\n```\n");
        assert!(problems.iter().any(|p| p.contains("without a marker")), "{problems:?}");
        let problems = checked(
            "<!-- checked: src/db/transaction.rs -->\n```sql\nSTART TRANSACTION;\nSELECT nothing FROM nowhere;\n```\n",
        );
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("nowhere"), "{problems:?}");
        // A migration's DDL, line by line: a constraint changed in the page is caught even
        // though every column it names is in the file.
        let migration =
            "<!-- checked: src/lab/migrations/postgres/2026-11-27-000216_create_demo_stays/up.sql -->";
        let ddl = |line: &str| {
            checked(&format!("{migration}\n```sql\nCREATE TABLE demo_stays (\n{line}\n);\n```\n"))
        };
        assert_eq!(
            ddl("    CONSTRAINT demo_stays_one_night_at_least CHECK (check_out > check_in),"),
            Vec::<String>::new()
        );
        let problems = ddl("    CONSTRAINT demo_stays_one_night_at_least CHECK (check_out >= check_in),");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("is not in src/lab/migrations/postgres/"), "{problems:?}");
    }

    #[test]
    fn a_wrong_figure_is_reported_and_rewritten() {
        let booking = figures::statements("booking").mysql;
        let page =
            format!("costs <!-- figure: booking.mysql -->{}<!-- /figure --> statements\n", booking + 1);
        let (rewritten, problems) = check_page(&Source::load(root()), "stale.md", &page);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(rewritten.contains(&format!("-->{booking}<!--")), "{rewritten}");
        assert!(checked("<!-- figure: no_such.mysql -->1<!-- /figure -->\n").len() == 1);
    }

    #[test]
    fn wrong_symbols_are_reported_with_what_was_expected() {
        let source = Source::load(root());
        let index = symbols::Index::build(&source);
        let page = "`Namespace::booking` and `Namespace::bookin`, `409 fully_booked` and `409 fully_bookd`, \
                    `404 fully_booked`, `LOCK_WAIT_SECS` and `LOCK_WAIT_SEC`, `src/db/cached.rs` and \
                    `src/db/cache.rs`, `src/db/cached.rs:12`, \
                    `sixty_four_clients_on_two_instances_never_overbook_a_day` and \
                    `sixty_four_clients_on_two_instances_always_overbook_a_day`, `on_hand` and `on_hands`, \
                    `NamedLockGuard` and `NamedLockGuards`, `check_then_insert(…)` and `check_then_inser(…)`\n\
                    ```text\n`LockName::inside_a_block`\n```\n";
        let found: Vec<String> = index.problems(page).into_iter().map(|(_, span, _)| span).collect();
        assert_eq!(
            found,
            [
                "Namespace::bookin",
                "409 fully_bookd",
                "404 fully_booked",
                "LOCK_WAIT_SEC",
                "src/db/cache.rs",
                "src/db/cached.rs:12",
                "sixty_four_clients_on_two_instances_always_overbook_a_day",
                "on_hands",
                "NamedLockGuards",
                "check_then_inser(…)",
            ]
        );
    }
}

//! The top-level modules of `src/` form layers, and a module uses only the layers below its own.
//!
//! A reader who opens a module should know which others it may lean on, and a change should not
//! quietly tie two layers into a circle (once `db` needs `locking` and `locking` needs `db`,
//! neither can be read, tested or replaced alone). So the order is written down here, in
//! [`LAYERS`], and in `docs/layout.md`; this test reads every `crate::…` path of `src/` (imports,
//! paths in code, `#[serde(with = "crate::…")]`, `$crate::…` in macros; not comments) and fails on
//! any use of a module at the same level or above, naming the file and the line. It also fails on
//! a top-level module that has no place in the list.
//!
//! Standard library only: it reads files and needs no database.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Lowest first. A module may use the modules of the layers before its own, and no other.
const LAYERS: &[&[&str]] = &[
    // Foundations: no module of ours below them.
    &["schema", "config", "metrics", "i18n"],
    // The database: every engine difference in behaviour in its dialect (a statement whose text
    // differs is written twice, side by side, where it is used: `Sql::per_engine`).
    &["db"],
    // Locking primitives: named locks, the per-key queue, retries.
    &["locking"],
    // What goes over the wire: how any failure is said over HTTP; values read from people.
    &["wire"],
    // The one infrastructure error every feature embeds.
    &["infra"],
    // Mechanisms every feature may use.
    &["audit", "deadlocks", "idempotency", "auth"],
    // The app's toolkit for handlers: state, page context, the logged-in user, the error page.
    &["app"],
    // The features, each a folder with its model, service and routes.
    &["edit_locks"],
    &["resources", "catalog"],
    &["bookings", "inventory"],
    &["orders", "batch"],
    &["holds"],
    &["admin", "account"],
    // The app: readiness and the drain on a stop signal, the lab (a cargo feature), the OpenAPI
    // document, the command line.
    &["shutdown"],
    &["lab"],
    &["openapi"],
    &["cli"],
];

/// The top-level module a file of `src/` belongs to (`None` for `lib.rs` and `main.rs`, the app
/// root, which may use everything).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_string_lossy().into_owned();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (name != "lib" && name != "main").then_some(name)
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).map(|d| d.filter_map(Result::ok).collect::<Vec<_>>()).unwrap_or_default() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(rust_files(&path));
        } else if path.extension().is_some_and(|x| x == "rs") {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// Each `crate::NAME` of `text` outside comments: the line it is on and `NAME`.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let code = match line.find("//") {
            // A `//` inside a string (a URL) is not a comment; these files put comments on lines
            // of their own or after code, never after a string holding `//` on the same line.
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        };
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let before = rest[..at].chars().next_back();
            let after = &rest[at + "crate::".len()..];
            let name: String = after.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            // `$crate::` (in a macro) counts; `haita_crate::` or `mycrate::` would not.
            if before.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_')) && !name.is_empty() {
                found.push((number + 1, name));
            }
            rest = after;
        }
    }
    found
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// The modules' edges: module → (used module → first place it is used).
type Edges = BTreeMap<String, BTreeMap<String, String>>;

fn edges(src: &Path) -> (Vec<String>, Edges) {
    let mut modules: Vec<String> = Vec::new();
    let mut edges = Edges::new();
    for file in rust_files(src) {
        let Some(module) = module_of(src, &file) else { continue };
        if !modules.contains(&module) {
            modules.push(module.clone());
        }
        let text = fs::read_to_string(&file).unwrap_or_default();
        for (line, used) in crate_paths(&text) {
            if used != module {
                let shown = src.parent().and_then(|root| file.strip_prefix(root).ok()).unwrap_or(&file);
                let place = format!("{}:{line}", shown.display());
                edges.entry(module.clone()).or_default().entry(used).or_insert(place);
            }
        }
    }
    // Only our top-level modules are edges; `crate::LAB` and the like are the app root's items.
    for used in edges.values_mut() {
        used.retain(|name, _| modules.contains(name));
    }
    (modules, edges)
}

/// The uses that go up or sideways, as "file:line: a uses b (…)".
fn violations(modules: &[String], edges: &Edges) -> Vec<String> {
    let mut wrong = Vec::new();
    for module in modules {
        if layer_of(module).is_none() {
            wrong.push(format!("src/{module} has no place in LAYERS (tests/layers.rs, docs/layout.md)"));
        }
    }
    for (module, used) in edges {
        let Some(own) = layer_of(module) else { continue };
        for (other, place) in used {
            match layer_of(other) {
                Some(theirs) if theirs < own => {}
                Some(theirs) => wrong.push(format!(
                    "{place}: {module} (layer {own}) uses {other} (layer {theirs}): a module uses only the layers below its own"
                )),
                None => {}
            }
        }
    }
    wrong
}

#[test]
fn every_module_uses_only_the_layers_below_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (modules, edges) = edges(&src);
    assert!(modules.len() > 20, "read the modules of {}", src.display());
    let wrong = violations(&modules, &edges);
    assert!(wrong.is_empty(), "layers broken:\n{}", wrong.join("\n"));
}

#[test]
fn a_use_upward_or_sideways_is_named_with_its_place() {
    let modules: Vec<String> =
        ["db", "locking", "bookings", "resources", "newcomer"].map(String::from).to_vec();
    let mut edges = Edges::new();
    edges.entry("db".into()).or_default().insert("locking".into(), "src/db/pool.rs:3".into());
    edges.entry("locking".into()).or_default().insert("db".into(), "src/locking/named.rs:9".into());
    edges
        .entry("bookings".into())
        .or_default()
        .insert("resources".into(), "src/bookings/service.rs:1".into());
    edges
        .entry("resources".into())
        .or_default()
        .insert("bookings".into(), "src/resources/editing.rs:7".into());
    let wrong = violations(&modules, &edges);
    assert_eq!(
        wrong,
        [
            "src/newcomer has no place in LAYERS (tests/layers.rs, docs/layout.md)",
            "src/db/pool.rs:3: db (layer 1) uses locking (layer 2): a module uses only the layers below its own",
            "src/resources/editing.rs:7: resources (layer 8) uses bookings (layer 9): a module uses only the layers below its own",
        ]
    );
}

#[test]
fn paths_in_code_strings_and_macros_count_and_comments_do_not() {
    let text = "use crate::db::DbConn;\n\
                /// see `crate::admin` for the screen\n\
                #[serde(with = \"crate::wire::utc\")]\n\
                $crate::infra::infra_error!(x); // crate::app here is a comment\n\
                let t = mycrate::locking::x;";
    assert_eq!(crate_paths(text), [(1, "db".to_string()), (3, "wire".to_string()), (4, "infra".to_string())]);
}

/// The places in `text` that send work to a blocking thread themselves, by line number:
/// actix's `block` (however the module is named) or tokio's `spawn_blocking`, outside comments.
fn blocking_hops(text: &str) -> Vec<usize> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let code = match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        };
        if ["web::block(", "spawn_blocking("].iter().any(|hop| code.contains(hop)) {
            found.push(number + 1);
        }
    }
    found
}

/// One door to the blocking threads (`db::OffExecutor`, `src/db/off_executor.rs`): work sent
/// any other way would run without its instance's metrics, and a reader would have two ways to
/// learn.
#[test]
fn only_the_one_door_sends_work_to_the_blocking_threads() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let door = src.join("db").join("off_executor.rs");
    let mut elsewhere = Vec::new();
    let mut at_the_door = 0;
    for file in rust_files(&src) {
        let text = fs::read_to_string(&file).expect("read a source file");
        let hops = blocking_hops(&text);
        if file == door {
            at_the_door += hops.len();
        } else {
            elsewhere.extend(hops.iter().map(|line| format!("{}:{line}", file.display())));
        }
    }
    assert_eq!(at_the_door, 1, "the door sends work to the blocking threads in one place");
    assert!(
        elsewhere.is_empty(),
        "work sent to the blocking threads past db::OffExecutor:\n{}",
        elsewhere.join("\n")
    );
}

#[test]
fn a_hop_in_code_counts_however_named_and_one_in_a_comment_does_not() {
    let text = "let x = actix_web::web::block(move || 1);\n\
                /// call it from `web::block`, never on the executor\n\
                aweb::block(f); // renamed, still a hop\n\
                let done = 1; // web::block( in a comment\n\
                tokio::task::spawn_blocking(work);";
    assert_eq!(blocking_hops(text), [1, 3, 5]);
}

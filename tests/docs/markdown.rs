//! Reading the pages as Markdown, as far as the checks need it.

use std::fs;
use std::path::{Path, PathBuf};

/// The `.md` files of `dir`, sorted.
pub fn markdown_in(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "md"))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// `text` with its fenced code blocks (```` ``` ```` / `~~~`, fences included) blanked out to
/// spaces, line breaks kept, so what is found outside them keeps its line number.
pub fn blank_fences(text: &str) -> String {
    let mut visible = String::with_capacity(text.len());
    let mut fence: Option<&str> = None;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        let hidden = match (fence, marker) {
            (None, Some(m)) => {
                fence = Some(m);
                true
            }
            (Some(open), Some(m)) if open == m => {
                fence = None;
                true
            }
            (Some(_), _) => true,
            (None, None) => false,
        };
        if hidden {
            visible.extend(line.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
        } else {
            visible.push_str(line);
        }
    }
    visible
}

//! Every relative link in `README.md`, `docs/*.md` and `docs/ja/*.md` points at a file or folder
//! that exists, the pages stand on their own (no pointers to material outside this repository),
//! and every page of `docs/` has its Japanese page.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Component, Path, PathBuf};

use crate::markdown::{blank_fences, markdown_in};
use crate::pages;

/// Text that must not appear in the pages (compared case-insensitively): each points at material
/// outside this repository, which a reader of a clone cannot follow.
const FORBIDDEN: &[&str] = &["../shared", "DESIGN.md", "background article", "article 00"];

/// A link found in a page: the line it starts on and its target as written.
#[derive(Debug, PartialEq, Eq)]
struct Link {
    line: usize,
    target: String,
    /// An image's alt text (`![alt](target)`); `None` for a link.
    alt: Option<String>,
}

/// The targets of `[text](target)` and `![alt](target)` links outside code: fenced blocks
/// (```` ``` ```` / `~~~`) and inline code spans are skipped, so SQL and shell examples that
/// happen to contain brackets are not mistaken for links.
fn links(text: &str) -> Vec<Link> {
    // Fenced code blocks blanked out, line breaks kept so line numbers stay right.
    let visible = blank_fences(text);

    let chars: Vec<char> = visible.chars().collect();
    let line_of = |at: usize| 1 + chars[..at].iter().filter(|c| **c == '\n').count();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '`' => i = skip_code_span(&chars, i),
            '[' => {
                if let Some(close) = matching(&chars, i, '[', ']')
                    && chars.get(close + 1) == Some(&'(')
                    && let Some(end) = matching(&chars, close + 1, '(', ')')
                {
                    let inside: String = chars[close + 2..end].iter().collect();
                    // `(target "title")`: the target is the first word; `<target>` is allowed too.
                    let target = inside.split_whitespace().next().unwrap_or_default();
                    let target = target.trim_start_matches('<').trim_end_matches('>');
                    let alt = (i > 0 && chars[i - 1] == '!').then(|| chars[i + 1..close].iter().collect());
                    found.push(Link { line: line_of(i), target: target.to_string(), alt });
                }
                // Continue inside the text, so an image inside a link's text is seen too.
                i += 1;
            }
            _ => i += 1,
        }
    }
    found
}

/// Index just past the inline code span that starts at `start` (a run of backticks closed by a
/// run of the same length); a run that is never closed is literal text.
fn skip_code_span(chars: &[char], start: usize) -> usize {
    let run = chars[start..].iter().take_while(|c| **c == '`').count();
    let mut j = start + run;
    while j < chars.len() {
        if chars[j] == '`' {
            let closing = chars[j..].iter().take_while(|c| **c == '`').count();
            if closing == run {
                return j + closing;
            }
            j += closing;
        } else {
            j += 1;
        }
    }
    start + run
}

/// Index of the bracket closing the one at `open`, counting nesting and skipping code spans.
fn matching(chars: &[char], open: usize, left: char, right: char) -> Option<usize> {
    let mut depth = 0usize;
    let mut j = open;
    while j < chars.len() {
        let c = chars[j];
        if c == '`' && left == '[' {
            j = skip_code_span(chars, j);
            continue;
        }
        if c == '\n' && chars.get(j + 1) == Some(&'\n') {
            return None; // a blank line ends a paragraph, and any link with it
        }
        if c == left {
            depth += 1;
        } else if c == right {
            depth -= 1;
            if depth == 0 {
                return Some(j);
            }
        }
        j += 1;
    }
    None
}

/// The path part of a target, or `None` for targets that are not files of this repository.
fn local_path(target: &str) -> Option<&str> {
    if target.is_empty()
        || target.starts_with('#')
        || ["http://", "https://", "mailto:"].iter().any(|scheme| target.starts_with(scheme))
    {
        return None;
    }
    let path = target.split('#').next().unwrap_or(target);
    // `src/db.rs:120` or `src/db.rs:120-140`: a line reference, not part of the file name.
    let path = match path.rsplit_once(':') {
        Some((file, line)) if !line.is_empty() && line.chars().all(|c| c.is_ascii_digit() || c == '-') => {
            file
        }
        _ => path,
    };
    Some(path)
}

/// The anchors of a page's headings as GitHub makes them: the heading's text (a link's target
/// left out) in lower case, every character but letters, marks, digits, spaces, `-` and `_`
/// dropped, spaces made `-`; a heading seen before gets `-1`, `-2`… Headings inside code
/// blocks are not headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = BTreeSet::new();
    for line in blank_fences(text).lines() {
        let hashes = line.len() - line.trim_start_matches('#').len();
        let Some(heading) = line[hashes..].strip_prefix(' ').filter(|_| (1..=6).contains(&hashes)) else {
            continue;
        };
        let mut shown = String::new();
        let mut rest = heading.trim();
        while let Some(at) = rest.find("](") {
            shown.push_str(&rest[..at]);
            rest = rest[at..].split_once(')').map_or("", |(_, after)| after);
        }
        shown.push_str(rest);
        let slug: String = shown
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let times = seen.entry(slug.clone()).or_default();
        anchors.insert(if *times == 0 { slug.clone() } else { format!("{slug}-{times}") });
        *times += 1;
    }
    anchors
}

/// `a/b/../c` → `a/c`, without touching the file system (the target may not exist).
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Every problem in one page, as `file:line: what`.
fn problems_in(root: &Path, page: &Path) -> Vec<String> {
    let shown = page.strip_prefix(root).unwrap_or(page).display().to_string();
    let text = match fs::read_to_string(page) {
        Ok(text) => text,
        Err(e) => return vec![format!("{shown}: cannot read: {e}")],
    };
    let mut problems = Vec::new();
    for (number, line) in text.lines().enumerate() {
        for word in FORBIDDEN {
            if line.to_lowercase().contains(&word.to_lowercase()) {
                problems.push(format!(
                    "{shown}:{}: mentions {word:?}; the repository must explain itself",
                    number + 1
                ));
            }
        }
    }
    let dir = page.parent().unwrap_or(root);
    for Link { line, target, .. } in links(&text) {
        if let Some(anchor) = target.strip_prefix('#') {
            if !anchors(&text).contains(anchor) {
                problems.push(format!("{shown}:{line}: ({target}) names no heading of this page"));
            }
            continue;
        }
        let Some(path) = local_path(&target) else { continue };
        let resolved =
            if let Some(from_root) = path.strip_prefix('/') { root.join(from_root) } else { dir.join(path) };
        let resolved = normalise(&resolved);
        if !resolved.starts_with(normalise(root)) {
            problems.push(format!("{shown}:{line}: ({target}) points outside the repository"));
        } else if !resolved.exists() {
            problems.push(format!("{shown}:{line}: ({target}) does not exist"));
        } else if let Some((_, anchor)) = target.split_once('#').filter(|_| path.ends_with(".md")) {
            let names_a_heading =
                fs::read_to_string(&resolved).is_ok_and(|page| anchors(&page).contains(anchor));
            if !names_a_heading {
                problems.push(format!("{shown}:{line}: ({target}) names no heading of {path}"));
            }
        }
    }
    problems
}

#[test]
fn every_link_in_readme_and_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pages = pages(root);
    assert!(pages.len() > 1, "expected README.md and docs/*.md, found {pages:?}");
    let problems: Vec<String> = pages.iter().flat_map(|page| problems_in(root, page)).collect();
    assert!(
        problems.is_empty(),
        "{} broken link(s) or outside pointer(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// What a screenshot's alt text must say of it, in the page's language: its file is named
/// `{page}-{lang}-{screen}.png` by the test that takes it (`tests/it/screenshots.rs`), and a
/// reader who cannot see the picture is told which language and which screen it shows.
fn alt_words(japanese_page: bool, lang: &str, screen: &str) -> Option<[&'static str; 2]> {
    let lang = match (japanese_page, lang) {
        (false, "en") => "English",
        (false, "ja") => "Japanese",
        (true, "en") => "英語",
        (true, "ja") => "日本語",
        _ => return None,
    };
    let screen = match (japanese_page, screen) {
        (false, "desktop") => "desktop",
        (false, "phone") => "phone",
        (true, "desktop") => "デスクトップ",
        (true, "phone") => "スマートフォン",
        _ => return None,
    };
    Some([lang, screen])
}

/// The problems of a page's images: no alt text, or one that does not say the language and the
/// screen its file was taken in.
fn image_problems(shown: &str, text: &str, japanese_page: bool) -> Vec<String> {
    let mut problems = Vec::new();
    for Link { line, target, alt } in links(text) {
        let Some(alt) = alt else { continue };
        if alt.trim().len() < 20 {
            problems.push(format!(
                "{shown}:{line}: ![{alt}]({target}) needs an alt text that says what it shows"
            ));
            continue;
        }
        let file = target.rsplit('/').next().unwrap_or_default();
        let Some(stem) = file.strip_suffix(".png") else { continue };
        let mut parts = stem.rsplitn(3, '-');
        let (Some(screen), Some(lang)) = (parts.next(), parts.next()) else { continue };
        let Some(words) = alt_words(japanese_page, lang, screen) else { continue };
        for word in words {
            if !alt.contains(word) {
                problems.push(format!(
                    "{shown}:{line}: the alt text of {file} does not say {word:?}, which the picture shows: {alt}"
                ));
            }
        }
    }
    problems
}

#[test]
fn every_screenshot_is_described_as_the_language_and_screen_it_shows() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut problems = Vec::new();
    for page in pages(root) {
        let shown = page.strip_prefix(root).unwrap_or(&page).display().to_string();
        let text = fs::read_to_string(&page).unwrap_or_default();
        problems.extend(image_problems(&shown, &text, shown.starts_with("docs/ja/")));
    }
    assert!(problems.is_empty(), "{} stale or missing alt text(s):\n{}", problems.len(), problems.join("\n"));
}

#[test]
fn an_alt_text_that_names_another_screen_or_language_is_stale() {
    let page = "![The booking page, on the English phone screen](screenshots/booking-refused-ja-desktop.png)";
    let problems = image_problems("x.md", page, false);
    assert_eq!(problems.len(), 2, "{problems:?}");
    let fresh =
        "![The booking page, on the Japanese desktop screen](screenshots/booking-refused-ja-desktop.png)";
    assert!(image_problems("x.md", fresh, false).is_empty());
    let ja = "![日本語のスマートフォンの画面の予約ページ](../screenshots/home-ja-desktop.png)";
    assert_eq!(image_problems("ja/x.md", ja, true).len(), 1, "the screen is wrong");
    assert_eq!(image_problems("x.md", "![x](a.png)", false).len(), 1, "no description");
}

/// The markers of a page's generated blocks and figures (`<!-- code: … -->`, `sql`, `checked`,
/// `figure`), sorted: a page and its translation show the same ones.
fn markers(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines() {
        let mut rest = line;
        while let Some(at) = rest.find("<!-- ") {
            let marker = &rest[at..];
            let end = marker.find("-->").map_or(marker.len(), |end| end + 3);
            if ["code:", "sql:", "checked:", "figure:"].iter().any(|kind| marker[5..].starts_with(kind)) {
                found.push(marker[..end].to_string());
            }
            rest = &marker[end..];
        }
    }
    found.sort();
    found
}

/// Every page of `docs/` has its Japanese page in `docs/ja/` under the same name, each linking to
/// the other and showing the same generated blocks; and no Japanese page is left without its
/// English one.
#[test]
fn every_docs_page_is_in_japanese_too() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let names = |dir: &str| -> Vec<String> {
        markdown_in(&root.join(dir))
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect()
    };
    let (english, japanese) = (names("docs"), names("docs/ja"));
    assert_eq!(english, japanese, "docs/ and docs/ja/ hold the same pages");
    let unlinked: Vec<&String> = english
        .iter()
        .filter(|name| {
            let text = fs::read_to_string(root.join("docs").join(name)).expect("page");
            !text.contains(&format!("](ja/{name})"))
        })
        .collect();
    assert!(unlinked.is_empty(), "English pages without a link to their Japanese page: {unlinked:?}");
    for name in &japanese {
        let text = fs::read_to_string(root.join("docs/ja").join(name)).expect("page");
        let english = fs::read_to_string(root.join("docs").join(name)).expect("page");
        assert_eq!(
            markers(&text),
            markers(&english),
            "docs/ja/{name} shows the same generated code, SQL and figures as docs/{name}"
        );
        assert!(text.contains(&format!("](../{name})")), "docs/ja/{name} links back to the English page");
        let kana = text.chars().filter(|c| ('\u{3040}'..='\u{30ff}').contains(c)).count();
        assert!(kana > 200, "docs/ja/{name} is written in Japanese ({kana} kana)");
    }
}

#[test]
fn a_headings_anchor_is_githubs() {
    let page = "# Stays: every night's lock\n\
                ## Hops: threads, `web::block` and [the pool](../src/db/pool.rs)\n\
                ```\n# not a heading\n```\n\
                ## 退場: SIGTERM で抜けて、止まり、終了する\n\
                ## Cost\n## Cost\n#hashtag\n";
    let found: Vec<String> = anchors(page).into_iter().collect();
    assert_eq!(
        found,
        [
            "cost",
            "cost-1",
            "hops-threads-webblock-and-the-pool",
            "stays-every-nights-lock",
            "退場-sigterm-で抜けて止まり終了する",
        ]
    );
}

#[test]
fn the_scanner_finds_links_and_images_but_not_code() {
    let text = "See [the guard](../src/locking/named.rs#L10) and ![chart](demo.png \"title\").\n\
                `[not](a-link)` and\n\
                ```sql\n\
                SELECT x[1](2)\n\
                ```\n\
                [`code` text](<other.md>) [web](https://example.com) [top](#hazard)\n\
                [line](../src/db.rs:120) [wrapped\n\
                text](wrapped.md)\n";
    let found = links(text);
    let alts: Vec<&str> = found.iter().filter_map(|l| l.alt.as_deref()).collect();
    assert_eq!(alts, ["chart"], "only the image has an alt text");
    let found: Vec<(usize, &str)> = found.iter().map(|l| (l.line, l.target.as_str())).collect();
    assert_eq!(
        found,
        [
            (1, "../src/locking/named.rs#L10"),
            (1, "demo.png"),
            (6, "other.md"),
            (6, "https://example.com"),
            (6, "#hazard"),
            (7, "../src/db.rs:120"),
            (7, "wrapped.md"),
        ]
    );
    assert_eq!(local_path("../src/locking/named.rs#L10"), Some("../src/locking/named.rs"));
    assert_eq!(local_path("../src/db.rs:120-140"), Some("../src/db.rs"));
    assert_eq!(local_path("https://example.com"), None);
    assert_eq!(local_path("#hazard"), None);
    assert_eq!(local_path("mailto:a@b"), None);
}

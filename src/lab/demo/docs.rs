//! The docs the demo page names, served by the app itself at `/demo/docs/{name}`: compiled in
//! from the repository's `docs/` (and `docs/ja/` for a Japanese reader), so the links work with
//! no network, as the demo in `DEMO_MODE` often runs. Shown as written (Markdown), not rendered:
//! the repository is where they read best, this is where they can always be read.

use crate::i18n::{Lang, escape_html};

/// A doc of the repository: its file name, then its English and Japanese text.
struct Doc {
    name: &'static str,
    en: &'static str,
    ja: &'static str,
}

macro_rules! docs {
    ($($name:literal),* $(,)?) => {
        [$(Doc {
            name: $name,
            en: include_str!(concat!("../../../docs/", $name)),
            ja: include_str!(concat!("../../../docs/ja/", $name)),
        }),*]
    };
}

/// Every doc the demo's words name (its strategies, verdicts, footer and flash sale; a test checks
/// that each one named is linked).
const DOCS: [Doc; 7] = docs![
    "named-lock-check-then-insert.md",
    "named-lock-guard.md",
    "row-locks-in-order.md",
    "contention-in-its-lane.md",
    "other-locks.md",
    "flash-sale.md",
    "postgres.md",
];

/// The doc `name` in `lang`: its title (the first line, a Markdown heading) and the rest.
pub fn doc(name: &str, lang: Lang) -> Option<(&'static str, &'static str)> {
    let doc = DOCS.iter().find(|d| d.name == name)?;
    let text = match lang {
        Lang::En => doc.en,
        Lang::Ja => doc.ja,
    };
    let (title, body) = text.split_once('\n').unwrap_or((text, ""));
    Some((title.trim_start_matches('#').trim(), body.trim_start()))
}

/// `text` as HTML, each doc it names (`docs/named-lock-guard.md`) a link to the doc served here:
/// for the demo's sentences, which name the docs in plain words.
pub fn linked(text: &str) -> String {
    let mut html = escape_html(text);
    for doc in &DOCS {
        let named = format!("docs/{}", doc.name);
        html = html.replace(&named, &format!("<a href=\"/demo/docs/{}\">{named}</a>", doc.name));
    }
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_doc_named_becomes_a_link_and_the_rest_stays_text() {
        assert_eq!(
            linked("the race <b> (docs/named-lock-guard.md, docs/other-locks.md)"),
            "the race &lt;b&gt; (<a href=\"/demo/docs/named-lock-guard.md\">docs/named-lock-guard.md</a>, \
             <a href=\"/demo/docs/other-locks.md\">docs/other-locks.md</a>)"
        );
        assert_eq!(linked("docs/README.md"), "docs/README.md", "only the docs served here");
    }

    #[test]
    fn a_doc_is_served_in_the_readers_language_with_its_title_apart() {
        let (title, body) = doc("named-lock-guard.md", Lang::Ja).expect("served");
        assert!(title.starts_with("コネクションプール") && !title.starts_with('#'), "{title}");
        assert!(!body.is_empty());
        assert!(doc("../Cargo.toml", Lang::En).is_none());
    }
}

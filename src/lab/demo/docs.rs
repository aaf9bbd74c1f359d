//! The docs the demo page names, served by the app itself at `/demo/docs/{name}`: compiled in
//! from the repository's `docs/` (and `docs/ja/` for a Japanese reader), so the links work with
//! no network, as the demo in `DEMO_MODE` often runs. Rendered from their Markdown
//! ([`rendered`]), a link to another doc served here kept, a link into the repository's source
//! left as its words (the source is not served).

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

/// A doc's Markdown as HTML: its tables and code blocks as such; a link to a doc served here
/// pointed at its page here, any other relative link (into `src/`, say) left as its words; the
/// HTML comments the docs test reads (`<!-- figure: … -->`) left out, and no other HTML let
/// through (the docs hold none, and a page of the app runs none it did not write).
pub fn rendered(markdown: &str) -> String {
    use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
    let mut unlinked = false;
    let events = Parser::new_ext(markdown, Options::ENABLE_TABLES).filter_map(|event| match event {
        Event::Html(_) | Event::InlineHtml(_) => None,
        Event::Start(Tag::Link { link_type, dest_url, title, id }) => {
            let (file, anchor) = dest_url.split_once('#').unwrap_or((&dest_url, ""));
            let served = DOCS.iter().find(|d| d.name == file.trim_start_matches("../"));
            let dest_url = match served {
                Some(doc) if anchor.is_empty() => format!("/demo/docs/{}", doc.name).into(),
                Some(doc) => format!("/demo/docs/{}#{anchor}", doc.name).into(),
                None if dest_url.contains("://") || dest_url.starts_with('#') => dest_url,
                None => {
                    unlinked = true;
                    return None;
                }
            };
            Some(Event::Start(Tag::Link { link_type, dest_url, title, id }))
        }
        // A long path in code (`bookings::service::check_then_insert`) may end a line after a
        // `::`, a `_` or a `/`, never inside a word, on a phone's narrow screen.
        Event::Code(code) => {
            let breakable = ["::", "_", "/"]
                .iter()
                .fold(escape_html(&code), |html, at| html.replace(at, &format!("{at}<wbr>")));
            Some(Event::InlineHtml(format!("<code>{breakable}</code>").into()))
        }
        Event::End(TagEnd::Link) if unlinked => {
            unlinked = false;
            None
        }
        event => Some(event),
    });
    let mut html = String::new();
    pulldown_cmark::html::push_html(&mut html, events);
    // A table wider than a phone scrolls in its own box, as the app's own tables do; a box that
    // may scroll, and a code block, can be reached with the keyboard to scroll it.
    html.replace("<table>", "<div class=\"scroll\" tabindex=\"0\"><table>")
        .replace("</table>", "</table></div>")
        .replace("<pre>", "<pre tabindex=\"0\">")
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
    fn a_doc_renders_with_its_links_to_served_docs_kept_and_no_html_of_its_own() {
        let html = rendered(
            "# T\n\nSee [the guard](named-lock-guard.md#pitfalls), [the lock](../src/locking/named.rs) \
             and [MariaDB](https://mariadb.com/).\n<!-- figure: x -->\n\n<script>alert(1)</script>\n\n\
             | a | b |\n|---|---|\n| 1 | 2 |\n\n`a::b_c<d>`\n",
        );
        assert!(html.contains("<a href=\"/demo/docs/named-lock-guard.md#pitfalls\">the guard</a>"), "{html}");
        assert!(html.contains(", the lock and"), "a link into the source is left as words: {html}");
        assert!(html.contains("<a href=\"https://mariadb.com/\">MariaDB</a>"), "{html}");
        assert!(!html.contains("<!--") && !html.contains("<script"), "{html}");
        assert!(
            html.contains("<div class=\"scroll\" tabindex=\"0\"><table>") && html.contains("<td>2</td>"),
            "{html}"
        );
        assert!(html.contains("<code>a::<wbr>b_<wbr>c&lt;d&gt;</code>"), "{html}");
    }

    #[test]
    fn a_doc_is_served_in_the_readers_language_with_its_title_apart() {
        let (title, body) = doc("named-lock-guard.md", Lang::Ja).expect("served");
        assert!(title.starts_with("コネクションプール") && !title.starts_with('#'), "{title}");
        assert!(!body.is_empty());
        assert!(doc("../Cargo.toml", Lang::En).is_none());
    }
}

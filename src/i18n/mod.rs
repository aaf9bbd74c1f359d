//! English and Japanese: every page in the language its reader asked for.
//!
//! The texts are in `src/i18n/texts.yml`, each key with its English and its Japanese side by
//! side, compiled into the binary by rust-i18n. A request's language is the one its reader
//! picked with the switch in the header (kept in the session), else the first of their
//! browser's `Accept-Language` that haita speaks, else English.
//!
//! A key missing from the file would show as the key itself: `tests::every_key_used_is_in_both_languages`
//! reads every template and source file for the keys they use and fails on one that is missing
//! in either language.

use std::borrow::{Borrow, Cow};

use actix_session::Session;
use actix_web::HttpRequest;
use actix_web::http::header;
use chrono::{Datelike, NaiveDate};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Lang {
    #[default]
    En,
    Ja,
}

/// Where a reader's own pick is kept in the session.
const SESSION_KEY: &str = "lang";

impl Lang {
    pub const ALL: [Self; 2] = [Self::En, Self::Ja];

    /// The BCP 47 tag, for `<html lang>` and the texts file.
    pub fn code(self) -> &'static str {
        match self {
            Self::En => "en",
            Self::Ja => "ja",
        }
    }

    /// The language's own name, for the switch.
    pub fn name(self) -> &'static str {
        match self {
            Self::En => "English",
            Self::Ja => "日本語",
        }
    }

    pub fn parse(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.code() == code)
    }

    /// The language of a request: the reader's pick, else their browser's, else English.
    pub fn of(req: &HttpRequest, session: &Session) -> Self {
        Self::picked(session).unwrap_or_else(|| {
            req.headers()
                .get(header::ACCEPT_LANGUAGE)
                .and_then(|v| v.to_str().ok())
                .and_then(Self::from_accept_language)
                .unwrap_or_default()
        })
    }

    /// The language the reader picked with the switch, if they did.
    pub fn picked(session: &Session) -> Option<Self> {
        session.get::<String>(SESSION_KEY).ok().flatten().and_then(|code| Self::parse(&code))
    }

    /// Keeps `self` as the reader's pick.
    pub fn keep(self, session: &Session) -> Result<(), actix_session::SessionInsertError> {
        session.insert(SESSION_KEY, self.code())
    }

    /// The most wanted language of an `Accept-Language` header that haita speaks
    /// (`ja-JP,ja;q=0.9,en;q=0.8` is Japanese; `fr,en;q=0.5` English; `fr` none).
    pub fn from_accept_language(header: &str) -> Option<Self> {
        let mut best: Option<(f32, Self)> = None;
        for item in header.split(',') {
            let mut parts = item.split(';');
            let tag = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let quality = parts
                .find_map(|p| p.trim().strip_prefix("q="))
                .map_or(Some(1.0), |q| q.trim().parse::<f32>().ok())
                .unwrap_or(0.0);
            let primary = tag.split('-').next().unwrap_or("");
            if let Some(lang) = Self::parse(primary)
                && quality > 0.0
                && best.is_none_or(|(q, _)| quality > q)
            {
                best = Some((quality, lang));
            }
        }
        best.map(|(_, lang)| lang)
    }

    /// The text `key` in this language.
    pub fn t<'a>(self, key: &'a str) -> Cow<'a, str> {
        rust_i18n::t!(key, locale = self.code())
    }

    /// The text `key` with each `%{name}` replaced by its value. `args` is any slice of pairs,
    /// by reference or not (templates pass their arguments by reference).
    pub fn t_with<'a>(self, key: &str, args: impl AsRef<[(&'a str, String)]>) -> String {
        let mut text = self.t(key).into_owned();
        for (name, value) in args.as_ref() {
            text = text.replace(&format!("%{{{name}}}"), value);
        }
        text
    }

    /// A day in a table: `Tue 2026-12-01`, `2026-12-01 (火)`.
    pub fn day(self, day: &NaiveDate) -> String {
        match self {
            Self::En => day.format("%a %Y-%m-%d").to_string(),
            Self::Ja => format!("{} ({})", day.format("%Y-%m-%d"), WEEKDAYS_JA[weekday(day)]),
        }
    }

    /// A day in a sentence: `Tuesday 2026-12-01`, `2026年12月1日(火曜日)`.
    pub fn long_day(self, day: &NaiveDate) -> String {
        match self {
            Self::En => day.format("%A %Y-%m-%d").to_string(),
            Self::Ja => {
                format!("{}年{}月{}日({}曜日)", day.year(), day.month(), day.day(), WEEKDAYS_JA[weekday(day)])
            }
        }
    }

    /// A whole number with the locale's grouping: `12,345` in both languages.
    pub fn number(self, n: impl Borrow<i64>) -> String {
        let n = *n.borrow();
        let digits = n.unsigned_abs().to_string();
        let mut grouped = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                grouped.push(',');
            }
            grouped.push(c);
        }
        if n < 0 { format!("-{grouped}") } else { grouped }
    }

    /// A price kept in hundredths, with its currency: `1,234.50 USD`.
    pub fn price(self, cents: impl Borrow<i64>) -> String {
        let cents = *cents.borrow();
        let sign = if cents < 0 { "-" } else { "" };
        format!("{sign}{}.{:02} {CURRENCY}", self.number((cents / 100).abs()), (cents % 100).abs())
    }
}

/// The currency of every price: one shop, one currency, so a constant rather than a setting
/// (prices are stored as whole hundredths, `price_cents`, which fits it). Written after the
/// amount as its ISO 4217 code, the same in both languages.
pub const CURRENCY: &str = "USD";

/// `text` made safe to put inside markup (`&`, `<`, `>`, `"`, `'`).
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const WEEKDAYS_JA: [&str; 7] = ["月", "火", "水", "木", "金", "土", "日"];

fn weekday(day: &NaiveDate) -> usize {
    day.weekday().num_days_from_monday() as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_browser_language_is_the_most_wanted_one_haita_speaks() {
        for (header, expected) in [
            ("ja-JP,ja;q=0.9,en;q=0.8", Some(Lang::Ja)),
            ("en-US,en;q=0.9,ja;q=0.8", Some(Lang::En)),
            ("fr-FR,fr;q=0.9,ja;q=0.7,en;q=0.5", Some(Lang::Ja)),
            ("fr", None),
            ("ja;q=0, en;q=0.1", Some(Lang::En)),
            ("*", None),
            ("", None),
            ("ja;q=abc,en", Some(Lang::En)),
        ] {
            assert_eq!(Lang::from_accept_language(header), expected, "{header}");
        }
    }

    #[test]
    fn days_and_prices_are_written_for_the_language() {
        let day = NaiveDate::from_ymd_opt(2026, 12, 1).expect("a day");
        assert_eq!(Lang::En.day(&day), "Tue 2026-12-01");
        assert_eq!(Lang::Ja.day(&day), "2026-12-01 (火)");
        assert_eq!(Lang::En.long_day(&day), "Tuesday 2026-12-01");
        assert_eq!(Lang::Ja.long_day(&day), "2026年12月1日(火曜日)");
        assert_eq!(Lang::En.price(123_456), "1,234.56 USD");
        assert_eq!(Lang::Ja.price(-5), "-0.05 USD");
        assert_eq!(Lang::En.number(1_000_000), "1,000,000");
        assert_eq!(Lang::Ja.t_with("test.greeting", &[("name", "花子".into())]), "こんにちは、花子さん");
        assert_eq!(Lang::En.t_with("test.greeting", &[("name", "Hanako".into())]), "Hello, Hanako");
    }

    /// Every key a template or a source file uses, in both languages. A key is any string
    /// literal shaped like one (`booking.fully_booked`) whose first part is a part the texts use;
    /// a key only in English would show English on a Japanese page, one in neither the key.
    #[test]
    fn every_key_used_is_in_both_languages() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let texts = std::fs::read_to_string(root.join("src/i18n/texts.yml")).expect("texts");
        let defined = keys_defined(&texts);
        let sections: Vec<&str> = defined.iter().filter_map(|(k, _)| k.split('.').next()).collect();
        let mut used = Vec::new();
        for dir in ["templates", "src"] {
            collect_used(&root.join(dir), &sections, &mut used);
        }
        assert!(used.len() > 100, "the scan found the keys in use: {}", used.len());
        let mut missing = Vec::new();
        for (key, file) in &used {
            for lang in Lang::ALL {
                if !defined.iter().any(|(k, langs)| k == key && langs.iter().any(|l| l == lang.code())) {
                    missing.push(format!("{key} ({}) used in {file}", lang.code()));
                }
            }
        }
        missing.dedup();
        assert!(missing.is_empty(), "texts missing from src/i18n/texts.yml:\n{}", missing.join("\n"));
        for (key, langs) in &defined {
            assert_eq!(langs.len(), 2, "{key} is in {langs:?} only");
        }
    }

    /// The keys of the texts file and the languages each has.
    fn keys_defined(texts: &str) -> Vec<(String, Vec<String>)> {
        let mut keys: Vec<(String, Vec<String>)> = Vec::new();
        for line in texts.lines() {
            if line.starts_with('#') || line.trim().is_empty() || line.starts_with("_version") {
                continue;
            }
            if !line.starts_with(' ') {
                keys.push((line.trim_end_matches(':').trim().to_string(), Vec::new()));
            } else if let Some((lang, _)) = line.trim().split_once(':')
                && let Some(last) = keys.last_mut()
                && line.starts_with("  ")
                && !line.starts_with("   ")
            {
                last.1.push(lang.to_string());
            }
        }
        keys
    }

    /// Literals shaped like keys that are file names (`home.html`).
    const FILE_KINDS: &[&str] =
        &["html", "rs", "md", "css", "js", "yml", "csv", "json", "toml", "sql", "png"];

    fn collect_used(dir: &std::path::Path, sections: &[&str], used: &mut Vec<(String, String)>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                collect_used(&path, sections, used);
                continue;
            }
            let Some(ext) = path.extension().and_then(|e| e.to_str()) else { continue };
            if !["rs", "html"].contains(&ext) || path.ends_with("i18n/mod.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            for literal in text.split('"').skip(1).step_by(2) {
                let shaped = literal.contains('.')
                    && literal.split('.').all(|part| {
                        !part.is_empty()
                            && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
                    });
                let file_name = literal.rsplit('.').next().is_some_and(|ext| FILE_KINDS.contains(&ext));
                if shaped
                    && !file_name
                    && literal.split('.').next().is_some_and(|first| sections.contains(&first))
                {
                    used.push((literal.to_string(), path.display().to_string()));
                }
            }
        }
    }
}

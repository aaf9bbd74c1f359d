//! Database times on the wire. Every pooled session runs with `time_zone = '+00:00'`, so a
//! `DATETIME` read back is UTC without saying so; JSON says so (`…Z`, RFC 3339), as the OpenAPI
//! document's `date-time` promises. Use with `#[serde(with = "crate::wire::utc")]`.

use chrono::{DateTime, NaiveDateTime};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub fn serialize<S: Serializer>(at: &NaiveDateTime, serializer: S) -> Result<S::Ok, S::Error> {
    at.and_utc().serialize(serializer)
}

/// Also reads a time without an offset as UTC: reports stored before times said their zone.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<NaiveDateTime, D::Error> {
    parse(&String::deserialize(deserializer)?).map_err(serde::de::Error::custom)
}

fn parse(text: &str) -> Result<NaiveDateTime, chrono::ParseError> {
    DateTime::parse_from_rfc3339(text).map(|at| at.naive_utc()).or_else(|_| text.parse())
}

/// The same for an optional time (`#[serde(with = "crate::wire::utc::option")]`).
pub mod option {
    use super::*;

    pub fn serialize<S: Serializer>(at: &Option<NaiveDateTime>, serializer: S) -> Result<S::Ok, S::Error> {
        at.map(|at| at.and_utc()).serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<NaiveDateTime>, D::Error> {
        Option::<String>::deserialize(deserializer)?
            .map(|text| parse(&text).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// The one way haita writes a moment, on every page and in every sentence: `2026-11-24 10:42:07
/// UTC` here, and `2026-11-24 19:42:07 JST` (`GMT+9` in English) once `/static/local_time.js`
/// has put it in the viewer's own time zone, with the zone named. A plain text (a JSON message,
/// a stored reason, the CLI) has no script to run, so it stays UTC and says so: [`text`].
pub fn text(at: &NaiveDateTime) -> String {
    at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// A moment as a page shows it: a `<time>` that says it in UTC in the markup, for a reader
/// without script and on hover, and in the viewer's own time zone once `/static/local_time.js`
/// has run (the one script that writes times; other scripts call its `haita.showLocal`).
/// Rendered with `|safe`: it holds only digits and separators, never text from a request.
pub struct Shown {
    at: NaiveDateTime,
    clock_only: bool,
}

/// Date and time: `2026-11-24 10:42:07 UTC`, then local.
pub fn shown(at: &NaiveDateTime) -> Shown {
    Shown { at: *at, clock_only: false }
}

/// The time of day only: `10:42:07 UTC`, then local.
pub fn clock(at: &NaiveDateTime) -> Shown {
    Shown { at: *at, clock_only: true }
}

impl std::fmt::Display for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let full = text(&self.at);
        let (kind, written) = if self.clock_only {
            ("time", self.at.format("%H:%M:%S UTC").to_string())
        } else {
            ("datetime", full.clone())
        };
        write!(
            f,
            r#"<time datetime="{}" data-local="{kind}" title="{full}">{written}</time>"#,
            self.at.and_utc().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        )
    }
}

/// A plain text from the server (a stored audit detail, a refusal's sentence) as markup for a
/// page: escaped, with each time it writes the one way ([`text`]) made a `<time>` like
/// [`shown`], so that a sentence on a page never says one time in the viewer's zone and the next
/// in UTC. Rendered with `|safe`.
pub fn marked(plain: &str) -> String {
    const SHAPE: &str = "2026-11-24 10:42:07 UTC";
    let mut out = String::with_capacity(plain.len());
    let mut rest = plain;
    while let Some(found) = rest.find(" UTC") {
        let end = found + " UTC".len();
        let start = end.saturating_sub(SHAPE.len());
        let at = rest
            .get(start..found)
            .and_then(|digits| NaiveDateTime::parse_from_str(digits, "%Y-%m-%d %H:%M:%S").ok());
        match at {
            Some(at) if rest.is_char_boundary(start) => {
                out.push_str(&crate::i18n::escape_html(&rest[..start]));
                out.push_str(&shown(&at).to_string());
            }
            _ => out.push_str(&crate::i18n::escape_html(&rest[..end])),
        }
        rest = &rest[end..];
    }
    out.push_str(&crate::i18n::escape_html(rest));
    out
}

#[cfg(test)]
mod tests {
    use chrono::NaiveDate;
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Stamp {
        #[serde(with = "super")]
        at: chrono::NaiveDateTime,
        #[serde(with = "super::option")]
        gone: Option<chrono::NaiveDateTime>,
    }

    #[test]
    fn database_times_travel_as_rfc3339_utc_and_back() {
        let at = NaiveDate::from_ymd_opt(2026, 11, 23)
            .and_then(|d| d.and_hms_micro_opt(22, 56, 17, 561_653))
            .expect("a time");
        let stamp = Stamp { at, gone: None };
        let json = serde_json::to_string(&stamp).expect("serializes");
        assert_eq!(json, r#"{"at":"2026-11-23T22:56:17.561653Z","gone":null}"#);
        assert_eq!(serde_json::from_str::<Stamp>(&json).expect("reads back"), stamp);
        let older = r#"{"at":"2026-11-23T22:56:17.561653","gone":"2026-11-24T00:00:00+09:00"}"#;
        let read: Stamp = serde_json::from_str(older).expect("reads an older report");
        assert_eq!(
            (read.at, read.gone.map(|at| at.to_string())),
            (at, Some("2026-11-23 15:00:00".to_string()))
        );
    }

    #[test]
    fn a_shown_time_is_utc_in_the_markup_and_says_so() {
        let at = chrono::NaiveDate::from_ymd_opt(2026, 11, 24).and_then(|d| d.and_hms_opt(10, 42, 7));
        let at = at.unwrap_or_default();
        assert_eq!(
            super::clock(&at).to_string(),
            r#"<time datetime="2026-11-24T10:42:07Z" data-local="time" title="2026-11-24 10:42:07 UTC">10:42:07 UTC</time>"#
        );
        assert!(super::shown(&at).to_string().contains(r#"data-local="datetime""#));
    }

    #[test]
    fn the_times_in_a_plain_text_are_marked_up_and_the_rest_escaped() {
        let at = chrono::NaiveDate::from_ymd_opt(2026, 11, 24).and_then(|d| d.and_hms_opt(10, 42, 7));
        let time = super::shown(&at.unwrap_or_default()).to_string();
        assert_eq!(
            super::marked("until 2026-11-24 10:42:07 UTC, by <b> at 9 UTC; 2026-11-24 10:42:07 UTC"),
            format!("until {time}, by &lt;b&gt; at 9 UTC; {time}")
        );
        assert_eq!(super::marked("日時 UTC"), "日時 UTC");
    }
}

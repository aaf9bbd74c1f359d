//! Database times on the wire. Every pooled session runs with `time_zone = '+00:00'`, so a
//! `DATETIME` read back is UTC without saying so; JSON says so (`…Z`, RFC 3339), as the OpenAPI
//! document's `date-time` promises. Use with `#[serde(with = "crate::http::utc")]`.

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

/// The same for an optional time (`#[serde(with = "crate::http::utc::option")]`).
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

/// A moment as a page shows it: in UTC in the markup, for a reader without script and on hover,
/// and in the viewer's own time zone once `/static/local_time.js` has run. Rendered with `|safe`:
/// it holds only digits and separators, never text from a request.
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
        let (kind, text) = if self.clock_only {
            ("time", self.at.format("%H:%M:%S"))
        } else {
            ("datetime", self.at.format("%Y-%m-%d %H:%M:%S"))
        };
        write!(
            f,
            r#"<time datetime="{}" data-local="{kind}" title="{} UTC">{text} UTC</time>"#,
            self.at.and_utc().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            self.at.format("%Y-%m-%d %H:%M:%S"),
        )
    }
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
}

//! Values that enter from a URL, a form or a JSON body, parsed strictly and once.
//!
//! chrono's `%Y` accepts signed years of any width (`+262142-12-18`, `-0001-01-01`), and adding
//! days to a date near chrono's own limits panics. So a day from outside is read in exactly one
//! shape, `YYYY-MM-DD`, and only within [`FIRST_DAY`]..=[`LAST_DAY`]: MySQL's `DATE` range,
//! less a margin at the end for the pages that add weeks to the day they were given. Anything
//! else is refused with a 4xx naming the field, never a panic or a 500.

use chrono::NaiveDate;

/// The earliest day accepted from outside: the start of MySQL's `DATE` range.
pub const FIRST_DAY: NaiveDate = match NaiveDate::from_ymd_opt(1000, 1, 1) {
    Some(day) => day,
    None => NaiveDate::MIN,
};

/// The latest day accepted from outside: MySQL's `DATE` range ends on 9999-12-31, and a page
/// may show up to 62 days from the one it was given.
pub const LAST_DAY: NaiveDate = match NaiveDate::from_ymd_opt(9999, 10, 30) {
    Some(day) => day,
    None => NaiveDate::MAX,
};

/// `text` as a day, if it is exactly `YYYY-MM-DD` (surrounding spaces aside), a real calendar
/// date, and within [`FIRST_DAY`]..=[`LAST_DAY`].
pub fn parse_day(text: &str) -> Option<NaiveDate> {
    let text = text.trim();
    let shape_ok = text.len() == 10
        && text
            .bytes()
            .enumerate()
            .all(|(i, b)| if i == 4 || i == 7 { b == b'-' } else { b.is_ascii_digit() });
    if !shape_ok {
        return None;
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d").ok().filter(|day| (FIRST_DAY..=LAST_DAY).contains(day))
}

/// The first character in `text` that nobody means to type into a field: a control character
/// (`\u{0}`, an escape, a backspace; a line break or tab only where the field has lines), or a
/// bidirectional override, which shows text in another order than it is stored (a product named
/// `\u{202E}gnp.exe` reads as `exe.png`). Such a character passed every length check before, and
/// was saved, shown to others and written to the audit log.
pub fn stray_character(text: &str, lines: bool) -> Option<char> {
    text.chars().find(|c| {
        (c.is_control() && !(lines && matches!(c, '\n' | '\r' | '\t')))
            || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
    })
}

/// A [`stray_character`] named as a person can look it up: `U+0000`.
pub fn code_point(c: char) -> String {
    format!("U+{:04X}", u32::from(c))
}

/// `text` cut to a length fit to quote back in an error message.
pub fn quoted(text: &str) -> String {
    text.chars().take(40).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_direction_overrides_are_stray_line_breaks_only_in_lines() {
        assert_eq!(stray_character("Tea pot, 1 l (鉄瓶)", false), None);
        assert_eq!(stray_character("one\ntwo\r\n\tthree", true), None);
        assert_eq!(stray_character("one\ntwo", false), Some('\n'));
        for (text, stray) in [
            ("a\u{0}b", '\u{0}'),
            ("\u{1b}[31m", '\u{1b}'),
            ("\u{202E}gnp.exe", '\u{202E}'),
            ("x\u{7F}", '\u{7F}'),
        ] {
            assert_eq!(stray_character(text, true), Some(stray), "{text:?}");
        }
        assert_eq!(code_point('\u{0}'), "U+0000");
        assert_eq!(code_point('\u{202E}'), "U+202E");
    }

    #[test]
    fn only_plain_iso_days_within_the_range_are_read() {
        assert_eq!(parse_day("2026-11-23"), NaiveDate::from_ymd_opt(2026, 11, 23));
        assert_eq!(parse_day(" 2026-11-23 "), NaiveDate::from_ymd_opt(2026, 11, 23));
        assert_eq!(parse_day("1000-01-01"), Some(FIRST_DAY));
        assert_eq!(parse_day("9999-10-30"), Some(LAST_DAY));
        for bad in [
            "+262142-12-18",
            "+262142-12-25",
            "-0001-01-01",
            "+2026-11-23",
            "0999-12-31",
            "9999-10-31",
            "9999-12-31",
            "2026-02-30",
            "2026-1-5",
            "2026-11-23T10:00",
            "2026/11/23",
            "２０２６-11-23",
            "",
            "tomorrow",
        ] {
            assert_eq!(parse_day(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_page_of_days_from_any_accepted_day_stays_within_chrono_and_mysql() {
        let step = chrono::Days::new(62);
        assert!(
            LAST_DAY
                .checked_add_days(step)
                .is_some_and(|d| d <= NaiveDate::from_ymd_opt(9999, 12, 31).expect("day"))
        );
        assert!(FIRST_DAY.checked_sub_days(step).is_some());
    }
}

/// The attributes that mark the form field `field` when it is in error: `aria-invalid`, the
/// message that describes it (the element `{field}-error`), and `autofocus` on the first field
/// in error, so that the focus lands where there is something to fix. `in_error` lists the
/// fields in error in the order the form shows them. Markup for `|safe`: a field name that is
/// not a plain identifier (never the case: templates pass their own literals) gives nothing.
pub fn field_marks(field: &str, in_error: &[&str]) -> String {
    let plain = !field.is_empty() && field.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
    match in_error.iter().position(|f| *f == field) {
        Some(at) if plain => format!(
            r#" aria-invalid="true" aria-describedby="{field}-error"{}"#,
            if at == 0 { " autofocus" } else { "" }
        ),
        _ => String::new(),
    }
}

#[cfg(test)]
mod field_marks_tests {
    use super::field_marks;

    #[test]
    fn only_fields_in_error_are_marked_and_only_the_first_takes_the_focus() {
        let in_error = ["description", "capacity"];
        assert_eq!(field_marks("name", &in_error), "");
        assert_eq!(
            field_marks("description", &in_error),
            r#" aria-invalid="true" aria-describedby="description-error" autofocus"#
        );
        assert_eq!(
            field_marks("capacity", &in_error),
            r#" aria-invalid="true" aria-describedby="capacity-error""#
        );
        assert_eq!(field_marks("x\" onfocus=\"", &["x\" onfocus=\""]), "", "never markup from a name");
    }
}

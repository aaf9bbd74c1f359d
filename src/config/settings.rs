//! How a setting is declared, read and shown: one line per environment variable, through
//! [`settings!`](crate::config::settings).
//!
//! A declaration gives a variable's name, its field and type, its default (the text an operator
//! would write, parsed like any other value), its bounds (in its parser), what it does (its doc
//! comment) and whether it is a secret. From that one line come the field, its reading (an
//! error names the variable, since the variable is what was read), its line of `haita config`
//! and of the docs' tables (checked by a test), and how `Debug` shows it.

use std::fmt::Debug;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration: {name}={value:?} is invalid: {reason}")]
    Invalid { name: String, value: String, reason: String },
    #[error("configuration: {name} is not set: {reason}")]
    Missing { name: &'static str, reason: &'static str },
}

impl ConfigError {
    pub(super) fn of(name: &str, value: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid { name: name.into(), value: value.into(), reason: reason.into() }
    }
}

/// How a value may be shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// As it is.
    Plain,
    /// Never: not in an error, not in `Debug` (a session key, a token).
    Secret,
    /// A URL whose password is replaced (`redact`).
    Url,
}

impl Mark {
    /// The mark written in a declaration (`[secret]`, `[url]`, or none).
    pub const fn of(written: &str) -> Self {
        match written.as_bytes() {
            b"secret" => Self::Secret,
            b"url" => Self::Url,
            _ => Self::Plain,
        }
    }

    fn show(self, value: &str) -> String {
        match self {
            Self::Plain => value.to_string(),
            Self::Secret => "<hidden>".into(),
            Self::Url => redact(value),
        }
    }
}

/// One declared variable, as `haita config` and the docs list it.
#[derive(Clone, Copy, Debug)]
pub struct Variable {
    pub name: &'static str,
    /// The default as an operator would write it; `None`: unset, or computed (the help says).
    pub default: Option<&'static str>,
    /// What it does: the declaration's doc comment.
    pub help: &'static str,
    pub mark: Mark,
}

/// Reads `name` with `lookup`, or else its `default`, and parses it. The error names the
/// variable and, unless it is a secret, the value.
pub fn read<T>(
    lookup: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    mark: Mark,
    default: Option<&'static str>,
    parse: impl Fn(Option<&str>) -> Result<T, String>,
) -> Result<T, ConfigError> {
    let given = lookup(name);
    let text = given.as_deref().or(default);
    parse(text).map_err(|reason| ConfigError::of(name, mark.show(text.unwrap_or_default()), reason))
}

/// A value `Debug` may show: secrets never, URLs without their password.
pub struct Shown<'a, T>(pub &'a T, pub Mark);

impl<T: Debug> Debug for Shown<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.1 {
            Mark::Plain => self.0.fmt(f),
            Mark::Secret => f.write_str("[not shown]"),
            Mark::Url => f.write_str(&redact(format!("{:?}", self.0).trim_matches('"'))),
        }
    }
}

/// The URL with its password replaced, for messages.
pub fn redact(url: &str) -> String {
    if url.is_empty() {
        return String::new();
    }
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            // Only a URL that cannot have a password refuses one.
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        Ok(parsed) => parsed.to_string(),
        // Not a URL: nothing in it can be told apart as a password, so nothing of it is shown.
        Err(_) => "(not a URL)".into(),
    }
}

// ---- parsers: each takes the text read (`None`: unset, with no default) -------------------

/// A value that must be there: every declaration with a default.
fn given(text: Option<&str>) -> Result<&str, String> {
    text.ok_or_else(|| "is not set".to_string())
}

/// Text as it is.
pub fn text(text: Option<&str>) -> Result<String, String> {
    given(text).map(ToString::to_string)
}

/// A whole number within `range`.
pub fn number<N>(range: RangeInclusive<N>) -> impl Fn(Option<&str>) -> Result<N, String>
where
    N: FromStr + PartialOrd + std::fmt::Display + Copy,
    N::Err: std::fmt::Display,
{
    move |text| {
        let text = given(text)?;
        let n: N = text.trim().parse().map_err(|e: N::Err| format!("{e}; use a whole number"))?;
        if range.contains(&n) {
            Ok(n)
        } else {
            Err(format!("{n} is not in {}..={}", range.start(), range.end()))
        }
    }
}

/// Whole seconds within `range`.
pub fn seconds(range: RangeInclusive<u64>) -> impl Fn(Option<&str>) -> Result<Duration, String> {
    in_units(range, 1)
}

/// Whole minutes within `range`.
pub fn minutes(range: RangeInclusive<u64>) -> impl Fn(Option<&str>) -> Result<Duration, String> {
    in_units(range, 60)
}

/// Whole days within `range`.
pub fn days(range: RangeInclusive<u64>) -> impl Fn(Option<&str>) -> Result<Duration, String> {
    in_units(range, 86_400)
}

fn in_units(range: RangeInclusive<u64>, unit: u64) -> impl Fn(Option<&str>) -> Result<Duration, String> {
    let number = number(range);
    move |text| number(text).map(|n| Duration::from_secs(n * unit))
}

/// A yes/no variable: `1`, `true`, `yes`, `on` or `0`, `false`, `no`, `off` (any case). Set but
/// empty is no: `DEMO_MODE=` in a compose file switches the demo off, it does not stop the app.
pub fn flag(text: Option<&str>) -> Result<bool, String> {
    match given(text)?.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        _ => Err("use 1 or 0".into()),
    }
}

/// One of `choices` (any case).
pub fn one_of<T: Copy>(choices: &'static [(&'static str, T)]) -> impl Fn(Option<&str>) -> Result<T, String> {
    move |text| {
        let text = given(text)?.trim();
        choices.iter().find(|(name, _)| name.eq_ignore_ascii_case(text)).map(|&(_, value)| value).ok_or_else(
            || format!("use one of {}", choices.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", ")),
        )
    }
}

/// A path.
pub fn path(text: Option<&str>) -> Result<PathBuf, String> {
    given(text).map(PathBuf::from)
}

/// A secret of at least `min` characters; `how` says how to make one.
pub fn secret(min: usize, how: &'static str) -> impl Fn(Option<&str>) -> Result<String, String> {
    move |text| {
        let text = given(text)?;
        if text.len() < min {
            return Err(format!("needs at least {min} characters, got {} (try `{how}`)", text.len()));
        }
        Ok(text.to_string())
    }
}

/// Comma-separated CIDRs (`TRUSTED_PROXIES`); a bare address is its own /32 or /128. Empty: none.
pub fn cidrs(text: Option<&str>) -> Result<Vec<ipnet::IpNet>, String> {
    given(text)?
        .split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| {
            part.parse::<ipnet::IpNet>()
                .or_else(|_| part.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| format!("{part:?} is not a CIDR such as 10.0.0.0/8 or an address"))
        })
        .collect()
}

/// A variable with no default: unset or set but empty is `None`, anything else is `parse`d.
pub fn optional<T>(
    parse: impl Fn(Option<&str>) -> Result<T, String>,
) -> impl Fn(Option<&str>) -> Result<Option<T>, String> {
    move |text| match text {
        None => Ok(None),
        Some(text) if text.trim().is_empty() => Ok(None),
        Some(text) => parse(Some(text)).map(Some),
    }
}

/// Declares a struct of settings, one environment variable per field, each declared once:
///
/// ```text
/// settings! {
///     pub struct Config {
///         /// What it does (the help `haita config` prints).
///         pool_size: u32 = "POOL_SIZE", default "16" => number(2..=10_000),
///         /// …
///         session_key: Option<String> = "SESSION_KEY" [secret] => optional(secret(64, "…")),
///     }
/// }
/// ```
///
/// The default is written as an operator would write the value and parsed by the same parser.
/// A variable without one is read as `None` when unset (`optional`). `[secret]` keeps the
/// value out of errors and `Debug`; `[url]` shows it without its password.
macro_rules! settings {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[doc = $doc:literal])*
                $field:ident : $ty:ty = $var:literal $( [$mark:ident] )?
                    $( default $default:literal )? $( default_from $computed:expr )? => $parse:expr
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone)]
        pub struct $name {
            $( $(#[doc = $doc])* #[doc = concat!("\n\n`", $var, "`.")] pub $field: $ty, )*
        }

        impl $name {
            /// Each variable as declared, in order.
            pub const VARIABLES: &'static [$crate::config::Variable] = &[
                $( $crate::config::Variable {
                    name: $var,
                    default: $crate::config::settings!(@shown $($default)?),
                    help: concat!($($doc, "\n"),*),
                    mark: $crate::config::Mark::of(stringify!($($mark)?)),
                }, )*
            ];

            /// Every variable, read with `lookup` (the process's environment, or a test's), in
            /// the order declared: a default computed from others (`default_from`) sees the
            /// ones declared before it.
            pub fn read_with(
                lookup: impl Fn(&str) -> Option<String>,
            ) -> Result<Self, $crate::config::ConfigError> {
                $(
                    let $field: $ty = {
                        let mark = $crate::config::Mark::of(stringify!($($mark)?));
                        $crate::config::settings!(
                            @read lookup, $var, mark, $parse, [$($default)?], [$($computed)?]
                        )
                    };
                )*
                Ok(Self { $( $field, )* })
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    $( .field(
                        stringify!($field),
                        &$crate::config::Shown(&self.$field, $crate::config::Mark::of(stringify!($($mark)?))),
                    ) )*
                    .finish()
            }
        }
    };
    (@shown $default:literal) => { Some($default) };
    (@shown) => { None };
    (@read $lookup:ident, $var:literal, $mark:ident, $parse:expr, [$default:literal], []) => {
        $crate::config::read(&$lookup, $var, $mark, Some($default), $parse)?
    };
    (@read $lookup:ident, $var:literal, $mark:ident, $parse:expr, [], [$computed:expr]) => {
        match $crate::config::read(&$lookup, $var, $mark, None, $crate::config::optional($parse))? {
            Some(given) => given,
            None => $computed,
        }
    };
    (@read $lookup:ident, $var:literal, $mark:ident, $parse:expr, [], []) => {
        $crate::config::read(&$lookup, $var, $mark, None, $parse)?
    };
}
pub(crate) use settings;

/// The process's environment; a variable that is not UTF-8 reads as its lossy text, which the
/// parser then refuses or takes as written.
pub fn from_process(name: &str) -> Option<String> {
    std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
}

/// The list of variables as `haita config` prints it: name, default, what it does.
pub fn help(variables: &[Variable]) -> String {
    let mut out = String::from("haita reads its configuration from these environment variables:\n");
    for variable in variables {
        out.push('\n');
        out.push_str(variable.name);
        if let Some(default) = variable.default.filter(|d| !d.is_empty()) {
            out.push_str(&format!(" (default: {default})"));
        }
        let mut line = String::from("   ");
        for word in variable.help.split_whitespace() {
            if line.len() + word.len() > 96 {
                out.push_str(&format!("\n{line}"));
                line = String::from("   ");
            }
            line.push(' ');
            line.push_str(word);
        }
        out.push_str(&format!("\n{line}\n"));
    }
    out
}

/// What the tests of each list of settings check: `.env.example` and both configuration pages
/// name exactly the declared variables, each with its declared default.
#[cfg(test)]
pub(crate) mod listing {
    use super::Variable;

    /// The part of the example file and of the pages a list belongs to: the app's, or the
    /// lab's, which follows the example file's `# ---- the lab` line and the pages' heading
    /// whose anchor is `lab`.
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub enum Part {
        App,
        #[cfg_attr(not(feature = "lab"), expect(dead_code, reason = "the lab's own test checks its part"))]
        Lab,
    }

    /// `text` before the first line starting with `marker` (the app's part), or from it on.
    fn part<'a>(text: &'a str, marker: &str, part: Part) -> &'a str {
        let at = text.find(&format!("\n{marker}")).map_or(text.len(), |i| i + 1);
        match part {
            Part::App => &text[..at],
            Part::Lab => &text[at..],
        }
    }

    /// `NAME` of every line `NAME=…` or `#NAME=…`.
    fn example_names(text: &str) -> Vec<String> {
        text.lines()
            .filter_map(|line| line.trim_start_matches('#').split_once('='))
            .map(|(name, _)| name.to_string())
            .filter(|name| !name.is_empty() && name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'))
            .collect()
    }

    /// The first two cells of each row of the variables' tables of a page.
    fn documented(page: &str) -> Vec<(String, String)> {
        page.lines()
            .filter_map(|line| {
                let mut cells = line.strip_prefix("| `")?.split(" | ");
                let name = cells.next()?.trim_end_matches('`').to_string();
                Some((name, cells.next()?.to_string()))
            })
            .collect()
    }

    pub fn check(declared: &[Variable], not_ours: &[&str], which: Part) {
        let mut names: Vec<String> = declared.iter().map(|v| v.name.to_string()).collect();
        names.extend(not_ours.iter().map(ToString::to_string));
        names.sort();
        let example = include_str!("../../.env.example");
        let mut listed = example_names(part(example, "# ---- the lab", which));
        listed.sort();
        listed.dedup();
        assert_eq!(listed, names, ".env.example must list every declared variable, and only those");
        for (page, text, heading) in [
            ("docs/configuration.md", include_str!("../../docs/configuration.md"), "## The lab"),
            ("docs/ja/configuration.md", include_str!("../../docs/ja/configuration.md"), "## ラボ"),
        ] {
            let rows = documented(part(text, heading, which));
            let mut listed: Vec<String> = rows.iter().map(|(name, _)| name.clone()).collect();
            listed.sort();
            assert_eq!(listed, names, "{page} must have a row for every declared variable, and only those");
            for variable in declared {
                let Some(default) = variable.default.filter(|d| !d.is_empty()) else { continue };
                let cell = rows
                    .iter()
                    .find(|(n, _)| n == variable.name)
                    .map(|(_, d)| d.as_str())
                    .unwrap_or_default();
                assert!(
                    cell.contains(&format!("`{default}`")),
                    "{page}: the default of {} is `{default}`, the page says {cell}",
                    variable.name
                );
            }
        }
    }
}

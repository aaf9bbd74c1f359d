//! The load generator as a process of its own: `wrk` (<https://github.com/wg/wrk>) with a Lua
//! script written for the cell, when it is installed.
//!
//! The built-in driver (reqwest clients in the bench's process) costs 70–90 µs of CPU per
//! request; on a machine whose cores are shared by the database, the app and the load
//! generator, that CPU is taken from the other two and lowers what the app can answer. `wrk`
//! costs a fraction of it, so its numbers are nearer what the app does with a client on
//! another machine. Its CPU is still read and printed (`cli µs`): the bench process waits for
//! `wrk`, so the kernel adds its CPU time to the bench's "children" counters.
//!
//! The script sends the same requests as the built-in driver (the same endpoint, body and key
//! sequence, one logged-in user per connection's share of requests, or on a realistic history
//! the user of each attempt) and counts the answers the
//! same way: 201 booked, 409 refused, 503 busy, anything else an error.

use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;

use super::bookings::{DAYS, Target};

/// Whether `wrk` can be run here.
pub fn installed() -> bool {
    Command::new("wrk").arg("-v").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

/// What one `wrk` run reports (the script's last line).
#[derive(Debug, Default, PartialEq)]
pub struct Report {
    pub booked: u64,
    pub refused: u64,
    pub busy: u64,
    pub errors: u64,
    /// The status and body of the first error, if any.
    pub first_error: Option<String>,
    pub p50: Duration,
    pub p99: Duration,
    pub elapsed: Duration,
    /// `wrk`'s own CPU time (user + system).
    pub cpu: Duration,
}

/// Runs `wrk` against `base` for `window` with `connections` connections, booking `target`'s
/// keys in order: as one user per connection (a cookie each), or, on a realistic history
/// (`target.users`), attempt `i` as the user of `cookies[i % len]`.
pub(super) fn run(
    base: &str,
    cookies: &[String],
    connections: usize,
    target: &Target,
    window: Duration,
) -> anyhow::Result<Report> {
    let threads = connections.clamp(1, 2);
    let script = script(cookies, target, threads)?;
    let path = std::env::temp_dir().join(format!("haita-bench-{}.lua", std::process::id()));
    std::fs::write(&path, script).with_context(|| format!("writing {}", path.display()))?;
    let children_before = super::children_cpu();
    let output = Command::new("bash")
        .args(["-c", CLOSE_INHERITED_THEN_WRK, "wrk"])
        .arg(format!("--threads={threads}"))
        .arg(format!("--connections={}", connections.max(1)))
        .arg(format!("--duration={}s", window.as_secs().max(1)))
        .arg("--timeout=30s")
        .arg(format!("--script={}", path.display()))
        .arg(base)
        .stdin(Stdio::null())
        .output()
        .context("running wrk")?;
    let cpu = super::children_cpu().saturating_sub(children_before);
    let _ = std::fs::remove_file(&path);
    let stdout = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "wrk failed ({}): {stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|line| line.strip_prefix("haita-wrk "))
        .with_context(|| format!("wrk printed no tally: {stdout}"))?;
    let report = parse(line)?;
    // wrk counts requests that got no answer (refused connections, timeouts) apart, in its own
    // summary; a run in which nothing was answered is no measurement.
    anyhow::ensure!(
        report.booked + report.refused + report.busy + report.errors > 0,
        "wrk got no answer: {stdout}"
    );
    Ok(Report { cpu, ..report })
}

/// Starts wrk (with the arguments after it) from a shell that first closes every descriptor but
/// stdin, stdout and stderr. The MariaDB client library opens its sockets without close-on-exec,
/// so a child inherits the bench's database connections; wrk sizes its event loop for its own
/// connections (10 + 3 per connection) and cannot watch a socket numbered beyond that, which it
/// reports as failed connects.
const CLOSE_INHERITED_THEN_WRK: &str =
    r#"for fd in /proc/$$/fd/*; do fd=${fd##*/}; [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done; exec wrk "$@""#;

/// A string literal of Lua for `text` (cookies and error bodies are plain ASCII).
fn lua_string(text: &str) -> anyhow::Result<String> {
    anyhow::ensure!(text.chars().all(|c| c.is_ascii_graphic() || c == ' '), "not plain text: {text:?}");
    Ok(format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\"")))
}

/// The script: per request the next key of the cell's sequence (each thread takes every
/// `threads`-th attempt) and the next cookie; per response a tally; at the end one line with
/// the totals and the latency percentiles, in microseconds.
fn script(cookies: &[String], target: &Target, threads: usize) -> anyhow::Result<String> {
    let (path, strategy) = target.endpoint();
    let first_day = target.first_day.and_hms_opt(12, 0, 0).context("noon exists")?.and_utc().timestamp();
    let mut lua = String::new();
    let list = |items: Vec<String>| items.join(", ");
    writeln!(
        lua,
        "local cookies = {{ {} }}",
        list(cookies.iter().map(|c| lua_string(c)).collect::<Result<_, _>>()?)
    )?;
    writeln!(lua, "local resources = {{ {} }}", list(target.resources.iter().map(i64::to_string).collect()))?;
    writeln!(lua, "local spread = {}", target.spread())?;
    writeln!(lua, "local rotate = {}", target.users.is_some())?;
    writeln!(lua, "local first_attempt = {}", target.first_attempt)?;
    writeln!(lua, "local first_day, days, threads = {first_day}, {DAYS}, {threads}")?;
    writeln!(lua, "local path = {}", lua_string(path)?)?;
    let strategy_field = match strategy {
        Some(name) => format!("\"strategy\":\"{name}\","),
        None => String::new(),
    };
    writeln!(lua, "local strategy_field = {}", lua_string(&strategy_field)?)?;
    lua.push_str(SCRIPT);
    Ok(lua)
}

/// The fixed part of the script (wrk's Lua API: `setup` runs once per thread in the main
/// state, `init`/`request`/`response` in each thread's own, `done` in the main state again).
const SCRIPT: &str = r#"
local all = {}
local next_id = 0
function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  table.insert(all, thread)
end

local attempt, sent = 0, 0
booked, refused, busy, errors, first_error = 0, 0, 0, 0, ""
function init(args)
  attempt = first_attempt + id
end

function request()
  local i = attempt
  attempt = attempt + threads
  sent = sent + 1
  local resource, day = resources[1], 0
  local cookie = cookies[(sent * threads + id) % #cookies + 1]
  if rotate then
    -- User u's k-th attempt, as bookings.rs's Target::key computes it.
    local u, k = i % #cookies, math.floor(i / #cookies)
    cookie = cookies[u + 1]
    if spread then
      resource = resources[((u + 37 * k) % #resources) + 1]
      day = (13 * u + 7 * k) % days
    end
  elseif spread then
    resource = resources[(math.floor(i / days) % #resources) + 1]
    day = i % days
  end
  local body = string.format('{%s"resource_id":%d,"date":"%s"}', strategy_field, resource,
    os.date("!%Y-%m-%d", first_day + day * 86400))
  local headers = {
    ["Content-Type"] = "application/json",
    ["Cookie"] = cookie,
  }
  return wrk.format("POST", path, headers, body)
end

function response(status, headers, body)
  if status == 201 then booked = booked + 1
  elseif status == 409 then refused = refused + 1
  elseif status == 503 then busy = busy + 1
  else
    errors = errors + 1
    if first_error == "" then first_error = status .. " " .. body end
  end
end

function done(summary, latency, requests)
  local t = { booked = 0, refused = 0, busy = 0, errors = 0 }
  local first = ""
  for _, thread in ipairs(all) do
    for name, _ in pairs(t) do t[name] = t[name] + thread:get(name) end
    if first == "" then first = thread:get("first_error") end
  end
  first = string.gsub(first, "[^%w%p ]", " ")
  io.write(string.format("haita-wrk booked=%d refused=%d busy=%d errors=%d p50=%d p99=%d elapsed=%d first_error=%s\n",
    t.booked, t.refused, t.busy, t.errors, latency:percentile(50), latency:percentile(99),
    summary.duration, first))
end
"#;

/// Reads the script's tally line (after its `haita-wrk ` prefix).
fn parse(line: &str) -> anyhow::Result<Report> {
    let (fields, first_error) = line.split_once(" first_error=").unwrap_or((line, ""));
    let mut report = Report {
        first_error: (!first_error.trim().is_empty()).then(|| first_error.trim().to_string()),
        ..Report::default()
    };
    for field in fields.split_whitespace() {
        let (name, value) = field.split_once('=').with_context(|| format!("not name=value: {field}"))?;
        let value: u64 = value.parse().with_context(|| format!("{name} is not a count: {value}"))?;
        match name {
            "booked" => report.booked = value,
            "refused" => report.refused = value,
            "busy" => report.busy = value,
            "errors" => report.errors = value,
            "p50" => report.p50 = Duration::from_micros(value),
            "p99" => report.p99 = Duration::from_micros(value),
            "elapsed" => report.elapsed = Duration::from_micros(value),
            other => anyhow::bail!("unknown field {other}"),
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tally_line_is_read_back_field_by_field() {
        let line = "booked=12 refused=3 busy=1 errors=2 p50=1500 p99=9000 elapsed=3000123 first_error=422 {\"error\":\"x\"}";
        let report = parse(line).expect("parses");
        assert_eq!(
            report,
            Report {
                booked: 12,
                refused: 3,
                busy: 1,
                errors: 2,
                first_error: Some("422 {\"error\":\"x\"}".into()),
                p50: Duration::from_micros(1500),
                p99: Duration::from_micros(9000),
                elapsed: Duration::from_micros(3_000_123),
                cpu: Duration::ZERO,
            }
        );
        assert_eq!(
            parse("booked=1 refused=0 busy=0 errors=0 p50=1 p99=2 elapsed=3 first_error=")
                .expect("parses")
                .first_error,
            None
        );
        assert!(parse("booked=lots").is_err());
    }

    #[test]
    fn lua_strings_are_quoted_and_anything_but_plain_text_is_refused() {
        assert_eq!(lua_string(r#"a"b\c"#).expect("plain"), r#""a\"b\\c""#);
        assert!(lua_string("line\nbreak").is_err());
    }
}

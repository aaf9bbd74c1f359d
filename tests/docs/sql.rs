//! SQL as the pages show it: a statement of the source laid out one clause per line, and the
//! normal form a hand-written line is compared in.

/// A statement's tokens (words, quoted strings, dialect tokens, punctuation), each with
/// whether whitespace came before it in the text.
fn spaced_tokens(sql: &str) -> Vec<(String, bool)> {
    let chars: Vec<char> = sql.chars().collect();
    let mut out: Vec<(String, bool)> = Vec::new();
    let mut i = 0;
    let mut spaced = false;
    while i < chars.len() {
        let c = chars[i];
        let before = out.len();
        if c.is_whitespace() {
            i += 1;
            spaced = true;
            continue;
        } else if c == '\'' || c == '"' || c == '`' {
            let start = i;
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += 1;
            }
            i = (i + 1).min(chars.len());
            out.push((chars[start..i].iter().collect(), spaced));
        } else if c == '{' {
            // A dialect token as written in the source: `{now}`, `{? microseconds}`.
            let start = i;
            while i < chars.len() && chars[i] != '}' {
                i += 1;
            }
            i = (i + 1).min(chars.len());
            out.push((chars[start..i].iter().collect(), spaced));
        } else if c.is_alphanumeric() || c == '_' || c == '.' || c == '$' || c == '@' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || "_.$@".contains(chars[i])) {
                i += 1;
            }
            out.push((chars[start..i].iter().collect(), spaced));
        } else {
            // `<=`, `>=`, `<>`, `!=`, `||`, `::` stay one token.
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            if ["<=", ">=", "<>", "!=", "||", "::"].contains(&two.as_str()) {
                out.push((two, spaced));
                i += 2;
            } else {
                out.push((c.to_string(), spaced));
                i += 1;
            }
        }
        debug_assert!(out.len() > before);
        spaced = false;
    }
    out
}

fn tokens(sql: &str) -> Vec<String> {
    spaced_tokens(sql).into_iter().map(|(t, _)| t).collect()
}

/// Clauses that start a line of their own when they are not inside parentheses.
const CLAUSES: &[&[&str]] = &[
    &["FROM"],
    &["WHERE"],
    &["GROUP", "BY"],
    &["ORDER", "BY"],
    &["HAVING"],
    &["LIMIT"],
    &["SET"],
    &["VALUES"],
    &["ON", "DUPLICATE", "KEY", "UPDATE"],
    &["ON", "CONFLICT"],
    &["RETURNING"],
    &["UNION"],
    &["JOIN"],
    &["LEFT", "JOIN"],
    &["FOR", "UPDATE"],
    &["FOR", "SHARE"],
    &["LOCK", "IN", "SHARE", "MODE"],
    &["{share}"],
];

/// Whether the tokens at `at` start a clause; `SET` inside `UPDATE … SET` only, not after `ON
/// DUPLICATE KEY UPDATE` (whose assignments follow on its own line anyway).
fn clause_at(tokens: &[String], at: usize) -> Option<usize> {
    CLAUSES.iter().find_map(|words| {
        let fits = words.iter().enumerate().all(|(k, w)| tokens.get(at + k).is_some_and(|t| t == w));
        fits.then_some(words.len())
    })
}

/// Joins tokens as the source spaced them (any run of whitespace as one space).
fn join(tokens: &[(String, bool)]) -> String {
    let mut out = String::new();
    for (i, (token, spaced)) in tokens.iter().enumerate() {
        if i > 0 && *spaced {
            out.push(' ');
        }
        out.push_str(token);
    }
    out
}

/// A statement laid out one clause per line: `FROM`, `WHERE`, `SET`, `VALUES`, … at the start
/// of a line when they are not inside parentheses, and a select list that holds subqueries
/// one item per line, indented by two. Deterministic, and nothing but whitespace changes.
pub fn format(sql: &str) -> String {
    let spaced = spaced_tokens(sql);
    let tokens: Vec<String> = spaced.iter().map(|(t, _)| t.clone()).collect();
    let mut lines: Vec<Vec<usize>> = vec![Vec::new()];
    let mut depth = 0usize;
    // Whether the top-level select list being written holds a subquery: then its items go one
    // per line.
    let subqueries_in_list = |from: usize| {
        let mut d = 0usize;
        for (k, t) in tokens.iter().enumerate().skip(from) {
            match t.as_str() {
                "(" => {
                    if d == 0 && tokens.get(k + 1).is_some_and(|n| n == "SELECT") {
                        return true;
                    }
                    d += 1;
                }
                ")" => d = d.saturating_sub(1),
                "FROM" if d == 0 => return false,
                _ => {}
            }
        }
        false
    };
    let mut split_list = false;
    let mut i = 0;
    while i < tokens.len() {
        let token = &tokens[i];
        if depth == 0 {
            if token == "SELECT" {
                split_list = subqueries_in_list(i + 1);
            }
            if let Some(n) = clause_at(&tokens, i)
                && !lines.last().is_some_and(Vec::is_empty)
            {
                split_list = split_list && token != "FROM";
                lines.push(Vec::new());
                lines.last_mut().expect("a line").extend(i..i + n);
                i += n;
                continue;
            }
        }
        match token.as_str() {
            "(" => depth += 1,
            ")" => depth = depth.saturating_sub(1),
            _ => {}
        }
        lines.last_mut().expect("a line").push(i);
        if depth == 0 && split_list && token == "," {
            lines.push(vec![usize::MAX]);
        }
        i += 1;
    }
    // The select list's first item on a line of its own too, when the list is split.
    let mut out = String::new();
    for line in lines {
        let indent = line.first() == Some(&usize::MAX);
        let words: Vec<(String, bool)> =
            line.into_iter().filter(|&k| k != usize::MAX).map(|k| spaced[k].clone()).collect();
        if words.is_empty() {
            continue;
        }
        if indent {
            out.push_str("  ");
        }
        out.push_str(&join(&words));
        out.push('\n');
    }
    split_first_item(&out)
}

/// `SELECT a,\n  (SELECT …)` → `SELECT\n  a,\n  (SELECT …)`: when the select list is one item per
/// line, its first item is too.
fn split_first_item(text: &str) -> String {
    let mut out = String::new();
    let lines: Vec<&str> = text.lines().collect();
    for (k, line) in lines.iter().enumerate() {
        if let Some(rest) = line.strip_prefix("SELECT ")
            && lines.get(k + 1).is_some_and(|next| next.starts_with("  "))
            && line.ends_with(',')
        {
            out.push_str("SELECT\n  ");
            out.push_str(rest);
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// The form a line of a hand-written block and a literal of the source are compared in:
/// whitespace collapsed, upper case, values (`'…'` strings, numbers), `$n` and `{list}` as
/// `?`, a list of `?` as one `?`, and spacing around punctuation dropped.
pub fn normalise(text: &str) -> String {
    let tokens = tokens(text);
    let mut out: Vec<String> = Vec::new();
    for token in tokens {
        let t = if token.starts_with('\'')
            || token.starts_with('$') && token.len() > 1 && token[1..].chars().all(|c| c.is_ascii_digit())
            || token.chars().all(|c| c.is_ascii_digit() || c == '.')
                && token.chars().any(|c| c.is_ascii_digit())
            || token == "{list}"
        {
            "?".to_string()
        } else {
            token.to_uppercase()
        };
        // `?, ?, ?` → `?`
        if t == "?" && out.len() >= 2 && out[out.len() - 1] == "," && out[out.len() - 2] == "?" {
            out.pop();
            continue;
        }
        out.push(t);
    }
    out.join(" ")
}

/// A normalised statement's verb and first table: `["UPDATE", "STOCK_LEVELS"]` for `UPDATE
/// stock_levels SET …`, `["SELECT", "USERS"]` for `SELECT id FROM users …` (its first `FROM`).
/// `None` for what is not a whole statement's start.
pub fn statement_key(normalised: &str) -> Option<Vec<String>> {
    let words: Vec<&str> = normalised.split(' ').collect();
    let verb = *words.first()?;
    let table_after = |marker: &str| words.iter().position(|w| *w == marker).and_then(|i| words.get(i + 1));
    let table = match verb {
        "INSERT" => table_after("INTO"),
        "UPDATE" => words.get(1),
        "DELETE" | "SELECT" => table_after("FROM"),
        _ => None,
    }?;
    Some(vec![verb.to_string(), table.to_string()])
}

/// The names a line of SQL uses, values left out: lower-case words (tables, columns, aliases;
/// `x.day` gives `x` and `day`) and upper-case words with an underscore (functions such as
/// `GET_LOCK`). Keywords are neither.
pub fn names(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    // Every other part between quotes is a string value.
    for part in line.split('\'').step_by(2) {
        for word in part.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            let lower = word.chars().next().is_some_and(|c| c.is_ascii_lowercase());
            let function = word.contains('_')
                && word.chars().all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit());
            if lower || function {
                out.push(word);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_is_laid_out_one_clause_per_line() {
        let sql = "SELECT r.capacity, (SELECT COUNT(*) FROM reservations x WHERE x.day = ?) AS confirmed \
                   FROM resources r WHERE r.id = ? {share}";
        assert_eq!(
            format(sql),
            "SELECT\n  r.capacity,\n  (SELECT COUNT(*) FROM reservations x WHERE x.day = ?) AS confirmed\n\
             FROM resources r\nWHERE r.id = ?\n{share}\n"
        );
        assert_eq!(
            format("UPDATE t SET a = a + 1, b = ? WHERE id IN ({list}) AND v = ?"),
            "UPDATE t\nSET a = a + 1, b = ?\nWHERE id IN ({list}) AND v = ?\n"
        );
        assert_eq!(format("SELECT GET_LOCK(?, ?)"), "SELECT GET_LOCK(?, ?)\n");
    }

    #[test]
    fn values_placeholders_and_lists_compare_equal() {
        assert_eq!(
            normalise("WHERE id IN (3, 8) AND day = '2026-12-24'"),
            normalise("where id in ({list}) and day = $2")
        );
        assert_eq!(normalise("SELECT  GET_LOCK('haita:x', 5)"), normalise("SELECT GET_LOCK(?, ?)"));
    }
}

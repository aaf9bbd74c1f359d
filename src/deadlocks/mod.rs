//! Deadlock evidence: what the server said about a deadlock our transaction lost, kept for the
//! admin. This is InnoDB's story; PostgreSQL tells less, and differently ([`parse_postgres`]).
//!
//! A deadlock victim's error says only "Deadlock found when trying to get lock; try restarting
//! transaction". The retry usually hides it from the user, and that is right; but an operator
//! needs to know *which* two statements met over *which* rows, or the next deadlock is a mystery
//! too. InnoDB keeps exactly that, for the latest deadlock only, in the `LATEST DETECTED
//! DEADLOCK` section of `SHOW ENGINE INNODB STATUS` (which needs the `PROCESS` privilege, granted
//! for the admin screen already). The next deadlock anywhere on the server overwrites it, so it
//! is read right after our transaction was chosen as the victim, on the same connection, before
//! the retry — and stored, once per event (the section's SHA-256 is unique), with the retry's
//! outcome added when it is known. The admin screen shows the two transactions, their statements
//! and the locks they held and waited for, next to what the retry did.

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text, Timestamp};
use serde::Serialize;

use diesel::result::Error as DbError;

use crate::db::{DbConn, Engine, Sql, cached_sql};

/// One deadlock as InnoDB described it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Deadlock {
    /// The server's own timestamp line of the event.
    pub at: String,
    /// Usually two; InnoDB may list more when a cycle involves more.
    pub transactions: Vec<Party>,
    /// The number (1, 2, …) of the transaction InnoDB rolled back.
    pub victim: Option<u32>,
}

impl Deadlock {
    /// Whether InnoDB rolled `party` back to break the deadlock.
    pub fn rolled_back(&self, party: &Party) -> bool {
        self.victim == Some(party.number)
    }
}

/// One transaction of a deadlock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Party {
    pub number: u32,
    /// InnoDB's transaction id, as its lock lines name it.
    pub trx_id: String,
    /// The server connection (`CONNECTION_ID()`) that ran it.
    pub thread_id: Option<i64>,
    /// The statement it was running when it had to wait.
    pub statement: String,
    /// Locks it held that the other one waited for: "index PRIMARY of table `db`.`t`, lock_mode X …".
    pub holds: Vec<String>,
    /// The lock it waited for.
    pub waits_for: Vec<String>,
}

const SECTION: &str = "LATEST DETECTED DEADLOCK";

/// The `LATEST DETECTED DEADLOCK` section of `status` (the text of `SHOW ENGINE INNODB STATUS`),
/// without its header: `None` when the server has seen no deadlock since it started.
pub fn section(status: &str) -> Option<&str> {
    let start = status.find(SECTION)? + SECTION.len();
    let body = status[start..].trim_start_matches(['\n', '-']);
    // Sections are a title between two lines of dashes; the next one ends this one.
    let end = body.find("\n------------\n").unwrap_or(body.len());
    Some(body[..end].trim_end())
}

/// Reads a deadlock section (MariaDB's and MySQL's wordings alike). Lock lines are attributed by
/// their `trx id`: "waiting" ones are what that transaction waited for, the others what it held.
pub fn parse(section: &str) -> Deadlock {
    let mut lines = section.lines().peekable();
    let at = lines.next().unwrap_or_default().trim().to_string();
    let mut transactions: Vec<Party> = Vec::new();
    let mut locks: Vec<(String, bool, String)> = Vec::new(); // (trx id, waiting, description)
    let mut victim = None;
    while let Some(line) = lines.next() {
        if let Some(number) = line.strip_prefix("*** (").and_then(|rest| rest.strip_suffix(") TRANSACTION:"))
        {
            let trx_id = lines
                .next()
                .and_then(|l| l.strip_prefix("TRANSACTION "))
                .and_then(|l| l.split(',').next())
                .unwrap_or_default()
                .to_string();
            // Then lines about tables and locks, the thread line, and the statement up to "***".
            let mut statement = Vec::new();
            let mut thread_id = None;
            while let Some(next) = lines.peek() {
                if next.starts_with("***") {
                    break;
                }
                let next = lines.next().unwrap_or_default();
                if thread_id.is_some() {
                    statement.push(next.trim());
                } else if let Some((_, rest)) = next.split_once(" thread id ") {
                    thread_id = rest.split(',').next().and_then(|id| id.trim().parse().ok());
                }
            }
            transactions.push(Party {
                number: number.parse().unwrap_or(0),
                trx_id,
                thread_id,
                statement: statement.join(" ").trim().to_string(),
                holds: Vec::new(),
                waits_for: Vec::new(),
            });
        } else if let Some(rest) =
            line.strip_prefix("RECORD LOCKS ").or_else(|| line.strip_prefix("TABLE LOCK "))
        {
            if let Some((trx, described)) = describe_lock(rest) {
                let waiting = line.trim_end().ends_with(" waiting");
                if !locks.iter().any(|(t, w, d)| *t == trx && *w == waiting && *d == described) {
                    locks.push((trx, waiting, described));
                }
            }
        } else if let Some(rest) = line.strip_prefix("*** WE ROLL BACK TRANSACTION (") {
            victim = rest.trim_end_matches(')').parse().ok();
        }
    }
    for party in &mut transactions {
        for (trx, waiting, described) in &locks {
            if *trx == party.trx_id {
                let list = if *waiting { &mut party.waits_for } else { &mut party.holds };
                list.push(described.clone());
            }
        }
    }
    Deadlock { at, transactions, victim }
}

/// "space id 1 page no 3 n bits 72 index PRIMARY of table `db`.`t` trx id 42 lock_mode X locks
/// rec but not gap waiting" → ("42", "index PRIMARY of table `db`.`t`, lock_mode X locks rec but
/// not gap").
fn describe_lock(line: &str) -> Option<(String, String)> {
    let (before, after) = line.split_once(" trx id ")?;
    let (trx, mode) = after.split_once(' ').unwrap_or((after, ""));
    let target = before.find("index ").or_else(|| before.find("table ")).map_or(before, |at| &before[at..]);
    let mode = mode.trim().trim_end_matches(" waiting");
    Some((trx.to_string(), format!("{target}, {mode}")))
}

/// `SHOW ENGINE INNODB STATUS`, over a connection of its own. diesel sends every statement as a
/// prepared one, and this one then answers no result metadata ("No metadata exists"), so it goes
/// over the text protocol of the `mysql` crate. Deadlocks are rare: a connection per reading.
fn innodb_status(url: &str) -> Result<String, mysql::Error> {
    use mysql::prelude::Queryable;
    let mut conn = mysql::Conn::new(mysql::Opts::from_url(url)?)?;
    let row: Option<(String, String, String)> = conn.query_first("SHOW ENGINE INNODB STATUS")?;
    Ok(row.map(|(_, _, status)| status).unwrap_or_default())
}

/// Right after `conn`'s transaction was chosen as a deadlock victim (rolled back, with
/// `error`): stores the deadlock as the server describes it, once per event, as seen by `path`
/// ("order", "booking batch"). `url` is the database's (`DbPool::url`). Returns the report's id,
/// for [`settle`]. Evidence is a by-product: failing to gather it (no `PROCESS` privilege, say)
/// is logged and never fails the request.
pub fn capture(conn: &mut DbConn, url: &str, path: &str, error: &DbError) -> Option<i64> {
    let captured = (|| -> Result<Option<i64>, String> {
        let section = match conn.engine() {
            Engine::Mysql => innodb_section(conn, url)?,
            Engine::Postgres => postgres_section(conn, error).map_err(|e| e.to_string())?,
        };
        let Some(section) = section else { return Ok(None) };
        store(conn, &section, path).map_err(|e| e.to_string())
    })();
    captured.unwrap_or_else(|e| {
        log::warn!("could not record the deadlock evidence: {e}");
        None
    })
}

/// InnoDB's latest deadlock, if it is the one `conn` lost. Only the latest is kept: by now it
/// may be another one, which is not ours to report (its own victim, if it is one of ours,
/// reports it).
fn innodb_section(conn: &mut DbConn, url: &str) -> Result<Option<String>, String> {
    let status = innodb_status(url).map_err(|e| e.to_string())?;
    let Some(section) = section(&status) else { return Ok(None) };
    let me = crate::locking::sql::own_connection_id(conn).map_err(|e| e.to_string())?;
    if !parse(section).transactions.iter().any(|party| party.thread_id == Some(me)) {
        log::info!("the latest deadlock on the server is not the one connection {me} lost");
        return Ok(None);
    }
    Ok(Some(section.to_string()))
}

/// PostgreSQL keeps no record of a deadlock: its description is the DETAIL of the victim's
/// error (40P01), one line per session of the cycle ("Process 12 waits for ShareLock on
/// transaction 345; blocked by process 67."). The statements are only in the server's log; the
/// other sessions' are read from `pg_stat_activity` now, and kept only while that session is
/// still in the deadlock's transaction (its `backend_xid` is the one we waited for): then its
/// statement is the one that waited, or came right after it. Stored as: the time,
/// `victim: process <pid>` (ours), the DETAIL lines, and `process <pid> statement: <text>` lines
/// ([`parse_postgres`] reads it back).
fn postgres_section(conn: &mut DbConn, error: &DbError) -> QueryResult<Option<String>> {
    let DbError::DatabaseError(_, info) = error else { return Ok(None) };
    let Some(detail) = info.details() else { return Ok(None) };
    let me = crate::locking::sql::own_connection_id(conn)?;
    let mut lines =
        vec![chrono::Utc::now().format("%Y-%m-%d %H:%M:%S UTC").to_string(), format!("victim: process {me}")];
    lines.extend(detail.lines().map(str::to_string));
    // Another party's statement is worth keeping only while it is still in the very transaction
    // of the deadlock: the one whose id the DETAIL names as what we waited for.
    let others: Vec<(i64, String)> = parse_postgres(&lines.join("\n"))
        .transactions
        .iter()
        .filter(|party| party.thread_id != Some(me))
        .filter_map(|party| {
            let xid = party.holds.iter().find_map(|held| held.strip_prefix("transaction "))?;
            Some((party.thread_id?, xid.to_string()))
        })
        .collect();
    for (pid, xid) in others {
        let statement = cached_sql::<Nullable<Text>>(
            "SELECT query FROM pg_stat_activity WHERE pid = CAST(? AS INTEGER) \
               AND backend_xid = CAST(CAST(? AS TEXT) AS xid) AND query <> '<insufficient privilege>'",
        )
        .bind::<BigInt, _>(pid)
        .bind::<Text, _>(&xid)
        .get_result::<Option<String>>(conn)
        .optional()?
        .flatten();
        if let Some(statement) = statement {
            let statement = statement.split_whitespace().collect::<Vec<_>>().join(" ");
            lines.push(format!("process {pid} statement: {statement}"));
        }
    }
    Ok(Some(lines.join("\n")))
}

/// Stores `section` once per event (its SHA-256 is the fingerprint) and returns its id.
fn store(conn: &mut DbConn, section: &str, path: &str) -> QueryResult<Option<i64>> {
    use sha2::Digest;
    let fingerprint: String =
        sha2::Sha256::digest(section.as_bytes()).iter().map(|byte| format!("{byte:02x}")).collect();
    cached_sql::<()>(Sql::per_engine(
        "INSERT IGNORE INTO deadlock_reports (fingerprint, section, seen_by, recorded_at) VALUES (?, ?, ?, ?)",
        "INSERT INTO deadlock_reports (fingerprint, section, seen_by, recorded_at) VALUES (?, ?, ?, ?) \
         ON CONFLICT (fingerprint) DO NOTHING",
    ))
    .bind::<Text, _>(&fingerprint)
    .bind::<Text, _>(section)
    .bind::<Text, _>(path)
    .bind::<Timestamp, _>(chrono::Utc::now().naive_utc())
    .execute(conn)?;
    cached_sql::<BigInt>("SELECT id FROM deadlock_reports WHERE fingerprint = ?")
        .bind::<Text, _>(&fingerprint)
        .get_result(conn)
        .optional()
}

/// A deadlock as [`postgres_section`] stored it. PostgreSQL names what a session waits for
/// (`ShareLock on transaction 345`: a row lock, waited for as the holder's transaction) and who
/// blocks it; the blocker holds the object waited for.
pub fn parse_postgres(section: &str) -> Deadlock {
    let mut lines = section.lines();
    let at = lines.next().unwrap_or_default().trim().to_string();
    let mut transactions: Vec<Party> = Vec::new();
    let mut victim_pid: Option<i64> = None;
    fn party(transactions: &mut Vec<Party>, pid: i64) -> &mut Party {
        if let Some(at) = transactions.iter().position(|p| p.thread_id == Some(pid)) {
            return &mut transactions[at];
        }
        let number = u32::try_from(transactions.len() + 1).unwrap_or(u32::MAX);
        transactions.push(Party {
            number,
            trx_id: String::new(),
            thread_id: Some(pid),
            statement: String::new(),
            holds: Vec::new(),
            waits_for: Vec::new(),
        });
        let last = transactions.len() - 1;
        &mut transactions[last]
    }
    for line in lines {
        if let Some(pid) = line.strip_prefix("victim: process ") {
            victim_pid = pid.trim().parse().ok();
        } else if let Some(rest) = line.strip_prefix("Process ") {
            let Some((pid, rest)) = rest.split_once(" waits for ") else { continue };
            let Some((wanted, blocker)) = rest.split_once("; blocked by process ") else { continue };
            let (Ok(pid), Ok(blocker)) = (pid.trim().parse(), blocker.trim().trim_end_matches('.').parse())
            else {
                continue;
            };
            party(&mut transactions, pid).waits_for.push(wanted.to_string());
            let object = wanted.split_once(" on ").map_or(wanted, |(_, object)| object);
            party(&mut transactions, blocker).holds.push(object.to_string());
        } else if let Some(rest) = line.strip_prefix("process ") {
            let Some((pid, statement)) = rest.split_once(" statement: ") else { continue };
            if let Ok(pid) = pid.trim().parse() {
                party(&mut transactions, pid).statement = statement.to_string();
            }
        }
    }
    let victim =
        transactions.iter().find(|p| p.thread_id.is_some() && p.thread_id == victim_pid).map(|p| p.number);
    Deadlock { at, transactions, victim }
}

/// Adds what the retry did to the report `id` (only its first outcome: the event is one).
pub fn settle(conn: &mut DbConn, id: i64, outcome: &str) {
    let settled =
        cached_sql::<()>("UPDATE deadlock_reports SET outcome = ? WHERE id = ? AND outcome IS NULL")
            .bind::<Text, _>(outcome)
            .bind::<BigInt, _>(id)
            .execute(conn);
    if let Err(e) = settled {
        log::warn!("could not record the outcome of deadlock report {id}: {e}");
    }
}

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    section: String,
    #[diesel(sql_type = Text)]
    seen_by: String,
    #[diesel(sql_type = Nullable<Text>)]
    outcome: Option<String>,
    #[diesel(sql_type = Timestamp)]
    recorded_at: NaiveDateTime,
}

/// A stored deadlock, as the admin screen shows it.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Report {
    pub id: i64,
    pub deadlock: Deadlock,
    /// InnoDB's own text, for whoever wants every detail.
    pub section: String,
    /// Which path of the app lost the deadlock.
    pub seen_by: String,
    /// What its retry did, once known.
    pub outcome: Option<String>,
    #[serde(with = "crate::web::utc")]
    pub recorded_at: NaiveDateTime,
}

/// The latest `limit` reports, newest first.
pub fn recent(conn: &mut DbConn, limit: i64) -> QueryResult<Vec<Report>> {
    let rows: Vec<Row> = cached_sql::<diesel::sql_types::Untyped>(
        "SELECT id, section, seen_by, outcome, recorded_at FROM deadlock_reports ORDER BY id DESC LIMIT ?",
    )
    .bind::<BigInt, _>(limit)
    .load(conn)?;
    let parse = match conn.engine() {
        Engine::Mysql => parse,
        Engine::Postgres => parse_postgres,
    };
    Ok(rows
        .into_iter()
        .map(|row| Report {
            id: row.id,
            deadlock: parse(&row.section),
            section: row.section,
            seen_by: row.seen_by,
            outcome: row.outcome,
            recorded_at: row.recorded_at,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As MariaDB 10.11 printed it for two sessions updating rows 1 and 2 in opposite orders
    /// (record dumps shortened).
    const STATUS: &str = "\
=====================================
2026-11-24 05:22:50 0x7fc1 INNODB MONITOR OUTPUT
=====================================
------------------------
LATEST DETECTED DEADLOCK
------------------------
2026-11-24 05:22:47 0x7fc1bc27e6c0
*** (1) TRANSACTION:
TRANSACTION 2750214, ACTIVE 1 sec starting index read
mysql tables in use 1, locked 1
LOCK WAIT 3 lock struct(s), heap size 1128, 2 row lock(s), undo log entries 1
MariaDB thread id 24648, OS thread handle 140470062147264, query id 12384039 127.0.0.1 root Updating
UPDATE t SET v=2 WHERE id=1
*** WAITING FOR THIS LOCK TO BE GRANTED:
RECORD LOCKS space id 17954 page no 3 n bits 320 index PRIMARY of table `dl_probe`.`t` trx id 2750214 lock_mode X locks rec but not gap waiting
Record lock, heap no 2 PHYSICAL RECORD: n_fields 4; compact format; info bits 0

*** CONFLICTING WITH:
RECORD LOCKS space id 17954 page no 3 n bits 320 index PRIMARY of table `dl_probe`.`t` trx id 2750003 lock_mode X locks rec but not gap
Record lock, heap no 2 PHYSICAL RECORD: n_fields 4; compact format; info bits 0

*** (2) TRANSACTION:
TRANSACTION 2750003, ACTIVE 1 sec starting index read
mysql tables in use 1, locked 1
LOCK WAIT 3 lock struct(s), heap size 1128, 2 row lock(s), undo log entries 1
MariaDB thread id 24628, OS thread handle 131673851291328, query id 12384025 127.0.0.1 root Updating
UPDATE t SET v=1 WHERE id=2
*** WAITING FOR THIS LOCK TO BE GRANTED:
RECORD LOCKS space id 17954 page no 3 n bits 320 index PRIMARY of table `dl_probe`.`t` trx id 2750003 lock_mode X locks rec but not gap waiting
Record lock, heap no 3 PHYSICAL RECORD: n_fields 4; compact format; info bits 0

*** CONFLICTING WITH:
RECORD LOCKS space id 17954 page no 3 n bits 320 index PRIMARY of table `dl_probe`.`t` trx id 2750214 lock_mode X locks rec but not gap
Record lock, heap no 3 PHYSICAL RECORD: n_fields 4; compact format; info bits 0

*** WE ROLL BACK TRANSACTION (1)
------------
TRANSACTIONS
------------
Trx id counter 2750300
";

    #[test]
    fn the_latest_deadlock_is_cut_out_of_the_status_text() {
        let section = section(STATUS).expect("a deadlock");
        assert!(section.starts_with("2026-11-24 05:22:47 0x7fc1bc27e6c0\n*** (1) TRANSACTION:"));
        assert!(section.ends_with("*** WE ROLL BACK TRANSACTION (1)"));
        assert_eq!(super::section("----\nTRANSACTIONS\n----\nTrx id counter 1\n"), None, "none yet");
    }

    #[test]
    fn each_transaction_gets_its_statement_and_the_locks_it_held_and_waited_for() {
        let deadlock = parse(section(STATUS).expect("a deadlock"));
        // The same text for both rows' locks: only the record dumps (not kept) differ.
        let lock = "index PRIMARY of table `dl_probe`.`t`, lock_mode X locks rec but not gap".to_string();
        assert_eq!(
            deadlock,
            Deadlock {
                at: "2026-11-24 05:22:47 0x7fc1bc27e6c0".into(),
                transactions: vec![
                    Party {
                        number: 1,
                        trx_id: "2750214".into(),
                        thread_id: Some(24648),
                        statement: "UPDATE t SET v=2 WHERE id=1".into(),
                        holds: vec![lock.clone()],
                        waits_for: vec![lock.clone()],
                    },
                    Party {
                        number: 2,
                        trx_id: "2750003".into(),
                        thread_id: Some(24628),
                        statement: "UPDATE t SET v=1 WHERE id=2".into(),
                        holds: vec![lock.clone()],
                        waits_for: vec![lock],
                    },
                ],
                victim: Some(1),
            }
        );
    }

    /// As stored from PostgreSQL 15's DETAIL for an order and a script locking two stock rows in
    /// opposite orders; the script was still in its transaction.
    #[test]
    fn a_postgresql_deadlock_names_sessions_what_each_waits_for_and_who_holds_it() {
        let section = "2026-11-24 22:36:01 UTC\n\
            victim: process 17515\n\
            Process 17515 waits for ShareLock on transaction 154557; blocked by process 17521.\n\
            Process 17521 waits for ShareLock on transaction 154558; blocked by process 17515.\n\
            process 17521 statement: SELECT product_id FROM stock_levels WHERE product_id = $1 FOR UPDATE";
        let party = |number, pid, statement: &str, holds: &str, waits: &str| Party {
            number,
            trx_id: String::new(),
            thread_id: Some(pid),
            statement: statement.into(),
            holds: vec![holds.into()],
            waits_for: vec![waits.into()],
        };
        assert_eq!(
            parse_postgres(section),
            Deadlock {
                at: "2026-11-24 22:36:01 UTC".into(),
                transactions: vec![
                    party(1, 17515, "", "transaction 154558", "ShareLock on transaction 154557"),
                    party(
                        2,
                        17521,
                        "SELECT product_id FROM stock_levels WHERE product_id = $1 FOR UPDATE",
                        "transaction 154557",
                        "ShareLock on transaction 154558",
                    ),
                ],
                victim: Some(1),
            }
        );
    }
}

//! InnoDB's description of the latest deadlock (`SHOW ENGINE INNODB STATUS`), read into a
//! [`Deadlock`]. MariaDB's and MySQL's wordings alike.

use super::{Deadlock, Party};

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
}

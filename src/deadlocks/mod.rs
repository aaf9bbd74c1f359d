//! Deadlock evidence: what the server said about a deadlock our transaction lost, kept for the
//! admin. This is InnoDB's story; PostgreSQL tells less, and differently: what each server
//! tells, and how it is read back, is the engine's dialect's answer (`db::dialect`).
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

pub use crate::db::dialect::{Deadlock, Party};
use crate::db::{DbConn, Sql, cached_sql};

/// Right after `conn`'s transaction was chosen as a deadlock victim (rolled back, with
/// `error`): stores the deadlock as the server describes it, once per event, as seen by `path`
/// ("order", "booking batch"). `url` is the database's (`DbPool::url`). Returns the report's id,
/// for [`settle`]. Evidence is a by-product: failing to gather it (no `PROCESS` privilege, say)
/// is logged and never fails the request.
pub fn capture(conn: &mut DbConn, url: &str, path: &str, error: &DbError) -> Option<i64> {
    let captured = (|| -> Result<Option<i64>, String> {
        let Some(section) = conn.dialect().deadlock_evidence(conn, url, error)? else { return Ok(None) };
        store(conn, &section, path).map_err(|e| e.to_string())
    })();
    captured.unwrap_or_else(|e| {
        log::warn!("could not record the deadlock evidence: {e}");
        None
    })
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
    #[serde(with = "crate::wire::utc")]
    pub recorded_at: NaiveDateTime,
}

/// The latest `limit` reports, newest first.
pub fn recent(conn: &mut DbConn, limit: i64) -> QueryResult<Vec<Report>> {
    let rows: Vec<Row> = cached_sql::<diesel::sql_types::Untyped>(
        "SELECT id, section, seen_by, outcome, recorded_at FROM deadlock_reports ORDER BY id DESC LIMIT ?",
    )
    .bind::<BigInt, _>(limit)
    .load(conn)?;
    let dialect = conn.dialect();
    Ok(rows
        .into_iter()
        .map(|row| Report {
            id: row.id,
            deadlock: dialect.read_deadlock(&row.section),
            section: row.section,
            seen_by: row.seen_by,
            outcome: row.outcome,
            recorded_at: row.recorded_at,
        })
        .collect())
}

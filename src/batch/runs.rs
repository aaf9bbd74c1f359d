//! `batch_runs`: one row per run of a batch job, kept current as it goes, so the admin screen
//! and the next run see what it did. Written on the run's own connection, outside its chunks'
//! transactions except where a chunk's progress must commit with the chunk.

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer, Text, Timestamp};
use serde::Serialize;

use crate::db::{DbConn, cached_sql};

/// A run as the admin screen shows it.
#[derive(Clone, Debug, Queryable, Serialize, utoipa::ToSchema)]
pub struct Run {
    pub id: i64,
    pub job: String,
    pub policy: String,
    pub params: String,
    pub guard: String,
    pub host: String,
    pub pid: i32,
    /// running, done, failed, abandoned (died without saying so).
    pub status: String,
    pub total: i32,
    pub done: i32,
    pub skipped: i32,
    pub report: Option<String>,
    pub error: Option<String>,
    #[serde(with = "crate::http::utc")]
    pub started_at: NaiveDateTime,
    #[serde(with = "crate::http::utc::option")]
    pub finished_at: Option<NaiveDateTime>,
}

/// What a run is, as it starts.
pub struct Start<'a> {
    pub job: &'a str,
    pub policy: &'a str,
    pub params: &'a str,
    pub guard: &'a str,
}

/// Records a run as it starts, under its job's guard. Runs of the job still marked running died
/// without saying so (`kill -9`, a lost machine): none can be running now, since we hold the
/// guard, so they are marked abandoned.
pub fn start(conn: &mut DbConn, run: &Start) -> QueryResult<i64> {
    cached_sql::<()>(
        "UPDATE batch_runs SET status = 'abandoned', finished_at = ? WHERE job = ? AND status = 'running'",
    )
    .bind::<Timestamp, _>(crate::db::now_micros())
    .bind::<Text, _>(run.job)
    .execute(conn)?;
    cached_sql::<()>(
        "INSERT INTO batch_runs (job, policy, params, guard, host, pid, status, started_at) \
         VALUES (?, ?, ?, ?, ?, ?, 'running', ?)",
    )
    .bind::<Text, _>(run.job)
    .bind::<Text, _>(run.policy)
    .bind::<Text, _>(run.params)
    .bind::<Text, _>(run.guard)
    .bind::<Text, _>(super::lockfile::host_name())
    .bind::<Integer, _>(i32::try_from(std::process::id()).unwrap_or(i32::MAX))
    .bind::<Timestamp, _>(crate::db::now_micros())
    .execute(conn)?;
    crate::db::last_insert_id(conn)
}

pub fn set_total(conn: &mut DbConn, id: i64, total: usize) -> QueryResult<()> {
    cached_sql::<()>("UPDATE batch_runs SET total = ? WHERE id = ?")
        .bind::<Integer, _>(i32::try_from(total).unwrap_or(i32::MAX))
        .bind::<BigInt, _>(id)
        .execute(conn)?;
    Ok(())
}

/// Adds a chunk's counts; called inside the chunk's transaction, so they commit with it.
pub fn progress(conn: &mut DbConn, id: i64, done: usize, skipped: usize) -> QueryResult<()> {
    cached_sql::<()>("UPDATE batch_runs SET done = done + ?, skipped = skipped + ? WHERE id = ?")
        .bind::<Integer, _>(i32::try_from(done).unwrap_or(i32::MAX))
        .bind::<Integer, _>(i32::try_from(skipped).unwrap_or(i32::MAX))
        .bind::<BigInt, _>(id)
        .execute(conn)?;
    Ok(())
}

pub fn finish(conn: &mut DbConn, id: i64, report: Option<&str>, error: Option<&str>) -> QueryResult<()> {
    let cut = |text: &str| text.chars().take(500).collect::<String>();
    cached_sql::<()>("UPDATE batch_runs SET status = ?, report = ?, error = ?, finished_at = ? WHERE id = ?")
        .bind::<Text, _>(if error.is_some() { "failed" } else { "done" })
        .bind::<diesel::sql_types::Nullable<Text>, _>(report.map(cut))
        .bind::<diesel::sql_types::Nullable<Text>, _>(error.map(cut))
        .bind::<Timestamp, _>(crate::db::now_micros())
        .bind::<BigInt, _>(id)
        .execute(conn)?;
    Ok(())
}

/// The latest runs, newest first.
pub fn recent(conn: &mut DbConn, limit: i64) -> QueryResult<Vec<Run>> {
    use crate::schema::batch_runs::dsl as b;
    b::batch_runs
        .order(b::id.desc())
        .limit(limit)
        .select((
            b::id,
            b::job,
            b::policy,
            b::params,
            b::guard,
            b::host,
            b::pid,
            b::status,
            b::total,
            b::done,
            b::skipped,
            b::report,
            b::error,
            b::started_at,
            b::finished_at,
        ))
        .load(conn)
}

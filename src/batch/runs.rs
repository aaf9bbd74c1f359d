//! `batch_runs`: one row per run of a batch job, kept current as it goes, so the admin screen
//! and the next run see what it did. Written on the run's own connection, outside its chunks'
//! transactions except where a chunk's progress must commit with the chunk.

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer, Text, Timestamp};
use serde::Serialize;

use crate::db::{DbConn, cached_sql};

/// A run as the admin screen shows it.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Run {
    pub id: i64,
    pub job: String,
    pub policy: String,
    pub params: String,
    pub guard: String,
    pub host: String,
    pub pid: i32,
    /// running; then done (nothing left), incomplete (some work left for a later run, `left`
    /// says why), failed (stopped by an error, `error`), or abandoned (died without saying so).
    pub status: String,
    pub total: i32,
    pub done: i32,
    pub skipped: i32,
    pub report: Option<String>,
    pub error: Option<String>,
    #[serde(with = "crate::wire::utc")]
    pub started_at: NaiveDateTime,
    #[serde(with = "crate::wire::utc::option")]
    pub finished_at: Option<NaiveDateTime>,
    /// What the run waits for right now, if anything.
    pub waiting: Option<Waiting>,
    /// Why work was left for a later run, one entry per reason and target.
    pub left: Vec<Left>,
    /// The fields of the form that starts the same job again (JSON), when known.
    #[serde(skip)]
    pub request: Option<String>,
}

impl Run {
    /// The text key of the run's outcome (`admin.outcome.{status}`).
    pub fn outcome_key(&self) -> &'static str {
        match self.status.as_str() {
            "running" => "admin.outcome.running",
            "done" => "admin.outcome.done",
            "incomplete" => "admin.outcome.incomplete",
            "failed" => "admin.outcome.failed",
            _ => "admin.outcome.abandoned",
        }
    }

    /// The report's file name (the full path is shown on hover).
    pub fn report_file(&self) -> &str {
        let path = self.report.as_deref().unwrap_or_default();
        path.rsplit('/').next().unwrap_or(path)
    }

    /// For a run that left work or failed: where its start form posts, and the fields to post.
    pub fn again_form(&self) -> Option<(&'static str, Vec<(String, String)>)> {
        let fields = self.again();
        let ended_short = matches!(self.status.as_str(), "incomplete" | "failed" | "abandoned");
        (ended_short && !fields.is_empty()).then_some(())?;
        Some((super::forms::action_of(&self.job)?, fields))
    }

    /// The start form's fields for the same job again, which does only what is left: a closed
    /// day is never closed twice, a revised product never revised twice.
    pub fn again(&self) -> Vec<(String, String)> {
        self.request.as_deref().and_then(|json| serde_json::from_str(json).ok()).unwrap_or_default()
    }
}

/// A run waiting for an online editor's lock: whose lock on which record, held since and until
/// when, and when the run gives up waiting.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Waiting {
    pub key: String,
    pub holder: String,
    #[serde(with = "crate::wire::utc")]
    pub lock_since: NaiveDateTime,
    #[serde(with = "crate::wire::utc")]
    pub lock_until: NaiveDateTime,
    #[serde(with = "crate::wire::utc")]
    pub began: NaiveDateTime,
    #[serde(with = "crate::wire::utc")]
    pub gives_up: NaiveDateTime,
}

/// Why a run left work for later, as it is stored and shown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Left {
    /// A [`Because`] code.
    pub code: String,
    /// What was left: a resource's name, empty for products (they are counted).
    pub subject: String,
    /// Whose lock it was, when that is the reason.
    pub holder: Option<String>,
    /// How many days (a closure) or products (a revision).
    pub items: i32,
}

impl Left {
    /// The text key that words this reason (`admin.left.{code}`).
    pub fn text_key(&self) -> &'static str {
        match self.code.as_str() {
            "edit_lock_waited_out" => "admin.left.edit_lock_waited_out",
            "edit_lock_held" => "admin.left.edit_lock_held",
            "edit_lock_lost" => "admin.left.edit_lock_lost",
            "day_lock_taken" => "admin.left.day_lock_taken",
            "row_busy" => "admin.left.row_busy",
            "row_stayed_locked" => "admin.left.row_stayed_locked",
            "product_locked" => "admin.left.product_locked",
            "price_refused" => "admin.left.price_refused",
            _ => "admin.left.other",
        }
    }
}

/// Why a job left a target for a later run; the admin screen words each in its language
/// (`admin.left.{code}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Because {
    /// `wait`: an editor kept the edit lock for the whole wait.
    EditLockWaitedOut,
    /// `skip`: an editor held the edit lock.
    EditLockHeld,
    /// The run's own edit lock was lost midway.
    EditLockLost,
    /// A booking held the day's booking lock.
    DayLockTaken,
    /// `skip`: an online request had the row locked.
    RowBusy,
    /// An online request kept the row locked past the lock wait.
    RowStayedLocked,
    /// `skip`: a product was being saved online.
    ProductLocked,
    /// The revised price is out of range.
    PriceRefused,
}

impl Because {
    pub fn code(self) -> &'static str {
        match self {
            Self::EditLockWaitedOut => "edit_lock_waited_out",
            Self::EditLockHeld => "edit_lock_held",
            Self::EditLockLost => "edit_lock_lost",
            Self::DayLockTaken => "day_lock_taken",
            Self::RowBusy => "row_busy",
            Self::RowStayedLocked => "row_stayed_locked",
            Self::ProductLocked => "product_locked",
            Self::PriceRefused => "price_refused",
        }
    }
}

/// What a run is, as it starts.
pub struct Start<'a> {
    pub job: &'a str,
    pub policy: &'a str,
    pub params: &'a str,
    pub guard: &'a str,
    /// The start form's fields, to run the same job again.
    pub request: &'a [(&'static str, String)],
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
        "INSERT INTO batch_runs (job, policy, params, guard, host, pid, status, started_at, request) \
         VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?)",
    )
    .bind::<Text, _>(run.job)
    .bind::<Text, _>(run.policy)
    .bind::<Text, _>(run.params)
    .bind::<Text, _>(run.guard)
    .bind::<Text, _>(super::lockfile::host_name())
    .bind::<Integer, _>(i32::try_from(std::process::id()).unwrap_or(i32::MAX))
    .bind::<Timestamp, _>(crate::db::now_micros())
    .bind::<Text, _>(serde_json::to_string(run.request).unwrap_or_default())
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

/// What the run waits for from now on (`None`: it waits no more).
pub fn waiting(conn: &mut DbConn, id: i64, waiting: Option<&Waiting>) -> QueryResult<()> {
    use crate::schema::batch_run_waits::dsl as w;
    // Only the run itself writes its row: a delete and an insert need no upsert.
    diesel::delete(w::batch_run_waits.find(id)).execute(conn)?;
    if let Some(waiting) = waiting {
        diesel::insert_into(w::batch_run_waits)
            .values((
                w::run_id.eq(id),
                w::lock_key.eq(&waiting.key),
                w::holder.eq(waiting.holder.chars().take(200).collect::<String>()),
                w::lock_since.eq(waiting.lock_since),
                w::lock_until.eq(waiting.lock_until),
                w::began.eq(waiting.began),
                w::gives_up.eq(waiting.gives_up),
            ))
            .execute(conn)?;
    }
    Ok(())
}

/// Records how the run ended: failed on an error; else incomplete when it left work for a later
/// run (`left` says why), done when it left nothing. A run that closed nothing is not done.
pub fn finish(
    conn: &mut DbConn,
    id: i64,
    report: Option<&str>,
    error: Option<&str>,
    left: &[Left],
) -> QueryResult<()> {
    let cut = |text: &str| text.chars().take(500).collect::<String>();
    let status = match (error, left.is_empty()) {
        (Some(_), _) => "failed",
        (None, false) => "incomplete",
        (None, true) => "done",
    };
    for (position, reason) in left.iter().enumerate() {
        cached_sql::<()>(
            "INSERT INTO batch_run_reasons (run_id, position, code, subject, holder, items) \
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind::<BigInt, _>(id)
        .bind::<Integer, _>(i32::try_from(position).unwrap_or(i32::MAX))
        .bind::<Text, _>(&reason.code)
        .bind::<Text, _>(reason.subject.chars().take(200).collect::<String>())
        .bind::<diesel::sql_types::Nullable<Text>, _>(
            reason.holder.as_ref().map(|h| h.chars().take(200).collect::<String>()),
        )
        .bind::<Integer, _>(reason.items)
        .execute(conn)?;
    }
    waiting(conn, id, None)?;
    cached_sql::<()>("UPDATE batch_runs SET status = ?, report = ?, error = ?, finished_at = ? WHERE id = ?")
        .bind::<Text, _>(status)
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
    load(conn, b::batch_runs.order(b::id.desc()).limit(limit).into_boxed())
}

/// One run, if it exists.
pub fn one(conn: &mut DbConn, id: i64) -> QueryResult<Option<Run>> {
    use crate::schema::batch_runs::dsl as b;
    Ok(load(conn, b::batch_runs.filter(b::id.eq(id)).into_boxed())?.pop())
}

type Columns = (
    (i64, String, String, String, String, String, i32, String, i32, i32, i32),
    (Option<String>, Option<String>, NaiveDateTime, Option<NaiveDateTime>, Option<String>),
);

/// The runs `query` picks, with what each waits for and why each left work.
fn load(
    conn: &mut DbConn,
    query: crate::schema::batch_runs::BoxedQuery<'_, crate::db::conn::MultiBackend>,
) -> QueryResult<Vec<Run>> {
    use crate::schema::batch_run_reasons::dsl as r;
    use crate::schema::batch_runs::dsl as b;
    let rows: Vec<Columns> = query
        .select((
            (
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
            ),
            (b::report, b::error, b::started_at, b::finished_at, b::request),
        ))
        .load(conn)?;
    let ids: Vec<i64> = rows.iter().map(|row| row.0.0).collect();
    let reasons: Vec<(i64, String, String, Option<String>, i32)> = r::batch_run_reasons
        .filter(r::run_id.eq_any(&ids))
        .order((r::run_id, r::position))
        .select((r::run_id, r::code, r::subject, r::holder, r::items))
        .load(conn)?;
    let waits: Vec<(i64, Waiting)> = {
        use crate::schema::batch_run_waits::dsl as w;
        w::batch_run_waits
            .filter(w::run_id.eq_any(&ids))
            .select((
                w::run_id,
                (w::lock_key, w::holder, w::lock_since, w::lock_until, w::began, w::gives_up),
            ))
            .load::<(i64, (String, String, NaiveDateTime, NaiveDateTime, NaiveDateTime, NaiveDateTime))>(
                conn,
            )?
            .into_iter()
            .map(|(id, (key, holder, lock_since, lock_until, began, gives_up))| {
                (id, Waiting { key, holder, lock_since, lock_until, began, gives_up })
            })
            .collect()
    };
    Ok(rows
        .into_iter()
        .map(|(head, (report, error, started_at, finished_at, request))| {
            let (id, job, policy, params, guard, host, pid, status, total, done, skipped) = head;
            let waiting = waits.iter().find(|(run, _)| *run == id).map(|(_, w)| w.clone());
            let left = reasons
                .iter()
                .filter(|reason| reason.0 == id)
                .map(|(_, code, subject, holder, items)| Left {
                    code: code.clone(),
                    subject: subject.clone(),
                    holder: holder.clone(),
                    items: *items,
                })
                .collect();
            Run {
                id,
                job,
                policy,
                params,
                guard,
                host,
                pid,
                status,
                total,
                done,
                skipped,
                report,
                error,
                started_at,
                finished_at,
                waiting,
                left,
                request,
            }
        })
        .collect())
}

//! The price revision: every product's price changed by a percentage, while customers order and
//! staff edit products online.
//!
//! Products are edited online *optimistically* (a version column, `catalog::edit`), so the batch
//! writes through the same versioned update ([`crate::catalog::edit::apply`]): an online save
//! that read a version before the batch changed the row gets the conflict screen, never a lost
//! update. The batch works in short transactions of [`CHUNK`] products, in ascending id (the
//! order every writer locks products in), each locking its rows first:
//!
//! - `wait`: `SELECT … FOR UPDATE`. An online save in flight on one of the rows makes the chunk
//!   wait for it — at most `ROW_LOCK_WAIT_SECS`; past that the run stops with what it did
//!   committed, and a later run of the same revision does the rest. Online saves wait for the
//!   batch's short transactions in turn.
//! - `skip`: `SELECT … FOR UPDATE SKIP LOCKED`. Rows locked right now are left alone and recorded
//!   as skipped; a later run of the same revision picks them up.
//! - `steal` has nothing to take here: an optimistic edit holds no lock between requests. It is
//!   refused with that explanation (it applies to jobs over rows under edit locks).
//!
//! A revision has a name, and each product is revised at most once per name
//! (`price_revision_items`): running it again continues, it never compounds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Datetime, Nullable, Text};

use super::guard::{BatchLock, GuardError, RunGuard};
use super::{report, runs};
use crate::catalog::edit::{self, ProductChanges};
use crate::db::{DbPool, cached_sql};
use crate::infra::Infra;
use crate::schema::products;
use crate::web::error::{AsProblem, Problem, http_error};
use actix_web::http::StatusCode;

/// Products per transaction: short enough that an online save waits little behind one.
pub const CHUNK: usize = 20;

pub const JOB: &str = "price-revision";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    Wait,
    Skip,
}

impl Policy {
    pub fn parse(text: &str) -> Result<Self, BatchError> {
        match text {
            "wait" => Ok(Self::Wait),
            "skip" => Ok(Self::Skip),
            "steal" => Err(BatchError::Invalid(
                "a price revision cannot steal: products are edited optimistically, so online \
                 editors hold no lock to take over (their stale saves get the conflict screen). \
                 Use --policy wait or skip."
                    .into(),
            )),
            other => Err(BatchError::Invalid(format!("unknown policy {other:?}: use wait or skip"))),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Wait => "wait",
            Self::Skip => "skip",
        }
    }
}

/// One revision, as the operator asked for it.
#[derive(Clone, Debug)]
pub struct Revision {
    /// 1 to 64 characters of `a-z 0-9 - _ .`: what makes a rerun continue instead of compound.
    pub name: String,
    /// −90 to +1000.
    pub percent: i32,
    pub policy: Policy,
    /// A pause between chunks, so online traffic keeps its share of the database.
    pub throttle: Duration,
    /// Where the CSV report goes (the shared directory); none when `None`.
    pub report_dir: Option<PathBuf>,
}

impl Revision {
    pub fn validate(&self) -> Result<(), BatchError> {
        let plain = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b);
        if self.name.is_empty() || self.name.len() > 64 || !self.name.bytes().all(plain) {
            return Err(BatchError::Invalid(format!(
                "revision name {:?}: use 1 to 64 of a-z, 0-9, '-', '_', '.'",
                self.name
            )));
        }
        if !(-90..=1000).contains(&self.percent) {
            return Err(BatchError::Invalid(format!("--percent {}: use -90 to 1000", self.percent)));
        }
        Ok(())
    }

    /// The new price: rounded to the cent, half away from zero.
    pub fn revised(&self, cents: i64) -> i64 {
        let scaled = i128::from(cents) * i128::from(100 + self.percent);
        i64::try_from((scaled + 50).div_euclid(100)).unwrap_or(i64::MAX)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// What the operator asked for cannot run (a bad name, percentage or policy).
    #[error("{0}")]
    Invalid(String),
    /// The run met something that should not happen; what it did before is committed.
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Guard(#[from] GuardError),
    #[error(transparent)]
    Infra(#[from] Infra),
    #[error("writing the report: {0}")]
    Report(#[from] std::io::Error),
}

impl AsProblem for BatchError {
    fn problem(&self) -> Problem {
        match self {
            Self::Invalid(why) => {
                Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_batch", why.clone())
            }
            Self::Guard(GuardError::Busy { job, by }) => Problem::new(
                StatusCode::CONFLICT,
                "batch_running",
                format!("{job} is already running ({by}); it can be started again when that run ends."),
            ),
            Self::Guard(GuardError::Infra(e)) | Self::Infra(e) => e.problem(),
            Self::Guard(GuardError::Lost { .. } | GuardError::File(_))
            | Self::Failed(_)
            | Self::Report(_) => Problem::internal(),
        }
    }
}
http_error!(BatchError);

impl From<actix_web::error::BlockingError> for BatchError {
    fn from(e: actix_web::error::BlockingError) -> Self {
        Self::Infra(e.into())
    }
}

impl From<diesel::result::Error> for BatchError {
    fn from(e: diesel::result::Error) -> Self {
        Self::Infra(e.into())
    }
}

/// What a run did.
#[derive(Debug)]
pub struct Summary {
    pub run_id: i64,
    pub total: usize,
    pub done: usize,
    pub skipped: usize,
    pub report: Option<PathBuf>,
}

/// One product's line in the report.
struct Line {
    product_id: i64,
    sku: String,
    old: Option<i64>,
    new: Option<i64>,
    status: &'static str,
}

/// Runs `revision` under the guard `lock`: only one run of the job at a time, on any instance.
pub fn run(pool: &DbPool, lock: &BatchLock, revision: &Revision) -> Result<Summary, BatchError> {
    start(pool, lock, revision)?.finish()
}

/// A run that holds its guard and is recorded in `batch_runs`, its work still ahead: what the
/// admin screen starts in a thread of its own after telling the admin it started.
pub struct Started {
    pub run_id: i64,
    guard: RunGuard,
    conn: crate::db::PooledConn,
    revision: Revision,
}

/// Checks the revision, takes the guard (or [`GuardError::Busy`]) and records the run.
pub fn start(pool: &DbPool, lock: &BatchLock, revision: &Revision) -> Result<Started, BatchError> {
    revision.validate()?;
    let guard = RunGuard::acquire(lock, pool, JOB)?;
    let mut conn = pool.get().map_err(Infra::from)?;
    let params = format!("revision={} percent={}", revision.name, revision.percent);
    let run_id = runs::start(
        &mut conn,
        &runs::Start { job: JOB, policy: revision.policy.label(), params: &params, guard: &guard.describe() },
    )?;
    Ok(Started { run_id, guard, conn, revision: revision.clone() })
}

impl Started {
    /// Does the work, writes the report, and records how the run ended.
    pub fn finish(mut self) -> Result<Summary, BatchError> {
        let (revision, run_id) = (&self.revision, self.run_id);
        let mut lines = Vec::new();
        let worked = work(&mut self.conn, &mut self.guard, run_id, revision, &mut lines);
        // Also after a failure: what was done before it is committed, and worth a report.
        let report = revision
            .report_dir
            .as_deref()
            .map(|dir| write_report(dir, revision, run_id, &lines))
            .transpose()?;
        let error = worked.as_ref().err().map(ToString::to_string);
        runs::finish(&mut self.conn, run_id, report.as_deref().and_then(Path::to_str), error.as_deref())?;
        let total = worked?;
        let done = lines.iter().filter(|l| l.status == "done").count();
        Ok(Summary { run_id, total, done, skipped: lines.len() - done, report })
    }
}

/// The products this revision has not done yet, in id order; returns how many there were.
fn work(
    conn: &mut MysqlConnection,
    guard: &mut RunGuard,
    run_id: i64,
    revision: &Revision,
    lines: &mut Vec<Line>,
) -> Result<usize, BatchError> {
    let targets: Vec<i64> = cached_sql::<BigInt>(
        "SELECT p.id FROM products p WHERE NOT EXISTS (SELECT 1 FROM price_revision_items i \
         WHERE i.revision = ? AND i.product_id = p.id AND i.status = 'done') ORDER BY p.id",
    )
    .bind::<Text, _>(&revision.name)
    .load(conn)?;
    runs::set_total(conn, run_id, targets.len())?;
    for (i, chunk) in targets.chunks(CHUNK).enumerate() {
        if i > 0 && !revision.throttle.is_zero() {
            std::thread::sleep(revision.throttle);
        }
        // Still ours? A run whose guard was taken over writes nothing more.
        guard.check()?;
        let chunk_lines = crate::db::transaction(conn, |conn| revise(conn, run_id, revision, chunk))?;
        lines.extend(chunk_lines);
    }
    Ok(targets.len())
}

const RECORD: &str = "INSERT INTO price_revision_items \
     (revision, product_id, status, old_price_cents, new_price_cents, run_id, at) VALUES (?, ?, ?, ?, ?, ?, ?) \
     ON DUPLICATE KEY UPDATE status = VALUES(status), old_price_cents = VALUES(old_price_cents), \
     new_price_cents = VALUES(new_price_cents), run_id = VALUES(run_id), at = VALUES(at)";

/// One chunk, in the caller's transaction: lock (or skip) the rows, revise, record.
fn revise(
    conn: &mut MysqlConnection,
    run_id: i64,
    revision: &Revision,
    chunk: &[i64],
) -> Result<Vec<Line>, BatchError> {
    type Row = (i64, String, String, String, i64, i32);
    let rows = products::table.filter(products::id.eq_any(chunk)).order(products::id).select((
        products::id,
        products::sku,
        products::name,
        products::description,
        products::price_cents,
        products::version,
    ));
    let rows: Vec<Row> = match revision.policy {
        Policy::Wait => rows.for_update().load(conn)?,
        Policy::Skip => rows.for_update().skip_locked().load(conn)?,
    };
    let mut lines = Vec::with_capacity(chunk.len());
    for &id in chunk {
        let line = match rows.iter().find(|r| r.0 == id) {
            Some((_, sku, name, description, price, version)) => {
                let new = revision.revised(*price);
                match ProductChanges::parse(name, description, new) {
                    Ok(changes) => {
                        // The row is locked and its version read under the lock: this cannot be
                        // stale; an online save that read the old version will be.
                        edit::apply(conn, id, *version, &changes, None).map_err(|e| match e {
                            // A lock conflict, a lost connection: the plumbing's, answered as such.
                            crate::catalog::CatalogError::Infra(e) => BatchError::Infra(e),
                            // Anything else would be a bug here (the row is locked), not bad input.
                            other => BatchError::Failed(format!("product {id}: {other}")),
                        })?;
                        Line {
                            product_id: id,
                            sku: sku.clone(),
                            old: Some(*price),
                            new: Some(new),
                            status: "done",
                        }
                    }
                    Err(_) => Line {
                        product_id: id,
                        sku: sku.clone(),
                        old: Some(*price),
                        new: Some(new),
                        status: "refused",
                    },
                }
            }
            // Locked by someone else right now (skip), or deleted meanwhile.
            None => Line { product_id: id, sku: String::new(), old: None, new: None, status: "skipped" },
        };
        cached_sql::<()>(RECORD)
            .bind::<Text, _>(&revision.name)
            .bind::<BigInt, _>(line.product_id)
            .bind::<Text, _>(line.status)
            .bind::<Nullable<BigInt>, _>(line.old)
            .bind::<Nullable<BigInt>, _>(line.new)
            .bind::<BigInt, _>(run_id)
            .bind::<Datetime, _>(crate::db::now_micros())
            .execute(conn)?;
        lines.push(line);
    }
    let done = lines.iter().filter(|l| l.status == "done").count();
    runs::progress(conn, run_id, done, lines.len() - done)?;
    Ok(lines)
}

fn write_report(dir: &Path, revision: &Revision, run_id: i64, lines: &[Line]) -> std::io::Result<PathBuf> {
    let mut csv = String::from("product_id,sku,old_price_cents,new_price_cents,status\n");
    let cents = |c: Option<i64>| c.map(|c| c.to_string()).unwrap_or_default();
    for l in lines {
        csv.push_str(&format!(
            "{},{},{},{},{}\n",
            l.product_id,
            report::csv_field(&l.sku),
            cents(l.old),
            cents(l.new),
            l.status
        ));
    }
    report::write_atomically(
        dir,
        &format!("price-revision-{}-run-{run_id}.csv", revision.name),
        csv.as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn revision(percent: i32) -> Revision {
        Revision {
            name: "r1".into(),
            percent,
            policy: Policy::Wait,
            throttle: Duration::ZERO,
            report_dir: None,
        }
    }

    #[test]
    fn prices_round_half_away_from_zero_to_the_cent() {
        assert_eq!(revision(5).revised(1000), 1050);
        assert_eq!(revision(5).revised(999), 1049); // 1048.95
        assert_eq!(revision(-10).revised(995), 896); // 895.5
        assert_eq!(revision(0).revised(1234), 1234);
    }

    #[test]
    fn names_percentages_and_policies_are_checked() {
        assert!(revision(5).validate().is_ok());
        assert!(revision(-91).validate().is_err());
        assert!(Revision { name: "Spring Sale".into(), ..revision(5) }.validate().is_err());
        assert!(
            matches!(Policy::parse("steal"), Err(BatchError::Invalid(why)) if why.contains("optimistically"))
        );
        assert_eq!(Policy::parse("skip").ok(), Some(Policy::Skip));
    }
}

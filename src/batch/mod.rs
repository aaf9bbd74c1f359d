//! Batch jobs beside online users (`haita batch …`): the jobs (`price_revision` over products,
//! edited optimistically; `closure` over resources, edited under edit locks), the guards that
//! let only one instance run a job at a time, across app servers that share a directory
//! (`lockfile`, `BATCH_LOCK=file`) or only the database (a named lock, `BATCH_LOCK=db`), the
//! runs' bookkeeping (`runs`), and the job's report, written so no reader sees it half-written
//! (`report`).
//!
//! Every job runs the same way ([`start`], [`Started::finish`]): take the guard (or be told who
//! runs it), record the run, do the work in short transactions while checking that the guard is
//! still ours, write the CSV report, record how the run ended. A job only says what its work is
//! ([`Job`]).

pub mod closure;
pub mod forms;
pub mod guard;
pub mod lockfile;
pub mod price_revision;
pub mod report;
pub mod runs;

use std::path::{Path, PathBuf};

use crate::db::DbConn;

use crate::db::{DbPool, PooledConn};
use crate::infra::{Infra, infra_error};
use crate::wire::answers::{Declared, answers};
use crate::wire::error::Said;
use crate::wire::error::{AsProblem, Problem};
use guard::{BatchLock, GuardError, RunGuard};

/// What a batch does about a row an online user holds right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Wait for the online user (bounded), then do the row.
    Wait,
    /// Take the row's edit lock over, whoever holds it; they are told on their next request.
    Steal,
    /// Leave the row for a later run, and say so in the report.
    Skip,
}

impl Policy {
    pub fn parse(text: &str) -> Result<Self, BatchError> {
        match text {
            "wait" => Ok(Self::Wait),
            "steal" => Ok(Self::Steal),
            "skip" => Ok(Self::Skip),
            other => {
                Err(BatchError::Invalid(Said::new("batch.err.policy", &[("given", format!("{other:?}"))])))
            }
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Wait => "wait",
            Self::Steal => "steal",
            Self::Skip => "skip",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// What the operator asked for cannot run (a bad name, range, percentage or policy).
    #[error("{0}")]
    Invalid(Said),
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

impl BatchError {
    /// Another run holds the job: the CLI exits with `EX_TEMPFAIL` for it.
    pub fn is_busy(&self) -> bool {
        matches!(self, Self::Guard(GuardError::Busy { .. }))
    }
}

answers! { BatchError {
    Invalid => UNPROCESSABLE_ENTITY "invalid_batch",
    Failed => INTERNAL_SERVER_ERROR "internal",
    Report => INTERNAL_SERVER_ERROR "internal",
} carries { Guard, Infra } }

impl AsProblem for BatchError {
    fn problem(&self) -> Problem {
        match self {
            Self::Invalid(why) => why.problem(self.answer()),
            Self::Guard(e) => e.problem(),
            Self::Infra(e) => e.problem(),
            Self::Failed(_) | Self::Report(_) => Problem::internal(),
        }
    }
}
infra_error!(BatchError);

/// A batch job: what it is asked, and its work. The running of it is [`start`]'s.
pub trait Job: Clone + Send + 'static {
    /// Names the job's guard, its runs and its reports.
    const NAME: &'static str;
    /// The report's first line.
    const REPORT_HEADER: &'static str;

    fn policy(&self) -> Policy;
    /// Refuses what cannot run, before the guard is taken.
    fn validate(&self) -> Result<(), BatchError>;
    /// What was asked, in a line for the admin screen.
    fn params(&self) -> String;
    /// What was asked, as the fields of the admin screen's start form ([`forms`]): the screen
    /// offers to run the same job again with them, which does only what is left.
    fn form_fields(&self) -> Vec<(&'static str, String)>;
    /// Where the CSV report goes (the shared directory); none when `None`.
    fn report_dir(&self) -> Option<&Path>;
    /// The report's file name, unique per run.
    fn report_name(&self, run_id: i64) -> String;
    /// Does the work, a line of the report per target; answers how many targets there were.
    fn work(&self, run: &mut Running<'_>) -> Result<usize, BatchError>;
}

/// What a job's work has at hand while it runs.
pub struct Running<'a> {
    pub pool: &'a DbPool,
    pub run_id: i64,
    /// The run's own connection (its bookkeeping; a job may work on it too).
    pub conn: &'a mut DbConn,
    guard: &'a mut RunGuard,
    report: &'a mut Report,
}

impl Running<'_> {
    /// Before each chunk of work: still ours? A run whose guard was taken over writes nothing
    /// more.
    pub fn check_guard(&mut self) -> Result<(), BatchError> {
        Ok(self.guard.check()?)
    }

    /// One target's line in the report (fields in the order of the job's header): done, or left
    /// for a later run and why.
    pub fn line(&mut self, fields: &[&str], left: Option<LeftFor>) {
        self.report.line(fields, left);
    }

    /// What the run waits for from now on (`None`: no more), for the admin screen.
    pub fn waiting(&mut self, waiting: Option<&runs::Waiting>) -> Result<(), BatchError> {
        Ok(runs::waiting(self.conn, self.run_id, waiting)?)
    }
}

/// Why one target was left for a later run: the reason, what was left (a resource's name; empty
/// where targets are only counted), and whose lock it was when that is why.
pub struct LeftFor {
    pub because: runs::Because,
    pub subject: String,
    pub holder: Option<String>,
}

/// The report as it grows: CSV lines, how many targets were done or left, and why they were
/// left (one entry per reason, subject and holder, counted, in the order first met).
#[derive(Default)]
struct Report {
    csv: String,
    done: usize,
    left: usize,
    reasons: Vec<runs::Left>,
}

impl Report {
    fn line(&mut self, fields: &[&str], left: Option<LeftFor>) {
        let fields: Vec<String> = fields.iter().map(|f| report::csv_field(f)).collect();
        self.csv.push_str(&fields.join(","));
        self.csv.push('\n');
        let Some(left) = left else {
            self.done += 1;
            return;
        };
        self.left += 1;
        let code = left.because.code();
        match self
            .reasons
            .iter_mut()
            .find(|r| r.code == code && r.subject == left.subject && r.holder == left.holder)
        {
            Some(reason) => reason.items += 1,
            None => self.reasons.push(runs::Left {
                code: code.to_string(),
                subject: left.subject,
                holder: left.holder,
                items: 1,
            }),
        }
    }
}

/// What a run did.
#[derive(Debug)]
pub struct Summary {
    pub run_id: i64,
    pub total: usize,
    pub done: usize,
    /// Skipped, refused or waited out: left for a later run.
    pub skipped: usize,
    pub report: Option<PathBuf>,
}

/// Runs `job` under the guard `lock`: only one run of the job at a time, on any instance.
pub fn run<J: Job>(pool: &DbPool, lock: &BatchLock, job: &J) -> Result<Summary, BatchError> {
    start(pool, lock, job)?.finish()
}

/// A run that holds its guard and is recorded in `batch_runs`, its work still ahead: what the
/// admin screen starts in a thread of its own after telling the admin it started.
pub struct Started<J> {
    pub run_id: i64,
    guard: RunGuard,
    conn: PooledConn,
    pool: DbPool,
    job: J,
}

/// Checks the job, takes the guard (or [`GuardError::Busy`]) and records the run.
pub fn start<J: Job>(pool: &DbPool, lock: &BatchLock, job: &J) -> Result<Started<J>, BatchError> {
    job.validate()?;
    let mut guard = RunGuard::acquire(lock, pool, J::NAME)?;
    // Checked once before the run records itself. Of two processes that took over one stale
    // lock file at the same instant, at most one still holds it at its first check (see
    // `lockfile`); the other is told who runs, as if it had found the lock held.
    if let Err(GuardError::Lost { why, .. }) = guard.check() {
        return Err(GuardError::Busy {
            job: J::NAME.into(),
            by: format!("another run took it at once: {why}"),
        }
        .into());
    }
    let mut conn = pool.get().map_err(Infra::from)?;
    let run_id = runs::start(
        &mut conn,
        &runs::Start {
            job: J::NAME,
            policy: job.policy().label(),
            params: &job.params(),
            guard: &guard.describe(),
            request: &job.form_fields(),
        },
    )?;
    Ok(Started { run_id, guard, conn, pool: pool.clone(), job: job.clone() })
}

impl<J: Job> Started<J> {
    /// Does the work, writes the report, and records how the run ended.
    pub fn finish(mut self) -> Result<Summary, BatchError> {
        let run_id = self.run_id;
        let mut report = Report::default();
        let worked = self.job.work(&mut Running {
            pool: &self.pool,
            run_id,
            conn: &mut self.conn,
            guard: &mut self.guard,
            report: &mut report,
        });
        // Also after a failure: what was done before it is committed, and worth a report.
        let written = self
            .job
            .report_dir()
            .map(|dir| {
                let csv = format!("{}\n{}", J::REPORT_HEADER, report.csv);
                report::write_atomically(dir, &self.job.report_name(run_id), csv.as_bytes())
            })
            .transpose()?;
        let error = worked.as_ref().err().map(ToString::to_string);
        runs::finish(
            &mut self.conn,
            run_id,
            written.as_deref().and_then(Path::to_str),
            error.as_deref(),
            &report.reasons,
        )?;
        let total = worked?;
        Ok(Summary { run_id, total, done: report.done, skipped: report.left, report: written })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_are_wait_steal_or_skip() {
        assert_eq!(Policy::parse("wait").ok(), Some(Policy::Wait));
        assert_eq!(Policy::parse("steal").ok(), Some(Policy::Steal));
        assert_eq!(Policy::parse("skip").ok(), Some(Policy::Skip));
        assert!(
            matches!(Policy::parse("Wait"), Err(BatchError::Invalid(why)) if why.to_string().contains("wait, steal or skip"))
        );
    }

    #[test]
    fn report_lines_are_csv_and_counted() {
        let mut report = Report::default();
        let locked =
            || Some(LeftFor { because: runs::Because::ProductLocked, subject: String::new(), holder: None });
        report.line(&["1", "a,b", "done"], None);
        report.line(&["2", "say \"hi\"", "skipped"], locked());
        report.line(&["3", "c", "skipped"], locked());
        assert_eq!(report.csv, "1,\"a,b\",done\n2,\"say \"\"hi\"\"\",skipped\n3,c,skipped\n");
        assert_eq!((report.done, report.left), (1, 2));
        assert_eq!(report.reasons.len(), 1, "one reason, counted");
        assert_eq!((report.reasons[0].code.as_str(), report.reasons[0].items), ("product_locked", 2));
    }
}

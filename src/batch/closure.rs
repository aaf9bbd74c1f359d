//! The maintenance closure: resources closed for a range of days, while staff edit them under
//! edit locks and customers book them.
//!
//! For each resource (ascending id) the batch first takes the resource's edit lock — as the
//! person who started it, marked *held by a batch* — and then closes each day
//! ([`crate::resources::closures::close_day`]): under the day's booking lock, in a transaction
//! of its own that proves it still holds the edit lock, locks the resource row, records the
//! closure and lists the bookings already made. Those stand: they are counted, named in the
//! report and in the audit log, never cancelled silently. New bookings of a closed day are
//! refused (`closed`). Afterwards the batch releases the edit lock, saying in the audit log what
//! it did.
//!
//! What the policy changes is what happens when someone holds a resource right now:
//!
//! - `wait`: an online editor's lock makes the batch wait — polling, at most `wait` — until they
//!   save or cancel; a day waits for its booking lock (at most 10 s) and the row lock for
//!   bookings in flight (`FOR UPDATE`, bounded by the server's lock wait timeout). A resource
//!   still held when the wait runs out, or a day still locked, is left for a later run.
//! - `steal`: the batch takes the edit lock over whoever holds it. The editor learns it on their
//!   next heartbeat or save, with why (the lock is the batch's, or the audit event of its
//!   release); their input is kept as their draft. No admin can force-release a batch's lock.
//! - `skip`: a resource under an online edit lock, a day whose booking lock is taken, a row
//!   locked right now (`FOR UPDATE SKIP LOCKED`) are left alone and listed in the report.
//!
//! Running the same closure again does only what is left: a closed day is never closed twice.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::NaiveDate;
use diesel::prelude::*;

use super::runs::{Because, Waiting};
use super::{BatchError, Job, LeftFor, Policy, Running, runs};
use crate::db::DbConn;
use crate::edit_locks::service::{self, Acquired};
use crate::edit_locks::{EditLockError, EditLockKey, Owner};
use crate::locking::retry::MayConflict;
use crate::locking::{LockError, NamedLockGuard, Turn};
use crate::resources::ResourceError;
use crate::resources::closures::{self, Closed, Closing, RowLock};
use crate::schema::{resource_closures, resources};
use crate::wire::error::Said;

/// The longest range one closure takes.
pub const MAX_DAYS: u64 = 92;
/// The longest a `wait` closure waits for one editor.
pub const MAX_WAIT: Duration = Duration::from_secs(600);
/// How long the batch's edit lock lives unrenewed; it is renewed before each day.
const EDIT_LOCK_TTL: Duration = Duration::from_secs(60);
/// The longest one day waits for its booking lock (bookings hold it for milliseconds): well
/// inside the batch's edit-lock lifetime and a lock file's, which are renewed between days.
const DAY_LOCK_WAIT: Duration = Duration::from_secs(10);
/// How often a waiting batch looks again whether the editor has left.
const POLL: Duration = Duration::from_millis(200);

/// One closure, as the operator asked for it.
#[derive(Clone, Debug)]
pub struct Closure {
    pub from: NaiveDate,
    /// The last day closed (inclusive).
    pub to: NaiveDate,
    /// Shown to customers who try to book, and in the audit log.
    pub reason: String,
    /// The resources to close; every one when empty.
    pub resources: Vec<i64>,
    pub policy: Policy,
    /// The staff member the closure is made by: the batch holds edit locks in their name.
    pub by: i64,
    /// `wait`: how long to wait for one resource's editor, or for one day's booking lock.
    pub wait: Duration,
    /// A pause between resources, so online traffic keeps its share of the database.
    pub throttle: Duration,
    pub report_dir: Option<PathBuf>,
}

impl Closure {
    fn days(&self) -> impl Iterator<Item = NaiveDate> + '_ {
        self.from.iter_days().take_while(|day| *day <= self.to)
    }

    /// The edit-lock owner of run `run_id`: a session of its own, so it is nobody's browser.
    fn owner(&self, run_id: i64) -> Owner {
        Owner { user_id: self.by, session: format!("batch:{}:run:{run_id}", Self::NAME) }
    }
}

impl Job for Closure {
    const NAME: &'static str = "resource-closure";
    const REPORT_HEADER: &'static str = "resource_id,resource,day,status,bookings,note";

    fn policy(&self) -> Policy {
        self.policy
    }

    fn validate(&self) -> Result<(), BatchError> {
        let invalid = |key, args: &[(&'static str, String)]| Err(BatchError::Invalid(Said::new(key, args)));
        let today = crate::bookings::service::today();
        let (from, to) = (("from", self.from.to_string()), ("to", self.to.to_string()));
        if self.from < today {
            return invalid("batch.err.from_past", &[from, ("today", today.to_string())]);
        }
        if self.to < self.from {
            return invalid("batch.err.to_before", &[from, to]);
        }
        if self.days().count() as u64 > MAX_DAYS {
            return invalid("batch.err.too_many_days", &[from, to, ("max", MAX_DAYS.to_string())]);
        }
        let reason = self.reason.trim();
        if reason.is_empty()
            || reason.chars().count() > 200
            || crate::wire::input::stray_character(reason, false).is_some()
        {
            return invalid("batch.err.reason", &[]);
        }
        if self.resources.len() > 1000 || self.resources.iter().any(|id| *id <= 0) {
            return invalid("batch.err.resources", &[]);
        }
        if self.wait > MAX_WAIT {
            return invalid("batch.err.wait", &[("max", MAX_WAIT.as_secs().to_string())]);
        }
        Ok(())
    }

    fn params(&self) -> String {
        let resources = match self.resources.as_slice() {
            [] => "all".to_string(),
            ids => ids.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
        };
        let params =
            format!("{} to {} resources={resources} reason={}", self.from, self.to, self.reason.trim());
        params.chars().take(200).collect()
    }

    fn form_fields(&self) -> Vec<(&'static str, String)> {
        let resources = self.resources.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
        vec![
            ("from", self.from.to_string()),
            ("to", self.to.to_string()),
            ("reason", self.reason.trim().to_string()),
            ("resources", resources),
            ("policy", self.policy.label().to_string()),
            ("wait_secs", self.wait.as_secs().to_string()),
        ]
    }

    fn report_dir(&self) -> Option<&Path> {
        self.report_dir.as_deref()
    }

    fn report_name(&self, run_id: i64) -> String {
        format!("resource-closure-{}-{}-run-{run_id}.csv", self.from, self.to)
    }

    fn work(&self, run: &mut Running<'_>) -> Result<usize, BatchError> {
        let targets = self.targets(run.conn)?;
        let total = targets.iter().map(|t| t.days.len()).sum();
        runs::set_total(run.conn, run.run_id, total)?;
        for (i, target) in targets.iter().enumerate() {
            if i > 0 && !self.throttle.is_zero() {
                std::thread::sleep(self.throttle);
            }
            run.check_guard()?;
            self.close(run, target)?;
        }
        Ok(total)
    }
}

/// A resource and the days of the range it is not closed on yet.
struct Target {
    id: i64,
    name: String,
    days: Vec<NaiveDate>,
}

/// What the batch got when it asked for a resource's edit lock.
enum EditLock {
    /// Ours, in this acquisition; `from` is whom it was taken from.
    Taken { epoch: i64, from: Option<String> },
    /// Someone else's, and the policy leaves it to them: why, for the report and the screen.
    Left { why: String, because: Because, holder: String },
}

impl Closure {
    /// The resources asked for (ascending id, the order every writer takes them in) with their
    /// days still open.
    fn targets(&self, conn: &mut DbConn) -> Result<Vec<Target>, BatchError> {
        let mut query =
            resources::table.select((resources::id, resources::name)).order(resources::id).into_boxed();
        if !self.resources.is_empty() {
            query = query.filter(resources::id.eq_any(&self.resources));
        }
        let found: Vec<(i64, String)> = query.load(conn)?;
        if let Some(missing) = self.resources.iter().find(|id| !found.iter().any(|(f, _)| f == *id)) {
            return Err(BatchError::Invalid(Said::new(
                "booking.no_resource",
                &[("id", missing.to_string())],
            )));
        }
        let closed: std::collections::HashSet<(i64, NaiveDate)> = resource_closures::table
            .filter(resource_closures::day.between(self.from, self.to))
            .select((resource_closures::resource_id, resource_closures::day))
            .load::<(i64, NaiveDate)>(conn)?
            .into_iter()
            .collect();
        Ok(found
            .into_iter()
            .map(|(id, name)| {
                let days = self.days().filter(|day| !closed.contains(&(id, *day))).collect();
                Target { id, name, days }
            })
            .filter(|target| !target.days.is_empty())
            .collect())
    }

    /// One resource: its edit lock, each open day of the range, the lock released.
    fn close(&self, run: &mut Running<'_>, target: &Target) -> Result<(), BatchError> {
        let key = EditLockKey::resource(target.id);
        let owner = self.owner(run.run_id);
        let (epoch, from) = match self.take_edit_lock(run, &key, &owner)? {
            EditLock::Taken { epoch, from } => (epoch, from),
            EditLock::Left { why, because, holder } => {
                self.leave(run, target, &target.days, &why, because, Some(holder))?;
                return Ok(());
            }
        };
        // Released on every path, a failed day included: a batch's lock blocks editors and no
        // admin can force it open.
        let closed = self.close_days(run, target, &key, &owner, epoch);
        let mut detail = format!(
            "by batch run {} ({}) when done with it: {} to {}, {}",
            run.run_id,
            Self::NAME,
            self.from,
            self.to,
            self.reason.trim()
        );
        if let Some(from) = from {
            detail.push_str(&format!("; it had taken the lock over from {from}"));
        }
        match &closed {
            Ok(true) => {}
            Ok(false) => detail.push_str("; nothing was closed"),
            Err(e) => detail.push_str(&format!("; the run stopped: {e}")),
        }
        let released = match service::release(run.conn, &key, &owner, None, &detail) {
            // Not ours any more (lost above): nothing to release.
            Ok(_) | Err(EditLockError::Locked(_)) => Ok(()),
            Err(e) => Err(edit_lock_failure(e)),
        };
        closed.and(released)
    }

    /// Each open day of `target`, under the edit lock the batch took in acquisition `epoch`;
    /// answers whether any day was closed.
    fn close_days(
        &self,
        run: &mut Running<'_>,
        target: &Target,
        key: &EditLockKey,
        owner: &Owner,
        epoch: i64,
    ) -> Result<bool, BatchError> {
        let mut closed_any = false;
        for (i, &day) in target.days.iter().enumerate() {
            run.check_guard()?;
            // The lock lives a minute at a time: a batch that died lets it go soon.
            if let Err(e) = service::heartbeat(run.conn, EDIT_LOCK_TTL, key, owner, Some(epoch)) {
                let why = format!("lost the edit lock: {e}");
                self.leave(run, target, &target.days[i..], &why, Because::EditLockLost, None)?;
                break;
            }
            let closing =
                Closing { resource_id: target.id, day, reason: self.reason.trim(), run_id: Some(run.run_id) };
            match self.close_day(run, owner, epoch, &closing)? {
                Ok(Closed::Closed { bookings }) => {
                    closed_any = true;
                    let ids = bookings.iter().map(|id| format!("#{id}")).collect::<Vec<_>>().join(" ");
                    let note = match bookings.len() {
                        0 => String::new(),
                        n => format!("{n} booking(s) made before the closure stand"),
                    };
                    self.line(run, target, day, &ids, &note, None)?;
                }
                Ok(Closed::AlreadyClosed) => {
                    self.line(run, target, day, "", "closed meanwhile", None)?;
                }
                Ok(Closed::RowBusy) => {
                    let why = "the resource was locked by an online request";
                    self.line(run, target, day, "", why, Some((Because::RowBusy, None)))?;
                }
                Err((why, because)) => {
                    self.line(run, target, day, "", &why, Some((because, None)))?;
                }
            }
        }
        Ok(closed_any)
    }

    /// Takes the resource's edit lock as the policy says; a waiting batch keeps renewing its
    /// guard while it waits.
    fn take_edit_lock(
        &self,
        run: &mut Running<'_>,
        key: &EditLockKey,
        owner: &Owner,
    ) -> Result<EditLock, BatchError> {
        let policy = match self.policy {
            Policy::Steal => service::Policy::SeizeForBatch,
            Policy::Wait | Policy::Skip => service::Policy::BatchWhenFree,
        };
        let began = Instant::now();
        let patience = if self.policy == Policy::Wait { self.wait } else { Duration::ZERO };
        // While it waits, the admin screen shows for whom, and until when; cleared as it ends.
        let mut shown: Option<Waiting> = None;
        let mut ask = || -> Result<EditLock, BatchError> {
            loop {
                let turn = Turn::unqueued(run.pool.names().edit_lock(key.as_str()), Duration::from_secs(5));
                match service::acquire(run.pool, turn, EDIT_LOCK_TTL, key, owner, policy) {
                    Ok((acquired, lock)) => {
                        let from = match acquired {
                            Acquired::TookOver(previous) => Some(previous.holder_name()),
                            Acquired::New | Acquired::Renewed { .. } => None,
                        };
                        return Ok(EditLock::Taken { epoch: lock.epoch, from });
                    }
                    Err(EditLockError::Locked(holder)) if began.elapsed() < patience => {
                        log::debug!("{}: waiting for {}", key, holder.holder_name());
                        let waiting = Waiting {
                            key: key.to_string(),
                            holder: holder.holder_name(),
                            lock_since: holder.acquired_at,
                            lock_until: holder.expires_at,
                            began: shown.as_ref().map_or_else(crate::db::now_micros, |w| w.began),
                            gives_up: shown.as_ref().map_or_else(
                                || crate::db::now_micros() + patience.saturating_sub(began.elapsed()),
                                |w| w.gives_up,
                            ),
                        };
                        // Written when the holder or the lock's expiry changed, not on every poll.
                        let changed = shown.as_ref().is_none_or(|w| {
                            (&w.key, &w.holder, w.lock_since, w.lock_until)
                                != (&waiting.key, &waiting.holder, waiting.lock_since, waiting.lock_until)
                        });
                        if changed {
                            run.waiting(Some(&waiting))?;
                            shown = Some(waiting);
                        }
                        std::thread::sleep(POLL.min(patience.saturating_sub(began.elapsed())));
                        run.check_guard()?;
                    }
                    Err(EditLockError::Locked(holder)) => {
                        let (why, because) = match self.policy {
                            Policy::Wait => (
                                format!(
                                    "waited {} s for the edit lock: {}",
                                    began.elapsed().as_secs(),
                                    crate::edit_locks::describe(&holder)
                                ),
                                Because::EditLockWaitedOut,
                            ),
                            _ => (
                                format!(
                                    "under an online edit lock: {}",
                                    crate::edit_locks::describe(&holder)
                                ),
                                Because::EditLockHeld,
                            ),
                        };
                        return Ok(EditLock::Left { why, because, holder: holder.holder_name() });
                    }
                    Err(e) => return Err(edit_lock_failure(e)),
                }
            }
        };
        let taken = ask();
        if shown.is_some() {
            run.waiting(None)?;
        }
        taken
    }

    /// One day, under the day's booking lock. The outer error stops the run; the inner one is
    /// why this day was left (the day's lock stayed taken, or the batch lost its edit lock).
    fn close_day(
        &self,
        run: &mut Running<'_>,
        owner: &Owner,
        epoch: i64,
        closing: &Closing<'_>,
    ) -> Result<Result<Closed, (String, Because)>, BatchError> {
        let (wait, row_lock) = match self.policy {
            Policy::Skip => (Duration::ZERO, RowLock::SkipLocked),
            Policy::Wait | Policy::Steal => {
                (self.wait.clamp(Duration::from_secs(1), DAY_LOCK_WAIT), RowLock::Wait)
            }
        };
        let turn = Turn::unqueued(run.pool.names().booking(closing.resource_id, closing.day), wait);
        let mut held = match NamedLockGuard::acquire_in_turn(run.pool.get()?, turn) {
            Ok(held) => held,
            Err(LockError::TimedOut { .. } | LockError::Crowded { .. }) => {
                return Ok(Err((
                    "the day's booking lock was taken by a booking".into(),
                    Because::DayLockTaken,
                )));
            }
            Err(e) => return Err(crate::infra::Infra::from(e).into()),
        };
        match closures::close_day(&mut held, owner, epoch, closing, row_lock) {
            Ok(closed) => Ok(Ok(closed)),
            // A row held past the lock wait, or a deadlock with an online save: this day waits
            // for a later run, like any day it could not lock.
            Err(ResourceError::Infra(e) | ResourceError::EditLock(EditLockError::Infra(e)))
                if e.lock_conflict().is_some() =>
            {
                Ok(Err((
                    format!("the resource stayed locked by an online request: {e}"),
                    Because::RowStayedLocked,
                )))
            }
            Err(ResourceError::Infra(e) | ResourceError::EditLock(EditLockError::Infra(e))) => Err(e.into()),
            Err(ResourceError::EditLock(e)) => {
                Ok(Err((format!("lost the edit lock: {e}"), Because::EditLockLost)))
            }
            Err(other) => Err(BatchError::Failed(format!("resource {}: {other}", closing.resource_id))),
        }
    }

    /// Days left for a later run, all for the same reason.
    fn leave(
        &self,
        run: &mut Running<'_>,
        target: &Target,
        days: &[NaiveDate],
        why: &str,
        because: Because,
        holder: Option<String>,
    ) -> Result<(), BatchError> {
        for &day in days {
            self.line(run, target, day, "", why, Some((because, holder.clone())))?;
        }
        Ok(())
    }

    /// One day's line in the report: closed, or `left` for a later run (why, and whose lock).
    fn line(
        &self,
        run: &mut Running<'_>,
        target: &Target,
        day: NaiveDate,
        bookings: &str,
        note: &str,
        left: Option<(Because, Option<String>)>,
    ) -> Result<(), BatchError> {
        let done = left.is_none();
        let status = if done { "closed" } else { "skipped" };
        let (id, day_text) = (target.id.to_string(), day.to_string());
        let left = left.map(|(because, holder)| LeftFor { because, subject: target.name.clone(), holder });
        run.line(&[&id, &target.name, &day_text, status, bookings, note], left);
        runs::progress(run.conn, run.run_id, usize::from(done), usize::from(!done))?;
        Ok(())
    }
}

/// An edit-lock error the closure cannot go on from: the plumbing's, or a bug.
fn edit_lock_failure(e: EditLockError) -> BatchError {
    match e {
        EditLockError::Infra(e) => BatchError::Infra(e),
        other => BatchError::Failed(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closure(from: NaiveDate, to: NaiveDate) -> Closure {
        Closure {
            from,
            to,
            reason: "Annual maintenance".into(),
            resources: vec![],
            policy: Policy::Wait,
            by: 1,
            wait: Duration::from_secs(30),
            throttle: Duration::ZERO,
            report_dir: None,
        }
    }

    fn in_days(n: u64) -> NaiveDate {
        crate::bookings::service::today() + chrono::Days::new(n)
    }

    #[test]
    fn a_closure_is_of_today_or_later_up_to_92_days_with_a_reason() {
        assert!(closure(in_days(1), in_days(3)).validate().is_ok());
        assert_eq!(closure(in_days(1), in_days(3)).days().count(), 3);
        assert!(closure(in_days(0), in_days(91)).validate().is_ok());
        assert!(closure(in_days(0), in_days(92)).validate().is_err());
        assert!(closure(in_days(3), in_days(1)).validate().is_err());
        let yesterday = crate::bookings::service::today() - chrono::Days::new(1);
        assert!(closure(yesterday, in_days(1)).validate().is_err());
        for reason in ["", "   ", "two\nlines"] {
            assert!(Closure { reason: reason.into(), ..closure(in_days(1), in_days(1)) }.validate().is_err());
        }
        assert!(Closure { resources: vec![0], ..closure(in_days(1), in_days(1)) }.validate().is_err());
        assert!(Closure { wait: MAX_WAIT * 2, ..closure(in_days(1), in_days(1)) }.validate().is_err());
    }

    #[test]
    fn params_fit_their_column() {
        let long = Closure { reason: "x".repeat(200), ..closure(in_days(1), in_days(2)) };
        assert_eq!(long.params().chars().count(), 200);
        assert!(closure(in_days(1), in_days(2)).params().contains("resources=all"));
    }
}

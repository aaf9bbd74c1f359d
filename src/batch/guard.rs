//! "Only one instance runs this job at a time", as the operator chose it (`BATCH_LOCK`):
//!
//! - `db` (the default): the named lock `haita:{tag}:batch:{job}`, taken without waiting and held
//!   by the run's own database session for the whole run. The server frees it the moment that
//!   session ends — a finished run, a crashed process, a killed connection — so a run that died
//!   is followed at once, never earlier.
//! - `file`: a lock file in `BATCH_LOCK_DIR` ([`super::lockfile`]), for servers that share a
//!   directory (NFS). A run that died is followed once its lock expires (or at once on the same
//!   host, where its process can be seen to be gone).
//!
//! Either way a run checks, before each chunk of work, that it still holds the guard
//! ([`RunGuard::check`]): a file lock that expired and was taken over, or a session an admin
//! killed, ends the run before it writes anything more.

use std::path::PathBuf;
use std::time::Duration;

use super::lockfile::{self, Busy, LockFile, LockFileError};
use crate::db::DbPool;
use crate::infra::Infra;
use crate::locking::{LockError, NamedLockGuard};
use crate::wire::answers::{Declared, answers};
use crate::wire::error::{AsProblem, Problem};

pub use crate::config::BatchLock;

impl BatchLock {
    /// Where reports go unless the operator says otherwise: the shared directory of the file
    /// guard; nowhere with the database guard.
    pub fn report_dir(&self) -> Option<PathBuf> {
        match self {
            Self::File(dir) => Some(dir.clone()),
            Self::Db => None,
        }
    }
}

/// How long a lock file lives without a heartbeat; [`RunGuard::check`] renews it.
pub const FILE_LOCK_TTL: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// Another instance runs the job now.
    #[error("{job} is already running ({by})")]
    Busy { job: String, by: String },
    /// The run lost its guard midway and must stop.
    #[error("{job} lost its guard: {why}")]
    Lost { job: String, why: String },
    #[error(transparent)]
    File(#[from] LockFileError),
    #[error(transparent)]
    Infra(#[from] Infra),
}

answers! { GuardError {
    Busy => CONFLICT "batch_running",
    Lost => INTERNAL_SERVER_ERROR "internal",
    File => INTERNAL_SERVER_ERROR "internal",
} carries { Infra } }

impl AsProblem for GuardError {
    fn problem(&self) -> Problem {
        match self {
            Self::Busy { job, by } => {
                self.answer().said("batch.running", &[("job", job.to_string()), ("by", by.to_string())])
            }
            Self::Infra(e) => e.problem(),
            Self::Lost { .. } | Self::File(_) => Problem::internal(),
        }
    }
}

/// The guard of a running job.
pub struct RunGuard {
    job: String,
    held: Held,
}

enum Held {
    Db(NamedLockGuard),
    File(LockFile),
}

impl RunGuard {
    /// Takes the guard of `job`, without waiting: [`GuardError::Busy`] when another run holds it.
    pub fn acquire(lock: &BatchLock, pool: &DbPool, job: &str) -> Result<Self, GuardError> {
        let held = match lock {
            BatchLock::Db => {
                let name = pool.names().batch(job);
                match NamedLockGuard::acquire(pool.get().map_err(Infra::from)?, name.clone(), Duration::ZERO)
                {
                    Ok(guard) => Held::Db(guard),
                    Err(LockError::TimedOut { .. } | LockError::Crowded { .. }) => {
                        let mut conn = pool.get().map_err(Infra::from)?;
                        let holder =
                            conn.dialect().holder_of(&mut conn, name.as_str()).map_err(Infra::from)?;
                        let by =
                            holder.map_or("another session".into(), |id| format!("database session {id}"));
                        return Err(GuardError::Busy { job: job.into(), by });
                    }
                    Err(e) => return Err(Infra::from(e).into()),
                }
            }
            BatchLock::File(dir) => match LockFile::acquire(dir, job, FILE_LOCK_TTL)? {
                Ok(file) => Held::File(file),
                Err(Busy::HeldBy(h)) => {
                    let by = format!(
                        "pid {} on {}, lock file {}",
                        h.pid,
                        h.host,
                        LockFile::path(dir, job).display()
                    );
                    return Err(GuardError::Busy { job: job.into(), by });
                }
                Err(Busy::LostTheTakeover) => {
                    return Err(GuardError::Busy {
                        job: job.into(),
                        by: "another process that took over first".into(),
                    });
                }
            },
        };
        Ok(Self { job: job.into(), held })
    }

    /// Before each chunk of work: the guard is still ours (and, for a file, renewed). An error
    /// means stop now, writing nothing more.
    pub fn check(&mut self) -> Result<(), GuardError> {
        let lost = |why: String| GuardError::Lost { job: self.job.clone(), why };
        match &mut self.held {
            Held::Db(guard) => {
                let name = guard.name().as_str().to_owned();
                let conn = guard.conn();
                let dialect = conn.dialect();
                let me = dialect.session_id(conn).map_err(|e| lost(format!("its session is gone: {e}")))?;
                match dialect.holder_of(conn, &name) {
                    Ok(Some(holder)) if holder == me => Ok(()),
                    Ok(other) => {
                        Err(lost(format!("the named lock is held by {other:?}, not by session {me}")))
                    }
                    Err(e) => Err(lost(format!("its session is gone: {e}"))),
                }
            }
            Held::File(file) => file.renew().map_err(|e| match e {
                LockFileError::Lost(path) => lost(format!("lock file {} was taken over", path.display())),
                other => GuardError::File(other),
            }),
        }
    }

    /// The guard in a sentence, for the run's log and report.
    pub fn describe(&self) -> String {
        match &self.held {
            Held::Db(guard) => format!("named lock {}", guard.name()),
            Held::File(file) => {
                let h = file.holder();
                format!("lock file (pid {} on {}, token {})", h.pid, h.host, h.token)
            }
        }
    }
}

/// Whether a lock file in `dir` says `job` is running now (for the admin screen).
pub fn file_holder(dir: &std::path::Path, job: &str) -> Option<lockfile::Holder> {
    lockfile::read_holder(&LockFile::path(dir, job)).ok().flatten()
}

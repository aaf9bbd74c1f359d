//! Batch jobs beside online users (`haita batch …`): the jobs (`price_revision`), the guards that
//! let only one instance run a job at a time, across app servers that share a directory
//! (`lockfile`, `BATCH_LOCK=file`) or only the database (a named lock, `BATCH_LOCK=db`), the
//! runs' bookkeeping (`runs`), and the job's report, written so no reader sees it half-written
//! (`report`).

pub mod guard;
pub mod lockfile;
pub mod price_revision;
pub mod report;
pub mod runs;

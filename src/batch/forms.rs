//! The admin screen's forms that start a batch job, read into the job they describe, with a
//! sentence naming the field when one is wrong.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::closure::{Closure, MAX_WAIT};
use super::price_revision::Revision;
use super::{BatchError, Policy};
use crate::wire::error::Said;

/// Where the admin screen's form that starts a price revision posts.
pub const REVISION_ACTION: &str = "/admin/batch/price-revision";
/// Where the admin screen's form that starts a closure posts.
pub const CLOSURE_ACTION: &str = "/admin/batch/closure";

/// Where the admin screen's start form of `job` posts (the run-again button posts there too).
pub fn action_of(job: &str) -> Option<&'static str> {
    use super::Job;
    match job {
        Revision::NAME => Some(REVISION_ACTION),
        Closure::NAME => Some(CLOSURE_ACTION),
        _ => None,
    }
}

/// "Revise prices": the revision's name, the percentage, the policy, a pause between chunks.
#[derive(Deserialize)]
pub struct RevisionForm {
    revision: String,
    percent: String,
    policy: String,
    throttle_ms: Option<String>,
}

impl RevisionForm {
    /// The revision the form asks for; its report goes to `report_dir`.
    pub fn into_revision(self, report_dir: Option<PathBuf>) -> Result<Revision, BatchError> {
        let percent = self.percent.trim().parse::<i32>().map_err(|_| {
            BatchError::Invalid(Said::new(
                "batch.err.percent_form",
                &[("given", format!("{:?}", self.percent.trim()))],
            ))
        })?;
        let throttle_ms = match self.throttle_ms.as_deref().map(str::trim) {
            None | Some("") => 0,
            Some(text) => text.parse::<u64>().ok().filter(|ms| *ms <= 10_000).ok_or_else(|| {
                BatchError::Invalid(Said::new("batch.err.pause", &[("given", format!("{text:?}"))]))
            })?,
        };
        Ok(Revision {
            name: self.revision.trim().to_string(),
            percent,
            policy: Policy::parse(self.policy.trim())?,
            throttle: Duration::from_millis(throttle_ms),
            report_dir,
        })
    }
}

/// "Close resources": the first and last day, the reason, which resources (all when empty), the
/// policy and how long to wait for an editor's lock.
#[derive(Deserialize)]
pub struct ClosureForm {
    from: String,
    to: String,
    reason: String,
    resources: Option<String>,
    policy: String,
    wait_secs: Option<String>,
}

impl ClosureForm {
    /// The closure the form asks for, made by the admin `by`; its report goes to `report_dir`.
    pub fn into_closure(self, by: i64, report_dir: Option<PathBuf>) -> Result<Closure, BatchError> {
        // `which`: the text saying which date is wrong.
        let day = |which: &'static str, text: &str| {
            chrono::NaiveDate::parse_from_str(text.trim(), "%Y-%m-%d").map_err(|_| {
                BatchError::Invalid(Said::new(which, &[("given", format!("{:?}", text.trim()))]))
            })
        };
        let resources = self
            .resources
            .as_deref()
            .unwrap_or("")
            .split([',', ' '])
            .filter(|id| !id.is_empty())
            .map(|id| {
                id.parse::<i64>().map_err(|_| {
                    BatchError::Invalid(Said::new("batch.err.resource_id", &[("given", format!("{id:?}"))]))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let wait_secs = match self.wait_secs.as_deref().map(str::trim) {
            None | Some("") => 60,
            Some(text) => text.parse::<u64>().ok().filter(|s| *s <= MAX_WAIT.as_secs()).ok_or_else(|| {
                BatchError::Invalid(Said::new(
                    "batch.err.wait_form",
                    &[("given", format!("{text:?}")), ("max", MAX_WAIT.as_secs().to_string())],
                ))
            })?,
        };
        Ok(Closure {
            from: day("batch.err.first_date", &self.from)?,
            to: day("batch.err.last_date", &self.to)?,
            reason: self.reason.trim().to_string(),
            resources,
            policy: Policy::parse(self.policy.trim())?,
            by,
            wait: Duration::from_secs(wait_secs),
            throttle: Duration::ZERO,
            report_dir,
        })
    }
}

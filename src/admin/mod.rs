//! The admin's view of every lock, and the force releases that pessimistic locking needs
//! (`docs/pessimistic-edit-lock.md`):
//! pessimistic locks whose owner vanished (closed laptop, crashed client, killed process) must be
//! releasable by an administrator, with a reason, in the audit log.
//!
//! Two kinds of lock are shown side by side:
//! - **edit locks** (rows of `edit_locks`, `crate::edit_locks`): force release deletes the row in
//!   a transaction that first locks it, so a save in flight either commits before or is refused
//!   after. Batch-held locks cannot be force-released (a batch that "steals" the
//!   online locks must not have them stolen back mid-run).
//! - **live MySQL named locks** of this deployment (`haita:{tag}:` prefix): a named lock belongs to a
//!   server session, so the only way to free one whose holder is stuck is to end that session
//!   (`KILL`). The holder is re-checked with `IS_USED_LOCK` right before, so a session that has
//!   meanwhile released the lock is never killed.
//!
//! Every route takes [`Admin`], so a handler cannot forget the role check.

pub mod instances;
pub mod metrics;
pub mod named_locks;
pub mod routes;

use actix_web::{FromRequest, HttpRequest, dev::Payload};

use crate::auth::{AuthError, Role, SessionUser};
use crate::edit_locks::EditLockError;
use crate::infra::{Infra, infra_error};
use crate::wire::answers::{Declared, answers};
use crate::wire::error::{AsProblem, Problem};

/// A logged-in administrator: extracting it answers 401 to anonymous requests and 403 to every
/// other role, before the handler runs.
pub struct Admin(pub SessionUser);

impl FromRequest for Admin {
    type Error = AuthError;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Self, AuthError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let user = SessionUser::from_request(req, payload);
        Box::pin(async move {
            let user = user.await?;
            user.require(Role::Admin)?;
            Ok(Admin(user))
        })
    }
}

/// Why an admin forced a lock open: required, written to the audit log.
#[derive(Clone, Debug)]
pub struct Reason(String);

pub const REASON_MAX: usize = 300;

impl Reason {
    pub fn parse(text: Option<&str>) -> Result<Self, AdminError> {
        let text = text.unwrap_or_default().trim();
        if let Some(stray) = crate::wire::input::stray_character(text, false) {
            return Err(AdminError::StrayInReason(stray));
        }
        let chars = text.chars().count();
        if (3..=REASON_MAX).contains(&chars) {
            Ok(Self(text.to_string()))
        } else {
            Err(AdminError::InvalidReason)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error(transparent)]
    EditLock(#[from] EditLockError),
    #[error("a reason of 3 to {REASON_MAX} characters is required")]
    InvalidReason,
    /// The reason holds a control character (or a direction override), written to the audit log
    /// as it is.
    #[error("the reason holds the control character {:?}", .0)]
    StrayInReason(char),
    #[error("{field} must be {range}")]
    OutOfRange { field: &'static str, range: String },
    #[error("{name:?} is not a named lock of this deployment ({prefix}…)")]
    NotOurs { name: String, prefix: String },
    #[error("named lock {0} is not held")]
    NotHeld(String),
    #[error("named lock {name} is now held by connection {now}, not {expected}")]
    HolderChanged { name: String, expected: i64, now: i64 },
    #[error("named lock {0} is held by the admin's own connection")]
    OwnConnection(String),
    /// The holder is another account's session, or one in another database: not the app's to
    /// end. `None` where the server does not show it to the app's account.
    #[error(
        "connection {holder}, which holds {name}, is a session of {account:?} in {database:?}, not the app's"
    )]
    NotOurSession { name: String, holder: i64, account: Option<String>, database: Option<String> },
    /// The server refused the KILL of a session of our own (it should not; it has the last word).
    #[error("the server refused to end connection {holder}, which holds {name}")]
    KillRefused { name: String, holder: i64 },
    #[error(transparent)]
    Infra(#[from] Infra),
}

answers! { AdminError {
    OutOfRange => UNPROCESSABLE_ENTITY "invalid_input",
    InvalidReason => UNPROCESSABLE_ENTITY "invalid_reason",
    StrayInReason => UNPROCESSABLE_ENTITY "invalid_reason",
    NotOurs => UNPROCESSABLE_ENTITY "not_haita_lock",
    NotHeld => NOT_FOUND "not_found",
    HolderChanged => CONFLICT "holder_changed",
    OwnConnection => CONFLICT "own_connection",
    NotOurSession => CONFLICT "not_our_session",
    KillRefused => CONFLICT "kill_refused",
} carries { Auth, EditLock, Infra } }

impl AsProblem for AdminError {
    fn problem(&self) -> Problem {
        let answer = self.answer();
        match self {
            Self::Auth(e) => e.problem(),
            Self::EditLock(e) => e.problem(),
            Self::OutOfRange { field, range } => answer
                .said("admin.err.range", &[("field", (*field).to_string()), ("range", range.to_string())])
                .with("field", *field),
            Self::InvalidReason => answer.said("admin.err.reason", &[("max", REASON_MAX.to_string())]),
            Self::StrayInReason(stray) => answer
                .said("field.stray_character", &[("code", crate::wire::input::code_point(*stray))])
                .with("field", "reason"),
            Self::NotOurs { name, prefix } => answer.said(
                "admin.err.not_ours",
                &[("name", format!("{name:?}")), ("prefix", format!("{prefix:?}"))],
            ),
            Self::NotHeld(name) => answer.said("admin.err.not_held", &[("name", name.to_string())]),
            Self::HolderChanged { name, expected, now } => answer.said(
                "admin.err.holder_changed",
                &[("name", name.to_string()), ("expected", expected.to_string()), ("now", now.to_string())],
            ),
            Self::OwnConnection(name) => {
                answer.said("admin.err.own_connection", &[("name", name.to_string())])
            }
            Self::NotOurSession { name, holder, account, database } => answer.said(
                match (account, database) {
                    (None, _) => "admin.err.not_our_session_unseen",
                    (Some(_), None) => "admin.err.not_our_session_no_database",
                    (Some(_), Some(_)) => "admin.err.not_our_session",
                },
                &[
                    ("name", name.to_string()),
                    ("holder", holder.to_string()),
                    ("account", account.clone().unwrap_or_default()),
                    ("database", database.clone().unwrap_or_default()),
                ],
            ),
            Self::KillRefused { name, holder } => answer.said(
                "admin.err.kill_refused",
                &[("name", name.to_string()), ("holder", holder.to_string())],
            ),
            Self::Infra(e) => e.problem(),
        }
    }
}
infra_error!(AdminError);

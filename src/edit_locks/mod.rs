//! Pessimistic edit locks: editing a resource is exclusive, for minutes, across requests.
//!
//! The hazard: staff edit a resource on a long form and collisions are frequent. With optimistic
//! locking the second person to save would lose their work; with a row lock held across HTTP
//! requests a closed browser would block everyone. So the
//! lock is *data*: a row in `edit_locks` with its owner (user **and** session), a heartbeat and
//! an expiry, released by the owner, by expiry, or by an admin (`crate::admin`).
//!
//! Two details make it correct under concurrency:
//! - **Acquiring is atomic even when no row exists yet** (`service::acquire`). There is nothing
//!   to `SELECT … FOR UPDATE` before the first acquire, and a locking read of a missing row only
//!   takes gap locks, so two first acquirers would both insert (one deadlocks; `docs/server-facts.md`).
//!   An advisory lock combined with the lock table closes that gap (`docs/pessimistic-edit-lock.md`): the named
//!   lock `haita:{tag}:edit:{key}` is held around "insert, or take over when expired or already mine".
//! - **Saving re-checks the lock in the same transaction as the update** (`editing::save`): the
//!   edit-lock row is read `FOR UPDATE`, which yields an [`EditLockToken`] only to its unexpired
//!   owner, and holds off any takeover or force release until the save commits.
//!
//! Expiry is judged by the database clock (`NOW(6)`), never the app's: several instances share
//! the database and their clocks may drift.

pub mod admin;
pub mod drafts;
pub mod ending;
pub mod model;
pub mod service;

pub use model::{EditLockKey, EditLockToken, LockView, Owner};

use crate::i18n::Lang;
use crate::infra::{Infra, infra_error};
use crate::wire::answers::{Declared, answers};
use crate::wire::error::{AsProblem, Problem};

#[derive(Debug, thiserror::Error)]
pub enum EditLockError {
    #[error("invalid edit-lock key {0:?}")]
    InvalidKey(String),
    #[error("{} holds edit lock {}", .0.owner_username, .0.key)]
    Locked(Box<LockView>),
    /// The heartbeat of a page whose lock someone else holds now: who, and `how` this page's
    /// hold ended (the key's latest ending event in a sentence: an admin's reason, a batch).
    #[error("{} holds edit lock {} now", .holder.owner_username, .holder.key)]
    TakenOver { holder: Box<LockView>, how: Option<String> },
    /// Nobody holds it (expired, released, ended by an admin or a batch job); `last` is the
    /// key's latest audit event in a sentence, which says which.
    #[error("edit lock {key} is not held by this session")]
    NotHeld { key: EditLockKey, last: Option<String> },
    /// The saver holds the lock, but not the acquisition its editor was opened under: the lock
    /// was taken over or ended and taken again (by this very session, in another tab) since.
    #[error("edit lock {key} was acquired again since epoch {opened} (now {current})")]
    Superseded { key: EditLockKey, opened: i64, current: i64 },
    #[error("no edit lock {0}")]
    NoSuchLock(EditLockKey),
    #[error("edit lock {0} is held by a batch job")]
    BatchHeld(EditLockKey),
    #[error(transparent)]
    Infra(#[from] Infra),
}

/// "Carol (carol) is editing this since 2026-11-24 10:42:07 UTC, until 2026-11-24 10:47:07
/// UTC." — the sentence said to everyone who is not the holder, as a plain text (a JSON
/// message, a batch run's reason).
pub fn describe(lock: &LockView) -> String {
    describe_in(lock, Lang::En)
}

/// [`describe`] in `lang` (by value or, from a template, by reference).
pub fn describe_in(lock: &LockView, lang: impl std::borrow::Borrow<Lang>) -> String {
    let (key, args) = described(lock, crate::wire::utc::text);
    lang.borrow().t_with(key, args)
}

/// [`describe_in`] as markup for a page (rendered with `|safe`): the holder's name escaped, the
/// times as `<time>` elements that the page shows in the viewer's own zone, like every other
/// time on the pages (`crate::wire::utc::shown`).
pub fn describe_html(lock: &LockView, lang: impl std::borrow::Borrow<Lang>) -> String {
    let (key, mut args) = described(lock, |at| crate::wire::utc::shown(at).to_string());
    for (name, value) in &mut args {
        if *name == "who" {
            *value = crate::i18n::escape_html(value);
        }
    }
    lang.borrow().t_with(key, args)
}

/// Who holds `lock` and until when, as a text and its values, each time written by `time`.
fn described(
    lock: &LockView,
    time: impl Fn(&chrono::NaiveDateTime) -> String,
) -> (&'static str, Vec<(&'static str, String)>) {
    let key = if lock.held_by_batch {
        "lock.by_batch"
    } else if lock.expired {
        "lock.expired"
    } else {
        "lock.editing"
    };
    (
        key,
        vec![
            ("who", lock.holder_name()),
            ("since", time(&lock.acquired_at)),
            ("until", time(&lock.expires_at)),
        ],
    )
}

/// Plain data as a JSON value for [`Problem::with`]; none of ours can fail to serialise.
fn json(value: impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or_default()
}

answers! { EditLockError {
    InvalidKey => UNPROCESSABLE_ENTITY "invalid_key",
    Locked => LOCKED "edit_locked",
    TakenOver => LOCKED "edit_locked",
    NotHeld => LOCKED "edit_lock_not_held",
    Superseded => LOCKED "edit_lock_superseded",
    NoSuchLock => NOT_FOUND "not_found",
    BatchHeld => CONFLICT "batch_held",
} carries { Infra } }

impl AsProblem for EditLockError {
    fn problem(&self) -> Problem {
        let answer = self.answer();
        match self {
            Self::InvalidKey(key) => answer.said("lock.invalid_key", &[("key", format!("{key:?}"))]),
            Self::Locked(lock) => {
                let (key, args) = described(lock, crate::wire::utc::text);
                answer
                    .said(key, &args)
                    .with("holder", lock.owner_username.clone())
                    .with("expires_at", json(lock.expires_at.and_utc()))
                    .with("lock", json(lock))
            }
            Self::TakenOver { holder, how } => {
                let (key, mut args) = described(holder, crate::wire::utc::text);
                // What ended this page's hold is an audit record, said in the words it was recorded in.
                let taken = match (key, how) {
                    ("lock.by_batch", None) => "lock.taken.by_batch",
                    ("lock.by_batch", Some(_)) => "lock.taken.by_batch.how",
                    ("lock.expired", None) => "lock.taken.expired",
                    ("lock.expired", Some(_)) => "lock.taken.expired.how",
                    (_, None) => "lock.taken.editing",
                    (_, Some(_)) => "lock.taken.editing.how",
                };
                args.extend(how.as_ref().map(|how| ("how", how.to_string())));
                answer
                    .said(taken, &args)
                    .with("holder", holder.owner_username.clone())
                    .with("expires_at", json(holder.expires_at.and_utc()))
                    .with("lock", json(holder))
                    .with("last_event", json(how))
            }
            Self::NotHeld { key, last } => answer
                .said(
                    if last.is_some() { "lock.not_held.last" } else { "lock.not_held" },
                    &[
                        ("key", key.to_string()),
                        ("last", last.as_ref().map(ToString::to_string).unwrap_or_default()),
                    ],
                )
                .with("last_event", json(last)),
            Self::Superseded { key, opened, current } => answer
                .said(
                    "lock.superseded",
                    &[
                        ("key", key.to_string()),
                        ("opened", opened.to_string()),
                        ("current", current.to_string()),
                    ],
                )
                .with("opened_epoch", *opened)
                .with("epoch", *current),
            Self::NoSuchLock(key) => answer.said("lock.no_such", &[("key", key.to_string())]),
            Self::BatchHeld(key) => answer.said("lock.batch_held", &[("key", key.to_string())]),
            Self::Infra(e) => e.problem(),
        }
    }
}
infra_error!(EditLockError);

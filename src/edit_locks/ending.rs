//! How an editor's hold on a lock ended, told to the person it displaced, in a sentence.
//!
//! The audit log says what happened to a lock for an administrator ("edit_lock.force_released by
//! admin … held by carol (session G-ffbJp-) … reason: …"). The editor whose page lost the lock
//! needs the same facts said to *them*: who ended it, when (a time their page shows in their own
//! zone), why, and what they can do now — open the editor again, continue here when the lock
//! is their own in another browser, or only read. [`ending`] reads them from the lock row and the
//! log, and changes nothing.

use chrono::NaiveDateTime;
use diesel::QueryResult;

use super::model::LockView;
use super::service::{ENDINGS, REASON, find};
use super::{EditLockKey, Owner};
use crate::audit::{self, Action, Told};
use crate::db::DbConn;
use crate::i18n::{Lang, escape_html};

/// What ended a page's hold on its lock, and who holds the lock now.
#[derive(Clone, Debug)]
pub struct Ending {
    pub how: How,
    /// When it happened, by the database clock.
    pub at: Option<NaiveDateTime>,
    /// Who did it, by the name people know them by: the admin, the batch's starter, the one who
    /// took it over.
    pub by: Option<String>,
    /// An admin's reason for a force release.
    pub reason: Option<String>,
    /// Who holds the lock now, if anyone.
    pub holder: Option<LockView>,
    /// Whether opening the editor again can work: the lock is free, this session's, or expired
    /// (and then taking it over is one click). Not while someone else holds it live.
    pub may_reopen: bool,
}

/// The ways a hold ends, as the displaced editor is told of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    /// Nothing ended: the page still holds its lock.
    StillHeld,
    /// This session holds the lock in a later acquisition: another tab opened the editor after
    /// the lock was ended (see the fencing epoch).
    OtherTab,
    /// The same person holds it in another session (another browser): "continue here".
    OtherSession,
    /// An admin released it, with a reason.
    ForceReleased,
    /// A batch job took it.
    Batch,
    /// It expired and someone took it over.
    TakenOver,
    /// It expired: this page could not renew it in time (removed by an admin, or not yet).
    Expired,
    /// The editor themselves ended it elsewhere: a save, a cancel or a logout in another tab.
    ReleasedByYou,
    /// Someone else released it.
    Released,
    /// Nothing recorded says how.
    Ended,
}

/// How `owner`'s hold on `key` — in the acquisition `epoch` their page was opened under, when
/// known — ended. Reads the lock row, then the log: the first events that end a hold after
/// `owner`'s latest acquisition (an older one would be about somebody else's hold).
pub fn ending(
    conn: &mut DbConn,
    key: &EditLockKey,
    owner: &Owner,
    epoch: Option<i64>,
) -> QueryResult<Ending> {
    let holder = find(conn, key)?;
    let told = |how, at, holder, may_reopen| Ending { how, at, by: None, reason: None, holder, may_reopen };
    if let Some(lock) = &holder {
        if lock.is_owned_by(owner) && !lock.expired {
            let how = if epoch.is_some_and(|e| e != lock.epoch) { How::OtherTab } else { How::StillHeld };
            return Ok(told(how, Some(lock.acquired_at), holder.clone(), true));
        }
        if lock.owner_user_id == owner.user_id && !lock.held_by_batch && !lock.is_owned_by(owner) {
            return Ok(told(How::OtherSession, Some(lock.acquired_at), holder.clone(), false));
        }
    }
    let may_reopen = holder.as_ref().is_none_or(|l| l.is_owned_by(owner) || (l.expired && !l.held_by_batch));
    let acquisitions = [Action::EditLockAcquired, Action::EditLockTakenOver];
    let latest = audit::latest_of(conn, key.as_str(), Some(&acquisitions), Some(owner.user_id), None)?;
    let events = match latest {
        Some(acquired) => audit::next_of(conn, key.as_str(), &ENDINGS, acquired.id, 2)?,
        None => Vec::new(),
    };
    // An expired lock taken by the next acquirer is logged as "expired", then the taking, in
    // one transaction: the taking is what the editor needs to hear.
    let event = match events.as_slice() {
        [expired, taken, ..]
            if expired.action == Action::EditLockExpired.as_str()
                && [Action::EditLockTakenOver.as_str(), Action::EditLockBatchSeized.as_str()]
                    .contains(&taken.action.as_str()) =>
        {
            Some(taken)
        }
        [first, ..] => Some(first),
        [] => None,
    };
    let Some(event) = event else {
        // Nothing logged since: the lock simply ran out (its row, if still there, says when).
        return Ok(match &holder {
            Some(lock) if lock.is_owned_by(owner) => {
                told(How::Expired, Some(lock.expires_at), holder.clone(), may_reopen)
            }
            _ => told(How::Ended, None, holder, may_reopen),
        });
    };
    let how = how_of(event, owner);
    let reason = (how == How::ForceReleased)
        .then(|| event.detail.split_once(REASON).map(|(_, reason)| reason.to_string()))
        .flatten();
    Ok(Ending { how, at: Some(event.at), by: event.actor_name.clone(), reason, holder, may_reopen })
}

fn how_of(event: &Told, owner: &Owner) -> How {
    match event.action.as_str() {
        a if a == Action::EditLockForceReleased.as_str() => How::ForceReleased,
        a if a == Action::EditLockBatchSeized.as_str() => How::Batch,
        a if a == Action::EditLockTakenOver.as_str() => How::TakenOver,
        a if a == Action::EditLockExpired.as_str() => How::Expired,
        a if a == Action::EditLockReleased.as_str() && event.actor_user_id == Some(owner.user_id) => {
            How::ReleasedByYou
        }
        a if a == Action::EditLockReleased.as_str() => How::Released,
        _ => How::Ended,
    }
}

impl Ending {
    /// The lock is this person's own, in another session: the page offers "continue here".
    pub fn may_continue_here(&self) -> bool {
        self.how == How::OtherSession
    }

    /// The sentence, in `lang`, as markup: the time is a `<time>` the page shows in the reader's
    /// own zone (`crate::wire::utc`); names and the reason are escaped. `lang` by value or, from
    /// a template, by reference.
    pub fn sentence_html(&self, lang: impl std::borrow::Borrow<Lang>) -> String {
        let lang = *lang.borrow();
        let time = self.at.map(|at| crate::wire::utc::clock(&at).to_string()).unwrap_or_default();
        let who = escape_html(self.by.as_deref().unwrap_or("?"));
        let reason = escape_html(self.reason.as_deref().unwrap_or(""));
        let args = [("time", time), ("who", who), ("reason", reason)];
        let key = match self.how {
            How::StillHeld => "ended.still_held",
            How::OtherTab => "ended.other_tab_html",
            How::OtherSession => "ended.other_session_html",
            How::ForceReleased if self.reason.is_some() => "ended.force_released_html",
            How::ForceReleased | How::Released => "ended.released_html",
            How::Batch => "ended.batch_html",
            How::TakenOver => "ended.taken_over_html",
            How::Expired if self.by.is_some() => "ended.expired_removed_html",
            How::Expired if self.at.is_some() => "ended.expired_html",
            How::Expired | How::Ended => "ended.ended",
            How::ReleasedByYou => "ended.released_by_you_html",
        };
        let mut sentence = lang.t_with(key, args);
        // Who holds it now, when that is news: someone who took it after an admin's release,
        // say. (A batch, a takeover and this person's own other session are named already.)
        if let Some(holder) = &self.holder
            && !holder.expired
            && matches!(self.how, How::ForceReleased | How::Released | How::ReleasedByYou | How::Ended)
        {
            sentence.push(' ');
            sentence.push_str(&escape_html(&super::describe_in(holder, lang)));
        }
        sentence
    }
}

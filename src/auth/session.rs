//! Who is logged in: a ticket in the encrypted session cookie, checked against the database on
//! every request.
//!
//! The cookie alone cannot be taken back: a copied cookie would stay valid until `SESSION_KEY`
//! changed, and a demoted admin would keep the role written into it. So the cookie holds only
//! a ticket (user id and session id), and each session is a row of `user_sessions`. Every
//! authenticated request reads that row joined with the user's (a primary-key lookup; requests
//! arriving together share one query, see [`SessionChecks`]), so logging out, logging out
//! everywhere, a role change or a deleted user take effect on the next request, on every
//! instance, with no state in the app itself.
//!
//! A handler whose own work is one trip to the database may instead take the ticket unchecked
//! ([`Claimed`]) and check it in a statement it sends anyway: a booking does, in its read of the
//! day. The check is the same (the session row, live now); the request saves a hop and a query.

use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use actix_session::{Session, SessionExt};
use actix_web::{FromRequest, HttpRequest, dev::Payload};
use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Text, Timestamp};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::{AuthError, Role, User};
use crate::db::cached::ListStatements;
use crate::db::{DbConn, OffExecutor, cached_sql};
use crate::infra::Infra;
use crate::schema::user_sessions;
use crate::wire::error::AsProblem;
use crate::wire::error::Problem;

const TICKET_KEY: &str = "ticket";

/// How long a session lasts; the cookie's own lifetime is the same.
pub const SESSION_TTL: chrono::TimeDelta = chrono::TimeDelta::hours(12);

/// What the cookie carries: which session row to look up. It is only a claim until that row
/// has been read: the cookie is sealed by the server's key, so nobody can write a ticket, but a
/// ticket outlives its session (logged out, expired, ended by an admin).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Ticket {
    user_id: i64,
    session_id: String,
}

impl Ticket {
    /// The ticket of the session `session_id` (as [`open`] returns it) of `user_id`.
    pub fn new(user_id: i64, session_id: String) -> Self {
        Self { user_id, session_id }
    }

    /// The user this ticket claims to be, to be trusted only once the session is found live.
    pub fn user_id(&self) -> i64 {
        self.user_id
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }
}

/// The ticket of the request's cookie, **not yet checked** (401 when there is none). For a
/// handler that checks it itself, in a statement of its own work on its own connection (see
/// [`LIVE_SESSION`]): one hop and one round trip fewer than [`SessionUser`]. Anything else
/// takes [`SessionUser`].
pub struct Claimed {
    pub ticket: Ticket,
    session: Session,
}

impl Claimed {
    /// Drops the cookie of a session the database no longer has, as [`SessionUser`] does.
    pub fn forget(&self) {
        self.session.purge();
    }
}

impl FromRequest for Claimed {
    type Error = AuthError;
    type Future = std::future::Ready<Result<Self, AuthError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let session = req.get_session();
        let ticket = ticket_of(&session).ok_or(AuthError::NotLoggedIn);
        std::future::ready(ticket.map(|ticket| Claimed { ticket, session }))
    }
}

/// The condition a live session meets, for a statement that checks tickets on the way: with
/// `s` the `user_sessions` row, bound to the current time and then to one session id per `?` of
/// `{list}`. Counting the rows that meet it tells whether every ticket of a list is live; when
/// the count falls short, [`current`] says which ones are not. The user id need not be matched
/// here: a ticket is sealed in the cookie with its session's own user.
pub const LIVE_SESSION: &str = "s.expires_at > ? AND s.id IN ({list})";

/// The time a session must outlast to be live now, for statements using [`LIVE_SESSION`].
pub fn live_after() -> NaiveDateTime {
    now()
}

/// The logged-in user, as the database has them now. Extracting it from a request whose
/// session is gone answers 401 (or, for a browser page, redirects to the login page).
#[derive(Clone, Debug, Serialize, Deserialize, Queryable, utoipa::ToSchema)]
pub struct SessionUser {
    pub id: i64,
    pub username: String,
    pub display_name: String,
    pub role: Role,
    /// Random per login: the same user in two browsers is two sessions (edit-lock owners).
    pub session_id: String,
    /// A demo account, whose password is published: the lab gives it a visitor's limits.
    #[serde(skip)]
    pub is_demo: bool,
}

impl SessionUser {
    /// Succeeds only if this user's role includes `needed`.
    pub fn require(&self, needed: Role) -> Result<(), AuthError> {
        if self.role.includes(needed) {
            Ok(())
        } else {
            Err(AuthError::Forbidden { have: self.role, need: needed })
        }
    }
}

/// The ticket in the request's session cookie, if it has one (not yet checked).
pub fn ticket_of(session: &Session) -> Option<Ticket> {
    session.get::<Ticket>(TICKET_KEY).ok().flatten()
}

/// Session checks of the requests that arrive together, answered by one query.
///
/// Each authenticated request must see its session row as the database has it now. One by one,
/// that is a blocking hop, a pool checkout and a query per request: under load more work than
/// many handlers do themselves. So requests queue their ticket here, holding nothing; the first
/// one starts a drainer task, which takes everything queued (at most [`MAX_CHECKS`]), looks it
/// all up with one query on one connection, answers each request, and goes again while more
/// arrived meanwhile. Every answer still comes from a query that started after its request
/// arrived: a logout or a role change is seen by the next request, exactly as one by one.
#[derive(Default)]
pub struct SessionChecks {
    queue: Mutex<Checks>,
}

#[derive(Default)]
struct Checks {
    waiting: Vec<(Ticket, oneshot::Sender<Checked>)>,
    draining: bool,
}

/// A session's user now, `None` when it has ended; a failed check carries the answer to give
/// (the same for every request of the batch: 503 when the database is busy or down).
type Checked = Result<Option<SessionUser>, Problem>;

/// Most sessions looked up by one query (one `IN` list).
pub const MAX_CHECKS: usize = 64;

impl SessionChecks {
    /// The user of `ticket`'s session as the database has it now.
    pub async fn check(
        self: &Arc<Self>,
        db: &OffExecutor,
        ticket: Ticket,
    ) -> Result<Option<SessionUser>, AuthError> {
        let (reply, answer) = oneshot::channel();
        let start = {
            let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            queue.waiting.push((ticket, reply));
            !std::mem::replace(&mut queue.draining, true)
        };
        if start {
            actix_web::rt::spawn(Arc::clone(self).drain(db.clone()));
        }
        match answer.await {
            Ok(checked) => checked.map_err(AuthError::CheckFailed),
            // The drainer is gone without answering (a panic in it): no answer is a refusal.
            Err(_) => Err(AuthError::CheckFailed(Problem::internal())),
        }
    }

    async fn drain(self: Arc<Self>, db: OffExecutor) {
        loop {
            let batch: Vec<_> = {
                let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
                if queue.waiting.is_empty() {
                    queue.draining = false;
                    return;
                }
                let take = queue.waiting.len().min(MAX_CHECKS);
                queue.waiting.drain(..take).collect()
            };
            let tickets: Vec<Ticket> = batch.iter().map(|(ticket, _)| ticket.clone()).collect();
            crate::metrics::record(|m| m.session_check_batch_size.observe(tickets.len() as f64));
            let found = db
                .with_pool(move |pool| {
                    let check = || Ok::<_, Infra>(current(&mut *pool.get()?, &tickets)?);
                    // A read, so safe to run again: once, on another connection, when the first
                    // one turned out dead (the server restarted since it was last used, say).
                    match check() {
                        Err(e) if e.is_unavailable() => check(),
                        checked => checked,
                    }
                })
                .await;
            let found = found.map_err(|error| {
                let problem = error.problem();
                log::warn!("checking {} session(s) failed: {error}", batch.len());
                problem
            });
            for (i, (_, reply)) in batch.into_iter().enumerate() {
                let _ = reply.send(found.as_ref().map(|users| users[i].clone()).map_err(Clone::clone));
            }
        }
    }
}

/// The live sessions among a list of ids, with their users. One text per list length of 1, 4,
/// 16 and 64 ([`MAX_CHECKS`]): a connection caches four statements for every batch size.
static LIVE_SESSIONS: LazyLock<ListStatements> = LazyLock::new(|| {
    ListStatements::new(
        "SELECT u.id, u.username, u.display_name, u.role, s.id, u.is_demo FROM user_sessions s \
         JOIN users u ON u.id = s.user_id WHERE s.expires_at > ? AND s.id IN ({list})",
        &[1, 4, 16, MAX_CHECKS],
    )
});

/// The user of each ticket's live session, in the tickets' order; `None` where it has ended.
pub fn current(conn: &mut DbConn, tickets: &[Ticket]) -> QueryResult<Vec<Option<SessionUser>>> {
    let ids: Vec<&str> = tickets.iter().map(|t| t.session_id.as_str()).collect();
    let Some((sql, ids)) = LIVE_SESSIONS.padded(&ids) else {
        return Ok(vec![None; tickets.len()]);
    };
    let live: Vec<SessionUser> = cached_sql::<(BigInt, Text, Text, Text, Text, Bool)>(sql)
        .bind::<Timestamp, _>(now())
        .bind_each::<Text, _>(ids)
        .load(conn)?;
    // A ticket names its user too: a session id presented with another user's id is no session.
    Ok(tickets
        .iter()
        .map(|ticket| {
            live.iter()
                .find(|user| user.session_id == ticket.session_id && user.id == ticket.user_id)
                .cloned()
        })
        .collect())
}

fn now() -> NaiveDateTime {
    chrono::Utc::now().naive_utc()
}

/// Opens a session row for the user `user_id` (blocking: call it off the executor) and returns
/// its id. Expired rows of the same user are cleared on the way.
pub fn open(conn: &mut DbConn, user_id: i64) -> QueryResult<String> {
    let session_id = super::csrf::random_token();
    let at = now();
    crate::db::transaction(conn, |conn| {
        diesel::delete(user_sessions::table)
            .filter(user_sessions::user_id.eq(user_id))
            .filter(user_sessions::expires_at.le(at))
            .execute(conn)?;
        diesel::insert_into(user_sessions::table)
            .values((
                user_sessions::id.eq(&session_id),
                user_sessions::user_id.eq(user_id),
                user_sessions::created_at.eq(at),
                user_sessions::expires_at.eq(at + SESSION_TTL),
            ))
            .execute(conn)
    })?;
    Ok(session_id)
}

/// Ends the ticket's session (logging out), or, when that session is still live, every session
/// of its user (`everywhere`): a cookie whose session has already ended ends nothing else.
///
/// Takes the ticket, not a checked [`SessionUser`]: a logout must reach the database whether or
/// not the session check did, and it reports whether it got there (see `account::routes`).
/// Runs in the caller's transaction (`account::logout`, which ends the session's edit locks in
/// the same one).
pub fn close(conn: &mut DbConn, ticket: &Ticket, everywhere: bool) -> QueryResult<usize> {
    let mine = user_sessions::table.filter(user_sessions::user_id.eq(ticket.user_id));
    let this = mine.filter(user_sessions::id.eq(&ticket.session_id));
    if !everywhere {
        return diesel::delete(this).execute(conn);
    }
    let live = diesel::delete(this.filter(user_sessions::expires_at.gt(now()))).execute(conn)?;
    Ok(if live == 0 { 0 } else { live + diesel::delete(mine).execute(conn)? })
}

/// Starts a fresh cookie for the session `session_id` of `user`: renewed, cleared, with a new
/// CSRF token, so nothing set before login (by an attacker who planted a cookie, say) survives
/// but the language the reader picked, one of two values checked when it is read.
pub fn log_in(session: &Session, user: &User, session_id: String) -> Result<SessionUser, AuthError> {
    let picked = crate::i18n::Lang::picked(session);
    session.renew();
    session.clear();
    if let Some(lang) = picked {
        lang.keep(session).map_err(|e| AuthError::Session(e.to_string()))?;
    }
    let ticket = Ticket { user_id: user.id, session_id };
    carry(session, &ticket)?;
    super::csrf::token(session)?;
    Ok(SessionUser {
        id: user.id,
        username: user.username.clone(),
        display_name: user.display_name.clone(),
        role: user.role,
        session_id: ticket.session_id,
        is_demo: user.is_demo,
    })
}

/// Puts `ticket` in the cookie: what [`log_in`] does once the password was checked, and what
/// the lab's benches do for sessions they opened themselves (`lab::bench::cookies`).
pub fn carry(session: &Session, ticket: &Ticket) -> Result<(), AuthError> {
    session.insert(TICKET_KEY, ticket).map_err(|e| AuthError::Session(e.to_string()))
}

/// Forgets the cookie (the row is closed by [`close`]).
pub fn log_out(session: &Session) {
    session.purge();
}

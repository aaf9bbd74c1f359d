//! Idempotent retries: a request that carries an `Idempotency-Key` takes effect at most once.
//!
//! The hazard: a client books, the answer is lost on the way back (a timeout, a dropped
//! connection, a proxy that retries, a double click on a slow page), and the client sends the
//! same request again. Every lock in this app is then beside the point: the second request is
//! a new booking as far as the server can tell, and it books (or sells) a second time.
//!
//! With a key, the second request gets the first one's answer back instead. How ([`once`]):
//!
//! 1. The key is claimed by the first statement of *the same transaction* that books or sells:
//!    an `INSERT` of the row `(user, key, fingerprint)`.
//! 2. A second request with the same key, on any instance, blocks on that `INSERT` (InnoDB locks
//!    the uncommitted unique key) until the first one ends. If the first committed, the insert
//!    fails as a duplicate, and the second request reads the stored answer and returns it. If
//!    the first rolled back, the insert simply succeeds and the second request runs.
//! 3. The answer, a success or a business refusal ("fully booked", "out of stock"), is written
//!    into the row in that same transaction. The effect and its stored answer commit together or
//!    not at all, even when the process dies in between: there is never "booked, but no answer to
//!    replay", nor "an answer, but no booking".
//! 4. A failure that is not an answer (busy, database unavailable, session ended) rolls the
//!    claim back with everything else: the next retry runs afresh, which is what the client
//!    wants from a 503.
//!
//! A coalesced batch (`orders::coalesce`) runs many keyed requests in one transaction: each
//! claims its key there in arrival order and its answer is stored there too ([`Once::claim`],
//! [`Once::answer`]), so every answer still commits with its effect. A passing failure of one
//! of them cannot roll the others back; its claim is deleted instead ([`Once::unclaim`]), which
//! leaves what a rollback would have.
//!
//! Keys are per user (one user's key never meets another's), may be 1 to 255 visible ASCII
//! characters, and are kept for [`TTL`]: an answer is replayed for a day, after which the key
//! may be used again. The same key with a different request is refused (422
//! `idempotency_key_reused`), because replaying the first answer would be a lie.

use actix_web::{FromRequest, HttpRequest};
use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DbError};
use diesel::sql_types::{BigInt, Binary, Nullable, Text, Timestamp};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use crate::db::{DbConn, Sql, cached_sql};
use crate::wire::answers::{Declared, answers};
use crate::wire::error::{AsProblem, Problem, http_error};

/// How long an answer is kept for replay, and a key stays bound to its request.
pub const TTL: chrono::TimeDelta = chrono::TimeDelta::hours(24);

/// The longest key accepted (the column's width).
pub const MAX_KEY_LEN: usize = 255;

/// The HTTP header (as Stripe and the IETF draft name it); HTML forms send a hidden field instead.
pub const HEADER: &str = "Idempotency-Key";

/// The form field that carries the key in HTML forms.
pub const FORM_FIELD: &str = "idempotency_key";

#[derive(Debug, thiserror::Error)]
pub enum IdempotencyError {
    #[error("invalid idempotency key")]
    BadKey,
    #[error("idempotency key reused for another request")]
    Reused,
    #[error("the stored answer cannot be read")]
    Unreadable,
}

answers! { IdempotencyError {
    BadKey => BAD_REQUEST "bad_idempotency_key",
    Reused => UNPROCESSABLE_ENTITY "idempotency_key_reused",
    Unreadable => CONFLICT "idempotency_key_used",
} }

impl AsProblem for IdempotencyError {
    fn problem(&self) -> Problem {
        let answer = self.answer();
        match self {
            Self::BadKey => answer.said(
                "idempotency.bad_key",
                &[("header", HEADER.to_string()), ("max", MAX_KEY_LEN.to_string())],
            ),
            Self::Reused => answer.said("idempotency.reused", &[]),
            Self::Unreadable => answer.said("idempotency.unreadable", &[]),
        }
    }
}
http_error!(IdempotencyError);

/// A well-formed key, not yet bound to a user or a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// 1 to [`MAX_KEY_LEN`] visible ASCII characters; anything else is refused, not trimmed,
    /// so a key never matches another one by accident.
    pub fn parse(text: &str) -> Result<Self, IdempotencyError> {
        let visible = |b: &u8| b.is_ascii_graphic();
        if (1..=MAX_KEY_LEN).contains(&text.len()) && text.bytes().all(|b| visible(&b)) {
            Ok(Self(text.to_owned()))
        } else {
            Err(IdempotencyError::BadKey)
        }
    }

    /// The key of an HTML form: its hidden field, if the form has one and it is not empty.
    pub fn from_form(field: Option<&str>) -> Result<Option<Self>, IdempotencyError> {
        field.filter(|text| !text.is_empty()).map(Self::parse).transpose()
    }

    /// A fresh random key, for the hidden field of a form (128 bits, URL-safe base64).
    pub fn fresh() -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>())
    }

    /// Binds the key to its user and to what the request asks for. `request` must describe the
    /// request completely and canonically (the parsed input, not the raw body): two requests
    /// that would do the same thing describe themselves the same way.
    pub fn bind(self, user_id: i64, request: &str) -> Once {
        Once { user_id, key: self.0, fingerprint: Sha256::digest(request.as_bytes()).to_vec() }
    }
}

/// The `Idempotency-Key` header of an API request, if it has one (a malformed one is a 400).
pub struct KeyHeader(pub Option<IdempotencyKey>);

impl FromRequest for KeyHeader {
    type Error = IdempotencyError;
    type Future = std::future::Ready<Result<Self, IdempotencyError>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let key = req.headers().get(HEADER).map(|value| {
            value.to_str().map_err(|_| IdempotencyError::BadKey).and_then(IdempotencyKey::parse)
        });
        std::future::ready(key.transpose().map(KeyHeader))
    }
}

/// A key bound to a user and a request: what [`once`] claims.
#[derive(Clone, Debug)]
pub struct Once {
    user_id: i64,
    key: String,
    fingerprint: Vec<u8>,
}

/// On MySQL a duplicate key fails the statement and the transaction carries on. On PostgreSQL a
/// failed statement aborts the whole transaction, so the duplicate is not an error there: the
/// insert does nothing, and says so by changing no row.
const CLAIM: Sql = Sql::per_engine(
    "INSERT INTO idempotency_keys (user_id, idempotency_key, fingerprint, created_at, expires_at) \
     VALUES (?, ?, ?, ?, ?)",
    "INSERT INTO idempotency_keys (user_id, idempotency_key, fingerprint, created_at, expires_at) \
     VALUES (?, ?, ?, ?, ?) ON CONFLICT (user_id, idempotency_key) DO NOTHING",
);
/// A locking read, so it sees the latest committed answer whatever this transaction's snapshot.
/// Shared, not exclusive: the failed insert already left a shared lock on the row in every
/// request that met the duplicate, and two of them upgrading to exclusive would deadlock each
/// other. (Only reclaiming an expired key writes; two requests doing that at once may deadlock,
/// and one is then retried or answered 503.)
const READ: &str = "SELECT fingerprint, outcome, expires_at FROM idempotency_keys \
     WHERE user_id = ? AND idempotency_key = ? {share}";
const RECLAIM: &str = "UPDATE idempotency_keys SET fingerprint = ?, outcome = NULL, created_at = ?, expires_at = ? \
     WHERE user_id = ? AND idempotency_key = ?";
const ANSWER: &str = "UPDATE idempotency_keys SET outcome = ? WHERE user_id = ? AND idempotency_key = ?";
const UNCLAIM: &str = "DELETE FROM idempotency_keys WHERE user_id = ? AND idempotency_key = ?";

/// Runs `work` inside the caller's transaction at most once per key: the first time, its
/// outcome (success, or a refusal declared `[kept]`: [`Declared::is_kept`]) is stored in the
/// same transaction; a later call with the same key returns the stored outcome without running
/// `work`. Without a key, `work` just runs.
///
/// The outer `Err` is for the caller's transaction to roll back (a passing failure, or the key
/// reused for another request); the inner result is the answer, to be returned *after* the
/// commit. Refusals are committed on purpose: the stored answer is the only thing they write.
pub fn once<T, E>(
    conn: &mut DbConn,
    key: Option<&Once>,
    work: impl FnOnce(&mut DbConn) -> Result<T, E>,
) -> Result<Result<T, E>, E>
where
    T: Serialize + DeserializeOwned,
    E: Serialize + DeserializeOwned + Declared + From<IdempotencyError> + From<DbError>,
{
    let Some(key) = key else { return work(conn).map(Ok) };
    match key.claim(conn)? {
        Claim::Fresh => {}
        Claim::Stored(stored) => return Ok(stored),
        Claim::Refused(refused) => return Err(refused.into()),
    }
    match work(conn) {
        Err(passing) if !passing.is_kept() => Err(passing),
        outcome => {
            key.answer(conn, &outcome)?;
            Ok(outcome)
        }
    }
}

/// What claiming a key found ([`Once::claim`]).
pub enum Claim<T, E> {
    /// The key is this transaction's now: run the request.
    Fresh,
    /// The key's first request has committed this answer.
    Stored(Result<T, E>),
    /// The key cannot serve this request (bound to another, or its answer unreadable); nothing
    /// was written.
    Refused(IdempotencyError),
}

/// The steps of [`once`] one by one, for requests that share one transaction and are answered
/// only once all of them are decided (a coalesced batch, `orders::batch::order_batch`): each
/// claims its key in arrival order, a stored answer ends it there, and the others' answers are
/// stored once they are known, in the same transaction ([`Once::answer`]). Rolling back is not
/// one request's to decide there: it would take the others' work with it. So a passing failure
/// of one of them takes its claim back instead ([`Once::unclaim`]), which leaves what a rollback
/// would have.
impl Once {
    /// Claims the key for this transaction, or returns the answer stored under it (also one
    /// stored earlier in this same transaction). The error is a statement's failure.
    pub fn claim<T: DeserializeOwned, E: DeserializeOwned>(
        &self,
        conn: &mut DbConn,
    ) -> Result<Claim<T, E>, DbError> {
        let now = crate::db::now_micros();
        let inserted = cached_sql::<()>(CLAIM)
            .bind::<BigInt, _>(self.user_id)
            .bind::<Text, _>(&self.key)
            .bind::<Binary, _>(&self.fingerprint)
            .bind::<Timestamp, _>(now)
            .bind::<Timestamp, _>(now + TTL)
            .execute(conn);
        match inserted {
            Ok(1) => return Ok(Claim::Fresh),
            Ok(_) | Err(DbError::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => {}
            Err(other) => return Err(other),
        }
        // Used before, by a transaction that has committed (had it rolled back, the insert
        // would have succeeded), or earlier in this one (a batch holding the same key twice).
        let (fingerprint, outcome, expires_at): (Vec<u8>, Option<String>, NaiveDateTime) =
            cached_sql::<(Binary, Nullable<Text>, Timestamp)>(READ)
                .bind::<BigInt, _>(self.user_id)
                .bind::<Text, _>(&self.key)
                .get_result(conn)?;
        if expires_at <= now {
            cached_sql::<()>(RECLAIM)
                .bind::<Binary, _>(&self.fingerprint)
                .bind::<Timestamp, _>(now)
                .bind::<Timestamp, _>(now + TTL)
                .bind::<BigInt, _>(self.user_id)
                .bind::<Text, _>(&self.key)
                .execute(conn)?;
            return Ok(Claim::Fresh);
        }
        if fingerprint != self.fingerprint {
            return Ok(Claim::Refused(IdempotencyError::Reused));
        }
        let Some(outcome) = outcome else { return Ok(Claim::Refused(IdempotencyError::Unreadable)) };
        match serde_json::from_str(&outcome) {
            Ok(stored) => {
                crate::metrics::record(|m| m.idempotent_replays.inc());
                Ok(Claim::Stored(stored))
            }
            Err(e) => {
                log::warn!("stored answer for an idempotency key cannot be read: {e}");
                Ok(Claim::Refused(IdempotencyError::Unreadable))
            }
        }
    }

    /// Stores `outcome` as the key's answer, in the transaction that claimed it.
    pub fn answer<T: Serialize, E: Serialize>(
        &self,
        conn: &mut DbConn,
        outcome: &Result<T, E>,
    ) -> Result<(), DbError> {
        let text = serde_json::to_string(outcome).map_err(|e| DbError::SerializationError(e.into()))?;
        cached_sql::<()>(ANSWER)
            .bind::<Text, _>(text)
            .bind::<BigInt, _>(self.user_id)
            .bind::<Text, _>(&self.key)
            .execute(conn)
            .map(drop)
    }

    /// Takes back this transaction's claim: what rolling it back would have left (a key that
    /// had expired and was reclaimed is gone rather than expired, which means the same).
    pub fn unclaim(&self, conn: &mut DbConn) -> Result<(), DbError> {
        cached_sql::<()>(UNCLAIM)
            .bind::<BigInt, _>(self.user_id)
            .bind::<Text, _>(&self.key)
            .execute(conn)
            .map(drop)
    }

    /// Whether `other` is the same key of the same user (whatever request it is bound to).
    pub fn same_key(&self, other: &Once) -> bool {
        self.user_id == other.user_id && self.key == other.key
    }
}

/// Deletes expired keys, a bounded batch per statement so no purge holds many row locks.
/// Run every few minutes by the server ([`crate::Application::run_until_stopped`]).
pub fn purge_expired(conn: &mut DbConn) -> QueryResult<usize> {
    // PostgreSQL's DELETE takes no LIMIT: the batch is chosen by a subquery on the rows' ids.
    const PURGE: Sql = Sql::per_engine(
        "DELETE FROM idempotency_keys WHERE expires_at <= ? LIMIT 1000",
        "DELETE FROM idempotency_keys WHERE ctid IN \
           (SELECT ctid FROM idempotency_keys WHERE expires_at <= ? LIMIT 1000)",
    );
    let now = crate::db::now_micros();
    let mut purged = 0;
    loop {
        let batch = cached_sql::<()>(PURGE).bind::<Timestamp, _>(now).execute(conn)?;
        purged += batch;
        if batch < 1000 {
            return Ok(purged);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_one_to_255_visible_ascii_characters() {
        assert!(IdempotencyKey::parse("3f1c-uuid").is_ok());
        assert!(IdempotencyKey::parse(&"k".repeat(MAX_KEY_LEN)).is_ok());
        for bad in ["", " padded", "tab\there", "ключ", &"k".repeat(MAX_KEY_LEN + 1)] {
            assert!(IdempotencyKey::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn an_empty_form_field_means_no_key() {
        assert_eq!(IdempotencyKey::from_form(None).ok(), Some(None));
        assert_eq!(IdempotencyKey::from_form(Some("")).ok(), Some(None));
        assert!(IdempotencyKey::from_form(Some("a b")).is_err());
    }

    #[test]
    fn fresh_keys_are_valid_and_differ() {
        let (a, b) = (IdempotencyKey::fresh(), IdempotencyKey::fresh());
        assert_ne!(a, b);
        assert!(IdempotencyKey::parse(&a).is_ok());
    }

    #[test]
    fn the_same_key_with_another_request_has_another_fingerprint() {
        let key = || IdempotencyKey::parse("k").expect("valid");
        assert_eq!(
            key().bind(1, "book 1 2026-12-24").fingerprint,
            key().bind(1, "book 1 2026-12-24").fingerprint
        );
        assert_ne!(
            key().bind(1, "book 1 2026-12-24").fingerprint,
            key().bind(1, "book 1 2026-12-25").fingerprint
        );
    }
}

//! Locking primitives, each named after the guarantee it gives.
//!
//! - [`NamedLockGuard`]: a MySQL named lock (`GET_LOCK`) held on one pooled connection for as
//!   long as the guard lives; the work done under it runs on that same connection.
//! - [`transaction_under_lock`]: a transaction run under a named lock held for exactly that one
//!   transaction (a single booking, a stock receipt): PostgreSQL's transaction-scoped advisory
//!   lock, released by the transaction's end (the guard on MySQL).
//!
//! - [`transaction_under_locks`]: the same for work that needs several named locks (a stay,
//!   one per night), taken in one order ([`TurnsInOrder`]) so that two such requests never wait
//!   for each other in a circle; on MySQL one session holds them all ([`NamedLocksInOrder`]).
//!
//! Both take their lock the same way (`named::ask_then_wait`): asked without waiting first,
//! then waited for within what is left of the request's turn and the instance's waiting budget.
//! - [`LockName`]: the only way to build a lock name: namespaced, case-stable, at most 64
//!   characters.
//! - [`retry::retry_on_lock_conflict`]: reruns a whole transaction after a deadlock or a lock
//!   wait timeout, at most a few times, with jittered backoff.
//! - [`LockQueue`]: one waiter per lock name per instance, in memory, and a budget for the
//!   sessions that wait at the server, so one hot or stuck key cannot take every connection.
//! - [`Batches`]: the requests for one hot key waiting in memory, in arrival order, for the one
//!   task that serves them in batches (one lock, one transaction, one commit for many).
//! - [`Coalescer`]: that task and its rules: a request alone at its key runs the feature's
//!   lesson function, requests that queued for one key are decided together ([`Serve`]).
//! - [`Cutoff`]: the moment a stopping instance answers every request still waiting in memory
//!   (503 `draining`) instead of letting its connection be closed unanswered.
//!
//! What each engine's server is asked for them (`GET_LOCK` or `pg_advisory_lock`, and how a
//! holder is found and its session ended) is the engine's dialect's answer (`db::dialect`); the
//! names themselves are built where the servers' rules for them are known (`db::lock_names`).

pub mod batches;
mod coalescer;
mod cutoff;
mod named;
pub mod queue;
pub mod retry;
mod transaction_scoped;

pub use crate::db::lock_names::{self as names, LockName, Namespace};
pub use batches::Batches;
pub use coalescer::{Coalescer, Serve};
pub use cutoff::Cutoff;
pub use named::{AcquireError, LockError, NamedLockGuard, NamedLocksInOrder};
pub use queue::{LockQueue, Turn, TurnsInOrder};
pub use transaction_scoped::{Isolation, transaction_under_lock, transaction_under_locks};

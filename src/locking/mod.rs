//! Locking primitives, each named after the guarantee it gives.
//!
//! - [`NamedLockGuard`]: a MySQL named lock (`GET_LOCK`) held on one pooled connection for as
//!   long as the guard lives; the work done under it runs on that same connection.
//! - [`LockName`]: the only way to build a lock name: namespaced, case-stable, at most 64
//!   characters.

mod named;
mod names;

pub use named::{LockError, NamedLockGuard};
pub use names::LockName;

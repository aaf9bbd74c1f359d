//! Users, password hashing, cookie sessions, roles and CSRF protection.
//!
//! The session cookie (encrypted and signed, actix-session's cookie store) names a row of
//! `user_sessions`, which every authenticated request checks (`session.rs`): any instance behind a
//! load balancer can serve any request, the only shared state is the database, and a session can
//! be ended from anywhere.

pub mod csrf;
pub mod model;
pub mod password;
pub mod service;
pub mod session;
pub mod throttle;

use actix_web::http::StatusCode;

pub use model::{Role, User};
pub use session::SessionUser;

use crate::http::error::{AsProblem, Problem};
use crate::infra::{Infra, infra_error};

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("not logged in")]
    NotLoggedIn,
    #[error("role {have} may not do this (needs {need})")]
    Forbidden { have: Role, need: Role },
    #[error("wrong username or password")]
    BadCredentials,
    #[error("CSRF token missing or wrong")]
    CsrfFailed,
    #[error("invalid {field}: {message}")]
    Invalid { field: &'static str, message: String },
    #[error("username {0:?} is already taken")]
    UsernameTaken(String),
    #[error("session store failed: {0}")]
    Session(String),
    #[error("password hashing failed: {0}")]
    Hashing(String),
    #[error("too many login attempts; retry in {retry_after_secs} s")]
    Throttled { retry_after_secs: u32 },
    #[error("no password-hashing slot free in time")]
    HashingBusy,
    /// The session could not be checked (the database busy or down); the answer to give.
    #[error("the session could not be checked: {}", .0.message)]
    CheckFailed(Problem),
    /// A logout the database did not record (busy or down): the session is still open.
    #[error("logout not recorded: {0}")]
    LogoutFailed(Infra),
    #[error(transparent)]
    Infra(#[from] Infra),
}

impl AsProblem for AuthError {
    fn problem(&self) -> Problem {
        use StatusCode as S;
        match self {
            Self::NotLoggedIn => Problem::words(S::UNAUTHORIZED, "not_logged_in", "error.not_logged_in", &[]),
            Self::Forbidden { need, .. } => {
                Problem::words(S::FORBIDDEN, "forbidden", "auth.forbidden", &[("role", need.to_string())])
            }
            Self::BadCredentials => {
                Problem::words(S::UNAUTHORIZED, "bad_credentials", "auth.bad_credentials", &[])
            }
            Self::CsrfFailed => Problem::words(S::FORBIDDEN, "csrf_failed", "error.csrf", &[]),
            Self::Invalid { field, message } => {
                Problem::new(S::UNPROCESSABLE_ENTITY, "invalid_input", format!("{field}: {message}"))
            }
            Self::UsernameTaken(name) => Problem::words(
                S::CONFLICT,
                "username_taken",
                "auth.username_taken",
                &[("name", format!("{name:?}"))],
            ),
            Self::Throttled { retry_after_secs } => Problem {
                retry_after: Some(*retry_after_secs),
                ..Problem::words(
                    S::TOO_MANY_REQUESTS,
                    "too_many_attempts",
                    "auth.throttled",
                    &[("seconds", retry_after_secs.to_string())],
                )
            },
            Self::HashingBusy => Problem {
                retry_after: Some(1),
                cause: "hashing",
                ..Problem::words(S::SERVICE_UNAVAILABLE, "busy", "auth.hashing_busy", &[])
            },
            Self::CheckFailed(problem) => problem.clone(),
            Self::LogoutFailed(_) => Problem {
                retry_after: Some(2),
                cause: "database",
                ..Problem::words(S::SERVICE_UNAVAILABLE, "logout_failed", "auth.logout_failed", &[])
            },
            Self::Infra(e) => e.problem(),
            Self::Session(_) | Self::Hashing(_) => Problem::internal(),
        }
    }
}
infra_error!(AuthError);

//! Users, password hashing, cookie sessions, roles and CSRF protection.
//!
//! The session cookie (encrypted and signed, actix-session's cookie store) names a row of
//! `user_sessions`, which every authenticated request checks (`session.rs`): any instance behind a
//! load balancer can serve any request, the only shared state is the database, and a session can
//! be ended from anywhere.

pub mod csrf;
pub mod model;
pub mod password;
pub mod quota;
pub mod service;
pub mod session;
pub mod throttle;
pub mod username;

pub use model::{Role, User};
pub use session::SessionUser;

use crate::infra::{Infra, infra_error};
use crate::wire::answers::{Declared, answers};
use crate::wire::error::{AsProblem, Problem};

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

answers! { AuthError {
    NotLoggedIn => UNAUTHORIZED "not_logged_in",
    Forbidden => FORBIDDEN "forbidden",
    BadCredentials => UNAUTHORIZED "bad_credentials",
    CsrfFailed => FORBIDDEN "csrf_failed",
    Invalid => UNPROCESSABLE_ENTITY "invalid_input",
    UsernameTaken => CONFLICT "username_taken",
    Throttled => TOO_MANY_REQUESTS "too_many_attempts",
    HashingBusy => SERVICE_UNAVAILABLE "busy",
    LogoutFailed => SERVICE_UNAVAILABLE "logout_failed",
    Session => INTERNAL_SERVER_ERROR "internal",
    Hashing => INTERNAL_SERVER_ERROR "internal",
} carries { CheckFailed, Infra } }

impl AsProblem for AuthError {
    fn problem(&self) -> Problem {
        let answer = self.answer();
        match self {
            Self::NotLoggedIn => answer.said("error.not_logged_in", &[]),
            Self::Forbidden { need, .. } => answer.said("auth.forbidden", &[("role", need.to_string())]),
            Self::BadCredentials => answer.said("auth.bad_credentials", &[]),
            Self::CsrfFailed => answer.said("error.csrf", &[]),
            Self::Invalid { field, message } => answer
                .said("request.invalid_field", &[("field", field.to_string()), ("message", message.clone())]),
            Self::UsernameTaken(name) => answer.said("auth.username_taken", &[("name", format!("{name:?}"))]),
            Self::Throttled { retry_after_secs } => Problem {
                retry_after: Some(*retry_after_secs),
                ..answer.said("auth.throttled", &[("seconds", retry_after_secs.to_string())])
            },
            Self::HashingBusy => {
                Problem { retry_after: Some(1), cause: "hashing", ..answer.said("auth.hashing_busy", &[]) }
            }
            Self::CheckFailed(problem) => problem.clone(),
            Self::LogoutFailed(_) => {
                Problem { retry_after: Some(2), cause: "database", ..answer.said("auth.logout_failed", &[]) }
            }
            Self::Infra(e) => e.problem(),
            Self::Session(_) | Self::Hashing(_) => Problem::internal(),
        }
    }
}
infra_error!(AuthError);

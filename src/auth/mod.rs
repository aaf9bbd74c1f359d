//! Users, password hashing, cookie sessions, roles and CSRF protection.
//!
//! The session cookie (encrypted and signed, actix-session's cookie store) names a row of
//! `user_sessions`, which every authenticated request checks (`session.rs`): any instance behind a
//! load balancer can serve any request, the only shared state is the database, and a session can
//! be ended from anywhere.

pub mod csrf;
pub mod model;
pub mod password;
pub mod routes;
pub mod service;
pub mod session;
pub mod throttle;

use actix_web::http::StatusCode;

pub use model::{Role, User};
pub use session::SessionUser;

use crate::infra::{Infra, infra_error};
use crate::web::error::{AsProblem, Problem};

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
    #[error(transparent)]
    Infra(#[from] Infra),
}

impl AsProblem for AuthError {
    fn problem(&self) -> Problem {
        use StatusCode as S;
        match self {
            Self::NotLoggedIn => Problem::new(S::UNAUTHORIZED, "not_logged_in", "Please log in first."),
            Self::Forbidden { need, .. } => Problem::new(
                S::FORBIDDEN,
                "forbidden",
                format!("This needs the {need} role, which your account does not have."),
            ),
            Self::BadCredentials => {
                Problem::new(S::UNAUTHORIZED, "bad_credentials", "Wrong username or password.")
            }
            Self::CsrfFailed => Problem::new(
                S::FORBIDDEN,
                "csrf_failed",
                "This form has expired or did not come from this site. Reload the page and try again.",
            ),
            Self::Invalid { field, message } => {
                Problem::new(S::UNPROCESSABLE_ENTITY, "invalid_input", format!("{field}: {message}"))
            }
            Self::UsernameTaken(name) => Problem::new(
                S::CONFLICT,
                "username_taken",
                format!("The username {name:?} is already taken."),
            ),
            Self::Throttled { retry_after_secs } => Problem {
                retry_after: Some(*retry_after_secs),
                ..Problem::new(
                    S::TOO_MANY_REQUESTS,
                    "too_many_attempts",
                    format!("Too many login attempts; please wait {retry_after_secs} s and try again."),
                )
            },
            Self::HashingBusy => {
                Problem::busy("Many people are logging in right now; please try again in a moment.")
                    .because("hashing")
            }
            Self::CheckFailed(problem) => problem.clone(),
            Self::Infra(e) => e.problem(),
            Self::Session(_) | Self::Hashing(_) => Problem::internal(),
        }
    }
}
infra_error!(AuthError);

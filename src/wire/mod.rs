//! How haita speaks HTTP, whatever the feature: a failure as a [`error::Problem`] (status, stable
//! code, a sentence in the reader's language) whose status and code each error declares once
//! ([`answers`]), the request errors every endpoint shares, times in
//! UTC on the wire ([`utc`]), and input read from people ([`input`]).
//!
//! It knows no feature and no app state, so every layer above the database may use it; the app's
//! own toolkit for handlers (state, page context, the HTML error page) is `crate::app`.

pub mod answers;
pub mod client_address;
pub mod error;
pub mod input;
pub mod slow_body;
pub mod utc;

//! What a person does with their own session: logging in and out (pages and the JSON session
//! endpoints; logging out ends the session's edit locks too, `logout`), and picking the pages'
//! language. The mechanism underneath (users, password
//! hashing, sessions, CSRF, the login throttle) is `crate::auth`, which every feature uses.

pub mod language;
pub mod logout;
pub mod routes;

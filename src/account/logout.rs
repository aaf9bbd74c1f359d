//! Logging out: the session's row ends, and with it the edit locks the session holds.

use crate::auth::session::{self, Ticket};
use crate::db::DbConn;
use crate::edit_locks::service;

/// Ends the ticket's session (or, `everywhere`, every session of its user) and, in the same
/// transaction, the edit locks those sessions hold, each with its audit event
/// (`edit_locks::service::release_on_logout`). A person who logs out in the editor and logs in
/// again finds the record free: without this their former session would hold it, for them as
/// for everyone, until the lock expired. Answers how many sessions ended.
///
/// The session's own locks are released even when its row was already gone (expired, ended by an
/// admin): the sealed cookie proves they were this session's, and nothing else can renew them.
pub fn log_out(conn: &mut DbConn, ticket: &Ticket, everywhere: bool) -> diesel::QueryResult<usize> {
    crate::db::transaction(conn, |conn| {
        let ended = session::close(conn, ticket, everywhere)?;
        // "Everywhere" reached the other sessions only if this one was live (`session::close`).
        let sessions = if everywhere && ended > 0 { None } else { Some(ticket.session_id()) };
        service::release_on_logout(conn, ticket.user_id(), sessions)?;
        Ok(ended)
    })
}

//! Session cookies for thousands of bench users without a login each.
//!
//! A login hashes a password (tens of milliseconds of CPU, by design), so logging in the ten
//! thousand users of a realistic history over HTTP would take minutes and measure nothing the
//! bench is about. Their sessions are rows the bench inserted (`history`), and a cookie is only
//! those sessions' tickets sealed with the server's `SESSION_KEY`: this module seals each one
//! through the app's own session middleware (`crate::session_cookies`), in process, as the
//! login would have.

use actix_session::Session;
use actix_web::cookie::Key;
use actix_web::{App, HttpResponse, test, web};

use crate::auth::session::{self, Ticket};

/// The `name=value` cookie of each ticket, sealed with `key`.
pub fn mint(key: &Key, tickets: &[Ticket]) -> anyhow::Result<Vec<String>> {
    actix_web::rt::System::new().block_on(async {
        let app = test::init_service(App::new().wrap(crate::session_cookies(key.clone(), false)).route(
            "/",
            web::post().to(|session: Session, ticket: web::Json<Ticket>| async move {
                match session::carry(&session, &ticket) {
                    Ok(()) => HttpResponse::NoContent().finish(),
                    Err(e) => HttpResponse::InternalServerError().body(e.to_string()),
                }
            }),
        ))
        .await;
        let mut cookies = Vec::with_capacity(tickets.len());
        for ticket in tickets {
            let response =
                test::call_service(&app, test::TestRequest::post().uri("/").set_json(ticket).to_request())
                    .await;
            anyhow::ensure!(response.status().is_success(), "could not seal a ticket: {}", response.status());
            let cookie = response
                .response()
                .cookies()
                .next()
                .ok_or_else(|| anyhow::anyhow!("the session middleware set no cookie"))?;
            cookies.push(format!("{}={}", cookie.name(), cookie.value()));
        }
        Ok(cookies)
    })
}

//! The header's language switch: the picked language kept in the session.

use actix_session::Session;
use actix_web::{HttpResponse, web};
use serde::Deserialize;

use crate::app::{see_other, switch_back};
use crate::auth::AuthError;
use crate::auth::csrf::CsrfForm;
use crate::i18n::Lang;
use crate::wire::input::quoted;

/// `POST /language`: the header's switch.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/language", web::post().to(switch));
}

#[derive(Deserialize)]
struct Switch {
    lang: String,
    next: Option<String>,
}

/// Keeps the picked language in the session and goes back to the page the switch was on (the
/// login page too, with where to go after logging in).
async fn switch(
    CsrfForm(form): CsrfForm<Switch>,
    session: Session,
) -> Result<HttpResponse, actix_web::Error> {
    let lang = Lang::parse(&form.lang).ok_or_else(|| AuthError::Invalid {
        field: "lang",
        message: format!("{:?} is not a language this site speaks (en, ja)", quoted(&form.lang)),
    })?;
    lang.keep(&session).map_err(|e| AuthError::Session(e.to_string()))?;
    Ok(see_other(&switch_back(form.next.as_deref())))
}

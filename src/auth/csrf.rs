//! CSRF protection for HTML forms: the synchronizer-token pattern.
//!
//! Each session carries a random token (in the encrypted session cookie, so no server state);
//! every form renders it in a hidden `csrf_token` field, and [`CsrfForm`] refuses a form post
//! whose field does not match, comparing in constant time. The check happens in the extractor,
//! so a handler that takes a form cannot forget it.
//!
//! The JSON API needs no token: every request that changes something (POST, PUT, PATCH, DELETE
//! under `/api/`) must say `Content-Type: application/json`, which a cross-site page cannot send
//! without a CORS preflight that this app never approves ([`json_only_api_writes`]). That holds
//! for the requests without a body too (taking an edit lock, releasing expired ones): a form
//! or `fetch(…, {mode: "no-cors"})` on another site could otherwise send them as a "simple"
//! request with the user's cookie. The session cookie is also `SameSite=Lax`.
//!
//! Whether a request is an API write is read from the path as the router reads it, decoded:
//! `POST /%61pi/v1/…` reaches the same handler as `POST /api/v1/…`, so it must meet the same rule
//! (an earlier version read the raw path and let it through).

use actix_session::{Session, SessionExt};
use actix_web::body::MessageBody;
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::http::header;
use actix_web::middleware::Next;
use actix_web::web::Bytes;
use actix_web::{FromRequest, HttpRequest};
use base64::Engine;
use rand::RngCore;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use std::future::Future;
use std::pin::Pin;
use subtle::ConstantTimeEq;

use super::AuthError;
use crate::wire::error::RequestError;

const CSRF_KEY: &str = "csrf";

/// Middleware: a state-changing `/api/` request without `Content-Type: application/json` is
/// refused with 415 before it reaches a handler (see the module's comment).
pub async fn json_only_api_writes(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    use actix_web::http::Method;
    let writes = matches!(*req.method(), Method::POST | Method::PUT | Method::PATCH | Method::DELETE);
    // `match_info` holds the path the router matches: percent-encoded letters decoded.
    let routed = req.match_info().as_str();
    let api = routed.starts_with("/api/") || req.path().starts_with("/api/");
    if writes && api && !is_json(req.headers()) {
        return Err(RequestError::UnsupportedMediaType("application/json").into());
    }
    next.call(req).await
}

/// `application/json`, with or without parameters (`; charset=utf-8`).
fn is_json(headers: &header::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// 32 random bytes, URL-safe base64.
pub fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// This session's token, created on first use (which also starts the session cookie).
pub fn token(session: &Session) -> Result<String, AuthError> {
    if let Some(existing) = session.get::<String>(CSRF_KEY).ok().flatten() {
        return Ok(existing);
    }
    let fresh = random_token();
    session.insert(CSRF_KEY, &fresh).map_err(|e| AuthError::Session(e.to_string()))?;
    Ok(fresh)
}

fn matches(session: &Session, submitted: Option<&str>) -> bool {
    match (session.get::<String>(CSRF_KEY).ok().flatten(), submitted) {
        (Some(expected), Some(given)) => expected.as_bytes().ct_eq(given.as_bytes()).into(),
        _ => false,
    }
}

/// The fields of a form that carries nothing but its CSRF token (log out, cancel): use as
/// `CsrfForm<TokenOnly>`.
#[derive(Deserialize)]
pub struct TokenOnly {}

/// A URL-encoded form whose `csrf_token` field matched the session's token.
pub struct CsrfForm<T>(pub T);

#[derive(Deserialize)]
struct TokenField {
    csrf_token: Option<String>,
}

impl<T: DeserializeOwned + 'static> FromRequest for CsrfForm<T> {
    type Error = actix_web::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let is_form = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        let session = req.get_session();
        let body = Bytes::from_request(req, payload);
        Box::pin(async move {
            if !is_form {
                return Err(RequestError::UnsupportedMediaType("application/x-www-form-urlencoded").into());
            }
            let body = body.await?;
            // The token is checked before the form is parsed: a forged post learns nothing
            // about which fields would have been accepted.
            let token = serde_urlencoded::from_bytes::<TokenField>(&body).ok().and_then(|f| f.csrf_token);
            if !matches(&session, token.as_deref()) {
                return Err(AuthError::CsrfFailed.into());
            }
            serde_urlencoded::from_bytes::<T>(&body)
                .map(CsrfForm)
                .map_err(|e| RequestError::MalformedBody(e.to_string()).into())
        })
    }
}

//! Login and logout: HTML pages and the JSON session endpoints.

use actix_session::Session;

use actix_web::{HttpRequest, HttpResponse, Responder, web};
use askama::Template;
use serde::{Deserialize, Serialize};

use crate::app::{AppState, PageContext, html, local_path, see_other};
use crate::auth::csrf::{CsrfForm, TokenOnly};
use crate::auth::throttle::{Attempt, LoginKey};
use crate::auth::{AuthError, Role, SessionUser, User, service, session};
use crate::infra::Infra;
use crate::wire::answers::documented_answers;
use crate::wire::client_address::ClientAddress;
use crate::wire::error::AsProblem;

#[derive(utoipa::OpenApi)]
#[openapi(paths(whoami, login_json, logout_json))]
pub struct Api;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/login", web::get().to(login_page))
        .route("/login", web::post().to(login_form))
        .route("/logout", web::post().to(logout_form))
        .service(
            web::resource("/api/v1/session")
                .route(web::get().to(whoami))
                .route(web::post().to(login_json))
                .route(web::delete().to(logout_json)),
        );
}

#[derive(Template)]
#[template(path = "auth/login.html")]
struct LoginPage {
    ctx: PageContext,
    next: String,
    username: String,
    error: Option<String>,
    demo_users: Vec<(String, Role)>,
}

#[derive(Deserialize)]
struct NextQuery {
    next: Option<String>,
}

async fn login_page(
    ctx: PageContext,
    query: web::Query<NextQuery>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let demo_users = demo_users(&state).await?;
    Ok(html(&LoginPage {
        ctx,
        next: local_path(query.next.as_deref()).to_string(),
        username: String::new(),
        error: None,
        demo_users,
    })?)
}

/// The demo accounts, listed on the login page with their published passwords: only in
/// `DEMO_MODE`, even if a database once seeded for a demo still holds them.
async fn demo_users(state: &AppState) -> Result<Vec<(String, Role)>, AuthError> {
    if !state.config.demo_mode {
        return Ok(Vec::new());
    }
    state.off_executor.with_conn(service::demo_users).await
}

#[derive(Deserialize)]
struct Credentials {
    username: String,
    password: String,
    next: Option<String>,
}

/// Count the attempt and fetch the hash in one trip (giving the connection back), then verify on
/// a hashing slot. A wrong password is answered after the account's delay, and stays counted;
/// an attempt that was not checked is taken back (`crate::auth::throttle`).
async fn check_credentials(
    state: &AppState,
    address: Option<ClientAddress>,
    username: String,
    password: String,
) -> Result<(User, Attempt), AuthError> {
    let policy = state.logins.policy();
    let key = LoginKey::new(&username, address);
    let (user, attempt) = state
        .off_executor
        .with_conn(move |conn| {
            let attempt = policy.begin(conn, key)?;
            match service::find_for_login(conn, &username) {
                Ok(user) => Ok((user, attempt)),
                Err(e) => {
                    attempt.not_checked(conn);
                    Err(e)
                }
            }
        })
        .await?;
    let demo_accounts = state.config.demo_mode;
    let checked = match state.logins.hashing_slot().await {
        Ok(slot) => {
            state
                .off_executor
                .run(move || {
                    let _slot = slot; // held until the hash is checked, even if the client has gone
                    service::verify(user, &password, demo_accounts)
                })
                .await
        }
        Err(busy) => Err(busy),
    };
    match checked {
        Ok(user) => Ok((user, attempt)),
        Err(AuthError::BadCredentials) => {
            // Not synchronisation: the account's bounded delay before answering a failure.
            actix_web::rt::time::sleep(attempt.delay_if_wrong).await;
            Err(AuthError::BadCredentials)
        }
        Err(unchecked) => {
            let taken_back = state.off_executor.with_conn(move |conn| {
                attempt.not_checked(conn);
                Ok::<_, AuthError>(())
            });
            if let Err(e) = taken_back.await {
                log::warn!("an unchecked login stays counted as a failure: {e}");
            }
            Err(unchecked)
        }
    }
}

async fn login_form(
    req: HttpRequest,
    CsrfForm(form): CsrfForm<Credentials>,
    session: Session,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let next = local_path(form.next.as_deref()).to_string();
    let address = ClientAddress::of_request(&req, &state.config.trusted_proxies);
    match check_credentials(&state, address, form.username.clone(), form.password).await {
        Ok((user, attempt)) => {
            start_session(&state, &session, user, attempt).await?;
            Ok(see_other(&next))
        }
        Err(refused @ AuthError::BadCredentials) => {
            // Shown at the login page's address with its `next`, for the language switch.
            let ctx = PageContext::anonymous(&req, crate::auth::csrf::token(&session)?)
                .shown_as(crate::app::login_address(&next));
            let page = LoginPage {
                error: Some(refused.problem().message_in(ctx.lang)),
                ctx,
                next,
                username: form.username,
                demo_users: demo_users(&state).await?,
            };
            let mut response = html(&page)?;
            *response.status_mut() = actix_web::http::StatusCode::UNAUTHORIZED;
            Ok(response)
        }
        Err(other) => Err(other.into()),
    }
}

async fn logout_form(
    CsrfForm(_): CsrfForm<TokenOnly>,
    session: Session,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    end_session(&state, &session, false).await?;
    Ok(see_other("/"))
}

/// Forgives the pair's failures and opens the session's row (off the executor, in one trip), then
/// writes the cookie that names it.
async fn start_session(
    state: &AppState,
    session: &Session,
    user: User,
    attempt: Attempt,
) -> Result<SessionUser, AuthError> {
    let (user, session_id) = state
        .off_executor
        .with_conn(move |conn| {
            attempt.succeeded(conn);
            let session_id = session::open(conn, user.id)?;
            Ok::<_, AuthError>((user, session_id))
        })
        .await?;
    session::log_in(session, &user, session_id)
}

/// Ends this session (or all of the user's) in the database, with its edit locks
/// (`account::logout`), then forgets the cookie.
///
/// The row is what makes a session: a cookie forgotten while its row stays would leave every
/// copy of it logged in. So the ticket goes straight to the `DELETE` (no session check first,
/// which the database being down would turn into "nobody logged in"), and when the database
/// cannot be reached the answer says so (503, `logout_failed`) and the cookie is kept, for the
/// person to log out again once it is back.
async fn end_session(state: &AppState, session: &Session, everywhere: bool) -> Result<(), AuthError> {
    if let Some(ticket) = session::ticket_of(session) {
        state
            .off_executor
            .with_conn(move |conn| Ok::<_, Infra>(super::logout::log_out(conn, &ticket, everywhere)?))
            .await
            .map_err(
                |e| if e.is_unavailable() || e.is_busy() { AuthError::LogoutFailed(e) } else { e.into() },
            )?;
    }
    session::log_out(session);
    Ok(())
}

#[derive(Serialize, utoipa::ToSchema)]
struct SessionBody<'a> {
    user: &'a SessionUser,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct JsonCredentials {
    username: String,
    password: String,
}

documented_answers!(LoginAnswers: AuthError[BadCredentials, Throttled, HashingBusy]);

/// Log in: sets the session cookie the rest of the API uses.
#[utoipa::path(post, path = "/api/v1/session", tag = "session", request_body = JsonCredentials,
    responses((status = 200, body = SessionBody), LoginAnswers))]
async fn login_json(
    req: HttpRequest,
    body: web::Json<JsonCredentials>,
    session: Session,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let body = body.into_inner();
    let address = ClientAddress::of_request(&req, &state.config.trusted_proxies);
    let (user, attempt) = check_credentials(&state, address, body.username, body.password).await?;
    let logged_in = start_session(&state, &session, user, attempt).await?;
    Ok(HttpResponse::Ok().json(SessionBody { user: &logged_in }))
}

documented_answers!(WhoAmIAnswers: AuthError[NotLoggedIn]);

/// Who is logged in.
#[utoipa::path(get, path = "/api/v1/session", tag = "session",
    responses((status = 200, body = SessionBody), WhoAmIAnswers))]
async fn whoami(user: SessionUser) -> impl Responder {
    HttpResponse::Ok().json(SessionBody { user: &user })
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct LogoutQuery {
    /// `true`: end every session of this user, in every browser, not only this one.
    everywhere: Option<bool>,
}

documented_answers!(LogoutAnswers: AuthError[LogoutFailed]);

/// Log out: this session, or with `?everywhere=true` every session of the user. Takes effect on
/// the next request of each, on every instance.
#[utoipa::path(delete, path = "/api/v1/session", tag = "session", params(LogoutQuery),
    responses((status = 204), LogoutAnswers))]
async fn logout_json(
    query: web::Query<LogoutQuery>,
    session: Session,
    state: web::Data<AppState>,
) -> Result<HttpResponse, AuthError> {
    end_session(&state, &session, query.everywhere.unwrap_or(false)).await?;
    Ok(HttpResponse::NoContent().finish())
}

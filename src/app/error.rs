//! Failures as a browser meets them: the HTML error page, in the reader's language, for any
//! error that `crate::wire::error` answers in JSON to a request a browser made. Handlers never
//! decide between the two.

use actix_web::body::{BoxBody, EitherBody};
use actix_web::dev::ServiceResponse;
use actix_web::http::{StatusCode, header};
use actix_web::middleware::ErrorHandlerResponse;
use actix_web::{HttpRequest, HttpResponse};
use askama::Template;

use crate::i18n::Lang;
pub use crate::wire::error::*;

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    ctx: super::PageContext,
    status: u16,
    heading: std::borrow::Cow<'static, str>,
    message: &'a str,
    /// The page the request came from, to go back to (a form's page keeps what was typed when
    /// the browser goes back in its history; reloading it would not).
    back: Option<&'a str>,
    /// Set on 401: the login page, returning to where the user was.
    login: Option<String>,
    retry_after: Option<String>,
}

/// What a person reads as the heading of a refusal, by status: plain words, not the protocol's.
fn heading(status: StatusCode, lang: Lang) -> std::borrow::Cow<'static, str> {
    lang.t(match status.as_u16() {
        400 | 422 => "error.400",
        401 => "error.401",
        403 => "error.403",
        404 => "error.404",
        405 => "error.405",
        409 => "error.409",
        412 => "error.412",
        413 => "error.413",
        415 => "error.415",
        423 => "error.423",
        428 => "error.428",
        429 => "error.429",
        503 => "error.503",
        s if s >= 500 => "error.500",
        _ => "error.409",
    })
}

/// A JSON error whose message has words ([`Problem::words`]), said in the reader's language
/// (picked, or asked for with `Accept-Language`); `error` and every other field stay as they are.
fn in_readers_language<B: 'static>(res: ServiceResponse<B>) -> ServiceResponse<EitherBody<B>> {
    use actix_session::SessionExt;
    let lang = Lang::of(res.request(), &res.request().get_session());
    let translated = res
        .response()
        .extensions()
        .get::<Problem>()
        .filter(|p| lang != Lang::En && p.words.is_some())
        .map(|p| Problem { message: p.message_in(lang), ..p.clone() });
    let Some(problem) = translated else { return res.map_into_left_body() };
    let Ok(body) = serde_json::to_string(&problem) else { return res.map_into_left_body() };
    let (req, old) = res.into_parts();
    let mut answer = HttpResponse::build(old.status());
    for (name, value) in old.headers() {
        if name != header::CONTENT_LENGTH {
            answer.append_header((name.clone(), value.clone()));
        }
    }
    ServiceResponse::new(req, answer.body(body)).map_into_right_body()
}

/// `ErrorHandlers` default handler: browser requests get an HTML page in the site's layout
/// (or, for a page that needs a login, a redirect to the login page); API requests keep their
/// JSON.
pub fn render_html_errors<B: 'static>(res: ServiceResponse<B>) -> actix_web::Result<ErrorHandlerResponse<B>> {
    let already_html = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    if already_html {
        return Ok(ErrorHandlerResponse::Response(res.map_into_left_body()));
    }
    if wants_json(res.request()) {
        return Ok(ErrorHandlerResponse::Response(in_readers_language(res)));
    }
    let status = res.status();
    let problem = res.response().extensions().get::<Problem>().cloned();
    let (req, old) = res.into_parts();

    if status == StatusCode::UNAUTHORIZED && req.method() == actix_web::http::Method::GET {
        let next = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
        let location = format!("/login?next={}", urlencode(next));
        let redirect = HttpResponse::SeeOther().insert_header((header::LOCATION, location)).finish();
        return Ok(ErrorHandlerResponse::Response(ServiceResponse::new(req, redirect).map_into_right_body()));
    }
    let retry_after = old.headers().get(header::RETRY_AFTER).cloned();
    Ok(ErrorHandlerResponse::Future(Box::pin(async move {
        let ctx = page_context(&req, status).await;
        let lang = ctx.lang;
        let message = problem.as_ref().map_or_else(
            || match status {
                StatusCode::NOT_FOUND => lang.t("error.not_found").into_owned(),
                StatusCode::PAYLOAD_TOO_LARGE => lang.t("error.too_large").into_owned(),
                StatusCode::METHOD_NOT_ALLOWED => lang.t("error.method").into_owned(),
                s if s.is_server_error() => Problem::internal().message_in(lang),
                _ => lang.t("error.other").into_owned(),
            },
            |p| p.message_in(lang),
        );
        let referer = req
            .headers()
            .get(header::REFERER)
            .and_then(|v| v.to_str().ok())
            .and_then(|r| local_path(&req, r));
        let login = (status == StatusCode::UNAUTHORIZED)
            .then(|| format!("/login?next={}", urlencode(referer.as_deref().unwrap_or("/"))));
        let page = ErrorPage {
            ctx,
            status: status.as_u16(),
            heading: heading(status, lang),
            message: &message,
            back: referer.as_deref(),
            login,
            retry_after: retry_after.as_ref().and_then(|v| v.to_str().ok()).map(str::to_string),
        };
        let mut builder = HttpResponse::build(status);
        if let Some(retry) = retry_after {
            builder.insert_header((header::RETRY_AFTER, retry));
        }
        let body: BoxBody = match page.render() {
            Ok(html) => BoxBody::new(html),
            Err(e) => {
                log::error!("rendering the error page failed: {e}");
                BoxBody::new(message)
            }
        };
        let response = builder.content_type("text/html; charset=utf-8").body(body);
        Ok(ServiceResponse::new(req, response).map_into_right_body())
    })))
}

/// The page context of a refused request, for the layout's menu. The user is looked up only
/// for a client error, and only if the handler did not already: a server error may be the
/// database failing, and its answer must stay quick.
async fn page_context(req: &HttpRequest, status: StatusCode) -> super::PageContext {
    use actix_session::SessionExt;
    use actix_web::{FromRequest, HttpMessage};
    let cached = req.extensions().get::<crate::auth::SessionUser>().cloned();
    let user = match cached {
        Some(user) => Some(user),
        None if status.is_client_error() && status != StatusCode::UNAUTHORIZED => {
            crate::auth::SessionUser::from_request(req, &mut actix_web::dev::Payload::None).await.ok()
        }
        None => None,
    };
    let csrf_token = crate::auth::csrf::token(&req.get_session()).unwrap_or_default();
    super::PageContext { user, ..super::PageContext::anonymous(req, csrf_token) }
}

/// The path of `referer` if it is one of this site's pages a person may be sent back to (the
/// same check as the login's `next`: no `//host`, no `..`, plain characters only), for a "back"
/// link.
fn local_path(req: &HttpRequest, referer: &str) -> Option<String> {
    let host = req.connection_info().host().to_string();
    let rest = referer.strip_prefix("http://").or_else(|| referer.strip_prefix("https://"))?;
    let path = rest.strip_prefix(host.as_str())?;
    super::is_return_page(path).then(|| path.to_string())
}

pub fn urlencode(text: &str) -> String {
    serde_urlencoded::to_string([("", text)]).map(|s| s[1..].to_string()).unwrap_or_default()
}

//! Errors as HTTP answers, in one place.
//!
//! Every feature has its own error enum of business answers, plus [`crate::infra::Infra`] for the
//! plumbing (pool, database, blocking pool, named lock), which maps itself. Each variant maps to
//! one [`Problem`]: a status, a stable machine code and a sentence for a person. The response is JSON
//! (`{"error": code, "message": …}`) and carries the `Problem` in its extensions; the
//! `web::error::render_html_errors` middleware turns it into an HTML page for requests made by a
//! browser, so handlers never decide between the two. A 5xx logs the whole cause chain and tells the
//! client nothing about it.

use actix_web::http::{StatusCode, header};
use actix_web::{HttpRequest, HttpResponse};
use serde::Serialize;

use super::answers::{Answer, Declared, answers};
use crate::i18n::Lang;

#[derive(Clone, Debug, Serialize)]
pub struct Problem {
    #[serde(skip)]
    pub status: StatusCode,
    pub error: &'static str,
    pub message: String,
    /// Seconds, sent as `Retry-After` (busy answers).
    #[serde(skip)]
    pub retry_after: Option<u32>,
    /// What ran out, for a 503 (`named_lock`, `row_lock`, `pool`, …): the `cause` label of
    /// `haita_unavailable_answers_total`. Not sent.
    #[serde(skip)]
    pub cause: &'static str,
    /// Machine-readable facts a client can act on (which product ran short, how many are left).
    #[serde(flatten)]
    pub details: serde_json::Map<String, serde_json::Value>,
    /// The message as a text of `src/i18n/texts.yml` and its values, for a page in the reader's
    /// language; `message` is its English.
    #[serde(skip)]
    pub words: Option<Box<Words>>,
}

/// A text of `src/i18n/texts.yml` and the values of its `%{name}`s.
pub type Words = (&'static str, Vec<(&'static str, String)>);

/// One invalid field of a form or JSON body, with the sentence a person reads: in English in
/// JSON, in the reader's language on a page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FieldError {
    pub field: &'static str,
    pub message: String,
    #[serde(skip)]
    pub words: Option<Box<Words>>,
}

impl FieldError {
    /// The field `field` is wrong as the text `key` says (with `args` filled in).
    pub fn said(field: &'static str, key: &'static str, args: &[(&'static str, String)]) -> Self {
        Self { field, message: Lang::En.t_with(key, args), words: Some(Box::new((key, args.to_vec()))) }
    }

    /// The sentence in `lang`.
    pub fn message_in(&self, lang: Lang) -> String {
        said_in(self.words.as_deref(), &self.message, lang)
    }
}

/// Words read both by a person on a page (in their language) and in a terminal or a log (in
/// English, which is how they display).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Said(pub Words);

impl Said {
    pub fn new(key: &'static str, args: &[(&'static str, String)]) -> Self {
        Self((key, args.to_vec()))
    }

    /// `answer`, saying these words.
    pub fn problem(&self, answer: Answer) -> Problem {
        answer.said(self.0.0, &self.0.1)
    }
}

impl std::fmt::Display for Said {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&Lang::En.t_with(self.0.0, &self.0.1))
    }
}

/// `words` said in `lang`, or `english` as it is when there are none.
fn said_in(words: Option<&Words>, english: &str, lang: Lang) -> String {
    match words {
        Some((key, args)) => lang.t_with(key, args),
        None => english.to_string(),
    }
}

impl Problem {
    pub fn new(status: StatusCode, error: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            error,
            message: message.into(),
            retry_after: None,
            cause: "",
            details: serde_json::Map::new(),
            words: None,
        }
    }

    /// A problem whose message is the text `key` (with `%{name}` filled in from `args`), so that
    /// a page says it in its reader's language; JSON carries the English.
    pub fn words(
        status: StatusCode,
        error: &'static str,
        key: &'static str,
        args: &[(&'static str, String)],
    ) -> Self {
        Self {
            words: Some(Box::new((key, args.to_vec()))),
            ..Self::new(status, error, Lang::En.t_with(key, args))
        }
    }

    /// The message in `lang`: its text when it has one, else the English.
    pub fn message_in(&self, lang: Lang) -> String {
        said_in(self.words.as_deref(), &self.message, lang)
    }

    /// Adds a field to the JSON body next to `error` and `message`.
    pub fn with(mut self, key: &str, value: impl Into<serde_json::Value>) -> Self {
        self.details.insert(key.to_string(), value.into());
        self
    }

    /// 503 `busy` with `Retry-After: 1`, saying the text `key`.
    pub fn busy(key: &'static str) -> Self {
        Self { retry_after: Some(1), cause: "other", ..Answer::BUSY.said(key, &[]) }
    }

    /// Names what ran out (see [`Problem::cause`]).
    pub fn because(self, cause: &'static str) -> Self {
        Self { cause, ..self }
    }

    /// The database cannot be reached right now; it usually comes back by itself.
    pub fn unavailable() -> Self {
        Self { retry_after: Some(2), cause: "database", ..Answer::UNAVAILABLE.said("error.unavailable", &[]) }
    }

    /// This instance is shutting down: the request was still waiting in memory for a lock, and
    /// nothing of it was done.
    pub fn draining() -> Self {
        Self { retry_after: Some(1), cause: "draining", ..Answer::DRAINING.said("error.draining", &[]) }
    }

    pub fn internal() -> Self {
        Answer::INTERNAL.said("error.internal", &[])
    }
}

/// The body of every error answer, as the OpenAPI document describes it. Some answers add
/// fields next to these two (which product ran short, the current representation, …).
#[derive(utoipa::ToSchema)]
#[expect(dead_code, reason = "documentation only: the body is built from a Problem")]
pub struct ErrorBody {
    /// Stable machine-readable code, e.g. `fully_booked`.
    error: String,
    /// A sentence for a person.
    message: String,
}

/// Implemented by every feature error; `http_error!` then derives `ResponseError` from it.
pub trait AsProblem: std::error::Error {
    fn problem(&self) -> Problem;
}

pub fn respond<E: AsProblem>(error: &E) -> HttpResponse {
    let problem = error.problem();
    if problem.status == StatusCode::SERVICE_UNAVAILABLE {
        crate::metrics::record(|m| {
            m.unavailable_answers.with_label_values(&[problem.error, problem.cause]).inc()
        });
    }
    if problem.status.is_server_error() {
        // A 503 with Retry-After is an expected answer under load or during an outage; a 500 is
        // a bug. Both keep their cause in the log and out of the response.
        match problem.retry_after {
            None => log::error!("{}", cause_chain(error)),
            Some(_) => log::warn!("{}: {}", problem.error, cause_chain(error)),
        }
    }
    let mut response = HttpResponse::build(problem.status);
    if let Some(secs) = problem.retry_after {
        response.insert_header((header::RETRY_AFTER, secs.to_string()));
    }
    let mut response = response.json(&problem);
    response.extensions_mut().insert(problem);
    response
}

fn cause_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `impl ResponseError` for a feature error through its [`AsProblem`] mapping.
macro_rules! http_error {
    ($error:ty) => {
        impl actix_web::ResponseError for $error {
            fn status_code(&self) -> actix_web::http::StatusCode {
                $crate::wire::error::AsProblem::problem(self).status
            }
            fn error_response(&self) -> actix_web::HttpResponse {
                $crate::wire::error::respond(self)
            }
        }
    };
}
pub(crate) use http_error;

/// Errors of the request itself, before any feature sees it: a body that is not what the
/// endpoint takes, a path or query that does not parse, an unknown route.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("malformed body: {0}")]
    MalformedBody(String),
    #[error("body too large (limit {0} bytes)")]
    TooLarge(usize),
    /// The body took longer than `REQUEST_BODY_TIMEOUT_SECS` (these seconds) to arrive.
    #[error("body not sent within {0} s")]
    SlowBody(u64),
    #[error("unsupported content type")]
    UnsupportedMediaType(&'static str),
    #[error("bad path: {0}")]
    BadPath(String),
    #[error("bad query: {0}")]
    BadQuery(String),
    #[error("not found")]
    NotFound,
    /// The path exists with other methods (listed, also in `Allow`).
    #[error("method not allowed")]
    MethodNotAllowed(String),
    #[error("internal error")]
    Internal(#[from] anyhow::Error),
}

answers! { RequestError {
    MalformedBody => BAD_REQUEST "malformed_body",
    TooLarge => PAYLOAD_TOO_LARGE "too_large",
    SlowBody => REQUEST_TIMEOUT "slow_body",
    UnsupportedMediaType => UNSUPPORTED_MEDIA_TYPE "unsupported_media_type",
    BadPath => NOT_FOUND "not_found",
    BadQuery => BAD_REQUEST "bad_query",
    NotFound => NOT_FOUND "not_found",
    MethodNotAllowed => METHOD_NOT_ALLOWED "method_not_allowed",
    Internal => INTERNAL_SERVER_ERROR "internal",
} }

impl AsProblem for RequestError {
    fn problem(&self) -> Problem {
        let answer = self.answer();
        match self {
            Self::MalformedBody(detail) => {
                answer.said("request.malformed_body", &[("detail", detail.clone())])
            }
            Self::TooLarge(limit) => answer.said("request.too_large", &[("limit", limit.to_string())]),
            Self::SlowBody(secs) => answer.said("request.slow_body", &[("seconds", secs.to_string())]),
            Self::UnsupportedMediaType(expected) => {
                answer.said("request.media_type", &[("expected", expected.to_string())])
            }
            Self::BadPath(detail) => answer.said("request.bad_path", &[("detail", plain_words(detail))]),
            Self::BadQuery(detail) => answer.said("request.bad_query", &[("detail", plain_words(detail))]),
            Self::NotFound => answer.said("error.not_found", &[]),
            Self::MethodNotAllowed(allowed) => answer.said("request.method", &[("allowed", allowed.clone())]),
            Self::Internal(_) => Problem::internal(),
        }
    }
}
http_error!(RequestError);

/// A deserialiser's complaint about a path or query, in words a person reads: no "deserialize
/// error", no Rust type names.
fn plain_words(detail: &str) -> String {
    let detail = detail
        .trim_start_matches("Path deserialize error: ")
        .trim_start_matches("Query deserialize error: ")
        .trim();
    let quoted = |text: &str| text.replace('`', "\"");
    if let Some(rest) = detail.strip_prefix("can not parse ") {
        let given = rest.split(" to a ").next().unwrap_or(rest);
        return format!("{given} is not a whole number");
    }
    if let Some(rest) = detail.strip_prefix("unknown field ") {
        let (field, known) = rest.split_once(", expected ").unwrap_or((rest, ""));
        let known = known.trim_start_matches("one of ");
        return if known.is_empty() {
            format!("{} is not something this page takes", quoted(field))
        } else {
            format!("{} is not something this page takes (it takes {})", quoted(field), quoted(known))
        };
    }
    if let Some(field) = detail.strip_prefix("missing field ") {
        return format!("{} is missing", quoted(field));
    }
    match detail {
        "invalid digit found in string" => "a whole number was expected".into(),
        "cannot parse integer from empty string" => "a number is missing".into(),
        "number too large to fit in target type" => "the number is too large".into(),
        "number too small to fit in target type" => "the number is too small".into(),
        other => quoted(other),
    }
}

/// The largest JSON or form body any endpoint accepts.
pub const BODY_LIMIT: usize = 16 * 1024;

/// JSON bodies up to `limit` bytes (most routes: [`BODY_LIMIT`]), with errors a person can read.
pub fn json_config(limit: usize) -> actix_web::web::JsonConfig {
    use actix_web::error::JsonPayloadError as E;
    actix_web::web::JsonConfig::default().limit(limit).error_handler(move |err, _req| {
        match err {
            E::OverflowKnownLength { .. } | E::Overflow { .. } => RequestError::TooLarge(limit),
            E::ContentType => RequestError::UnsupportedMediaType("application/json"),
            E::Deserialize(e) => RequestError::MalformedBody(e.to_string()),
            other => RequestError::MalformedBody(other.to_string()),
        }
        .into()
    })
}

pub fn path_config() -> actix_web::web::PathConfig {
    actix_web::web::PathConfig::default()
        .error_handler(|err, _req| RequestError::BadPath(err.to_string()).into())
}

pub fn query_config() -> actix_web::web::QueryConfig {
    actix_web::web::QueryConfig::default()
        .error_handler(|err, _req| RequestError::BadQuery(err.to_string()).into())
}

pub async fn not_found() -> Result<HttpResponse, RequestError> {
    Err(RequestError::NotFound)
}

/// Whether this request is answered in JSON (the API) or HTML (everything a browser navigates).
pub fn wants_json(req: &HttpRequest) -> bool {
    let path = req.path();
    path.starts_with("/api/") || path == "/health" || path == "/ready" || path == "/metrics"
}

impl From<actix_web::error::BlockingError> for RequestError {
    fn from(e: actix_web::error::BlockingError) -> Self {
        Self::Internal(anyhow::anyhow!("blocking task failed: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::plain_words;

    #[test]
    fn parser_complaints_are_put_in_plain_words() {
        assert_eq!(
            plain_words("Path deserialize error: can not parse \"abc\" to a i64"),
            "\"abc\" is not a whole number"
        );
        assert_eq!(
            plain_words("Query deserialize error: invalid digit found in string"),
            "a whole number was expected"
        );
        assert_eq!(
            plain_words("unknown field `colour`, expected `from` or `days`"),
            "\"colour\" is not something this page takes (it takes \"from\" or \"days\")"
        );
        assert_eq!(plain_words("missing field `date`"), "\"date\" is missing");
    }
}

//! The buyers' side of the counter: their requests to the instances, and what each answer
//! means to a buyer.
//!
//! One HTTP client (one connection pool) for all buyers; each request carries its buyer's
//! session cookie, as a browser would. Every order and hold is sent with an `Idempotency-Key`
//! of its own, so that a resend after a `503 busy` or a dropped connection takes effect once.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use reqwest::{Method, StatusCode, header};
use serde_json::{Value, json};

/// How long a buyer waits for one answer.
const ANSWER_WAIT: Duration = Duration::from_secs(30);
/// How long a buyer waits before resending after a failed connection or a `503` without
/// `Retry-After`.
const RESEND_AFTER: Duration = Duration::from_millis(200);

/// What an answer means to a buyer.
#[derive(Debug)]
pub enum Answer {
    /// 201 or 204: done; the body, if any.
    Done(Value),
    /// 409: refused, with the answer's `error` code (`insufficient_stock`, `hold_expired`, …).
    Refused(String),
    /// 503 or 429, or no answer at all: send the same request again after this long.
    Busy(Duration),
    /// Anything else: status and body, for the report. A 500 is a bug.
    Unexpected(String),
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Done(_) => write!(f, "done"),
            Self::Refused(code) => write!(f, "409 {code}"),
            Self::Busy(after) => write!(f, "busy, or no answer (again in {} ms)", after.as_millis()),
            Self::Unexpected(what) => write!(f, "{what}"),
        }
    }
}

/// A logged-in buyer: the instance they use and their session cookie (`name=value`).
pub struct Session {
    instance: usize,
    cookie: String,
}

pub struct Shop {
    http: reqwest::Client,
    bases: Vec<String>,
    /// Requests sent since the last [`Shop::take_count`].
    sent: AtomicU32,
}

impl Shop {
    pub fn new(bases: &[String]) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(ANSWER_WAIT)
            // actix closes a connection idle for 5 s (its keep-alive): let go of one sooner, so
            // no request is sent on a connection the server is closing.
            .pool_idle_timeout(Duration::from_secs(2))
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self { http, bases: bases.to_vec(), sent: AtomicU32::new(0) })
    }

    /// How many instances the buyers are spread over.
    pub fn instances(&self) -> usize {
        self.bases.len()
    }

    /// The requests sent since the last call.
    pub fn take_count(&self) -> u32 {
        self.sent.swap(0, Ordering::Relaxed)
    }

    /// Logs `username` in on `instance`, as the app's login form or API does for anyone.
    pub async fn log_in(&self, instance: usize, username: &str, password: &str) -> Result<Session, Answer> {
        let url = format!("{}/api/v1/session", self.bases[instance]);
        let request = self.http.post(url).json(&json!({"username": username, "password": password}));
        let response = request.send().await.map_err(|_| Answer::Busy(RESEND_AFTER))?;
        if response.status() != StatusCode::OK {
            return Err(answer(response).await);
        }
        let cookie = response
            .headers()
            .get(header::SET_COOKIE)
            .and_then(|set| set.to_str().ok()?.split(';').next().map(str::to_owned))
            .ok_or_else(|| Answer::Unexpected(format!("{username} logged in without a session cookie")))?;
        Ok(Session { instance, cookie })
    }

    /// `POST /api/v1/orders`: one unit of `product`.
    pub async fn order(&self, buyer: &Session, product: i64, key: &str) -> Answer {
        let body = json!({"lines": [{"product_id": product, "quantity": 1}]});
        self.send(buyer, Method::POST, "/api/v1/orders", Some(body), Some(key)).await
    }

    /// `POST /api/v1/holds`: one unit of `product` for `seconds`.
    pub async fn hold(&self, buyer: &Session, product: i64, seconds: u32, key: &str) -> Answer {
        let body = json!({"product_id": product, "quantity": 1, "seconds": seconds});
        self.send(buyer, Method::POST, "/api/v1/holds", Some(body), Some(key)).await
    }

    /// `POST /api/v1/holds/{id}/order`: the held unit, bought.
    pub async fn order_from_hold(&self, buyer: &Session, hold: i64, key: &str) -> Answer {
        self.send(buyer, Method::POST, &format!("/api/v1/holds/{hold}/order"), None, Some(key)).await
    }

    /// `DELETE /api/v1/holds/{id}`: the held unit, given back.
    pub async fn release(&self, buyer: &Session, hold: i64) -> Answer {
        self.send(buyer, Method::DELETE, &format!("/api/v1/holds/{hold}"), None, None).await
    }

    async fn send(
        &self,
        buyer: &Session,
        method: Method,
        path: &str,
        body: Option<Value>,
        key: Option<&str>,
    ) -> Answer {
        self.sent.fetch_add(1, Ordering::Relaxed);
        let url = format!("{}{path}", self.bases[buyer.instance]);
        let mut request = self
            .http
            .request(method, url)
            .header(header::COOKIE, &buyer.cookie)
            // The API takes writes only as JSON, a body-less one too (its CSRF defence).
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        if let Some(body) = body {
            request = request.body(body.to_string());
        }
        match request.send().await {
            Ok(response) => answer(response).await,
            Err(_) => Answer::Busy(RESEND_AFTER),
        }
    }
}

async fn answer(response: reqwest::Response) -> Answer {
    let status = response.status();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .map_or(RESEND_AFTER, Duration::from_secs);
    let text = response.text().await.unwrap_or_default();
    match status {
        StatusCode::CREATED | StatusCode::NO_CONTENT => {
            Answer::Done(serde_json::from_str(&text).unwrap_or(Value::Null))
        }
        StatusCode::CONFLICT => {
            let code = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|body| body["error"].as_str().map(str::to_owned))
                .unwrap_or_default();
            Answer::Refused(code)
        }
        // Busy, or a buyer's own limit (a hold again too soon after theirs ran out, too many
        // holds in a minute): either way, the same request again once Retry-After has passed.
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => Answer::Busy(retry_after),
        other => Answer::Unexpected(format!("{other} {}", text.chars().take(300).collect::<String>())),
    }
}

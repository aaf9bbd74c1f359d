//! A deadline on reading a request's body, so that a client sending it a byte at a time cannot
//! keep a connection (an open file, a worker's attention) for ever.
//!
//! actix-web bounds the time to send the *headers* (`client_request_timeout`, 5 s) but not the
//! body: a body announced as 100 bytes and sent one byte every eight seconds kept its connection
//! open for minutes, and a few hundred such connections used up the process's open files until
//! `/health` went unanswered. So every request's payload is read through [`Deadline`]: once the
//! body has taken longer than `REQUEST_BODY_TIMEOUT_SECS` from the end of the headers, the next
//! read fails, the handler's extractor gives up, and the answer is 408 `slow_body` with
//! `Connection: close`. A body that arrives in time is not touched; a request without one never
//! looks at the clock.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::HttpMessage;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::error::PayloadError;
use actix_web::http::ConnectionType;
use actix_web::middleware::Next;
use actix_web::rt::time::{Sleep, sleep};
use actix_web::web::{Bytes, Data};
use futures_core::Stream;

use super::error::RequestError;

/// `REQUEST_BODY_TIMEOUT_SECS`, as app data: the middleware reads it from there.
#[derive(Clone, Copy, Debug)]
pub struct BodyTimeout(pub Duration);

/// Middleware around every request: its payload is read under the [`BodyTimeout`], and a body
/// that missed it is answered 408 on a connection that is then closed.
pub async fn deadline<B: MessageBody>(
    mut req: ServiceRequest,
    next: Next<B>,
) -> Result<ServiceResponse<EitherBody<B>>, actix_web::Error> {
    let Some(BodyTimeout(limit)) = req.app_data::<Data<BodyTimeout>>().map(|t| *t.get_ref()) else {
        return Ok(next.call(req).await?.map_into_left_body());
    };
    let missed = Arc::new(AtomicBool::new(false));
    let payload = req.take_payload();
    let late = Deadline { inner: payload, timer: Box::pin(sleep(limit)), missed: Arc::clone(&missed) };
    req.set_payload(Payload::Stream { payload: Box::pin(late) });
    let answered = next.call(req).await;
    if !missed.load(Ordering::Acquire) {
        return Ok(answered?.map_into_left_body());
    }
    // Whatever the handler made of a body cut short, the answer is the deadline's.
    let secs = limit.as_secs().max(1);
    match answered {
        Ok(response) => {
            let (req, _) = response.into_parts();
            let mut refused = actix_web::ResponseError::error_response(&RequestError::SlowBody(secs));
            refused.head_mut().set_connection_type(ConnectionType::Close);
            Ok(ServiceResponse::new(req, refused).map_into_right_body())
        }
        Err(_) => Err(RequestError::SlowBody(secs).into()),
    }
}

/// A payload that fails once its timer has run out.
struct Deadline {
    inner: Payload,
    timer: Pin<Box<Sleep>>,
    missed: Arc<AtomicBool>,
}

impl Stream for Deadline {
    type Item = Result<Bytes, PayloadError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // The clock first: a body trickling in steadily is always ready with its next byte, and
        // would never let a timer polled only when nothing is ready run out.
        if self.timer.as_mut().poll(cx).is_ready() {
            self.missed.store(true, Ordering::Release);
            return Poll::Ready(Some(Err(PayloadError::Io(std::io::ErrorKind::TimedOut.into()))));
        }
        Pin::new(&mut self.inner).poll_next(cx)
    }
}

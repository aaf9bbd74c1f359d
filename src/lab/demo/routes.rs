//! HTTP for the demo: `/demo` (anyone may look, a logged-in user may run), the JSON API, and
//! `/api/v1/demo/bookings`, one booking by a correct strategy, which `haita bench` measures.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix_web::{HttpResponse, web};
use askama::Template;
use chrono::NaiveDate;
use diesel::prelude::*;
use serde::{Deserialize, Serialize};

use super::DemoError;
use super::race::{self, RaceReport, RaceSpec};
use super::strategies::{Answer, Attempt, Queue, Seen, Strategy, lock_name};
use crate::auth::SessionUser;
use crate::auth::csrf::CsrfForm;
use crate::infra::Infra;
use crate::lab::schema::demo_bookings;
use crate::web::error::ErrorBody;
use crate::web::input::{FIRST_DAY, LAST_DAY, parse_day, quoted};
use crate::web::{AppState, PageContext, blocking, html, see_other};

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(race_json, race_by_id_json, book_json),
    tags((name = "demo", description = "The double-booking race, strategy by strategy"))
)]
pub struct Api;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/demo", web::get().to(demo_page))
        .route("/demo/races", web::post().to(race_form))
        .route("/demo/code/{strategy}", web::get().to(code_page))
        .route("/api/v1/demo/races", web::post().to(race_json))
        .route("/api/v1/demo/races/{id}", web::get().to(race_by_id_json))
        .route("/api/v1/demo/bookings", web::post().to(book_json));
}

/// One race at a time per instance: a race opens up to `POOL_SIZE` extra connections and
/// hundreds of threads. Registered once per app in `Application::build`, shared by its workers.
#[derive(Default)]
pub struct RaceSlot {
    running: AtomicBool,
}

/// Proof that this request runs the instance's race; frees the slot when dropped, also when the
/// browser has gone away and the race finished without anyone waiting for it.
struct RaceTicket(web::Data<RaceSlot>);

impl RaceTicket {
    fn take(slot: &web::Data<RaceSlot>) -> Result<Self, DemoError> {
        slot.running
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| Self(slot.clone()))
            .map_err(|_| DemoError::RaceRunning)
    }
}

impl Drop for RaceTicket {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::Release);
    }
}

async fn run_race(
    state: &AppState,
    slot: &web::Data<RaceSlot>,
    user: &SessionUser,
    spec: RaceSpec,
) -> Result<RaceReport, DemoError> {
    let ticket = RaceTicket::take(slot)?;
    let (pool, config, who) = (state.pool.clone(), state.config.clone(), user.username.clone());
    blocking(move || {
        if let Some(left) = race::cooldown_left(&mut *pool.get()?, &who)? {
            return Err(DemoError::CoolingDown(left.as_secs().max(1)));
        }
        let report = race::run(&pool, &config, &spec, &who);
        drop(ticket);
        report
    })
    .await
}

// ---- HTML -------------------------------------------------------------------------------

struct StrategyInfo {
    name: &'static str,
    lines: [&'static str; 2],
    correct: bool,
}

/// One bar of the chart, geometry computed here so the template stays declarative.
struct Bar {
    label: &'static str,
    y: u32,
    ok_width: u32,
    beyond_x: u32,
    beyond_width: u32,
    bookings: String,
    p50_width: u32,
    p99_width: u32,
    latency: String,
}

#[derive(Template)]
#[template(path = "demo/page.html")]
struct DemoPage {
    ctx: PageContext,
    strategies: Vec<StrategyInfo>,
    report: Option<RaceReport>,
    bars: Vec<Bar>,
    chart_height: u32,
    defaults: (u32, u32, u32),
    limits: (u32, u32, u32),
    time_cap_secs: u64,
}

const ROW: u32 = 30;
/// Where the booking bars start; the template draws the latency bars from x = 580 and their
/// numbers in a column at x = 770, so no label runs into the next panel.
const BOOKINGS_X: u32 = 200;
const BOOKINGS_WIDTH: f64 = 260.0;
const LATENCY_WIDTH: f64 = 180.0;

fn bars(report: &RaceReport) -> Vec<Bar> {
    let most_bookings = report.results.iter().map(|r| r.confirmed).max().unwrap_or(0).max(1) as f64;
    let slowest = report.results.iter().map(|r| r.p99_ms).fold(0.0_f64, f64::max).max(0.001);
    let scale = |value: f64, max: f64, width: f64| (value / max * width).round() as u32;
    report
        .results
        .iter()
        .zip(0..)
        .map(|(r, i)| {
            let within = (r.confirmed - r.double_bookings).max(0) as f64;
            let ok_width = scale(within, most_bookings, BOOKINGS_WIDTH);
            Bar {
                label: r.strategy.name(),
                y: 30 + i * ROW,
                ok_width,
                beyond_x: BOOKINGS_X + ok_width,
                beyond_width: scale(r.double_bookings as f64, most_bookings, BOOKINGS_WIDTH),
                bookings: if r.double_bookings > 0 {
                    format!("{} ({} double)", r.confirmed, r.double_bookings)
                } else {
                    r.confirmed.to_string()
                },
                p50_width: scale(r.p50_ms, slowest, LATENCY_WIDTH),
                p99_width: scale(r.p99_ms, slowest, LATENCY_WIDTH),
                latency: format!("{:.1} / {:.1} ms", r.p50_ms, r.p99_ms),
            }
        })
        .collect()
}

#[derive(Deserialize)]
struct RaceQuery {
    race: Option<i64>,
}

async fn demo_page(
    ctx: PageContext,
    query: web::Query<RaceQuery>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let (pool, id) = (state.pool.clone(), query.race);
    let report = blocking(move || race::load(&mut *pool.get()?, id)).await?;
    let bars = report.as_ref().map(bars).unwrap_or_default();
    let page = DemoPage {
        ctx,
        strategies: Strategy::ALL
            .map(|s| StrategyInfo { name: s.name(), lines: s.explanation(), correct: s.is_correct() })
            .into(),
        chart_height: 40 + ROW * u32::try_from(bars.len()).unwrap_or(0),
        bars,
        report,
        defaults: (race::DEFAULT_CLIENTS, race::DEFAULT_ATTEMPTS, race::DEFAULT_PAUSE_MS),
        limits: (race::MAX_CLIENTS, race::MAX_ATTEMPTS, race::MAX_PAUSE_MS),
        time_cap_secs: race::TIME_CAP.as_secs(),
    };
    Ok(html(&page)?)
}

/// The form sends one `strategy` field per ticked box, so it is read as pairs.
fn spec_from_form(fields: &[(String, String)]) -> Result<RaceSpec, DemoError> {
    let names: Vec<&str> = fields.iter().filter(|(k, _)| k == "strategy").map(|(_, v)| v.as_str()).collect();
    let number = |field: &'static str| -> Result<Option<u32>, DemoError> {
        match fields.iter().find(|(k, _)| k == field).map(|(_, v)| v.trim()) {
            None | Some("") => Ok(None),
            Some(text) => text.parse().map(Some).map_err(|_| DemoError::Invalid {
                field,
                message: format!("{:?} is not a whole number", text.chars().take(20).collect::<String>()),
            }),
        }
    };
    RaceSpec::parse(&names, number("clients")?, number("attempts")?, number("pause_ms")?)
}

async fn race_form(
    user: SessionUser,
    CsrfForm(fields): CsrfForm<Vec<(String, String)>>,
    state: web::Data<AppState>,
    slot: web::Data<RaceSlot>,
) -> actix_web::Result<HttpResponse> {
    let spec = spec_from_form(&fields)?;
    let report = run_race(&state, &slot, &user, spec).await?;
    Ok(see_other(&format!("/demo?race={}#results", report.id)))
}

#[derive(Template)]
#[template(path = "demo/code.html")]
struct CodePage {
    ctx: PageContext,
    strategy: Strategy,
    lines: [&'static str; 2],
    source: &'static str,
}

async fn code_page(ctx: PageContext, path: web::Path<String>) -> actix_web::Result<HttpResponse> {
    let strategy = Strategy::parse(&path).map_err(|_| crate::web::error::RequestError::NotFound)?;
    Ok(html(&CodePage { ctx, strategy, lines: strategy.explanation(), source: strategy.source() })?)
}

// ---- JSON -------------------------------------------------------------------------------

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
enum StrategyChoice {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct RaceRequest {
    strategy: StrategyChoice,
    #[schema(minimum = 1, maximum = 256)]
    clients: Option<u32>,
    #[schema(minimum = 1, maximum = 10000)]
    attempts: Option<u32>,
    #[schema(minimum = 0, maximum = 1000)]
    pause_ms: Option<u32>,
}

/// Run a race (login required; one at a time per instance). `strategy` is a name, a list of
/// names, or "all".
#[utoipa::path(post, path = "/api/v1/demo/races", tag = "demo", request_body = RaceRequest,
    responses((status = 201, description = "The report: per strategy attempts, confirmed, double bookings, busy \
                answers, deadlocks retried, leaked locks, p50/p99 and elapsed time; Location names it"),
              (status = 401, body = ErrorBody),
              (status = 409, description = "busy: a race is already running on this instance", body = ErrorBody),
              (status = 422, description = "unknown strategy, or a bound exceeded", body = ErrorBody)))]
async fn race_json(
    user: SessionUser,
    body: web::Json<RaceRequest>,
    state: web::Data<AppState>,
    slot: web::Data<RaceSlot>,
) -> Result<HttpResponse, DemoError> {
    let names: Vec<&str> = match &body.strategy {
        StrategyChoice::One(name) => vec![name.as_str()],
        StrategyChoice::Many(names) => names.iter().map(String::as_str).collect(),
    };
    let spec = RaceSpec::parse(&names, body.clients, body.attempts, body.pause_ms)?;
    let report = run_race(&state, &slot, &user, spec).await?;
    Ok(HttpResponse::Created()
        .insert_header(("Location", format!("/api/v1/demo/races/{}", report.id)))
        .json(report))
}

/// A stored race report.
#[utoipa::path(get, path = "/api/v1/demo/races/{id}", tag = "demo", params(("id" = i64, Path, minimum = 1, example = 1)),
    responses((status = 200, description = "The report, as POST returned it"), (status = 404, body = ErrorBody)))]
async fn race_by_id_json(
    path: web::Path<i64>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, DemoError> {
    let (pool, id) = (state.pool.clone(), path.into_inner());
    let report = blocking(move || race::load(&mut *pool.get()?, Some(id))).await?;
    Ok(HttpResponse::Ok().json(report))
}

/// How many bookings one demo resource may hold through the single-booking API. Races make demo
/// resources of their own and only the newest races' are kept, so with this bound the demo's
/// tables stay small however often the API is called.
pub const MAX_BOOKINGS_PER_DEMO_RESOURCE: i64 = 500;

/// The demo's operations that need no session (see `openapi::PUBLIC`): anyone may look at a race.
pub const PUBLIC: &[(&str, &str)] = &[("get", "/api/v1/demo/races/{id}")];

#[derive(Deserialize, utoipa::ToSchema)]
#[schema(as = DemoBookRequest)]
#[serde(deny_unknown_fields)]
struct BookRequest {
    strategy: String,
    #[schema(minimum = 1)]
    resource_id: i64,
    #[schema(format = Date)]
    date: String,
}

#[derive(Serialize)]
struct Booked {
    strategy: Strategy,
    resource_id: i64,
    date: NaiveDate,
    status: &'static str,
}

/// One booking of a demo resource by one of the correct strategies, on the app's own pool. The
/// unsafe ones are refused here: on the shared pool the pitfall would leak locks into it.
#[utoipa::path(post, path = "/api/v1/demo/bookings", tag = "demo", request_body = BookRequest,
    responses((status = 201, description = "Booked"),
              (status = 409, description = "fully_booked, or demo_resource_full", body = ErrorBody),
              (status = 422, description = "an unsafe strategy, or bad input", body = ErrorBody)))]
async fn book_json(
    user: SessionUser,
    body: web::Json<BookRequest>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, DemoError> {
    let strategy = Strategy::parse(&body.strategy)?;
    if strategy.race_only().is_some() {
        return Err(DemoError::RaceOnly(strategy));
    }
    if body.resource_id <= 0 {
        return Err(DemoError::Invalid { field: "resource_id", message: "must be a positive number".into() });
    }
    let day = parse_day(&body.date).ok_or_else(|| DemoError::Invalid {
        field: "date",
        message: format!(
            "{:?} is not a date between {FIRST_DAY} and {LAST_DAY}; use YYYY-MM-DD",
            quoted(&body.date)
        ),
    })?;
    let (pool, lock_wait, resource_id) = (state.pool.clone(), state.config.lock_wait, body.resource_id);
    let client = i32::try_from(user.id).unwrap_or(i32::MAX);
    // The day's turn is awaited here, in memory, before a blocking thread or a connection is taken.
    let turn = match strategy {
        Strategy::NamedLock => Some(state.turn(lock_name(pool.names(), resource_id, day)).await?),
        _ => None,
    };
    let answer = blocking(move || {
        // Checked before the booking, outside its lock: concurrent requests may pass it together
        // and overshoot by at most the number of requests in flight, which still bounds the table.
        let held: i64 = demo_bookings::table
            .filter(demo_bookings::demo_resource_id.eq(resource_id))
            .count()
            .get_result(&mut *pool.get()?)
            .map_err(Infra::from)?;
        if held >= MAX_BOOKINGS_PER_DEMO_RESOURCE {
            return Err(DemoError::DemoResourceFull(resource_id));
        }
        let queue = Queue::Taken(turn);
        let attempt =
            Attempt { pool: &pool, resource_id, day, client, pause: Duration::ZERO, lock_wait, queue };
        strategy.book(attempt, &mut Seen::default())
    })
    .await?;
    match answer {
        Answer::Confirmed => {
            Ok(HttpResponse::Created().json(Booked { strategy, resource_id, date: day, status: "confirmed" }))
        }
        Answer::Full => Err(DemoError::FullyBooked),
    }
}

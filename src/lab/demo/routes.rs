//! HTTP for the demo: `/demo` (anyone may look and watch the standard race; a logged-in user
//! chooses what to race; below it the flash sale's row, whose form `crate::lab::flash::routes`
//! serves), `/demo/races/live` (the running race as server-sent events), the JSON API, and
//! `/api/v1/demo/bookings`, one booking by a correct strategy, which `haita bench` measures.

use std::time::Duration;

use actix_web::http::header;
use actix_web::web::Bytes;
use actix_web::{HttpResponse, web};
use askama::Template;
use chrono::NaiveDate;
use diesel::prelude::*;
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use super::DemoError;
use super::live::{self, Live, RaceBoard};
use super::race::{self, RaceReport, RaceSpec};
use super::strategies::{Answer, Attempt, Queue, Seen, Strategy, lock_name};
use crate::app::{AppState, PageContext, html, see_other};
use crate::auth::SessionUser;
use crate::auth::csrf::CsrfForm;
use crate::db::Engine;
use crate::i18n::Lang;
use crate::infra::Infra;
use crate::lab::locks::OutsideLocks;
use crate::lab::schema::demo_bookings;
use crate::wire::answers::documented_answers;
use crate::wire::client_address::ClientAddress;
use crate::wire::error::{AsProblem, Problem};
use crate::wire::input::{FIRST_DAY, LAST_DAY, parse_day, quoted};

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(race_json, live_json, race_by_id_json, book_json),
    tags((name = "demo", description = "The double-booking race, strategy by strategy"))
)]
pub struct Api;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/demo", web::get().to(demo_page))
        .route("/demo/races", web::post().to(race_form))
        .route("/demo/races/live", web::get().to(live_events))
        .route("/static/race_live.js", web::get().to(live_script))
        .route("/demo/code/{strategy}", web::get().to(code_page))
        .route("/demo/docs/{name}", web::get().to(doc_page))
        .route("/api/v1/demo/races", web::post().to(race_json))
        .route("/api/v1/demo/races/live", web::get().to(live_json))
        .route("/api/v1/demo/races/{id}", web::get().to(race_by_id_json))
        .route("/api/v1/demo/bookings", web::post().to(book_json))
        .configure(crate::lab::flash::routes::configure);
}

/// Who a race started from the page without logging in is recorded as (and cooled down as):
/// in `DEMO_MODE` a first visitor may watch the standard race before making an account.
const VISITOR: &str = "a visitor";

/// Starts a race of `spec` for `who` on a blocking thread, once the user's cooldown and the
/// cluster's race slot allow it. Await the handle for the report, or drop it: the race runs to
/// its end either way and frees the slot when it does.
///
/// Every race waits its client address's cooldown on this instance (`bounds.address_cooldown`:
/// a visitor's, [`race::VISITOR_COOLDOWN`], for visitors and demo accounts), checked first so
/// that the longer wait is the one told; then `who`'s own [`race::COOLDOWN`] (all visitors
/// together, as "a visitor", share one).
async fn start_race(
    state: &AppState,
    board: &web::Data<RaceBoard>,
    outside: &web::Data<OutsideLocks>,
    who: String,
    spec: RaceSpec,
    (address, bounds): (Option<ClientAddress>, race::Bounds),
) -> Result<JoinHandle<Result<RaceReport, DemoError>>, DemoError> {
    if let Some(left) =
        address.and_then(|address| board.address_cooldown_left(address, bounds.address_cooldown))
    {
        return Err(DemoError::CoolingDown(left.as_secs().max(1)));
    }
    let asked_for = who.clone();
    if let Some(left) =
        state.off_executor.with_conn(move |conn| race::cooldown_left(conn, &asked_for)).await?
    {
        return Err(DemoError::CoolingDown(left.as_secs().max(1)));
    }
    let ticket = RaceBoard::take(state, board, &spec, &who, address).await?;
    let (door, config, outside) = (state.off_executor.clone(), state.config.clone(), outside.clone());
    Ok(actix_web::rt::spawn(async move {
        door.with_pool(move |pool| {
            let report =
                race::run(pool, &config, &outside, &spec, &who, &|progress| ticket.progress(progress));
            ticket.end(&report);
            Ok::<_, Infra>(report)
        })
        .await
        .map_err(DemoError::from)
        .and_then(|report| report)
    }))
}

// ---- HTML -------------------------------------------------------------------------------

struct StrategyInfo {
    name: &'static str,
    lines: [String; 2],
    correct: bool,
    /// Why this server cannot run it, in the reader's language; its box cannot be ticked.
    unavailable: Option<String>,
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
    /// The race in progress on any instance, if any, and how the last one ended.
    live: Live,
    form: RaceForm,
    /// Why the form's race was not started, said above the form.
    refused: Option<String>,
    /// The flash sale running now and the latest one (`crate::lab::flash`).
    flash: crate::lab::flash::Shown,
    /// Why the flash sale was not started, said above its button.
    flash_refused: Option<String>,
    limits: (u32, u32, u32),
    time_cap_secs: u64,
}

impl DemoPage {
    /// Who started a race or a sale, as the page says it: "a visitor" in the reader's language
    /// (it is stored as [`VISITOR`]), anyone else by their username.
    fn who(&self, started_by: &str) -> String {
        if started_by == VISITOR {
            self.ctx.lang.t("demo.a_visitor").into_owned()
        } else {
            started_by.to_string()
        }
    }

    /// [`VISITOR`], for the live race's script to say it as [`Self::who`] does.
    fn visitor_name(&self) -> &'static str {
        VISITOR
    }
}

/// The race form as typed, kept when the race is refused so that nothing is typed twice.
struct RaceForm {
    strategies: Vec<String>,
    clients: String,
    attempts: String,
    pause_ms: String,
}

/// What the reader may ask a race of: a visitor's, a demo account's (a visitor's too) or an
/// account's.
fn bounds_of(ctx: &PageContext) -> race::Bounds {
    ctx.user.as_ref().map_or(race::Bounds::VISITOR, |user| race::Bounds::of_account(user.is_demo))
}

impl RaceForm {
    /// The form as first shown: the defaults within what the reader may ask for, every strategy
    /// the server can run ticked.
    fn defaults(bounds: race::Bounds, engine: Engine) -> Self {
        Self {
            strategies: Strategy::available_on(engine).iter().map(|s| s.name().to_string()).collect(),
            clients: race::DEFAULT_CLIENTS.min(bounds.max_clients).to_string(),
            attempts: race::DEFAULT_ATTEMPTS.min(bounds.max_attempts).to_string(),
            pause_ms: race::DEFAULT_PAUSE_MS.min(bounds.max_pause_ms).to_string(),
        }
    }

    fn typed(fields: &[(String, String)]) -> Self {
        let field = |name: &str| -> String {
            fields
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.chars().take(20).collect())
                .unwrap_or_default()
        };
        Self {
            strategies: fields.iter().filter(|(k, _)| k == "strategy").map(|(_, v)| v.clone()).collect(),
            clients: field("clients"),
            attempts: field("attempts"),
            pause_ms: field("pause_ms"),
        }
    }

    fn ticks(&self, name: &str) -> bool {
        self.strategies.iter().any(|s| s == name)
    }
}

const ROW: u32 = 30;
/// Where the booking bars start; the template draws the latency bars from x = 580 and their
/// numbers in a column at x = 770, so no label runs into the next panel.
const BOOKINGS_X: u32 = 200;
const BOOKINGS_WIDTH: f64 = 260.0;
const LATENCY_WIDTH: f64 = 180.0;

fn bars(report: &RaceReport, lang: Lang) -> Vec<Bar> {
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
                    lang.t_with(
                        "demo.chart.double",
                        [("confirmed", r.confirmed.to_string()), ("double", r.double_bookings.to_string())],
                    )
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
    let form = RaceForm::defaults(bounds_of(&ctx), state.pool().engine());
    render_demo_page(ctx, &state, query.race, form, None).await
}

/// What the page says was refused: a race (above the race form) or a flash sale (above its
/// button).
enum Refused {
    Race(Problem),
    FlashSale(Problem),
}

/// The page again, saying why the flash sale was not started.
pub(crate) async fn page_refusing_flash_sale(
    ctx: PageContext,
    state: &AppState,
    refused: Problem,
) -> actix_web::Result<HttpResponse> {
    let form = RaceForm::defaults(bounds_of(&ctx), state.pool().engine());
    render_demo_page(ctx, state, None, form, Some(Refused::FlashSale(refused))).await
}

/// The page, with the race `race` (or the latest), and a refused race's form and reason.
async fn render_demo_page(
    ctx: PageContext,
    state: &AppState,
    race: Option<i64>,
    form: RaceForm,
    refused: Option<Refused>,
) -> actix_web::Result<HttpResponse> {
    let report = state.off_executor.with_conn(move |conn| race::load(conn, race)).await?;
    let live = state.off_executor.with_conn(live::now).await?;
    let flash = state.off_executor.with_conn(crate::lab::flash::latest).await?;
    let bars = report.as_ref().map(|r| bars(r, ctx.lang)).unwrap_or_default();
    let (lang, engine) = (ctx.lang, state.pool().engine());
    let bounds = bounds_of(&ctx);
    let page = DemoPage {
        ctx,
        strategies: Strategy::ALL
            .map(|s| StrategyInfo {
                name: s.name(),
                lines: s.explanation(lang, engine),
                correct: s.is_correct(),
                unavailable: s.unavailable_on(engine).map(|why| lang.t(why).into_owned()),
            })
            .into(),
        chart_height: 40 + ROW * u32::try_from(bars.len()).unwrap_or(0),
        bars,
        report,
        live,
        form,
        refused: match &refused {
            Some(Refused::Race(p)) => Some(p.message_in(lang)),
            _ => None,
        },
        flash,
        flash_refused: match &refused {
            Some(Refused::FlashSale(p)) => Some(p.message_in(lang)),
            _ => None,
        },
        limits: (bounds.max_clients, bounds.max_attempts, bounds.max_pause_ms),
        time_cap_secs: race::TIME_CAP.as_secs(),
    };
    let mut response = html(&page)?;
    if let Some(Refused::Race(problem) | Refused::FlashSale(problem)) = refused {
        *response.status_mut() = problem.status;
        if let Some(secs) = problem.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
        }
    }
    Ok(response)
}

/// The form sends one `strategy` field per ticked box, so it is read as pairs. A visitor's form
/// has no boxes: every strategy then.
fn spec_from_form(
    fields: &[(String, String)],
    bounds: &race::Bounds,
    engine: Engine,
) -> Result<RaceSpec, DemoError> {
    let mut names: Vec<&str> =
        fields.iter().filter(|(k, _)| k == "strategy").map(|(_, v)| v.as_str()).collect();
    if names.is_empty() && *bounds == race::Bounds::VISITOR {
        names.push("all");
    }
    let number = |field: &'static str| -> Result<Option<u32>, DemoError> {
        match fields.iter().find(|(k, _)| k == field).map(|(_, v)| v.trim()) {
            None | Some("") => Ok(None),
            Some(text) => text.parse().map(Some).map_err(|_| DemoError::Invalid {
                field,
                message: format!("{:?} is not a whole number", text.chars().take(20).collect::<String>()),
            }),
        }
    };
    RaceSpec::parse(&names, number("clients")?, number("attempts")?, number("pause_ms")?, bounds, engine)
}

/// Starts a race and sends the browser to watch it (`#live`). A logged-in user races what the
/// form asks; a visitor (the page offers them one button) a small race of every strategy
/// ([`race::Bounds::VISITOR`]: numbers beyond it are refused, whatever the request says), at most
/// once per [`race::VISITOR_COOLDOWN`] from one address; a demo account within a visitor's
/// bounds and cooldown. A race the form may not start (bad numbers, another race running, too
/// soon after the user's or the address's last one) is answered on the page itself, with the
/// form as typed.
async fn race_form(
    ctx: PageContext,
    req: actix_web::HttpRequest,
    CsrfForm(fields): CsrfForm<Vec<(String, String)>>,
    state: web::Data<AppState>,
    board: web::Data<RaceBoard>,
    outside: web::Data<OutsideLocks>,
) -> actix_web::Result<HttpResponse> {
    let engine = state.pool().engine();
    let address = ClientAddress::of_request(&req, &state.config.trusted_proxies);
    let (who, bounds) = match &ctx.user {
        Some(user) => (user.username.clone(), race::Bounds::of_account(user.is_demo)),
        None => (VISITOR.to_string(), race::Bounds::VISITOR),
    };
    let started = match spec_from_form(&fields, &bounds, engine) {
        Ok(spec) => start_race(&state, &board, &outside, who, spec, (address, bounds)).await,
        Err(invalid) => Err(invalid),
    };
    match started {
        Ok(_running) => Ok(see_other("/demo#live")),
        Err(
            refused @ (DemoError::Invalid { .. }
            | DemoError::Unavailable { .. }
            | DemoError::RaceRunning
            | DemoError::CoolingDown(_)),
        ) => {
            let form = if ctx.user.is_some() {
                RaceForm::typed(&fields)
            } else {
                RaceForm::defaults(bounds, engine)
            };
            let ctx = ctx.shown_as("/demo".into());
            render_demo_page(ctx, &state, None, form, Some(Refused::Race(refused.problem()))).await
        }
        Err(other) => Err(other.into()),
    }
}

/// The race in progress as server-sent events: the state now, then every change, for as long as
/// the page is open (with a comment line every [`STILL_HERE`], so that proxies keep the
/// connection). Each event's data is a [`Live`], the same JSON as `/api/v1/demo/races/live`.
/// The changes come from this instance's one reader of the race board (`live.rs`), whichever
/// instance runs the race; the first state is read here, after subscribing, so that no change
/// falls between the two, and a state is never sent twice or out of order.
async fn live_events(
    board: web::Data<RaceBoard>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, DemoError> {
    let states = RaceBoard::watch(&board, &state);
    let first = state.off_executor.with_conn(live::now).await?;
    let events = futures_util::stream::unfold(
        (states, Some(first), None::<u64>),
        |(mut states, first, mut sent)| async move {
            let live = match first {
                Some(live) => live,
                None => loop {
                    match tokio::time::timeout(STILL_HERE, states.changed()).await {
                        Ok(Ok(())) => {}
                        Ok(Err(_)) => return None, // the board is gone: the app is stopping
                        Err(_) => {
                            return Some((Ok(Bytes::from_static(b": still here\n\n")), (states, None, sent)));
                        }
                    }
                    let live = states.borrow_and_update().clone();
                    if sent.is_none_or(|seq| live.seq > seq) {
                        break live;
                    }
                },
            };
            sent = Some(live.seq);
            let data = serde_json::to_string(&live).map_err(actix_web::error::ErrorInternalServerError);
            Some((data.map(|json| Bytes::from(format!("data: {json}\n\n"))), (states, None, sent)))
        },
    );
    Ok(HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        // Compression would hold events back until a block fills.
        .insert_header((header::CONTENT_ENCODING, "identity"))
        .streaming(events))
}

/// How often an idle event stream says it is still there.
const STILL_HERE: Duration = Duration::from_secs(15);

/// The progress script of the page (`EventSource` on `/demo/races/live`).
async fn live_script() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "public, max-age=3600"))
        .body(include_str!("../../../static/race_live.js"))
}

#[derive(Template)]
#[template(path = "demo/code.html")]
struct CodePage {
    ctx: PageContext,
    strategy: Strategy,
    lines: [String; 2],
    source: &'static str,
}

async fn code_page(
    ctx: PageContext,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let strategy = Strategy::parse(&path).map_err(|_| crate::wire::error::RequestError::NotFound)?;
    let lines = strategy.explanation(ctx.lang, state.pool().engine());
    Ok(html(&CodePage { ctx, strategy, lines, source: strategy.source() })?)
}

#[derive(Template)]
#[template(path = "demo/doc.html")]
struct DocPage {
    ctx: PageContext,
    name: String,
    title: &'static str,
    /// The doc rendered to HTML by [`super::docs::rendered`].
    body: String,
}

impl DocPage {
    /// The file shown, as the repository names it.
    fn file(&self) -> String {
        match self.ctx.lang {
            Lang::En => format!("docs/{}", self.name),
            Lang::Ja => format!("docs/ja/{}", self.name),
        }
    }
}

/// A doc the demo names, from the copy compiled into this server (`super::docs`).
async fn doc_page(ctx: PageContext, path: web::Path<String>) -> actix_web::Result<HttpResponse> {
    let name = path.into_inner();
    let (title, body) =
        super::docs::doc(&name, ctx.lang).ok_or(crate::wire::error::RequestError::NotFound)?;
    Ok(html(&DocPage { ctx, name, title, body: super::docs::rendered(body) })?)
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

documented_answers!(RaceAnswers: DemoError[Invalid, Unavailable, RaceRunning, CoolingDown]);

/// Run a race (login required; one at a time across every instance on the database). `strategy` is a name, a list of
/// names, or "all" (every strategy this server can run: exclusion-constraint needs PostgreSQL).
#[utoipa::path(post, path = "/api/v1/demo/races", tag = "demo", request_body = RaceRequest,
    responses((status = 201, description = "The report: per strategy attempts, confirmed, double bookings, busy \
                answers, deadlocks retried, leaked locks, p50/p99 and elapsed time; Location names it"), RaceAnswers))]
async fn race_json(
    user: SessionUser,
    req: actix_web::HttpRequest,
    body: web::Json<RaceRequest>,
    state: web::Data<AppState>,
    board: web::Data<RaceBoard>,
    outside: web::Data<OutsideLocks>,
) -> Result<HttpResponse, DemoError> {
    let names: Vec<&str> = match &body.strategy {
        StrategyChoice::One(name) => vec![name.as_str()],
        StrategyChoice::Many(names) => names.iter().map(String::as_str).collect(),
    };
    let bounds = race::Bounds::of_account(user.is_demo);
    let spec =
        RaceSpec::parse(&names, body.clients, body.attempts, body.pause_ms, &bounds, state.pool().engine())?;
    let address = ClientAddress::of_request(&req, &state.config.trusted_proxies);
    let running =
        start_race(&state, &board, &outside, user.username.clone(), spec, (address, bounds)).await?;
    let report = running.await.map_err(|e| anyhow::anyhow!("the race's thread failed: {e}"))??;
    Ok(HttpResponse::Created()
        .insert_header(("Location", format!("/api/v1/demo/races/{}", report.id)))
        .json(report))
}

/// The race in progress, on whichever instance runs it (how far each strategy has got: attempts,
/// bookings and double bookings so far, counted in the database), and how the last one ended.
/// `/demo/races/live` streams the same as server-sent events.
#[utoipa::path(get, path = "/api/v1/demo/races/live", tag = "demo",
    responses((status = 200, description = "`race`: the race running now or null, with `strategies` (`stage`: \
                waiting, running or done; `attempts`, `confirmed`, `double_bookings` so far); `finished`: \
                `{outcome: report, race_id}` or `{outcome: failed, message}` for the last race")))]
async fn live_json(state: web::Data<AppState>) -> Result<HttpResponse, DemoError> {
    Ok(HttpResponse::Ok().json(state.off_executor.with_conn(live::now).await?))
}

documented_answers!(RaceByIdAnswers: DemoError[RaceNotFound]);

/// A stored race report.
#[utoipa::path(get, path = "/api/v1/demo/races/{id}", tag = "demo", params(("id" = i64, Path, minimum = 1, example = 1)),
    responses((status = 200, description = "The report, as POST returned it"), RaceByIdAnswers))]
async fn race_by_id_json(
    path: web::Path<i64>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, DemoError> {
    let id = path.into_inner();
    let report = state.off_executor.with_conn(move |conn| race::load(conn, Some(id))).await?;
    Ok(HttpResponse::Ok().json(report))
}

/// How many bookings one demo resource may hold through the single-booking API. Races make demo
/// resources of their own and only the newest races' are kept, so with this bound the demo's
/// tables stay small however often the API is called.
pub const MAX_BOOKINGS_PER_DEMO_RESOURCE: i64 = 500;

/// The demo's operations that need no session (see `openapi::PUBLIC`): anyone may look at a race.
pub const PUBLIC: &[(&str, &str)] = &[("get", "/api/v1/demo/races/{id}"), ("get", "/api/v1/demo/races/live")];

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

documented_answers!(DemoBookAnswers:
    DemoError[Invalid, Unavailable, RaceOnly, FullyBooked, DemoResourceFull, UnknownDemoResource, FencedOff, Busy, Lease]);

/// One booking of a demo resource by one of the correct strategies, on the app's own pool. The
/// unsafe ones are refused here: on the shared pool the pitfall would leak locks into it.
#[utoipa::path(post, path = "/api/v1/demo/bookings", tag = "demo", request_body = BookRequest,
    responses((status = 201, description = "Booked"), DemoBookAnswers))]
async fn book_json(
    user: SessionUser,
    body: web::Json<BookRequest>,
    state: web::Data<AppState>,
    outside: web::Data<OutsideLocks>,
) -> Result<HttpResponse, DemoError> {
    let strategy = Strategy::parse(&body.strategy)?;
    if let Some(why) = strategy.unavailable_on(state.pool().engine()) {
        return Err(DemoError::Unavailable { strategy, why });
    }
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
    let (lock_wait, resource_id) = (state.config.lock_wait, body.resource_id);
    let client = i32::try_from(user.id).unwrap_or(i32::MAX);
    // The day's turn is awaited here, in memory, before a blocking thread or a connection is
    // taken: at most one request per day of this instance then goes on to ask for the lock.
    let turn = match strategy {
        Strategy::NamedLock | Strategy::RedisLock | Strategy::FileLock | Strategy::LockTable => {
            Some(state.turn(lock_name(state.pool().names(), resource_id, day)).await?)
        }
        _ => None,
    };
    let answer = state
        .off_executor
        .with_pool(move |pool| {
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
            let outside = &outside;
            let attempt = Attempt {
                pool,
                resource_id,
                day,
                nights: 1,
                client,
                pause: Duration::ZERO,
                lock_wait,
                queue,
                outside,
            };
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

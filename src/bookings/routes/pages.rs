//! The booking pages: a resource's days with the form of one day and the stay form (its nights
//! and price shown before it is booked, a refusal answered in place), and my bookings.

use actix_web::http::StatusCode;
use actix_web::{FromRequest, HttpRequest, HttpResponse, web};
use askama::Template;
use chrono::NaiveDate;
use serde::Deserialize;

use super::book;
use crate::app::{AppState, PageContext, html, see_other};
use crate::auth::SessionUser;
use crate::auth::csrf::{CsrfForm, TokenOnly};
use crate::auth::session::Claimed;
use crate::bookings::BookingError;
use crate::bookings::coalesce::Coalescer;
use crate::bookings::model::{BookingDate, Reservation, Stay};
use crate::bookings::service::{self, DayAvailability};
use crate::idempotency::IdempotencyKey;
use crate::resources::Resource;
use crate::wire::answers::Declared;
use crate::wire::error::AsProblem;
use crate::wire::input::{FIRST_DAY, LAST_DAY, parse_day, quoted};

#[derive(Deserialize)]
pub(super) struct FromQuery {
    pub(super) from: Option<String>,
    /// How many days (the API; the page shows `PAGE_DAYS`).
    pub(super) days: Option<u32>,
    /// `saved=1` after the resource's editor saved it (HTML only): a "saved" message.
    saved: Option<String>,
    /// A stay picked in the page's form (HTML only): its nights and price are shown.
    check_in: Option<String>,
    check_out: Option<String>,
}

impl FromQuery {
    /// The first day shown: `from` if given (any valid date, past included, for browsing),
    /// else today.
    pub(super) fn start(&self) -> Result<NaiveDate, BookingError> {
        match self.from.as_deref() {
            None | Some("") => Ok(service::today()),
            Some(text) => parse_day(text).ok_or_else(|| BookingError::InvalidDate(quoted(text))),
        }
    }

    /// The stay picked, as typed, when the stay form was sent.
    fn picked(&self) -> Option<Picked> {
        (self.check_in.is_some() || self.check_out.is_some()).then(|| Picked {
            check_in: self.check_in.clone().unwrap_or_default(),
            check_out: self.check_out.clone().unwrap_or_default(),
        })
    }
}

/// The check-in and check-out days of the page's stay form, as typed: shown back in the form,
/// and read as a [`Stay`].
#[derive(Clone, Debug, Default, Deserialize)]
struct Picked {
    check_in: String,
    check_out: String,
}

impl Picked {
    fn stay(&self) -> Result<Stay, BookingError> {
        Stay::parse(&self.check_in, &self.check_out, service::today())
    }

    /// This page again, showing the same stay (the login and language links come back to it).
    fn page(&self, resource_id: i64) -> String {
        let query =
            serde_urlencoded::to_string([("check_in", &self.check_in), ("check_out", &self.check_out)])
                .unwrap_or_default();
        format!("/resources/{resource_id}?{query}")
    }
}

#[derive(Template)]
#[template(path = "bookings/resource.html")]
struct ResourcePage {
    ctx: PageContext,
    resource: Resource,
    days: Vec<DayAvailability>,
    today: NaiveDate,
    /// The last day bookings are open for: later days are shown, not offered.
    last_day: NaiveDate,
    previous: NaiveDate,
    next: NaiveDate,
    saved: bool,
    refused: Option<Refused>,
    /// What the stay form holds: empty, or the stay picked.
    picked: Picked,
    /// The stay picked, with its nights and price, or why those dates are no stay.
    preview: Option<Result<Preview, String>>,
}

impl ResourcePage {
    /// Whether `day` is the one a booking was just refused for (its row is marked).
    fn refused_on(&self, day: &NaiveDate) -> bool {
        self.refused.as_ref().is_some_and(|r| r.night.as_ref() == Some(day))
    }

    /// Whether `day` is a night of the stay shown.
    fn in_stay(&self, day: &NaiveDate) -> bool {
        matches!(&self.preview, Some(Ok(p)) if p.stay.check_in() <= *day && *day < p.stay.check_out())
    }

    /// Whether some day shown is beyond the booking window: the page then says what the window is.
    fn shows_beyond_window(&self) -> bool {
        self.days.iter().any(|d| d.date > self.last_day)
    }

    /// The day bookings open for `day`: the window's length before it.
    fn opens_on(&self, day: &NaiveDate) -> NaiveDate {
        *day - chrono::Days::new(crate::bookings::model::HORIZON_DAYS.unsigned_abs())
    }

    /// The login page, coming back to this page and the stay it shows.
    fn log_in_to_book(&self) -> String {
        let next = self.picked.page(self.resource.id);
        format!("/login?{}", serde_urlencoded::to_string([("next", next)]).unwrap_or_default())
    }

    /// The earliest check-out day the form offers: the morning after tonight.
    fn first_check_out(&self) -> NaiveDate {
        self.today + chrono::Days::new(1)
    }

    /// The latest check-out day the form offers: the morning after the last bookable night.
    fn last_check_out(&self) -> NaiveDate {
        self.last_day + chrono::Days::new(1)
    }
}

/// A stay picked on the resource page, before it is booked: its nights, its price, and what
/// the page's snapshot of those nights says stands in the way (the sentence the booking itself
/// would answer). A snapshot, like the table: the booking decides under the nights' locks.
struct Preview {
    stay: Stay,
    night_price: i64,
    total: i64,
    blocked: Option<String>,
}

impl Preview {
    fn of(stay: Stay, resource: &Resource, days: &[DayAvailability], lang: crate::i18n::Lang) -> Self {
        let nights = days.iter().filter(|d| d.date >= stay.check_in() && d.date < stay.check_out());
        let blocked = nights
            .filter_map(|d| {
                if d.mine {
                    Some(BookingError::NightBooked { night: d.date })
                } else if let Some(reason) = &d.closed {
                    Some(BookingError::Closed { day: d.date, reason: reason.clone() })
                } else if d.available == 0 {
                    Some(BookingError::NightFull { night: d.date, capacity: d.capacity })
                } else {
                    None
                }
            })
            .map(|in_the_way| in_the_way.problem().message_in(lang))
            .next();
        Self {
            stay,
            night_price: resource.price_cents,
            total: resource.price_cents.saturating_mul(i64::from(stay.nights())),
            blocked,
        }
    }
}

pub(super) const PAGE_DAYS: u32 = 14;

pub(super) async fn resource_page(
    ctx: PageContext,
    path: web::Path<i64>,
    query: web::Query<FromQuery>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let picked = query.picked();
    // A stay picked is shown from its check-in day, all its nights in the table.
    let from = match picked.as_ref().map(Picked::stay) {
        Some(Ok(stay)) if query.from.is_none() => stay.check_in(),
        _ => query.start()?,
    };
    let shown = Shown { from, saved: query.saved.is_some(), refused: None, picked };
    render_resource_page(&state, ctx, path.into_inner(), shown).await
}

/// What the resource page shows besides the days.
struct Shown {
    from: NaiveDate,
    saved: bool,
    refused: Option<Refused>,
    picked: Option<Picked>,
}

/// A booking the page's form just sent and the day refused: said on the page the customer was
/// on, next to the night it is about, with the places as they are now.
pub(super) struct Refused {
    /// The booking's day, when it was one day: the sentence names it.
    pub day: Option<NaiveDate>,
    /// The night whose row is marked: the day's, or the night of a stay the refusal names.
    pub night: Option<NaiveDate>,
    pub message: String,
    status: StatusCode,
}

async fn render_resource_page(
    state: &AppState,
    ctx: PageContext,
    id: i64,
    shown: Shown,
) -> actix_web::Result<HttpResponse> {
    let Shown { from, saved, refused, picked } = shown;
    let viewer = ctx.user.as_ref().map(|u| u.id);
    let (resource, days) = state
        .off_executor
        .with_conn(move |conn| service::availability(conn, id, from, PAGE_DAYS, viewer))
        .await?;
    let step = chrono::Days::new(u64::from(PAGE_DAYS));
    let preview = picked.as_ref().map(|picked| {
        picked.stay().map(|stay| Preview::of(stay, &resource, &days, ctx.lang)).map_err(|no| no.problem())
    });
    // Dates that are no stay answer like a refused form: 422, the sentence in place.
    let status = match (&refused, &preview) {
        (Some(r), _) => r.status,
        (None, Some(Err(no))) => no.status,
        _ => StatusCode::OK,
    };
    let preview = preview.map(|p| p.map_err(|no| no.message_in(ctx.lang)));
    let mut response = html(&ResourcePage {
        ctx,
        resource,
        days,
        today: service::today(),
        last_day: crate::bookings::model::last_bookable_day(service::today()),
        saved,
        refused,
        picked: picked.unwrap_or_default(),
        preview,
        // Within chrono's range for any accepted `from`; clamped so the links stay accepted too.
        previous: (from - step).max(FIRST_DAY),
        next: (from + step).min(LAST_DAY),
    })?;
    *response.status_mut() = status;
    Ok(response)
}

#[derive(Deserialize)]
pub(super) struct BookForm {
    date: String,
    /// Fresh in every rendered form: a double submit or a resend after a lost answer books once.
    idempotency_key: Option<String>,
}

/// The booking form of one day. A booking the day refuses (taken, full, closed, not a bookable
/// date) answers in place: the resource page again, the message next to the day, the places as
/// they are now, with the refusal's status. Anything else (an ended session, a busy server) is
/// a page of its own.
pub(super) async fn book_form(
    claimed: Claimed,
    req: HttpRequest,
    path: web::Path<i64>,
    CsrfForm(form): CsrfForm<BookForm>,
    state: web::Data<AppState>,
    coalescer: web::Data<Coalescer>,
) -> actix_web::Result<HttpResponse> {
    let resource_id = path.into_inner();
    let booked = async {
        let date = BookingDate::parse(&form.date, service::today())?;
        let key = IdempotencyKey::from_form(form.idempotency_key.as_deref())?;
        book(&state, &coalescer, &claimed, resource_id, Stay::one_night(date), key).await
    };
    match booked.await {
        Ok(booked) => Ok(see_other(&format!("/bookings?booked={}", booked.id))),
        Err(refused) if refused.is_answered_in_place() => {
            let day = parse_day(form.date.trim());
            let from =
                day.filter(|day| *day >= service::today()).unwrap_or_else(service::today).min(LAST_DAY);
            let place =
                InPlace { resource_id, from, day, shown_as: format!("/resources/{resource_id}?from={from}") };
            answer_in_place(&state, &req, refused, place, None).await
        }
        Err(BookingError::UnknownResource(id)) => Err(BookingError::ResourceNotFound(id).into()),
        Err(other) => Err(other.into()),
    }
}

#[derive(Deserialize)]
pub(super) struct StayForm {
    check_in: String,
    check_out: String,
    idempotency_key: Option<String>,
}

/// The stay form, sent from a stay's preview on the resource page. Answered like the form of
/// one day: booked → my bookings; refused → the resource page again, from the check-in day,
/// the sentence naming the night in the way and that night's row marked.
pub(super) async fn book_stay_form(
    claimed: Claimed,
    req: HttpRequest,
    path: web::Path<i64>,
    CsrfForm(form): CsrfForm<StayForm>,
    state: web::Data<AppState>,
    coalescer: web::Data<Coalescer>,
) -> actix_web::Result<HttpResponse> {
    let resource_id = path.into_inner();
    let picked = Picked { check_in: form.check_in.clone(), check_out: form.check_out.clone() };
    let booked = async {
        let stay = picked.stay()?;
        let key = IdempotencyKey::from_form(form.idempotency_key.as_deref())?;
        book(&state, &coalescer, &claimed, resource_id, stay, key).await
    };
    match booked.await {
        Ok(booked) => Ok(see_other(&format!("/bookings?booked={}", booked.id))),
        Err(refused) if refused.is_answered_in_place() => {
            let from = picked.stay().map_or_else(|_| service::today(), Stay::check_in);
            let place = InPlace { resource_id, from, day: None, shown_as: picked.page(resource_id) };
            answer_in_place(&state, &req, refused, place, Some(picked)).await
        }
        Err(BookingError::UnknownResource(id)) => Err(BookingError::ResourceNotFound(id).into()),
        Err(other) => Err(other.into()),
    }
}

/// Where a refused form is answered: the resource page from `from`, standing for `shown_as`.
struct InPlace {
    resource_id: i64,
    from: NaiveDate,
    /// The day of a booking of one day, which the sentence names.
    day: Option<NaiveDate>,
    shown_as: String,
}

/// The resource page again, with the refusal in place and the places as they are now.
async fn answer_in_place(
    state: &AppState,
    req: &HttpRequest,
    refused: BookingError,
    place: InPlace,
    picked: Option<Picked>,
) -> actix_web::Result<HttpResponse> {
    // The page's context (who is logged in) only now: a booking that goes through costs no
    // session lookup beyond the one `Claimed` already made.
    let ctx = PageContext::extract(req).await?;
    let problem = refused.problem();
    let night = refused.night().or(place.day);
    let refused =
        Refused { day: place.day, night, message: problem.message_in(ctx.lang), status: problem.status };
    let ctx = ctx.shown_as(place.shown_as);
    let shown = Shown { from: place.from, saved: false, refused: Some(refused), picked };
    render_resource_page(state, ctx, place.resource_id, shown).await
}

#[derive(Template)]
#[template(path = "bookings/mine.html")]
struct MyBookingsPage {
    ctx: PageContext,
    bookings: Vec<(Reservation, String)>,
    just_booked: Option<i64>,
    just_cancelled: Option<i64>,
    today: NaiveDate,
}

#[derive(Deserialize)]
pub(super) struct BookedQuery {
    booked: Option<i64>,
    cancelled: Option<i64>,
}

pub(super) async fn my_bookings_page(
    user: SessionUser,
    ctx: PageContext,
    query: web::Query<BookedQuery>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let bookings = state.off_executor.with_conn(move |conn| service::my_reservations(conn, user.id)).await?;
    Ok(html(&MyBookingsPage {
        ctx,
        bookings,
        just_booked: query.booked,
        just_cancelled: query.cancelled,
        today: service::today(),
    })?)
}

pub(super) async fn cancel_form(
    user: SessionUser,
    path: web::Path<i64>,
    CsrfForm(_): CsrfForm<TokenOnly>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let id = path.into_inner();
    state.off_executor.with_conn(move |conn| service::cancel(conn, user.id, id)).await?;
    Ok(see_other(&format!("/bookings?cancelled={id}")))
}

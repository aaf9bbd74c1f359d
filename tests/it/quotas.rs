//! Per-user quotas: nobody holds every day of a resource, nobody orders without limit.
//!
//! The booking cap is a count over all of a user's days, while a booking locks only its own day:
//! requests of one user for different days run under different locks, at once. These tests send
//! them exactly so, and check the database afterwards.

use std::sync::Arc;

use diesel::prelude::*;
use haita::auth::Role;
use serde_json::{Value, json};
use tokio::sync::Barrier;

use crate::common::{Client, TestApp, TestDb, book_with_key, error_code, on_both_engines};

/// The cap the booking tests run with.
const CAP: u32 = 5;

on_both_engines!(
    one_user_booking_many_days_at_once_holds_exactly_the_cap,
    one_user_booking_many_days_at_once_holds_exactly_the_cap_on_postgres => many_days_at_once
);

on_both_engines!(
    one_user_booking_many_days_at_once_one_at_a_time_holds_exactly_the_cap,
    one_user_booking_many_days_at_once_one_at_a_time_holds_exactly_the_cap_on_postgres
        => many_days_at_once_uncoalesced
);

async fn many_days_at_once(db: TestDb) {
    cap_holds_under_a_burst(db, true).await;
}

/// Each booking alone under its day's lock (`BOOKING_COALESCING=0`): `service::book`'s path.
async fn many_days_at_once_uncoalesced(db: TestDb) {
    cap_holds_under_a_burst(db, false).await;
}

/// One user with a cap of 5 sends 15 bookings for 15 different days at once, on two instances:
/// five are confirmed, ten answered 409 `booking_quota`. One booking sent earlier with an
/// idempotency key is one of the five, and its resend still gets its 201.
async fn cap_holds_under_a_burst(db: TestDb, coalesce: bool) {
    let app = TestApp::spawn_on(db, 2, |c| {
        c.max_future_bookings = CAP;
        c.coalesce_bookings = coalesce;
    })
    .await;
    let resource = app.resource("Every day", 1);
    let user = app.user("hoarder", Role::Customer);
    let clients: Vec<Client> = (0..3 * CAP as usize).map(|i| app.client(i)).collect();
    futures::future::join_all(clients.iter().map(|c| c.login(&user))).await;
    let today = haita::bookings::service::today();
    let day = |n: u64| today + chrono::Days::new(n);

    let first = book_with_key(&clients[0], "first-of-five", resource, day(1)).await;
    assert_eq!(first.status(), 201, "the first booking");
    let first: Value = first.json().await.expect("json");

    let barrier = Arc::new(Barrier::new(clients.len()));
    let tasks = clients.iter().enumerate().map(|(i, client)| {
        let (barrier, http, url) = (barrier.clone(), client.http.clone(), client.url("/api/v1/reservations"));
        let date = day(2 + i as u64);
        actix_web::rt::spawn(async move {
            barrier.wait().await;
            let body = json!({"resource_id": resource, "date": date.to_string()});
            let response = http.post(url).json(&body).send().await.expect("POST");
            let status = response.status().as_u16();
            let code = if status == 201 { String::new() } else { error_code(response).await };
            (status, code)
        })
    });
    let answers: Vec<(u16, String)> =
        futures::future::join_all(tasks).await.into_iter().map(|r| r.expect("client task")).collect();

    let booked = answers.iter().filter(|(status, _)| *status == 201).count();
    assert_eq!(booked, CAP as usize - 1, "the cap less the earlier booking: {answers:?}");
    assert!(
        answers.iter().all(|a| a.0 == 201 || (a.0 == 409 && a.1 == "booking_quota")),
        "the others are refused for the quota: {answers:?}"
    );
    assert_eq!(future_bookings_of(&app.db, user.id), i64::from(CAP), "in the database");

    // The resend of an accepted booking gets its stored answer, not a quota refusal.
    let again = book_with_key(&clients[0], "first-of-five", resource, day(1)).await;
    assert_eq!(again.status(), 201, "the resend");
    let again: Value = again.json().await.expect("json");
    assert_eq!(again["id"], first["id"], "the same booking");

    // The form answers in place, with the sentence.
    let token = clients[1].csrf_token(&format!("/resources/{resource}")).await;
    let date = day(40).to_string();
    let form = [("csrf_token", token.as_str()), ("date", date.as_str())];
    let page = clients[1].post_form(&format!("/resources/{resource}/bookings"), &form).await;
    assert_eq!(page.status(), 409, "the form's refusal");
    let page = page.text().await.expect("page");
    assert!(
        page.contains(&format!("You already hold {CAP} future bookings"))
            && page.contains("cancel one first"),
        "the page says why and what to do: {page}"
    );
    assert_eq!(future_bookings_of(&app.db, user.id), i64::from(CAP), "nothing more booked");
}

/// The cap: MAX_ORDERS_PER_MINUTE_PER_USER in the order test.
const RATE: u32 = 3;

on_both_engines!(
    an_order_past_the_rate_is_refused_with_retry_after_and_a_resend_still_gets_its_201,
    an_order_past_the_rate_is_refused_with_retry_after_and_a_resend_still_gets_its_201_on_postgres
        => order_rate
);

/// Three quick orders are placed; the fourth is 429 `order_rate` with a Retry-After within the
/// minute; the resend of the first (same Idempotency-Key) still gets its 201.
async fn order_rate(db: TestDb) {
    let app = TestApp::spawn_on(db, 1, |c| c.max_orders_per_minute = RATE).await;
    let product = app.product("RATE-1", 100, 100);
    let user = app.user("quick", Role::Customer);
    let client = app.client(0);
    client.login(&user).await;

    let first = order_with_key(&client, "order-1", product).await;
    assert_eq!(first.status(), 201, "the first order");
    let first: Value = first.json().await.expect("json");
    for n in 2..=RATE {
        assert_eq!(client.order(&[(product, 1)]).await.status(), 201, "order {n}");
    }
    let refused = client.order(&[(product, 1)]).await;
    assert_eq!(refused.status(), 429, "one order past the rate");
    let retry_after: u32 = refused
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("Retry-After in seconds");
    assert!((1..=60).contains(&retry_after), "within the minute: {retry_after}");
    let body: Value = refused.json().await.expect("json");
    assert_eq!(body["error"], "order_rate", "{body}");
    assert!(body["message"].as_str().is_some_and(|m| m.contains("try again in")), "{body}");
    assert_eq!(orders_of(&app.db, user.id), i64::from(RATE), "in the database");

    let again = order_with_key(&client, "order-1", product).await;
    assert_eq!(again.status(), 201, "the resend of an accepted order");
    let again: Value = again.json().await.expect("json");
    assert_eq!(again["id"], first["id"], "the same order");
    assert_eq!(orders_of(&app.db, user.id), i64::from(RATE), "nothing more placed");
}

async fn order_with_key(client: &Client, key: &str, product: i64) -> reqwest::Response {
    client
        .http
        .post(client.url("/api/v1/orders"))
        .header("Idempotency-Key", key)
        .json(&json!({"lines": [{"product_id": product, "quantity": 1}]}))
        .send()
        .await
        .expect("POST")
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

fn future_bookings_of(db: &TestDb, user_id: i64) -> i64 {
    haita::db::cached_sql::<diesel::sql_types::Untyped>(
        "SELECT COUNT(*) AS n FROM reservations WHERE user_id = ? AND status = 'confirmed'",
    )
    .bind::<diesel::sql_types::BigInt, _>(user_id)
    .get_result::<Count>(&mut db.raw_connection())
    .expect("count")
    .n
}

fn orders_of(db: &TestDb, user_id: i64) -> i64 {
    haita::db::cached_sql::<diesel::sql_types::Untyped>("SELECT COUNT(*) AS n FROM orders WHERE user_id = ?")
        .bind::<diesel::sql_types::BigInt, _>(user_id)
        .get_result::<Count>(&mut db.raw_connection())
        .expect("count")
        .n
}

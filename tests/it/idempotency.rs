//! Idempotent retries: a request resent with the same `Idempotency-Key` gets the first answer
//! back and takes effect once — under concurrency, across instances, for HTML forms too.
//! Checked in the database afterwards.

use std::sync::Arc;

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Date};
use haita::auth::Role;
use serde_json::{Value, json};
use tokio::sync::Barrier;

use crate::common::{Client, TestApp, book_with_key, error_code, future_day, invariants};

/// The same logged-in session (one cookie jar) talking to instance `i % n`: a client whose
/// retries a load balancer spreads over the instances.
fn same_session_on(app: &TestApp, session: &Client, i: usize) -> Client {
    Client { http: session.http.clone(), base: app.addresses[i % app.addresses.len()].clone() }
}

/// `resenders` clients of one session, released together, each sending `send` `times` in a
/// row; every answer as (status, body).
async fn resend_all_at_once<F, Fut>(clients: Vec<Client>, times: usize, send: F) -> Vec<(u16, Value)>
where
    F: Fn(Client) -> Fut + Clone + 'static,
    Fut: std::future::Future<Output = reqwest::Response> + 'static,
{
    let barrier = Arc::new(Barrier::new(clients.len()));
    let tasks = clients.into_iter().map(|client| {
        let (barrier, send) = (barrier.clone(), send.clone());
        actix_web::rt::spawn(async move {
            barrier.wait().await;
            let mut answers = Vec::new();
            for _ in 0..times {
                let response = send(Client { http: client.http.clone(), base: client.base.clone() }).await;
                let status = response.status().as_u16();
                answers.push((status, response.json::<Value>().await.expect("JSON answer")));
            }
            answers
        })
    });
    futures::future::join_all(tasks).await.into_iter().flat_map(|r| r.expect("client task")).collect()
}

async fn order_with_key(client: &Client, key: &str, lines: &[(i64, i64)]) -> reqwest::Response {
    let lines: Vec<Value> = lines.iter().map(|(p, q)| json!({"product_id": p, "quantity": q})).collect();
    client
        .http
        .post(client.url("/api/v1/orders"))
        .header("Idempotency-Key", key)
        .json(&json!({ "lines": lines }))
        .send()
        .await
        .expect("POST")
}

fn bookings_of(app: &TestApp, user_id: i64, resource: i64, day: chrono::NaiveDate) -> i64 {
    haita::db::cached_sql::<diesel::sql_types::Untyped>(
        "SELECT COUNT(*) AS n FROM reservations WHERE user_id = ? AND resource_id = ? AND day = ?",
    )
    .bind::<BigInt, _>(user_id)
    .bind::<BigInt, _>(resource)
    .bind::<Date, _>(day)
    .get_result::<Count>(&mut app.db.raw_connection())
    .expect("count")
    .n
}

fn orders_of(app: &TestApp, user_id: i64) -> i64 {
    haita::db::cached_sql::<diesel::sql_types::Untyped>("SELECT COUNT(*) AS n FROM orders WHERE user_id = ?")
        .bind::<BigInt, _>(user_id)
        .get_result::<Count>(&mut app.db.raw_connection())
        .expect("count")
        .n
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// Every answer must be the first one, byte for byte: without the key, the resends would get
/// 409 `already_booked` (bookings) or place 199 more orders (orders).
fn all_the_same(answers: &[(u16, Value)]) -> (u16, Value) {
    let first = answers[0].clone();
    for answer in answers {
        assert_eq!(answer, &first, "a resend got another answer than the first");
    }
    first
}

#[actix_web::test]
async fn twenty_clients_resending_one_booking_ten_times_over_two_instances_book_once() {
    // Two instances take the resends; a third, unused until then, plays a restarted one.
    let app = TestApp::spawn_instances(3, |_| {}).await;
    let resource = app.resource("Retried room", 3);
    let user = app.user("retrier", Role::Customer);
    let session = app.client(0);
    session.login(&user).await;
    let day = future_day();

    let resenders = (0..20).map(|i| same_session_on(&app, &session, i % 2)).collect();
    let answers = resend_all_at_once(resenders, 10, move |client| async move {
        book_with_key(&client, "booking-7f3a", resource, day).await
    })
    .await;

    assert_eq!(answers.len(), 200);
    let (status, body) = all_the_same(&answers);
    assert_eq!(status, 201, "{body}");
    assert_eq!(bookings_of(&app, user.id, resource, day), 1);
    invariants::no_day_over_capacity(&app.db);
    invariants::no_named_lock_left_held(&app.db);

    // An instance that has seen none of it (as after a restart) answers the same.
    let replayed = book_with_key(&same_session_on(&app, &session, 2), "booking-7f3a", resource, day).await;
    assert_eq!(replayed.status(), 201);
    assert_eq!(replayed.json::<Value>().await.expect("json"), body);

    // The same key with another request is refused, and books nothing.
    let other_day = day.succ_opt().expect("a next day");
    let reused = book_with_key(&session, "booking-7f3a", resource, other_day).await;
    assert_eq!(reused.status(), 422);
    assert_eq!(error_code(reused).await, "idempotency_key_reused");
    assert_eq!(bookings_of(&app, user.id, resource, other_day), 0);
}

#[actix_web::test]
async fn twenty_clients_resending_one_order_ten_times_over_two_instances_order_once() {
    let app = TestApp::spawn_instances(2, |_| {}).await;
    let (tea, cups) = (app.product("TEA-1", 450, 500), app.product("CUP-1", 900, 500));
    let user = app.user("reorderer", Role::Customer);
    let session = app.client(0);
    session.login(&user).await;

    let resenders = (0..20).map(|i| same_session_on(&app, &session, i)).collect();
    let answers = resend_all_at_once(resenders, 10, move |client| async move {
        order_with_key(&client, "order-51c2", &[(tea, 2), (cups, 1)]).await
    })
    .await;

    let (status, body) = all_the_same(&answers);
    assert_eq!(status, 201, "{body}");
    assert_eq!(orders_of(&app, user.id), 1);
    assert_eq!((invariants::on_hand(&app.db, tea), invariants::on_hand(&app.db, cups)), (498, 499));
    invariants::stock_matches_ledger(&app.db);
    invariants::orders_match_ledger(&app.db);

    // The same lines in another order and split differently are the same request.
    let same = order_with_key(&session, "order-51c2", &[(cups, 1), (tea, 1), (tea, 1)]).await;
    assert_eq!(same.status(), 201);
    assert_eq!(same.json::<Value>().await.expect("json"), body);
    // Another quantity is not.
    let reused = order_with_key(&session, "order-51c2", &[(tea, 3)]).await;
    assert_eq!(error_code(reused).await, "idempotency_key_reused");
    assert_eq!(orders_of(&app, user.id), 1);
}

#[actix_web::test]
async fn a_refusal_is_replayed_as_it_was_and_an_expired_key_runs_again() {
    let app = TestApp::spawn().await;
    let product = app.product("LAST-1", 1200, 1);
    let user = app.user("latecomer", Role::Customer);
    let session = app.client(0);
    session.login(&user).await;

    let refused = order_with_key(&session, "order-too-many", &[(product, 2)]).await;
    assert_eq!(refused.status(), 409);
    let first: Value = refused.json().await.expect("json");
    assert_eq!(first["error"], "insufficient_stock");
    // Stock arrives, but the key's answer was given: a resend is told the same.
    haita::db::cached_sql::<diesel::sql_types::Untyped>(
        "UPDATE stock_levels SET on_hand = 10 WHERE product_id = ?",
    )
    .bind::<BigInt, _>(product)
    .execute(&mut app.db.raw_connection())
    .expect("restock");
    let resent = order_with_key(&session, "order-too-many", &[(product, 2)]).await;
    assert_eq!(resent.status(), 409);
    assert_eq!(resent.json::<Value>().await.expect("json"), first);
    assert_eq!(orders_of(&app, user.id), 0);

    // Once the key has expired it is free again, even for another request.
    haita::db::cached_sql::<()>(haita::db::Sql::per_engine(
        "UPDATE idempotency_keys SET expires_at = created_at - INTERVAL 1 SECOND",
        "UPDATE idempotency_keys SET expires_at = created_at - INTERVAL '1 second'",
    ))
    .execute(&mut app.db.raw_connection())
    .expect("expire");
    let again = order_with_key(&session, "order-too-many", &[(product, 3)]).await;
    assert_eq!(again.status(), 201);
    assert_eq!(orders_of(&app, user.id), 1);

    // A malformed key is a 400 and changes nothing.
    let bad = order_with_key(&session, "with space", &[(product, 1)]).await;
    assert_eq!(bad.status(), 400);
    assert_eq!(error_code(bad).await, "bad_idempotency_key");
    assert_eq!(orders_of(&app, user.id), 1);
}

/// The forms carry a fresh key in a hidden field: a double submit books once, and both submits
/// land on the same confirmation.
#[actix_web::test]
async fn a_booking_form_submitted_twice_books_once() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Double-clicked room", 3);
    let user = app.user("clicker", Role::Customer);
    let session = app.client(0);
    session.login(&user).await;
    let day = future_day();

    let page = session.get(&format!("/resources/{resource}")).await.text().await.expect("page");
    let field = |name: &str| {
        let marker = format!("name=\"{name}\" value=\"");
        let start =
            page.find(&marker).unwrap_or_else(|| panic!("the page has a {name} field")) + marker.len();
        page[start..].split('"').next().expect("value").to_string()
    };
    let (token, key) = (field("csrf_token"), field("idempotency_key"));
    let form =
        [("csrf_token", token.as_str()), ("date", &day.to_string()), ("idempotency_key", key.as_str())];
    let path = format!("/resources/{resource}/bookings");
    let (first, second) = (session.post_form(&path, &form).await, session.post_form(&path, &form).await);
    assert_eq!((first.status().as_u16(), second.status().as_u16()), (303, 303));
    assert_eq!(first.headers().get("location"), second.headers().get("location"));
    assert_eq!(bookings_of(&app, user.id, resource, day), 1);

    // A new page brings a new key: the next submit is a new request (and this user has the day).
    let fresh = session.get(&format!("/resources/{resource}")).await.text().await.expect("page");
    assert!(!fresh.contains(&key), "a rendered form reused a key");
}

#[actix_web::test]
async fn expired_keys_are_purged_and_live_ones_kept() {
    let app = TestApp::spawn().await;
    let product = app.product("KEPT-1", 100, 50);
    let user = app.user("purged", Role::Customer);
    let session = app.client(0);
    session.login(&user).await;
    for key in ["old-1", "old-2", "live-1"] {
        assert_eq!(order_with_key(&session, key, &[(product, 1)]).await.status(), 201);
    }
    haita::db::cached_sql::<diesel::sql_types::Untyped>(
        "UPDATE idempotency_keys SET expires_at = created_at WHERE idempotency_key LIKE 'old-%'",
    )
    .execute(&mut app.db.raw_connection())
    .expect("expire");

    let purged = haita::idempotency::purge_expired(&mut app.db.raw_connection()).expect("purge");
    assert_eq!(purged, 2);
    let left: Vec<String> = haita::schema::idempotency_keys::table
        .select(haita::schema::idempotency_keys::idempotency_key)
        .load(&mut app.db.raw_connection())
        .expect("keys");
    assert_eq!(left, ["live-1"]);
    // The live key still replays; the orders themselves are not touched by the purge.
    assert_eq!(order_with_key(&session, "live-1", &[(product, 1)]).await.status(), 201);
    assert_eq!(orders_of(&app, user.id), 3);
}

//! Booking under concurrency, checked in the database afterwards.

use std::sync::Arc;
use std::time::Duration;

use diesel::prelude::*;
use haita::auth::Role;
use serde_json::Value;
use tokio::sync::Barrier;

mod browser;

use crate::common::{Client, TestApp, TestDb, error_code, future_day, invariants, on_both_engines};

/// Sends one booking per client, all released by a barrier at the same instant.
async fn book_all_at_once(
    clients: Vec<Client>,
    resource_id: i64,
    day: chrono::NaiveDate,
) -> Vec<(u16, String)> {
    let barrier = Arc::new(Barrier::new(clients.len()));
    let tasks = clients.into_iter().map(|client| {
        let barrier = barrier.clone();
        actix_web::rt::spawn(async move {
            barrier.wait().await;
            let response = client.book(resource_id, day).await;
            let status = response.status().as_u16();
            let code = if status == 201 { String::new() } else { error_code(response).await };
            (status, code)
        })
    });
    futures::future::join_all(tasks).await.into_iter().map(|r| r.expect("client task")).collect()
}

on_both_engines!(
    sixty_four_clients_on_two_instances_never_overbook_a_day,
    sixty_four_clients_on_two_instances_never_overbook_a_day_on_postgres => sixty_four_clients_book_one_day
);

on_both_engines!(
    sixty_four_clients_booking_one_at_a_time_never_overbook_a_day,
    sixty_four_clients_booking_one_at_a_time_never_overbook_a_day_on_postgres
        => sixty_four_clients_book_one_day_one_at_a_time
);

/// 64 clients on two instances book one day of a resource of capacity 3, all at once.
async fn sixty_four_clients_book_one_day(db: TestDb) {
    sixty_four_clients_on_two_instances(db, true).await;
}

/// The same race with each booking on its own, not coalesced into batches: every request takes
/// the day's lock for its own transaction (on PostgreSQL the transaction-scoped advisory lock).
async fn sixty_four_clients_book_one_day_one_at_a_time(db: TestDb) {
    sixty_four_clients_on_two_instances(db, false).await;
}

async fn sixty_four_clients_on_two_instances(db: TestDb, coalesce: bool) {
    let app = TestApp::spawn_on(db, 2, |c| c.coalesce_bookings = coalesce).await;
    let resource = app.resource("Lab bench", 3);
    let day = future_day();
    let users: Vec<_> = (0..64).map(|i| app.user(&format!("u{i:02}"), Role::Customer)).collect();
    let clients: Vec<Client> = (0..64).map(|i| app.client(i)).collect();
    futures::future::join_all(clients.iter().zip(&users).map(|(c, u)| c.login(u))).await;

    let answers = book_all_at_once(clients, resource, day).await;

    let created = answers.iter().filter(|(s, _)| *s == 201).count();
    assert_eq!(created, 3, "exactly capacity bookings succeed: {answers:?}");
    for (status, code) in &answers {
        assert!(
            (*status == 409 && code == "fully_booked")
                || (*status == 503 && code == "busy")
                || *status == 201,
            "unexpected answer {status} {code}"
        );
    }
    assert_eq!(invariants::confirmed_on(&app.db, resource, day), 3);
    invariants::no_day_over_capacity(&app.db);
    invariants::no_user_booked_twice(&app.db);
    invariants::no_named_lock_left_held(&app.db);
}

/// A booking checks its session in its own read of the day (no separate check before it): a
/// session ended elsewhere books nothing — alone, or inside a batch of live ones on a hot day —
/// and its answer drops the stale cookie. Every fourth of 32 clients is logged out in the
/// database after logging in; they all book one day at once, then a day each.
#[actix_web::test]
async fn a_booking_whose_session_has_ended_books_nothing_even_in_a_batch() {
    let app = TestApp::spawn_instances(2, |_| {}).await;
    let resource = app.resource("Meeting room", 40);
    let ended = |i: usize| i.is_multiple_of(4);
    let users: Vec<_> = (0..32).map(|i| app.user(&format!("s{i:02}"), Role::Customer)).collect();
    let clients: Vec<Client> = (0..32).map(|i| app.client(i)).collect();
    futures::future::join_all(clients.iter().zip(&users).map(|(c, u)| c.login(u))).await;
    let ended_ids: Vec<String> =
        users.iter().enumerate().filter(|(i, _)| ended(*i)).map(|(_, u)| u.id.to_string()).collect();
    haita::db::cached_sql::<diesel::sql_types::Untyped>(&format!(
        "DELETE FROM user_sessions WHERE user_id IN ({})",
        ended_ids.join(", ")
    ))
    .execute(&mut app.db.raw_connection())
    .expect("end sessions");

    let hot = future_day();
    // Round 0: everybody on the hot day (coalesced into batches); round 1: a day each.
    for round in 0..2 {
        let barrier = Arc::new(Barrier::new(clients.len()));
        let answers = futures::future::join_all(clients.iter().enumerate().map(|(i, client)| {
            let barrier = barrier.clone();
            let day = if round == 0 { hot } else { hot + chrono::Days::new(1 + i as u64) };
            async move {
                barrier.wait().await;
                let response = client.book(resource, day).await;
                let status = response.status().as_u16();
                let drops_cookie = response
                    .headers()
                    .get_all("set-cookie")
                    .iter()
                    .any(|c| c.to_str().is_ok_and(|c| c.contains("Max-Age=0")));
                let code = if status == 201 { String::new() } else { error_code(response).await };
                (status, code, drops_cookie)
            }
        }))
        .await;
        for (i, answer) in answers.iter().enumerate() {
            if ended(i) && round == 0 {
                assert_eq!(answer, &(401, "not_logged_in".into(), true), "client {i}, round {round}");
            } else if ended(i) {
                // The cookie went with the first refusal: no ticket, refused before any work.
                assert_eq!(answer, &(401, "not_logged_in".into(), false), "client {i}, round {round}");
            } else {
                assert_eq!(answer.0, 201, "client {i}, round {round}: {answer:?}");
            }
        }
    }
    let booked_by_ended: i64 = haita::db::cached_sql::<diesel::sql_types::Untyped>(&format!(
        "SELECT COUNT(*) AS n FROM reservations WHERE user_id IN ({})",
        ended_ids.join(", ")
    ))
    .get_result::<Count>(&mut app.db.raw_connection())
    .expect("count")
    .n;
    assert_eq!(booked_by_ended, 0);
    assert_eq!(invariants::confirmed_on(&app.db, resource, hot), 24, "every live session booked the hot day");
    invariants::no_day_over_capacity(&app.db);
    invariants::no_named_lock_left_held(&app.db);
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

#[actix_web::test]
async fn one_user_submitting_twenty_times_at_once_gets_one_booking() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Tennis court", 5);
    let day = future_day();
    let user = app.user("eager", Role::Customer);
    let client = app.client(0);
    client.login(&user).await;
    // Twenty requests carrying the same session cookie, like a double-clicking browser.
    let same_session: Vec<Client> =
        (0..20).map(|_| Client { http: client.http.clone(), base: client.base.clone() }).collect();

    let answers = book_all_at_once(same_session, resource, day).await;

    assert_eq!(answers.iter().filter(|(s, _)| *s == 201).count(), 1, "{answers:?}");
    assert!(
        answers
            .iter()
            .all(|(s, c)| *s == 201 || (*s == 409 && c == "already_booked") || (*s == 503 && c == "busy"))
    );
    assert_eq!(invariants::confirmed_users_on(&app.db, resource, day), vec![user.id]);
    invariants::no_user_booked_twice(&app.db);
    invariants::no_named_lock_left_held(&app.db);
}

#[actix_web::test]
async fn a_cancelled_place_can_be_booked_again() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Meeting room", 1);
    let day = future_day();
    let (alice, bob) = (app.client(0), app.client(0));
    alice.login(&app.user("alice", Role::Customer)).await;
    bob.login(&app.user("bob", Role::Customer)).await;

    let booked = alice.book(resource, day).await;
    assert_eq!(booked.status(), 201);
    assert!(booked.headers().contains_key("location"));
    let booked: Value = booked.json().await.expect("json");
    assert_eq!(booked["status"], "confirmed");
    assert_eq!(booked["date"], day.to_string());

    let refused = bob.book(resource, day).await;
    assert_eq!(refused.status(), 409);
    assert_eq!(error_code(refused).await, "fully_booked");

    // Bob cannot cancel Alice's booking, and cannot even learn that it exists.
    let id = booked["id"].as_i64().expect("id");
    let foreign = bob.send(reqwest::Method::DELETE, &format!("/api/v1/reservations/{id}")).await;
    assert_eq!(foreign.status(), 404);

    let cancelled = alice.send(reqwest::Method::DELETE, &format!("/api/v1/reservations/{id}")).await;
    assert_eq!(cancelled.status(), 200);
    let again = alice.send(reqwest::Method::DELETE, &format!("/api/v1/reservations/{id}")).await;
    assert_eq!(again.status(), 409);
    assert_eq!(error_code(again).await, "already_cancelled");

    assert_eq!(bob.book(resource, day).await.status(), 201);
    assert_eq!(invariants::confirmed_on(&app.db, resource, day), 1);
    invariants::no_day_over_capacity(&app.db);
}

#[actix_web::test]
async fn a_day_whose_lock_stays_held_answers_busy_and_other_days_still_book() {
    let app = TestApp::spawn_instances(1, |c| c.lock_wait = Duration::from_secs(1)).await;
    let resource = app.resource("Court", 2);
    let day = future_day();
    let client = app.client(0);
    client.login(&app.user("carol", Role::Customer)).await;

    // Another session (say a stuck batch job) holds this day's lock.
    let other = app.db.session_holding(&app.db.pool.names().booking(resource, day));

    let busy = client.book(resource, day).await;
    assert_eq!(busy.status(), 503);
    assert_eq!(busy.headers().get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
    assert_eq!(error_code(busy).await, "busy");
    assert_eq!(invariants::confirmed_on(&app.db, resource, day), 0, "a busy answer writes nothing");
    // Operators see it too: /metrics counts the timed-out GET_LOCK under its scope.
    let metrics = client.metrics().await;
    assert!(
        metrics.lines().any(|l| l.starts_with("haita_named_lock_acquisitions_total")
            && l.contains("outcome=\"timed_out\"")
            && l.contains("scope=\"book\"")),
        "{metrics}"
    );
    assert!(metrics.contains("haita_pool_connections"));

    // The lock is per day: the next day is not blocked.
    let next_day = day.succ_opt().expect("date");
    assert_eq!(client.book(resource, next_day).await.status(), 201);

    drop(other); // the holder's session ends, and its lock with it
    assert_eq!(client.book(resource, day).await.status(), 201);
    invariants::no_named_lock_left_held(&app.db);
}

#[actix_web::test]
async fn availability_shows_what_is_booked_and_by_whom() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Bench", 3);
    let day = future_day();
    let client = app.client(0);
    client.login(&app.user("dora", Role::Customer)).await;
    assert_eq!(client.book(resource, day).await.status(), 201);

    let path = format!("/api/v1/resources/{resource}/availability?from={day}&days=2");
    let body: Value = client.get(&path).await.json().await.expect("json");
    let days = body["days"].as_array().expect("days");
    assert_eq!(days.len(), 2);
    assert_eq!(days[0]["confirmed"], 1);
    assert_eq!(days[0]["available"], 2);
    assert_eq!(days[0]["mine"], true);
    assert_eq!(days[1]["confirmed"], 0);

    let anonymous: Value = app.client(0).get(&path).await.json().await.expect("json");
    assert_eq!(anonymous["days"][0]["mine"], false, "anonymous viewers see counts only");
}

#[actix_web::test]
async fn booking_and_cancelling_through_the_html_pages() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Studio <b>A</b>", 1);
    let day = future_day();
    app.user("erin", Role::Customer);
    let browser = app.client(0);

    // Not logged in: the booking page offers a login link, /bookings redirects to login.
    let page = browser.get(&format!("/resources/{resource}?from={day}")).await.text().await.expect("page");
    assert!(
        page.contains("Studio &#60;b&#62;A&#60;/b&#62;") || page.contains("Studio &lt;b&gt;A&lt;/b&gt;"),
        "escaped"
    );
    assert!(page.contains("Log in to book"));
    let redirect = browser.get("/bookings").await;
    assert_eq!(redirect.status(), 303);
    assert_eq!(redirect.headers()["location"], "/login?next=%2Fbookings");

    let token = browser.csrf_token("/login").await;
    let login = browser
        .post_form(
            "/login",
            &[
                ("csrf_token", &token),
                ("username", "erin"),
                ("password", crate::common::PASSWORD),
                ("next", "/bookings"),
            ],
        )
        .await;
    assert_eq!(login.status(), 303);
    assert_eq!(login.headers()["location"], "/bookings");

    let page_path = format!("/resources/{resource}?from={day}");
    let token = browser.csrf_token(&page_path).await;
    let booked = browser
        .post_form(
            &format!("/resources/{resource}/bookings"),
            &[("csrf_token", &token), ("date", &day.to_string())],
        )
        .await;
    assert_eq!(booked.status(), 303);
    let location = booked.headers()["location"].to_str().expect("location").to_string();
    assert!(location.starts_with("/bookings?booked="), "{location}");

    let mine = browser.get(&location).await.text().await.expect("page");
    assert!(mine.contains("Booked!") && mine.contains(&day.to_string()));
    let page = browser.get(&page_path).await.text().await.expect("page");
    assert!(page.contains("booked by you"));

    // Booking the same full day again shows an error page, not a crash.
    let full = browser
        .post_form(
            &format!("/resources/{resource}/bookings"),
            &[("csrf_token", &token), ("date", &day.to_string())],
        )
        .await;
    assert_eq!(full.status(), 409);
    let refusal = full.text().await.expect("page");
    assert!(refusal.contains("already booked"), "{refusal}");
    // Answered in place: the resource page again, still logged in, the message by the day.
    assert!(refusal.contains("Log out") && refusal.contains("id=\"refused\""), "{refusal}");
    assert!(refusal.contains("id=\"refused-day\"") && refusal.contains("booked by you"), "{refusal}");

    let id = location.trim_start_matches("/bookings?booked=");
    let cancelled = browser.post_form(&format!("/bookings/{id}/cancel"), &[("csrf_token", &token)]).await;
    assert_eq!(cancelled.status(), 303);
    let location = cancelled.headers()["location"].to_str().expect("location").to_string();
    assert_eq!(location, format!("/bookings?cancelled={id}"));
    let mine = browser.get(&location).await.text().await.expect("page");
    assert!(mine.contains("id=\"cancelled\"") && mine.contains(&day.to_string()), "confirmed: {mine}");
    assert_eq!(invariants::confirmed_on(&app.db, resource, day), 0);

    // The calendar offers only days bookings are open for: none past the horizon.
    let horizon = haita::bookings::service::today() + chrono::Days::new(365);
    let late =
        browser.get(&format!("/resources/{resource}?from={horizon}")).await.text().await.expect("page");
    assert_eq!(late.matches("aria-label=\"Book ").count(), 1, "only the horizon's own day is offered");
    assert!(late.contains("opens for booking on"));
}

fn page_path(resource: i64, day: chrono::NaiveDate) -> String {
    format!("/resources/{resource}?from={day}")
}

/// The refusals that remain pages of their own carry the site's layout and a way forward: a
/// login link when the session has ended, the way back to the page the form was on.
#[actix_web::test]
async fn error_pages_keep_the_layout_and_offer_a_way_forward() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Way forward room", 1);
    let day = future_day();
    let user = app.user("fay", Role::Customer);
    let tab = app.client(0);
    tab.login(&user).await;
    let page = format!("/resources/{resource}?from={day}");
    let token = tab.csrf_token(&page).await;

    // The "back" link only ever leads to a page of this site.
    let sneaky = tab.http.get(tab.url("/no/such/page")).header("referer", tab.url("//evil.example/x"));
    let shown = sneaky.send().await.expect("GET").text().await.expect("page");
    assert!(!shown.contains("evil.example") && !shown.contains("id=\"back\""), "{shown}");
    let honest = tab.http.get(tab.url("/no/such/page")).header("referer", tab.url(&page_path(resource, day)));
    let shown = honest.send().await.expect("GET").text().await.expect("page");
    assert!(shown.contains("id=\"back\""), "{shown}");

    // No parser wording reaches a person.
    let not_an_id = tab.get("/resources/abc").await;
    assert_eq!(not_an_id.status(), 404);
    let shown = not_an_id.text().await.expect("page");
    assert!(shown.contains("is not a whole number") && !shown.contains("deserialize"), "{shown}");

    let missing = tab.get("/no/such/page").await;
    assert_eq!(missing.status(), 404);
    let missing = missing.text().await.expect("page");
    assert!(
        missing.contains("Not found") && missing.contains("fay"),
        "the layout knows who is in: {missing}"
    );

    // Logged out in another tab: the form's booking answers 401 with a login link back here.
    let other_tab = crate::common::Client { http: tab.http.clone(), base: tab.base.clone() };
    let logout_token = other_tab.csrf_token("/").await;
    assert_eq!(other_tab.post_form("/logout", &[("csrf_token", &logout_token)]).await.status(), 303);
    let refused = tab
        .http
        .post(tab.url(&format!("/resources/{resource}/bookings")))
        .header("referer", tab.url(&page))
        .form(&[("csrf_token", token.as_str()), ("date", &day.to_string())])
        .send()
        .await
        .expect("POST");
    let status = refused.status().as_u16();
    let body = refused.text().await.expect("page");
    assert_eq!(status, 401, "{body}");
    if status == 401 {
        let login = format!("/login?next={}", haita::app::error::urlencode(&page));
        assert!(
            body.contains(&login.replace('&', "&#38;")) || body.contains(&login.replace('&', "&amp;")),
            "{body}"
        );
        assert!(body.contains("Please log in first"), "{body}");
    }
    assert_eq!(invariants::confirmed_on(&app.db, resource, day), 0);
}

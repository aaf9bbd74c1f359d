//! Stays of several nights (`bookings::stays`): every night under its day's lock, the locks
//! taken in ascending date order, checked in the database afterwards.

use std::sync::Arc;
use std::time::Duration;

use chrono::NaiveDate;
use haita::auth::Role;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::sync::Barrier;

use crate::common::{Client, TestApp, TestDb, error_code, future_day, invariants, on_both_engines};

/// Books `resource` from `from` to `to` through the JSON API.
async fn book_stay(client: &Client, resource: i64, from: NaiveDate, to: NaiveDate) -> reqwest::Response {
    let body = json!({"resource_id": resource, "from": from.to_string(), "to": to.to_string()});
    client.post_json("/api/v1/reservations", &body).await
}

fn after(day: NaiveDate, days: u64) -> NaiveDate {
    day + chrono::Days::new(days)
}

/// The value of `name{labels…}` on one instance's `/metrics`, summed over its series.
async fn sample(client: &Client, name: &str, labels: &[&str]) -> f64 {
    let text = client.metrics().await;
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// 503 answers of both instances for a transaction that deadlocked (or waited out a row lock).
async fn deadlocks_answered(app: &TestApp) -> f64 {
    let mut answered = 0.0;
    for i in 0..app.addresses.len() {
        answered += sample(&app.client(i), "haita_unavailable_answers_total", &["cause=\"row_lock\""]).await;
    }
    answered
}

on_both_engines!(
    sixty_four_clients_on_two_instances_booking_overlapping_stays_never_overbook_a_night,
    sixty_four_clients_on_two_instances_booking_overlapping_stays_never_overbook_a_night_on_postgres
        => overlapping_stays_race
);

/// 64 clients on two instances, all at once, each book a stay of 1 to 7 nights starting on one
/// of ten days, on a resource with two places: every night is wanted by many stays, which share
/// nights with each other in every overlap there is. Stays of one night are bookings of one day
/// and go to the day's coalesced batch, so stays also meet batches of their days. Afterwards no
/// night holds more than two, nobody holds a night twice, every answer was booked, full or busy,
/// no deadlock reached a client (no 500, no 503 for a deadlocked transaction), and no named
/// lock is left held.
async fn overlapping_stays_race(db: TestDb) {
    let app = TestApp::spawn_on(db, 2, |_| {}).await;
    let resource = app.resource("Guest room", 2);
    let first = future_day();
    let seed: u64 = rand::random();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let stays: Vec<(NaiveDate, NaiveDate)> = (0..64)
        .map(|_| {
            let from = after(first, rng.random_range(0..10));
            (from, after(from, rng.random_range(1..=7)))
        })
        .collect();
    let users: Vec<_> = (0..64).map(|i| app.user(&format!("guest{i:02}"), Role::Customer)).collect();
    let clients: Vec<Client> = (0..64).map(|i| app.client(i)).collect();
    futures::future::join_all(clients.iter().zip(&users).map(|(c, u)| c.login(u))).await;

    let deadlocks_before = deadlocks_answered(&app).await;
    let barrier = Arc::new(Barrier::new(clients.len()));
    let tasks = clients.into_iter().zip(stays.clone()).map(|(client, (from, to))| {
        let barrier = barrier.clone();
        actix_web::rt::spawn(async move {
            barrier.wait().await;
            let response = book_stay(&client, resource, from, to).await;
            let status = response.status().as_u16();
            let code = if status == 201 { String::new() } else { error_code(response).await };
            (status, code)
        })
    });
    let answers: Vec<(u16, String)> =
        futures::future::join_all(tasks).await.into_iter().map(|r| r.expect("client task")).collect();

    let context = format!("seed {seed}, stays {stays:?}, answers {answers:?}");
    for (status, code) in &answers {
        assert!(
            matches!((*status, code.as_str()), (201, "") | (409, "fully_booked") | (503, "busy")),
            "unexpected answer {status} {code}: {context}"
        );
    }
    let booked = answers.iter().filter(|(status, _)| *status == 201).count();
    let full = answers.iter().filter(|(status, _)| *status == 409).count();
    assert!(booked >= 2 && full > 0, "some stays booked, some refused: {context}");
    // A deadlocked transaction that reached a client is answered 503 busy with the cause
    // `row_lock` (a named lock's wait that ran out is `named_lock`, the waiting budget spent
    // `lock_waiters`); on MySQL a deadlock of named locks is a failed GET_LOCK, a 500, which the
    // answers above exclude. (Sixty-four logins at once may meet one; they are counted before.)
    assert_eq!(deadlocks_answered(&app).await, deadlocks_before, "a deadlock reached a client: {context}");
    invariants::no_day_over_capacity(&app.db);
    invariants::no_user_booked_twice(&app.db);
    invariants::no_named_lock_left_held(&app.db);
    // Each night holds at most two; the stays booked fill some night completely.
    let busiest = (0..17).map(|d| invariants::confirmed_on(&app.db, resource, after(first, d))).max();
    assert_eq!(busiest, Some(2), "{context}");
}

on_both_engines!(
    a_stay_is_one_reservation_counted_on_every_night_and_cancelled_as_one,
    a_stay_is_one_reservation_counted_on_every_night_and_cancelled_as_one_on_postgres => one_reservation
);

/// One place, and a stay of three nights: each of its nights is full for everyone else — for a
/// booking of that day and for a stay that overlaps it, which is told the first night in the
/// way — and the stay's holder cannot book one of its nights again. Cancelled, the stay frees
/// all three at once.
async fn one_reservation(db: TestDb) {
    let app = TestApp::spawn_on(db, 1, |_| {}).await;
    let resource = app.resource("Guest room", 1);
    let (alice, bob) = (app.client(0), app.client(0));
    alice.login(&app.user("alice", Role::Customer)).await;
    bob.login(&app.user("bob", Role::Customer)).await;
    let check_in = future_day();
    let check_out = after(check_in, 3);

    let booked = book_stay(&alice, resource, check_in, check_out).await;
    assert_eq!(booked.status(), 201);
    let stay: Value = booked.json().await.expect("json");
    assert_eq!(
        (stay["date"].as_str(), stay["to"].as_str()),
        (Some(&*check_in.to_string()), Some(&*check_out.to_string()))
    );
    let id = stay["id"].as_i64().expect("id");

    let path = format!("/api/v1/resources/{resource}/availability?from={check_in}&days=4");
    let days: Value = alice.get(&path).await.json().await.expect("availability");
    let shown: Vec<(i64, bool)> = days["days"]
        .as_array()
        .expect("days")
        .iter()
        .map(|d| (d["confirmed"].as_i64().expect("confirmed"), d["mine"].as_bool().expect("mine")))
        .collect();
    assert_eq!(shown, [(1, true), (1, true), (1, true), (0, false)], "three nights, the check-out day free");

    let middle = after(check_in, 1);
    let day_refused = bob.book(resource, middle).await;
    assert_eq!(day_refused.status(), 409);
    assert_eq!(error_code(day_refused).await, "fully_booked");

    let overlapping = book_stay(&bob, resource, after(check_in, 2), after(check_in, 6)).await;
    assert_eq!(overlapping.status(), 409);
    let refused: Value = overlapping.json().await.expect("json");
    assert_eq!(refused["error"], "fully_booked");
    let last_night = after(check_in, 2).to_string();
    assert_eq!(refused["night"], last_night.as_str(), "the night in the way: {refused}");
    assert!(refused["message"].as_str().is_some_and(|m| m.contains(&last_night)), "{refused}");

    let again = book_stay(&alice, resource, middle, after(check_in, 5)).await;
    assert_eq!(again.status(), 409);
    let again: Value = again.json().await.expect("json");
    assert_eq!(
        (again["error"].as_str(), again["night"].as_str()),
        (Some("already_booked"), Some(&*middle.to_string()))
    );

    // The check-out day is no night of the stay: it can be booked by anyone.
    assert_eq!(bob.book(resource, check_out).await.status(), 201);

    let cancelled = alice.send(reqwest::Method::DELETE, &format!("/api/v1/reservations/{id}")).await;
    assert_eq!(cancelled.status(), 200);
    for night in 0..3 {
        assert_eq!(
            invariants::confirmed_on(&app.db, resource, after(check_in, night)),
            0,
            "night {night} freed"
        );
    }
    assert_eq!(book_stay(&bob, resource, after(check_in, 1), check_out).await.status(), 201);
    invariants::no_day_over_capacity(&app.db);
    invariants::no_user_booked_twice(&app.db);
}

on_both_engines!(
    a_stay_across_a_closed_day_is_refused_naming_it,
    a_stay_across_a_closed_day_is_refused_naming_it_on_postgres => across_a_closed_day
);

async fn across_a_closed_day(db: TestDb) {
    use diesel::prelude::*;
    use haita::schema::resource_closures as c;
    let app = TestApp::spawn_on(db, 1, |_| {}).await;
    let resource = app.resource("Guest room", 2);
    let staff = app.user("carol", Role::Staff);
    let client = app.client(0);
    client.login(&app.user("dora", Role::Customer)).await;
    let check_in = future_day();
    let closed = after(check_in, 2);
    diesel::insert_into(c::table)
        .values((
            c::resource_id.eq(resource),
            c::day.eq(closed),
            c::reason.eq("roof repairs"),
            c::bookings_at_close.eq(0),
            c::closed_by.eq(staff.id),
            c::closed_at.eq(chrono::Utc::now().naive_utc()),
        ))
        .execute(&mut app.db.raw_connection())
        .expect("close a day");

    let refused = book_stay(&client, resource, check_in, after(check_in, 4)).await;
    assert_eq!(refused.status(), 409);
    let body: Value = refused.json().await.expect("json");
    assert_eq!(body["error"], "closed");
    assert!(body["message"].as_str().is_some_and(|m| m.contains(&closed.to_string())), "{body}");
    assert_eq!(invariants::confirmed_on(&app.db, resource, check_in), 0, "no night booked");
    assert_eq!(book_stay(&client, resource, check_in, closed).await.status(), 201, "up to the closed day");
}

on_both_engines!(
    a_stay_whose_night_stays_locked_answers_busy_and_gives_back_the_nights_it_took,
    a_stay_whose_night_stays_locked_answers_busy_and_gives_back_the_nights_it_took_on_postgres
        => a_night_held_elsewhere
);

/// Another session holds the lock of the third night of a four-night stay. The stay takes the
/// first two, waits for the third within its one wait, answers 503 busy, and lets go of the two
/// it took: nights before the held one book at once. Once the holder is gone, the stay books.
async fn a_night_held_elsewhere(db: TestDb) {
    let app = TestApp::spawn_on(db, 1, |c| c.lock_wait = Duration::from_secs(1)).await;
    let resource = app.resource("Guest room", 2);
    let (guest, other) = (app.client(0), app.client(0));
    guest.login(&app.user("erin", Role::Customer)).await;
    other.login(&app.user("frank", Role::Customer)).await;
    let check_in = future_day();
    let holder = app.db.session_holding(&app.db.pool.names().booking(resource, after(check_in, 2)));

    let busy = book_stay(&guest, resource, check_in, after(check_in, 4)).await;
    assert_eq!(busy.status(), 503);
    assert_eq!(error_code(busy).await, "busy");
    let held = invariants::named_locks_held(&app.db);
    assert_eq!(
        held.len(),
        1,
        "only the holder's lock is left: {:?}",
        held.iter().map(|l| &l.name).collect::<Vec<_>>()
    );
    assert_eq!(invariants::confirmed_on(&app.db, resource, check_in), 0, "a busy stay books no night");
    assert_eq!(other.book(resource, check_in).await.status(), 201, "the first night is free to lock");

    drop(holder);
    assert_eq!(book_stay(&guest, resource, check_in, after(check_in, 4)).await.status(), 201);
    invariants::no_named_lock_left_held(&app.db);
    invariants::no_day_over_capacity(&app.db);
}

on_both_engines!(
    a_resent_stay_books_once_and_its_key_cannot_book_other_nights,
    a_resent_stay_books_once_and_its_key_cannot_book_other_nights_on_postgres => resent_stay
);

/// The idempotency key is bound to the whole request: a resend of the stay gets its first
/// answer back, and the same key sent for other nights is refused (422), booking nothing.
async fn resent_stay(db: TestDb) {
    let app = TestApp::spawn_on(db, 1, |_| {}).await;
    let resource = app.resource("Guest room", 2);
    let client = app.client(0);
    client.login(&app.user("gina", Role::Customer)).await;
    let check_in = future_day();
    let send = |to: NaiveDate| {
        let body = json!({"resource_id": resource, "from": check_in.to_string(), "to": to.to_string()});
        client
            .http
            .post(client.url("/api/v1/reservations"))
            .header("Idempotency-Key", "stay-1")
            .json(&body)
            .send()
    };
    let first = send(after(check_in, 3)).await.expect("POST");
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.expect("json");
    let resent = send(after(check_in, 3)).await.expect("POST");
    assert_eq!(resent.status(), 201);
    assert_eq!(resent.json::<Value>().await.expect("json")["id"], first["id"], "the first answer again");
    let other_nights = send(after(check_in, 5)).await.expect("POST");
    assert_eq!(other_nights.status(), 422);
    assert_eq!(error_code(other_nights).await, "idempotency_key_reused");
    assert_eq!(invariants::confirmed_on(&app.db, resource, after(check_in, 4)), 0, "nothing more booked");
    assert_eq!(invariants::confirmed_on(&app.db, resource, check_in), 1, "booked once");
}

on_both_engines!(
    stays_that_are_no_stay_are_refused_with_a_sentence,
    stays_that_are_no_stay_are_refused_with_a_sentence_on_postgres => not_a_stay
);

/// Dates that are no stay answer 422 with a sentence, and book nothing.
async fn not_a_stay(db: TestDb) {
    let app = TestApp::spawn_on(db, 1, |_| {}).await;
    let resource = app.resource("Guest room", 2);
    let client = app.client(0);
    client.login(&app.user("hana", Role::Customer)).await;
    let today = haita::bookings::service::today();
    let day = future_day();
    let last = haita::bookings::model::last_bookable_day(today);
    let cases: [(&str, Value, &str); 7] = [
        (
            "a check-out on the check-in day",
            json!({"from": day.to_string(), "to": after(day, 0).to_string()}),
            "invalid_stay",
        ),
        (
            "fifteen nights",
            json!({"from": day.to_string(), "to": after(day, 15).to_string()}),
            "invalid_stay",
        ),
        ("only a check-in", json!({"from": day.to_string()}), "invalid_stay"),
        (
            "a date and a stay",
            json!({"date": day.to_string(), "from": day.to_string(), "to": after(day, 2).to_string()}),
            "invalid_stay",
        ),
        (
            "a check-in in the past",
            json!({"from": today.pred_opt().expect("yesterday").to_string(), "to": after(today, 2).to_string()}),
            "past_date",
        ),
        (
            "a last night beyond the horizon",
            json!({"from": last.to_string(), "to": after(last, 2).to_string()}),
            "too_far_ahead",
        ),
        ("a check-out that is no date", json!({"from": day.to_string(), "to": "soon"}), "invalid_date"),
    ];
    for (what, mut body, code) in cases {
        body["resource_id"] = json!(resource);
        let answer = client.post_json("/api/v1/reservations", &body).await;
        assert_eq!(answer.status(), 422, "{what}");
        assert_eq!(error_code(answer).await, code, "{what}");
    }
    // The horizon's last night can be booked, its check-out the day after.
    let ends_on_the_last_night =
        book_stay(&client, resource, after(last, 0) - chrono::Days::new(1), after(last, 1)).await;
    assert_eq!(ends_on_the_last_night.status(), 201);
    assert_eq!(invariants::confirmed_on(&app.db, resource, day), 0, "nothing booked");
}

on_both_engines!(
    the_quota_counts_a_stays_nights,
    the_quota_counts_a_stays_nights_on_postgres => quota_in_nights
);

/// With at most five future nights per user, a stay of four leaves room for one: a stay of two
/// is refused, saying how many nights are held, a booking of one day still fits, and then
/// nothing does. Cancelled, the stay gives its four nights back.
async fn quota_in_nights(db: TestDb) {
    let app = TestApp::spawn_on(db, 1, |c| c.max_future_bookings = 5).await;
    let resource = app.resource("Guest room", 9);
    let client = app.client(0);
    client.login(&app.user("ines", Role::Customer)).await;
    let first = future_day();

    let four = book_stay(&client, resource, first, after(first, 4)).await;
    assert_eq!(four.status(), 201);
    let four: Value = four.json().await.expect("json");
    let two_more = book_stay(&client, resource, after(first, 5), after(first, 7)).await;
    assert_eq!(two_more.status(), 409);
    let refused: Value = two_more.json().await.expect("json");
    assert_eq!(
        (refused["error"].as_str(), refused["held"].as_i64()),
        (Some("booking_quota"), Some(4)),
        "{refused}"
    );
    assert!(refused["message"].as_str().is_some_and(|m| m.contains("2 more would pass 5")), "{refused}");
    assert_eq!(client.book(resource, after(first, 5)).await.status(), 201, "one night still fits");
    let full = client.book(resource, after(first, 6)).await;
    assert_eq!((full.status().as_u16(), error_code(full).await), (409, "booking_quota".to_string()));

    let id = four["id"].as_i64().expect("id");
    assert_eq!(
        client.send(reqwest::Method::DELETE, &format!("/api/v1/reservations/{id}")).await.status(),
        200
    );
    assert_eq!(book_stay(&client, resource, after(first, 6), after(first, 8)).await.status(), 201);
}

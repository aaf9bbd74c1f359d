//! Lock metrics an operator can read: per lock family, waits and holds, timeouts, busy answers
//! and pool checkouts, in `/metrics` and drawn on `/admin/metrics`.
//!
//! Each app instance has a registry of its own, so a test's counts are its own instance's; the
//! checks still read a series before and after the event they cause and assert that it grew.

use std::time::Duration;

use haita::auth::Role;

use crate::common::{Client, TestApp, future_day};

/// The value of the sample `name{labels…}` whose labels include every one of `labels`.
async fn sample(client: &Client, name: &str, labels: &[&str]) -> f64 {
    let text = client.metrics().await;
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The series the test below moves: waits and holds of the named booking lock and of the
/// orders' row locks, busy answers for a named lock, pool checkouts.
async fn readings(client: &Client) -> Vec<f64> {
    let series: [(&str, &[&str]); 6] = [
        ("haita_lock_wait_seconds_count", &["family=\"named\"", "scope=\"book\""]),
        ("haita_lock_hold_seconds_count", &["family=\"named\"", "scope=\"book\""]),
        ("haita_lock_hold_seconds_count", &["family=\"row\"", "scope=\"stock\""]),
        ("haita_lock_wait_seconds_count", &["family=\"row\"", "scope=\"stock\""]),
        ("haita_unavailable_answers_total", &["answer=\"busy\"", "cause=\"named_lock\""]),
        ("haita_pool_checkout_seconds_count", &[]),
    ];
    let mut values = Vec::new();
    for (name, labels) in series {
        values.push(sample(client, name, labels).await);
    }
    values
}

#[actix_web::test]
async fn waits_holds_busy_answers_and_checkouts_are_counted_per_lock_family() {
    let app = TestApp::spawn_instances(1, |c| c.lock_wait = Duration::from_secs(1)).await;
    let resource = app.resource("Measured room", 2);
    let product = app.product("MEASURED-1", 300, 10);
    let client = app.client(0);
    client.login(&app.user("measured", Role::Customer)).await;
    let before = readings(&client).await;

    // A booking (a named lock waited for and held), an order (row locks), and a day whose
    // lock another session holds (a wait that runs out: 503 busy).
    let day = future_day();
    let next_day = day.succ_opt().expect("day");
    assert_eq!(client.book(resource, day).await.status(), 201);
    assert_eq!(client.order(&[(product, 1)]).await.status(), 201);
    let _stuck = app.db.session_holding(&app.db.pool.names().booking(resource, next_day));
    assert_eq!(client.book(resource, next_day).await.status(), 503);

    let after = readings(&client).await;
    assert!(
        after[0] >= before[0] + 2.0,
        "two GET_LOCK waits (one granted, one timed out): {before:?} → {after:?}"
    );
    assert!(after[1] > before[1], "the granted one was held, then released: {after:?}");
    assert!(after[2] > before[2] && after[3] > before[3], "the order's row locks: {after:?}");
    assert!(after[4] > before[4], "the busy answer, with its cause: {after:?}");
    assert!(after[5] >= before[5] + 2.0, "pool checkouts: {after:?}");

    // The admin sees the same, drawn.
    let admin = app.client(0);
    admin.login(&app.user("operator", Role::Admin)).await;
    let page = admin.get("/admin/metrics").await;
    assert_eq!(page.status(), 200);
    let page = page.text().await.expect("page");
    for expected in ["<svg", "named · book", "row · stock", "pool checkout", "answered 503: busy, named_lock"]
    {
        assert!(page.contains(expected), "{expected:?} missing from the metrics page");
    }
}

/// Two instances in one process keep apart: bookings through the first move its pool and lock
/// series, and the second, which served nothing but its own `/metrics`, shows none of it.
#[actix_web::test]
async fn each_instance_counts_only_what_it_served() {
    let app = TestApp::spawn_instances(2, |_| {}).await;
    let (busy, quiet) = (app.client(0), app.client(1));
    let resource = app.resource("apart", 5);
    for i in 0..3 {
        busy.login(&app.user(&format!("apart{i}"), Role::Customer)).await;
        assert_eq!(busy.book(resource, future_day()).await.status(), 201);
    }
    let served =
        sample(&busy, "haita_lock_hold_seconds_count", &["family=\"named\"", "scope=\"book\""]).await;
    assert!(served >= 3.0, "the first instance held the day's lock for each booking: {served}");
    let elsewhere =
        sample(&quiet, "haita_lock_hold_seconds_count", &["family=\"named\"", "scope=\"book\""]).await;
    assert_eq!(elsewhere, 0.0, "the second instance booked nothing");
    let checkouts = sample(&quiet, "haita_pool_checkout_seconds_count", &[]).await;
    assert_eq!(checkouts, 0.0, "the second instance checked out no connection for a request");
}

//! The database going away under load: quick 503s, never a 500 or a long hang, and recovery on
//! its own when the server is back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use haita::auth::Role;

use crate::common::own_server::OwnServer;
use crate::common::{TestApp, TestDb, future_day, invariants, poll};

#[derive(Debug)]
struct Answer {
    client: usize,
    status: u16,
    code: String,
    retry_after: bool,
    started: Instant,
    took: Duration,
}

/// Whether each of the `clients` has had an answer that `counts`.
fn every_client(answers: &Mutex<Vec<Answer>>, clients: usize, counts: impl Fn(&Answer) -> bool) -> bool {
    let answers = answers.lock().expect("answers");
    let had: std::collections::BTreeSet<usize> =
        answers.iter().filter(|a| counts(a)).map(|a| a.client).collect();
    had.len() == clients
}

/// Bookings and orders from 12 clients while the project's own MariaDB is killed with `kill -9`
/// two seconds into the load, and started again once every client has met the outage.
/// Checks: only 2xx, 409 and 503 (+ Retry-After) answers; while the server is down no request
/// waits anywhere near the pool timeout (8 s here: without the outage fast path every request
/// would wait all of it); requests succeed again after the restart without anyone touching the
/// app; the invariants hold in the database afterwards.
#[actix_web::test]
async fn a_killed_database_gives_quick_503s_and_the_app_recovers_by_itself() {
    // The app's log shows the cause of any 500 this test finds (`RUST_LOG=warn` to see it).
    let _ = env_logger::builder().is_test(true).try_init();
    let mut server = OwnServer::start();
    let db = TestDb::on_server(&server.url());
    let app = TestApp::spawn_on(db, 1, |c| {
        c.pool_timeout = Duration::from_secs(8);
        c.lock_wait = Duration::from_secs(2);
        // Each client orders about fifty times a second, far beyond what one person may (the
        // order rate has tests of its own, `quotas`); its 429s would hide the outage's answers.
        c.max_orders_per_minute = 100_000;
    })
    .await;
    let resource = app.resource("Outage room", 3);
    let product = app.product("OUTAGE-1", 100, 1_000);
    let clients: Vec<_> = (0..12).map(|i| app.client(i)).collect();
    for (i, client) in clients.iter().enumerate() {
        client.login(&app.user(&format!("o{i:02}"), Role::Customer)).await;
    }
    let first_day = future_day();

    let n_clients = clients.len();
    let stop = Arc::new(AtomicBool::new(false));
    let answers = Arc::new(Mutex::new(Vec::new()));
    let load = clients.into_iter().enumerate().map(|(i, client)| {
        let (stop, answers) = (stop.clone(), answers.clone());
        actix_web::rt::spawn(async move {
            let mut n = 0u64;
            // Bounded: at most 2 000 requests per client, and the test stops the loop.
            while !stop.load(Ordering::Relaxed) && n < 2_000 {
                n += 1;
                let started = Instant::now();
                let response = if i % 2 == 0 {
                    client.book(resource, first_day + chrono::Days::new(n % 20)).await
                } else {
                    client.order(&[(product, 1)]).await
                };
                let took = started.elapsed();
                let status = response.status().as_u16();
                let retry_after = response.headers().get("retry-after").is_some();
                let code = if status >= 400 {
                    response
                        .json::<serde_json::Value>()
                        .await
                        .ok()
                        .and_then(|b| b["error"].as_str().map(str::to_string))
                        .unwrap_or_default()
                } else {
                    String::new()
                };
                answers.lock().expect("answers").push(Answer {
                    client: i,
                    status,
                    code,
                    retry_after,
                    started,
                    took,
                });
                // Not synchronisation: the pace of the load, a request every 20 ms or so per client.
                actix_web::rt::time::sleep(Duration::from_millis(20)).await;
            }
        })
    });
    let load = futures::future::join_all(load);
    // After the kill, each step waits for the load to have seen the one before.
    let chaos = async {
        // Not synchronisation: the crash comes at a moment of its own, two seconds into the
        // load, unrelated to what the requests are doing. A kill set off by the load's progress
        // instead (every client served once, or fifty times; every day booked full) falls at a
        // moment tied to the load's rhythm, when more bookings sit queued behind a day's lock
        // and end as `busy` rather than `unavailable`: measured, 3 of 13 503s in one of ten
        // runs (more than allowed below), against none in 22 runs killed on this clock.
        actix_web::rt::time::sleep(Duration::from_secs(2)).await;
        let killed_at = Instant::now();
        server.kill();
        // Down until every client has met the outage, rather than for a guess at how long that
        // takes: only then is there something to check about the answers while down.
        poll::until_async(
            "every client to meet the outage: a 503 to a request sent after the kill",
            Duration::from_secs(60),
            async || every_client(&answers, n_clients, |a| a.started >= killed_at && a.status == 503),
        )
        .await;
        let server = actix_web::rt::task::spawn_blocking(move || {
            server.run();
            server
        })
        .await
        .expect("restart");
        let back_at = Instant::now();
        poll::until_async(
            "a request sent after the restart to succeed, and every client to be answered since",
            Duration::from_secs(60),
            async || {
                let after = |a: &Answer| a.started >= back_at;
                every_client(&answers, n_clients, after)
                    && answers
                        .lock()
                        .expect("answers")
                        .iter()
                        .any(|a| after(a) && matches!(a.status, 200 | 201))
            },
        )
        .await;
        stop.store(true, Ordering::Relaxed);
        (server, killed_at, back_at)
    };
    let (tasks, chaos) = futures::future::join(load, chaos).await;
    let (_server, killed_at, back_at) = chaos;
    tasks.into_iter().for_each(|t| t.expect("client task"));
    let answers = std::mem::take(&mut *answers.lock().expect("answers"));

    for a in &answers {
        let fine = matches!(a.status, 200 | 201 | 409) || (a.status == 503 && a.retry_after);
        assert!(fine, "only success, 409 and 503 with Retry-After, never a 500: {a:?}");
    }
    let during: Vec<&Answer> =
        answers.iter().filter(|a| a.started >= killed_at && a.started < back_at).collect();
    let slowest = during.iter().map(|a| a.took).max().unwrap_or_default();
    let slowest_started = during
        .iter()
        .max_by_key(|a| a.took)
        .map(|a| a.started.saturating_duration_since(killed_at))
        .unwrap_or_default();
    let unavailable = during.iter().filter(|a| a.status == 503).count();
    let first_success_after = answers
        .iter()
        .filter(|a| a.started >= back_at && matches!(a.status, 200 | 201))
        .map(|a| a.started + a.took - back_at)
        .min();
    let codes: std::collections::BTreeSet<&str> = during.iter().map(|a| a.code.as_str()).collect();
    println!(
        "outage: {} requests while down ({unavailable} × 503, codes {codes:?}), slowest {slowest:?} (started {slowest_started:?} after the kill); \
         first success {first_success_after:?} after the server was back; {} requests in all",
        during.len(),
        answers.len()
    );
    assert!(unavailable > 0, "the outage was noticed");
    // Said as it is: the database is down, not busy (a checkout during an outage used to answer
    // `busy`; then nearly every 503 did). Most, not all: a request can meet a full queue or a
    // checkout already waiting just as the server goes. Measured: 2 `busy` of 12 and of 13 503s
    // in two of about twenty runs, never more, so at most a fifth (two when there are few).
    let said_unavailable = during.iter().filter(|a| a.status == 503 && a.code == "unavailable").count();
    let said_otherwise = unavailable - said_unavailable;
    assert!(said_otherwise <= (unavailable / 5).max(2), "503s while down say unavailable: {codes:?}");
    assert!(
        slowest < Duration::from_secs(4),
        "no request waited for the pool timeout while down: {slowest:?}"
    );
    assert!(
        first_success_after.is_some(),
        "requests succeed again once the server is back, with no restart of the app"
    );

    invariants::no_day_over_capacity(&app.db);
    invariants::no_user_booked_twice(&app.db);
    invariants::stock_matches_ledger(&app.db);
    invariants::orders_match_ledger(&app.db);
}

/// The database restarted while the app sat quiet: every pooled connection is dead, and none
/// is tested at checkout. The first statement that meets one — here a booking's `GET_LOCK`,
/// which is safe to send again on another connection, and is — marks every connection that has
/// not answered since as suspect, so the next checkouts ping them and drop the dead ones before
/// anyone uses them: the requests after the restart answer as if nothing had happened, none
/// with a 503. Two instances: one coalescing bookings (the default), one booking each request
/// on its own.
#[actix_web::test]
async fn after_a_database_restart_a_quiet_pool_answers_every_request() {
    let mut server = OwnServer::start();
    let db = TestDb::on_server(&server.url());
    let instance = std::cell::Cell::new(0);
    let app = TestApp::spawn_on(db, 2, |config| {
        config.coalesce_bookings = instance.get() == 0;
        instance.set(instance.get() + 1);
    })
    .await;
    let resource = app.resource("Restart room", 50);
    let clients = [app.client(0), app.client(1)];
    for (i, client) in clients.iter().enumerate() {
        client.login(&app.user(&format!("r{i:02}"), Role::Customer)).await;
    }
    // Bookings at once, so that each pool holds several connections when the server goes. Each
    // instance books days of its own: waiting for the other's locks is not what this is about.
    let first_day = haita::bookings::service::today() + chrono::Days::new(2);
    let day = |instance: usize, i: u64| first_day + chrono::Days::new(40 * instance as u64 + i);
    let warm_up = clients
        .iter()
        .enumerate()
        .flat_map(|(instance, client)| (0..8).map(move |i| client.book(resource, day(instance, i))));
    for response in futures::future::join_all(warm_up).await {
        let status = response.status().as_u16();
        assert_eq!(status, 201, "warm-up: {}", response.text().await.unwrap_or_default());
    }
    let server = actix_web::rt::task::spawn_blocking(move || {
        server.kill();
        server.run();
        server
    })
    .await
    .expect("restart");

    for (instance, client) in clients.iter().enumerate() {
        for i in 0..10 {
            let response = client.book(resource, day(instance, 20 + i)).await;
            let status = response.status().as_u16();
            let body = response.text().await.unwrap_or_default();
            assert_eq!(status, 201, "instance {instance}, booking {i} after the restart: {body}");
        }
        let listed = client.get("/api/v1/reservations").await;
        assert_eq!(listed.status().as_u16(), 200);
    }
    drop(server);
}

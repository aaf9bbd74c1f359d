//! The database going away under load: quick 503s on every path, never a 500 or a long hang,
//! and recovery on its own when the server is back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use haita::auth::Role;
use serde_json::json;

use crate::common::own_server::OwnServer;
use crate::common::{Client, TestApp, TestDb, future_day, invariants, poll};

#[derive(Debug)]
struct Answer {
    client: usize,
    path: &'static str,
    status: u16,
    code: String,
    retry_after: bool,
    /// The answer's `Content-Type` is HTML (else JSON, or none for a redirect).
    html: bool,
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

/// The longest wait from request to answer while the database is down, on every path: what the
/// issue asks (under a second, from request to 503), and what is asserted per path. It is the
/// one duration a test asserts on; measured before the fix, orders took 1.96 s here.
const WHILE_DOWN: Duration = Duration::from_secs(1);

/// One path of the load: what a client of `role` sends, whether it asks for HTML, and the
/// answers it gets when the database is up.
#[derive(Clone, Copy)]
struct Path {
    name: &'static str,
    role: Option<Role>,
    html: bool,
    fine: &'static [u16],
}

const PATHS: &[Path] = &[
    Path { name: "booking", role: Some(Role::Customer), html: false, fine: &[201, 409] },
    Path { name: "stay", role: Some(Role::Customer), html: false, fine: &[201, 409] },
    Path { name: "order, a cart of two lines", role: Some(Role::Customer), html: false, fine: &[201, 409] },
    Path { name: "order, one line (coalesced)", role: Some(Role::Customer), html: false, fine: &[201, 409] },
    Path { name: "checkout hold", role: Some(Role::Customer), html: false, fine: &[201, 409] },
    Path { name: "stock receipt", role: Some(Role::Staff), html: false, fine: &[200, 201] },
    Path { name: "edit lock", role: Some(Role::Staff), html: false, fine: &[200, 201] },
    Path { name: "edit lock (editor page)", role: Some(Role::Staff), html: true, fine: &[303] },
    Path { name: "batch start (admin screen)", role: Some(Role::Admin), html: true, fine: &[303, 409] },
    Path { name: "login", role: None, html: false, fine: &[200] },
    Path { name: "catalog page", role: Some(Role::Customer), html: true, fine: &[200] },
    Path { name: "bookings page", role: Some(Role::Customer), html: true, fine: &[200] },
    Path { name: "admin locks page", role: Some(Role::Admin), html: true, fine: &[200] },
];

/// How many clients send each path (index into [`PATHS`]): two on the busiest, so that the
/// coalesced orders form batches and bookings queue behind each other's locks.
fn clients_of(path: usize) -> usize {
    match PATHS[path].name {
        "booking" | "order, a cart of two lines" | "order, one line (coalesced)" => 2,
        _ => 1,
    }
}

/// What the load works on.
struct Fixture {
    resource: i64,
    stay_resource: i64,
    products: [i64; 3],
    /// One resource per staff client, so that its edit locks are its own: the API's, the page's.
    edited: [i64; 2],
    first_day: chrono::NaiveDate,
    login: crate::common::TestUser,
}

/// The `n`-th request of a client on `path`.
async fn send(client: &Client, path: &Path, n: u64, csrf: &str, at: &Fixture) -> reqwest::Response {
    let day = |offset: u64| at.first_day + chrono::Days::new(offset);
    let [hot, a, b] = at.products;
    match path.name {
        "booking" => client.book(at.resource, day(n % 20)).await,
        "stay" => {
            let from = day(30 + (n % 20) * 3);
            let body = json!({"resource_id": at.stay_resource, "from": from.to_string(),
                              "to": (from + chrono::Days::new(2)).to_string()});
            client.post_json("/api/v1/reservations", &body).await
        }
        "order, a cart of two lines" => client.order(&[(a, 1), (b, 1)]).await,
        "order, one line (coalesced)" => client.order(&[(hot, 1)]).await,
        "checkout hold" => client.post_json("/api/v1/holds", &json!({"product_id": a, "quantity": 1})).await,
        "stock receipt" => {
            client.post_json("/api/v1/stock/receipts", &json!({"product_id": b, "quantity": 1})).await
        }
        "edit lock" => {
            client.send(reqwest::Method::POST, &format!("/api/v1/resources/{}/edit-lock", at.edited[0])).await
        }
        "edit lock (editor page)" => {
            client
                .post_form(&format!("/resources/{}/edit/start", at.edited[1]), &[("csrf_token", csrf)])
                .await
        }
        "batch start (admin screen)" => {
            let form = [("csrf_token", csrf), ("revision", "outage"), ("percent", "1"), ("policy", "wait")];
            client.post_form("/admin/batch/price-revision", &form).await
        }
        "login" => {
            let body = json!({"username": at.login.username, "password": crate::common::PASSWORD});
            client.post_json("/api/v1/session", &body).await
        }
        "catalog page" => client.get("/products").await,
        "bookings page" => client.get("/bookings").await,
        "admin locks page" => client.get("/admin/locks").await,
        other => unreachable!("no such path: {other}"),
    }
}

/// Every path of the app — bookings, stays, orders one at a time and coalesced, checkout holds,
/// stock receipts, edit locks (API and editor page), a batch start from the admin screen, login
/// and HTML pages — sent by 16 clients (customers, staff and an admin, each where its path needs
/// the role) while the project's own database server is killed with `kill -9` two seconds into
/// the load, and started again once every client has met the outage.
/// Checks: only the path's own answers and 503 (+ Retry-After) answers, never a 500; per path,
/// every request sent while the server is down is answered within [`WHILE_DOWN`] — a 503 with
/// `Retry-After`, in HTML or JSON as asked (or what committed just before the kill); requests
/// succeed again after the restart without anyone touching the app; the invariants hold in the
/// database afterwards.
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
    let at = Arc::new(Fixture {
        resource: app.resource("Outage room", 3),
        stay_resource: app.resource("Outage suite", 2),
        products: [
            app.product("OUTAGE-HOT", 100, 100_000),
            app.product("OUTAGE-A", 100, 100_000),
            app.product("OUTAGE-B", 100, 100_000),
        ],
        edited: [app.resource("Edited by the API", 1), app.resource("Edited on its page", 1)],
        // The stays reach 91 days past it: all of that within the booking horizon.
        first_day: future_day().min(
            haita::bookings::service::today()
                + chrono::Days::new(haita::bookings::model::HORIZON_DAYS.unsigned_abs() - 92),
        ),
        login: app.user("o-login", Role::Customer),
    });
    let staff = app.user("o-staff", Role::Staff);
    let admin = app.user("o-admin", Role::Admin);
    let mut clients = Vec::new();
    for (p, path) in PATHS.iter().enumerate() {
        for _ in 0..clients_of(p) {
            let i = clients.len();
            let client = app.client(i);
            match path.role {
                Some(Role::Customer) => client.login(&app.user(&format!("o{i:02}"), Role::Customer)).await,
                Some(Role::Staff) => client.login(&staff).await,
                Some(Role::Admin) => client.login(&admin).await,
                None => {}
            }
            let csrf = if path.html && path.fine.contains(&303) {
                client.csrf_token("/").await
            } else {
                String::new()
            };
            clients.push((client, *path, csrf));
        }
    }

    let n_clients = clients.len();
    let stop = Arc::new(AtomicBool::new(false));
    let answers = Arc::new(Mutex::new(Vec::new()));
    let load = clients.into_iter().enumerate().map(|(i, (client, path, csrf))| {
        let (stop, answers, at) = (stop.clone(), answers.clone(), at.clone());
        actix_web::rt::spawn(async move {
            let mut n = 0u64;
            // Bounded: at most 2 000 requests per client, and the test stops the loop.
            while !stop.load(Ordering::Relaxed) && n < 2_000 {
                n += 1;
                let started = Instant::now();
                let response = send(&client, &path, n, &csrf, &at).await;
                let took = started.elapsed();
                let status = response.status().as_u16();
                let retry_after = response.headers().get("retry-after").is_some();
                let html = response
                    .headers()
                    .get("content-type")
                    .and_then(|t| t.to_str().ok())
                    .is_some_and(|t| t.starts_with("text/html"));
                let code = if status >= 400 && !html {
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
                    path: path.name,
                    status,
                    code,
                    retry_after,
                    html,
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

    let fine_when_up = |a: &Answer| PATHS.iter().any(|p| p.name == a.path && p.fine.contains(&a.status));
    for a in &answers {
        let fine = fine_when_up(a) || (a.status == 503 && a.retry_after);
        assert!(fine, "only the path's own answers and 503 with Retry-After, never a 500: {a:?}");
    }
    let during: Vec<&Answer> =
        answers.iter().filter(|a| a.started >= killed_at && a.started < back_at).collect();
    let unavailable = during.iter().filter(|a| a.status == 503).count();
    let first_success_after = answers
        .iter()
        .filter(|a| a.started >= back_at && matches!(a.status, 200 | 201))
        .map(|a| a.started + a.took - back_at)
        .min();
    let codes: std::collections::BTreeSet<&str> = during.iter().map(|a| a.code.as_str()).collect();
    println!(
        "outage: {} requests while down ({unavailable} × 503, codes {codes:?}); first success \
         {first_success_after:?} after the server was back; {} requests in all",
        during.len(),
        answers.len()
    );
    // Per path: how long its answers took while the server was down. Printed for every path
    // before any is asserted, so that one run shows them all.
    let mut too_slow = Vec::new();
    for path in PATHS {
        let mut took: Vec<Duration> = during.iter().filter(|a| a.path == path.name).map(|a| a.took).collect();
        took.sort();
        let p99 = took.get((took.len() * 99).div_ceil(100).saturating_sub(1)).copied().unwrap_or_default();
        let max = took.last().copied().unwrap_or_default();
        println!(
            "  {:<28} {:>4} answers while down, p99 {p99:>8.1?}, max {max:>8.1?}",
            path.name,
            took.len()
        );
        if max >= WHILE_DOWN {
            too_slow.push(format!("{}: {max:?}", path.name));
        }
    }
    assert!(unavailable > 0, "the outage was noticed");
    for path in PATHS {
        let its: Vec<&&Answer> = during.iter().filter(|a| a.path == path.name).collect();
        assert!(its.iter().any(|a| a.status == 503), "{}: met the outage", path.name);
        for a in its {
            let said_down = a.status == 503 && a.retry_after && a.html == path.html;
            assert!(
                said_down || fine_when_up(a),
                "{}: while down, a 503 with Retry-After in {} (or what committed before): {a:?}",
                path.name,
                if path.html { "HTML" } else { "JSON" }
            );
        }
    }
    assert!(
        too_slow.is_empty(),
        "every path answers within {WHILE_DOWN:?} while the database is down: {too_slow:?}"
    );
    // Said as it is: the database is down, not busy (a checkout during an outage used to answer
    // `busy`; then nearly every 503 did). Most, not all: a request can meet a full queue or a
    // checkout already waiting just as the server goes. Measured: 2 `busy` of 12 and of 13 503s
    // in two of about twenty runs, never more, so at most a fifth (two when there are few).
    let json_503: Vec<&&Answer> = during.iter().filter(|a| a.status == 503 && !a.html).collect();
    let said_unavailable = json_503.iter().filter(|a| a.code == "unavailable").count();
    let said_otherwise = json_503.len() - said_unavailable;
    assert!(said_otherwise <= (json_503.len() / 5).max(2), "503s while down say unavailable: {codes:?}");
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

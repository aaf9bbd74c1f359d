//! Liveness, readiness and the drain on SIGTERM (`src/shutdown.rs`), on real `haita serve`
//! processes sent real signals: `/health` answers while the database is down and `/ready` says
//! 503 at once; a SIGTERM takes the instance out of readiness while it goes on answering, then
//! every request in flight gets its own answer and the process exits 0; a request still queued in
//! memory for a lock when the shutdown budget runs out is answered 503 `draining`, not dropped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use haita::auth::Role;
use serde_json::{Value, json};

use crate::common::own_server::OwnServer;
use crate::common::{
    Client, METRICS_TOKEN, TestApp, TestDb, create_user, future_day, invariants, poll, server,
};

/// A `haita serve` process on `db`, its log kept in a file (named in failures).
struct Serve {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Serve {
    /// Production defaults but for plain HTTP, generous quotas (the clients here book and order
    /// in loops) and `env`.
    fn start(db: &TestDb, env: &[(&str, &str)]) -> Self {
        let port = crate::common::free_port();
        let log = std::env::temp_dir().join(format!("haita-drain-{}-{port}.log", db.name));
        let mut command = Command::new(env!("CARGO_BIN_EXE_haita"));
        command
            .arg("serve")
            .env("DATABASE_URL", &db.url)
            .env("BIND", format!("127.0.0.1:{port}"))
            .env("SESSION_KEY", "test-session-key-test-session-key-test-session-key-test-session-key!")
            .env("COOKIE_SECURE", "0")
            .env("METRICS_TOKEN", METRICS_TOKEN)
            .env("LOGIN_FAILURES_PER_ADDRESS", "100000")
            .env("MAX_FUTURE_BOOKINGS_PER_USER", "100000")
            .env("MAX_ORDERS_PER_MINUTE_PER_USER", "100000")
            .env("WORKERS", "2")
            .env("RUST_LOG", "info,actix_server=warn,actix_web=warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"));
        for (name, value) in env {
            command.env(name, value);
        }
        let child = command.spawn().expect("haita serve");
        let serve = Self { child, port, log };
        poll::until(
            &format!("haita serve to listen (log: {})", serve.log.display()),
            Duration::from_secs(60),
            || TcpStream::connect(("127.0.0.1", port)).is_ok(),
        );
        serve
    }

    fn address(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Sends `signal` (`TERM`, `INT`) to the process, as an orchestrator or a terminal does.
    fn signal(&self, signal: &str) {
        let sent = Command::new("kill").arg(format!("-{signal}")).arg(self.child.id().to_string()).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -{signal}");
    }

    fn accepts_connections(&self) -> bool {
        TcpStream::connect(("127.0.0.1", self.port)).is_ok()
    }

    /// The exit status, waited for at most `deadline`.
    fn exit_within(&mut self, deadline: Duration) -> Option<ExitStatus> {
        let mut status = None;
        poll::within(deadline, || {
            status = self.child.try_wait().expect("try_wait");
            status.is_some()
        });
        status
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// The value of the series `series` (`name{labels}` as `/metrics` writes it); 0 when absent.
fn gauge(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

fn header(response: &reqwest::Response, name: &str) -> String {
    response.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string()
}

/// What became of one request: its status and error code, or no answer at all.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Answered(u16, String),
    /// The connection could not be made: the request was never sent (an instance that stopped
    /// accepting).
    Refused,
    /// Sent and never answered: a lost request.
    Lost(String),
}

async fn outcome(sent: Result<reqwest::Response, reqwest::Error>) -> Outcome {
    match sent {
        Ok(response) => {
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or_default();
            Outcome::Answered(status, body["error"].as_str().unwrap_or_default().to_string())
        }
        Err(e) if e.is_connect() => Outcome::Refused,
        Err(e) => Outcome::Lost(format!("{e:?}")),
    }
}

async fn book(client: &Client, resource: i64, day: chrono::NaiveDate) -> Outcome {
    let body = json!({"resource_id": resource, "date": day.to_string()});
    outcome(client.http.post(client.url("/api/v1/reservations")).json(&body).send().await).await
}

async fn order(client: &Client, product: i64) -> Outcome {
    let body = json!({"lines": [{"product_id": product, "quantity": 1}]});
    outcome(client.http.post(client.url("/api/v1/orders")).json(&body).send().await).await
}

fn count(db: &TestDb, sql: &str) -> i64 {
    use diesel::prelude::*;
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    haita::db::cached_sql::<diesel::sql_types::Untyped>(sql)
        .get_result::<Count>(&mut db.raw_connection())
        .expect("count")
        .n
}

/// `/health` answers 200 while the database is down: it touches neither the database nor the
/// pool. `/ready` answers 503 `unavailable` with `Retry-After` within the second the issue asks
/// of every path while the database is down, and 200 again once it is back.
#[actix_web::test]
async fn health_answers_without_the_database_and_ready_says_quickly_that_it_is_down() {
    let server = OwnServer::start();
    let app = TestApp::spawn_on(TestDb::on_server(&server.url()), 1, |_| {}).await;
    let client = app.client(0);
    let health = client.get("/health").await;
    assert_eq!(health.status(), 200);
    assert_eq!(health.json::<Value>().await.expect("json"), json!({"status": "ok"}));
    let ready = client.get("/ready").await;
    assert_eq!(ready.status(), 200);
    assert_eq!(ready.json::<Value>().await.expect("json"), json!({"status": "ready", "database": "ok"}));

    let mut server = actix_web::rt::task::spawn_blocking(move || {
        let mut server = server;
        server.kill();
        server
    })
    .await
    .expect("kill");
    poll::until_async("/ready to say the database is down", Duration::from_secs(30), async || {
        client.get("/ready").await.status() == 503
    })
    .await;
    for _ in 0..5 {
        let asked = Instant::now();
        let ready = client.get("/ready").await;
        let took = asked.elapsed();
        assert_eq!(ready.status(), 503);
        assert!(!header(&ready, "retry-after").is_empty(), "with Retry-After");
        let body: Value = ready.json().await.expect("json");
        assert_eq!(body, json!({"status": "unavailable", "database": "unreachable"}));
        assert!(took < Duration::from_secs(1), "/ready took {took:?} while the database was down");
        let health = client.get("/health").await;
        assert_eq!(health.status(), 200, "liveness does not depend on the database");
    }

    server = actix_web::rt::task::spawn_blocking(move || {
        server.run();
        server
    })
    .await
    .expect("restart");
    poll::until_async("/ready once the database is back", Duration::from_secs(60), async || {
        client.get("/ready").await.status() == 200
    })
    .await;
    drop(server);
}

crate::common::on_both_engines!(
    sigterm_drains_then_answers_every_request_in_flight_and_exits_0,
    sigterm_drains_then_answers_every_request_in_flight_and_exits_0_on_postgres
        => drains_and_loses_nothing
);

/// A `haita serve` under load gets SIGTERM: `/ready` turns 503 `draining` at once while the
/// clients still sending get their normal answers (201, or 409), each on a connection closed
/// after it; a second SIGTERM stops accepting; the eight bookings that were waiting for a day's
/// lock held elsewhere (one at the server, seven queued in memory) all get their 201 once it is
/// freed; the process exits 0. Every request sent got an answer, every 201 is a row and every
/// row a 201, and no named lock is left held.
///
/// `DRAIN_SECS` is a minute here: the exit is awaited for less than that, so it comes from the
/// second signal cutting the drain short, as documented.
async fn drains_and_loses_nothing(db: TestDb) {
    let hot = haita::bookings::service::today() + chrono::Days::new(1);
    let hot_resource = crate::common::create_resource(&db, "Hot hall", 100);
    let spread_resource = crate::common::create_resource(&db, "Spread hall", 100);
    let product = crate::common::create_product(&db, "DRAIN-1", 100, 10_000);
    let mut serve = Serve::start(&db, &[("DRAIN_SECS", "60"), ("LOCK_WAIT_SECS", "20")]);
    let address = serve.address();
    let clients: Vec<Client> = (0..16).map(|_| Client::new(&address)).collect();
    for (i, client) in clients.iter().enumerate() {
        client.login(&create_user(&db, &format!("drain{i:02}"), Role::Customer)).await;
    }
    let (waiting, streaming) = clients.split_at(8);
    let watcher = Client::new(&address);

    // Eight bookings of the hot day wait for its lock, held by another session: the first at
    // the server, the others queued in memory behind it.
    let held = db.session_holding(&db.pool.names().booking(hot_resource, hot));
    let mut in_flight = Vec::new();
    for (i, client) in waiting.iter().enumerate() {
        let client = Client { http: client.http.clone(), base: client.base.clone() };
        in_flight.push(actix_web::rt::spawn(async move { book(&client, hot_resource, hot).await }));
        let (at_server, queued) = (1.0, i as f64);
        poll::until_async("the booking to wait for the held lock", Duration::from_secs(30), async || {
            let metrics = watcher.metrics().await;
            gauge(&metrics, "haita_lock_waiters") == at_server
                && gauge(&metrics, "haita_lock_queue_depth{scope=\"book\"}") == queued
        })
        .await;
    }

    // Eight clients book days of their own and order, in a loop, until each has had three
    // answers after /ready said "draining".
    let draining_seen = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let loops = streaming.iter().enumerate().map(|(i, client)| {
        let client = Client { http: client.http.clone(), base: client.base.clone() };
        let (draining_seen, answered) = (Arc::clone(&draining_seen), Arc::clone(&answered));
        actix_web::rt::spawn(async move {
            let (mut before, mut after) = (Vec::new(), Vec::new());
            // Forty days of its own each (a day booked again is a 409 already_booked).
            let first_day = hot + chrono::Days::new(1 + 40 * i as u64);
            for n in 0..1000_u64 {
                let seen = draining_seen.load(Ordering::SeqCst);
                let got = if n % 2 == 0 {
                    ("book", book(&client, spread_resource, first_day + chrono::Days::new(n / 2 % 40)).await)
                } else {
                    ("order", order(&client, product).await)
                };
                let stop = !matches!(got.1, Outcome::Answered(..));
                answered.fetch_add(1, Ordering::SeqCst);
                if seen {
                    after.push(got)
                } else {
                    before.push(got)
                }
                if stop || after.len() >= 3 {
                    break;
                }
            }
            (before, after)
        })
    });
    let loops: Vec<_> = loops.collect();
    poll::until_async("the clients to be booking and ordering", Duration::from_secs(30), async || {
        answered.load(Ordering::SeqCst) >= 2 * streaming.len()
    })
    .await;

    serve.signal("TERM");
    let ready_went_draining = {
        let give_up = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(ready) = watcher.http.get(watcher.url("/ready")).send().await
                && ready.status() == 503
                && !header(&ready, "retry-after").is_empty()
                && ready.json::<Value>().await.ok() == Some(json!({"status": "draining"}))
            {
                break true;
            }
            if Instant::now() >= give_up {
                break false;
            }
            actix_web::rt::time::sleep(poll::INTERVAL).await;
        }
    };
    draining_seen.store(true, Ordering::SeqCst);
    let health_while_draining =
        watcher.http.get(watcher.url("/health")).send().await.map(|r| r.status().as_u16());
    let metrics_while_draining = watcher.metrics().await;
    let mut streamed = Vec::new();
    for (before, after) in futures::future::join_all(loops).await.into_iter().map(|r| r.expect("client")) {
        streamed.push((before, after));
    }

    serve.signal("TERM");
    let stopped_accepting = poll::within(Duration::from_secs(20), || !serve.accepts_connections());
    let mut held = held;
    server::release_all(&mut held);
    drop(held);
    let mut waited = Vec::new();
    for request in in_flight {
        waited.push(request.await.expect("booking task"));
    }
    let exit = serve.exit_within(Duration::from_secs(30));
    let log = serve.log();

    let summary = format!(
        "ready went draining: {ready_went_draining}; accepting stopped: {stopped_accepting}; exit: {exit:?}\n\
         waiting bookings: {waited:?}\nstreamed (before, after): {streamed:?}\nlog: {}",
        serve.log.display()
    );
    eprintln!("{summary}");
    assert!(ready_went_draining, "/ready never answered 503 draining with Retry-After: {summary}");
    assert_eq!(health_while_draining.ok(), Some(200), "liveness stays up while draining");
    assert_eq!(gauge(&metrics_while_draining, "haita_draining"), 1.0, "haita_draining");
    let after: Vec<&(&str, Outcome)> = streamed.iter().flat_map(|(_, after)| after).collect();
    assert!(after.len() >= 3 * streaming.len(), "every client had its answers while draining: {summary}");
    for (what, got) in streamed.iter().flat_map(|(before, after)| before.iter().chain(after)) {
        assert!(
            matches!(got, Outcome::Answered(201 | 409, _)),
            "a {what} answered {got:?} around the drain: {summary}"
        );
    }
    assert!(
        waited.iter().all(|o| *o == Outcome::Answered(201, String::new())),
        "the bookings in flight at the stop: {summary}"
    );
    assert!(stopped_accepting, "the second SIGTERM stops accepting: {summary}");
    assert!(exit.is_some_and(|s| s.success()), "the process exits 0 within the budget: {summary}");
    for line in [
        "SIGTERM received: draining",
        "received again: skipping the rest of DRAIN_SECS",
        "not accepting connections any more",
        "stopped ",
        "exiting",
    ] {
        assert!(log.contains(line), "the log says {line:?}: {log}");
    }

    let created = |what: &str| {
        streamed
            .iter()
            .flat_map(|(before, after)| before.iter().chain(after))
            .filter(|(w, got)| *w == what && matches!(got, Outcome::Answered(201, _)))
            .count() as i64
    };
    let booked =
        count(&db, &format!("SELECT COUNT(*) AS n FROM reservations WHERE resource_id = {spread_resource}"));
    assert_eq!(booked, created("book"), "every 201 booking is a row, and every row was answered 201");
    let ordered = count(&db, "SELECT COUNT(*) AS n FROM orders");
    assert_eq!(ordered, created("order"), "every 201 order is a row, and every row was answered 201");
    assert_eq!(invariants::confirmed_on(&db, hot_resource, hot), 8);
    invariants::no_day_over_capacity(&db);
    invariants::no_user_booked_twice(&db);
    invariants::orders_match_ledger(&db);
    invariants::no_named_lock_left_held(&db);
}

crate::common::on_both_engines!(
    a_request_queued_for_a_lock_when_the_budget_runs_out_is_answered_draining,
    a_request_queued_for_a_lock_when_the_budget_runs_out_is_answered_draining_on_postgres
        => queued_requests_are_answered_at_the_cutoff
);

/// `SHUTDOWN_TIMEOUT_SECS=3` and `LOCK_WAIT_SECS=60`: a booking and a stock receipt wait at the
/// server for locks held elsewhere, and a second of each waits in memory behind them (the
/// booking coalescer's queue, the lock queue). On SIGTERM (`DRAIN_SECS=0`) accepting stops at
/// once and an idle keep-alive connection is closed while they all still wait; a second before the budget
/// runs out the two queued requests are answered 503 `draining` with `Retry-After`, and, the
/// locks freed, the two at the server get their 201. The process exits 0; the two turned away
/// did nothing.
async fn queued_requests_are_answered_at_the_cutoff(db: TestDb) {
    let day = future_day();
    let resource = crate::common::create_resource(&db, "Cut hall", 10);
    let product = crate::common::create_product(&db, "CUT-1", 100, 0);
    let mut serve =
        Serve::start(&db, &[("DRAIN_SECS", "0"), ("SHUTDOWN_TIMEOUT_SECS", "3"), ("LOCK_WAIT_SECS", "60")]);
    let address = serve.address();
    let (booker, late_booker) = (Client::new(&address), Client::new(&address));
    let (receiver, late_receiver) = (Client::new(&address), Client::new(&address));
    booker.login(&create_user(&db, "cut-booker", Role::Customer)).await;
    late_booker.login(&create_user(&db, "cut-late-booker", Role::Customer)).await;
    let staff = create_user(&db, "cut-staff", Role::Staff);
    receiver.login(&staff).await;
    late_receiver.login(&staff).await;
    let watcher = Client::new(&address);
    let held_day = db.session_holding(&db.pool.names().booking(resource, day));
    let held_stock = db.session_holding(&db.pool.names().stock(product));

    let receive = |client: Client| async move {
        let body = json!({"product_id": product, "quantity": 5});
        let sent = client.http.post(client.url("/api/v1/stock/receipts")).json(&body).send().await;
        let retry_after = sent.as_ref().map(|r| header(r, "retry-after")).unwrap_or_default();
        (outcome(sent).await, retry_after)
    };
    let book = |client: Client| async move {
        let body = json!({"resource_id": resource, "date": day.to_string()});
        let sent = client.http.post(client.url("/api/v1/reservations")).json(&body).send().await;
        let retry_after = sent.as_ref().map(|r| header(r, "retry-after")).unwrap_or_default();
        (outcome(sent).await, retry_after)
    };
    let waits = async |what: &str, at_server: f64, book_queued: f64, stock_queued: f64| {
        poll::until_async(what, Duration::from_secs(30), async || {
            let metrics = watcher.metrics().await;
            gauge(&metrics, "haita_lock_waiters") == at_server
                && gauge(&metrics, "haita_lock_queue_depth{scope=\"book\"}") == book_queued
                && gauge(&metrics, "haita_lock_queue_depth{scope=\"stock\"}") == stock_queued
        })
        .await;
    };
    let first_booking = actix_web::rt::spawn(book(booker));
    waits("the booking to wait at the server", 1.0, 0.0, 0.0).await;
    let first_receipt = actix_web::rt::spawn(receive(receiver));
    waits("the receipt to wait at the server", 2.0, 0.0, 0.0).await;
    let queued_booking = actix_web::rt::spawn(book(late_booker));
    let queued_receipt = actix_web::rt::spawn(receive(late_receiver));
    waits("one of each to queue in memory", 2.0, 1.0, 1.0).await;

    // A keep-alive connection, idle since its last answer.
    let mut idle = TcpStream::connect(("127.0.0.1", serve.port)).expect("connect");
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").expect("send");
    let mut answer = [0_u8; 1024];
    let read = idle.read(&mut answer).expect("answer");
    assert!(answer[..read].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer[..read]));
    let idle_since = Instant::now();

    serve.signal("TERM");
    idle.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let closed = idle.read(&mut answer);
    let idle_for = idle_since.elapsed();
    assert!(matches!(closed, Ok(0)) || closed.is_err(), "the idle connection is closed: {closed:?}");
    // actix closes a connection idle for its keep-alive (5 s) by itself: the stop closed it first.
    assert!(idle_for < Duration::from_secs(5), "closed by the stop, not the keep-alive: {idle_for:?}");
    assert!(!first_booking.is_finished() && !first_receipt.is_finished(), "still in flight meanwhile");

    let (turned_away_booking, booking_retry) = queued_booking.await.expect("task");
    let (turned_away_receipt, receipt_retry) = queued_receipt.await.expect("task");
    for mut held in [held_day, held_stock] {
        server::release_all(&mut held);
    }
    let (booked, _) = first_booking.await.expect("task");
    let (received, _) = first_receipt.await.expect("task");
    let exit = serve.exit_within(Duration::from_secs(30));
    let summary = format!(
        "queued: {turned_away_booking:?} {turned_away_receipt:?}; at the server: {booked:?} {received:?}; \
         exit {exit:?}; log: {}",
        serve.log.display()
    );
    eprintln!("{summary}");
    let draining = Outcome::Answered(503, "draining".into());
    assert_eq!((&turned_away_booking, &turned_away_receipt), (&draining, &draining), "{summary}");
    assert!(!booking_retry.is_empty() && !receipt_retry.is_empty(), "with Retry-After: {summary}");
    assert_eq!(
        (&booked, &received),
        (&Outcome::Answered(201, String::new()), &Outcome::Answered(201, String::new())),
        "{summary}"
    );
    assert!(exit.is_some_and(|s| s.success()), "exits 0: {summary}");
    assert!(serve.log().contains("SHUTDOWN_TIMEOUT_SECS nearly spent"), "{}", serve.log());
    assert_eq!(invariants::confirmed_on(&db, resource, day), 1, "the turned-away booking did nothing");
    assert_eq!(invariants::on_hand(&db, product), 5, "the turned-away receipt did nothing");
    invariants::stock_matches_ledger(&db);
    invariants::no_named_lock_left_held(&db);
}

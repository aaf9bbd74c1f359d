//! Contention stays in its lane: one hot or stuck lock key must not slow anything else.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use haita::auth::Role;
use tokio::sync::Barrier;

use crate::common::{Client, TestApp, error_code, future_day, invariants, poll, server};

/// A separate session (a stuck batch job, a paused holder) holds one day's booking lock while 48
/// clients book that day. Without the per-key queue and the waiting budget, their lock waits
/// (`GET_LOCK`, `pg_advisory_lock`) fill the pool and a booking of another day, the product list and an order all wait for
/// a connection until they answer 503. With them, only one request per instance waits at the
/// server, and everything else finds a connection.
///
/// The pool timeout is made shorter than the lock wait, so that starving would show as 503s
/// (a bound on behaviour, not a timing assertion): the bystanders must all succeed while the
/// stuck session still holds the lock, and every hot-day client must give up with 503 `busy`
/// on its own, also before the lock is released.
#[actix_web::test]
async fn a_stuck_booking_lock_starves_nothing_else() {
    let app = TestApp::spawn_instances(1, |c| {
        c.pool_size = 8;
        c.pool_timeout = Duration::from_secs(1);
        c.lock_wait = Duration::from_secs(3);
        c.lock_waiters_max = 2;
    })
    .await;
    let resource = app.resource("Hot room", 50);
    let product = app.product("BYSTANDER-1", 500, 10);
    let hot_day = future_day();
    let other_day = hot_day.succ_opt().expect("a next day");

    let mut stuck = app.db.raw_connection();
    let name = app.db.pool.names().booking(resource, hot_day);
    assert!(server::try_lock(&mut stuck, &name), "the stuck session takes the hot day's lock");
    let stuck_id = crate::common::server::connection_id(&mut stuck).expect("connection id");

    let hot_clients: Vec<Client> = (0..48).map(|i| app.client(i)).collect();
    let hot_users: Vec<_> = (0..48).map(|i| app.user(&format!("hot{i:02}"), Role::Customer)).collect();
    // A few at a time: this pool is small on purpose, and logging in is not what is tested.
    for (clients, users) in hot_clients.chunks(4).zip(hot_users.chunks(4)) {
        futures::future::join_all(clients.iter().zip(users).map(|(c, u)| c.login(u))).await;
    }
    let bystander = app.client(0);
    bystander.login(&app.user("bystander", Role::Customer)).await;

    let barrier = Arc::new(Barrier::new(hot_clients.len() + 1));
    let hot = hot_clients.into_iter().map(|client| {
        let barrier = barrier.clone();
        actix_web::rt::spawn(async move {
            barrier.wait().await;
            let response = client.book(resource, hot_day).await;
            let status = response.status().as_u16();
            let retry_after = response.headers().get("retry-after").is_some();
            (status, error_code(response).await, retry_after)
        })
    });
    let hot = futures::future::join_all(hot);
    let bystanders = async {
        barrier.wait().await;
        // The bystanders come once the hot clients are in place: one of them waiting at the
        // server for the stuck lock, the others queued in memory behind it.
        poll::until_async(
            "a hot-day booking to wait at the server and the others to queue behind it",
            Duration::from_secs(30),
            async || {
                let metrics = bystander.metrics().await;
                invariants::named_lock_waiters(&app.db) >= 1
                    && gauge(&metrics, "haita_lock_queue_depth{scope=\"book\"}") >= 15.0
            },
        )
        .await;
        let timed = std::time::Instant::now();
        let booking = bystander.book(resource, other_day).await.status().as_u16();
        let booking_took = timed.elapsed();
        let products = bystander.get("/api/v1/products").await.status().as_u16();
        let products_took = timed.elapsed() - booking_took;
        let order = bystander.order(&[(product, 1)]).await.status().as_u16();
        println!(
            "bystanders while one day is stuck: booking {booking} in {booking_took:?}, product list \
             {products} in {products_took:?}, order {order} in {:?}",
            timed.elapsed() - booking_took - products_took
        );
        let metrics = bystander.metrics().await;
        (booking, products, order, metrics)
    };
    let (answers, (booking, products, order, metrics)) = futures::future::join(hot, bystanders).await;

    // Everything above finished while the stuck session still held the lock.
    let still = crate::common::server::holder_of(&mut stuck, name.as_str()).expect("holder");
    assert_eq!(still, Some(stuck_id), "the stuck session held the lock throughout");

    assert_eq!((booking, products, order), (201, 200, 201), "bystanders are served while one key is stuck");
    let answers: Vec<_> = answers.into_iter().map(|a| a.expect("client task")).collect();
    for (status, code, retry_after) in &answers {
        assert_eq!((*status, code.as_str(), *retry_after), (503, "busy", true), "{answers:?}");
    }
    // Operators see the queue at work: read while the hot clients were still waiting, in memory
    // and (one batch) at the server. A batch takes up to 32 requests off the queue, so at least
    // 48 - 32 - 1 are still counted as queued. (Metrics are per process and tests share it, so
    // other tests can only add to these numbers.)
    assert!(gauge(&metrics, "haita_lock_queue_depth{scope=\"book\"}") >= 15.0, "{metrics}");
    assert!(gauge(&metrics, "haita_lock_waiters ") >= 1.0, "{metrics}");

    // Released, not merely disconnected: the server frees a closed session's locks
    // asynchronously, after the check below may already have run.
    server::release_all(&mut stuck);
    drop(stuck);
    assert_eq!(invariants::confirmed_on(&app.db, resource, hot_day), 0);
    assert_eq!(invariants::confirmed_on(&app.db, resource, other_day), 1);
    invariants::no_named_lock_left_held(&app.db);
}

/// The sum of the samples of `metric` (a name, or a name and its labels) in a `/metrics` page.
fn gauge(metrics: &str, metric: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(metric))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The waiting budget on its own: with the in-memory queue letting one request per key through,
/// requests for *different* held keys are what can pile up at the server. Past the budget they
/// are refused at once with 503 `busy`, and the pool stays free for everyone else.
#[actix_web::test]
async fn past_the_waiting_budget_a_request_for_a_held_lock_is_refused_at_once() {
    let app = TestApp::spawn_instances(1, |c| {
        c.pool_size = 4;
        c.pool_timeout = Duration::from_secs(1);
        c.lock_wait = Duration::from_secs(3);
        c.lock_waiters_max = 1;
    })
    .await;
    let resource = app.resource("Held room", 5);
    let first_day = future_day();
    let days: Vec<_> = (0..6).map(|i| first_day + chrono::Days::new(i)).collect();
    let mut stuck = app.db.raw_connection();
    for day in &days {
        let name = app.db.pool.names().booking(resource, *day);
        assert!(server::try_lock(&mut stuck, &name), "hold {name}");
    }
    let clients: Vec<Client> = (0..days.len()).map(|i| app.client(i)).collect();
    for (i, client) in clients.iter().enumerate() {
        client.login(&app.user(&format!("held{i}"), Role::Customer)).await;
    }
    let answers = futures::future::join_all(clients.iter().zip(&days).map(|(client, day)| async move {
        let response = client.book(resource, *day).await;
        (response.status().as_u16(), error_code(response).await)
    }))
    .await;
    assert!(answers.iter().all(|(s, c)| *s == 503 && c == "busy"), "{answers:?}");
    let metrics = clients[0].metrics().await;
    let refused: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("haita_lock_waiters_refused_total") && l.contains("scope=\"book\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(refused >= 4.0, "at most one of six waited at the server, the rest were refused: {metrics}");
    // Released, not merely disconnected: the server frees a closed session's locks
    // asynchronously, after the check below may already have run.
    server::release_all(&mut stuck);
    drop(stuck);
    invariants::no_named_lock_left_held(&app.db);
}

/// A separate `haita serve` process, killed with SIGKILL mid-run.
struct AppProcess {
    child: std::process::Child,
    address: String,
}

impl AppProcess {
    fn start(database_url: &str) -> Self {
        let port = crate::common::free_port();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_haita"))
            .arg("serve")
            .env("DATABASE_URL", database_url)
            .env("BIND", format!("127.0.0.1:{port}"))
            .env("SESSION_KEY", "test-session-key-test-session-key-test-session-key-test-session-key!")
            // Production defaults otherwise; the test talks plain HTTP to it.
            .env("COOKIE_SECURE", "0")
            .env("LOGIN_FAILURES_PER_ADDRESS", "100000")
            .env("RUST_LOG", "error")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("haita serve");
        poll::until("haita serve to listen on its port", Duration::from_secs(30), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        Self { child, address: format!("http://127.0.0.1:{port}") }
    }
}

impl Drop for AppProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Three instances on one database: two in this process, one a `haita serve` process that is
/// killed with SIGKILL while 64 clients book one hot day (capacity 3) and 32 book spread days.
/// The survivors finish; nobody gets a 5xx other than 503 busy; the killed process's sessions,
/// and with them any lock they held, are gone from the server; every day holds at most its
/// capacity and nobody is booked twice.
#[actix_web::test]
async fn three_instances_keep_every_day_within_capacity_when_one_is_killed() {
    let app = TestApp::spawn_instances(2, |_| {}).await;
    let mut doomed = AppProcess::start(&app.db.url);
    let resource = app.resource("Three instances", 3);
    let hot_day = future_day();
    let spread_first = hot_day + chrono::Days::new(40);
    let address =
        |i: usize| if i % 3 == 2 { doomed.address.clone() } else { app.addresses[i % 3 % 2].clone() };
    let clients: Vec<(usize, Client)> = (0..96).map(|i| (i, Client::new(&address(i)))).collect();
    let users: Vec<_> = (0..clients.len()).map(|i| app.user(&format!("t{i:02}"), Role::Customer)).collect();
    for (chunk, users) in clients.chunks(8).zip(users.chunks(8)) {
        futures::future::join_all(chunk.iter().zip(users).map(|((_, c), u)| c.login(u))).await;
    }
    let barrier = Arc::new(Barrier::new(clients.len() + 1));
    let answered_by_doomed = Arc::new(AtomicUsize::new(0));
    let bookings = clients.into_iter().map(|(i, client)| {
        let (barrier, answered_by_doomed) = (barrier.clone(), answered_by_doomed.clone());
        actix_web::rt::spawn(async move {
            barrier.wait().await;
            let day = if i < 64 { hot_day } else { spread_first + chrono::Days::new((i % 8) as u64) };
            // A killed instance's client sees its connection drop: no answer, not a 5xx.
            let sent = client
                .http
                .post(client.url("/api/v1/reservations"))
                .json(&serde_json::json!({"resource_id": resource, "date": day.to_string()}))
                .send()
                .await;
            if i % 3 == 2 && sent.is_ok() {
                answered_by_doomed.fetch_add(1, Ordering::Relaxed);
            }
            match sent {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let code = if status == 201 { String::new() } else { error_code(response).await };
                    Some((status, code))
                }
                Err(_) => None,
            }
        })
    });
    let answers = futures::future::join_all(bookings);
    let kill = async {
        barrier.wait().await;
        // Mid-run: the doomed instance is serving its share of the bookings (it has answered
        // one; its other clients' requests are in flight).
        poll::until_async("the doomed instance to answer a booking", Duration::from_secs(30), async || {
            answered_by_doomed.load(Ordering::Relaxed) > 0
        })
        .await;
        let _ = doomed.child.kill();
        let _ = doomed.child.wait();
    };
    let (answers, ()) = futures::future::join(answers, kill).await;
    let answers: Vec<_> = answers.into_iter().map(|a| a.expect("client task")).collect();

    for (status, code) in answers.iter().flatten() {
        assert!(
            *status == 201
                || (*status == 409 && code == "fully_booked")
                || (*status == 503 && code == "busy"),
            "{status} {code}"
        );
    }
    assert!(invariants::confirmed_on(&app.db, resource, hot_day) <= 3);
    invariants::no_day_over_capacity(&app.db);
    invariants::no_user_booked_twice(&app.db);
    // The killed process's sessions are gone, and with them every lock they held.
    invariants::no_named_lock_left_held(&app.db);
    // The survivors still serve.
    let late = app.client(0);
    late.login(&app.user("late", Role::Customer)).await;
    assert_eq!(late.book(resource, spread_first + chrono::Days::new(20)).await.status(), 201);
}

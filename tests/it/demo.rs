//! The demo's claims, checked in the database: without a lock the race double-books; every
//! correct strategy never does; the pool pitfall leaks locks and the race closes exactly the
//! sessions that leaked them.

use diesel::prelude::*;
use diesel::sql_types::BigInt;
use haita::auth::Role;
use haita::db::Sql;
use haita::lab::demo::Strategy;
use serde_json::{Value, json};

mod browser;
mod cluster;
mod exclusion;
pub mod flash_sale;
mod outside_locks;

use crate::common::{Client, TestApp, error_code, invariants, poll};

/// A client logged in as a new customer `name`, from an address of its own (the lab's test apps
/// trust the loopback as their proxy, `TestApp::spawn_lab`): every race waits its address's
/// cooldown, and the tests race one after another as different people would.
async fn logged_in(app: &TestApp, name: &str) -> Client {
    let octets = name.bytes().fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    let address = format!("10.{}.{}.{}", (octets >> 16) & 0xff, (octets >> 8) & 0xff, octets & 0xff);
    let client = Client::forwarded_for(app.address(), &address);
    client.login(&app.user(name, Role::Customer)).await;
    client
}

async fn race(client: &Client, body: Value) -> Value {
    let response = client.post_json("/api/v1/demo/races", &body).await;
    assert_eq!(response.status(), 201, "race {body} failed");
    response.json().await.expect("race report")
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

fn count<'a>(app: &TestApp, sql: impl Into<Sql<'a>>, resource_id: i64) -> i64 {
    let sql = sql.into();
    haita::db::cached_sql::<diesel::sql_types::Untyped>(sql)
        .bind::<BigInt, _>(resource_id)
        .get_result::<Count>(&mut app.db.raw_connection())
        .unwrap_or_else(|e| panic!("{sql:?}: {e}"))
        .n
}

/// Bookings beyond the one place per day, counted straight from `demo_bookings` (the sum is
/// DECIMAL on MySQL and NUMERIC on PostgreSQL, hence the cast back to a 64-bit integer).
fn beyond_capacity(app: &TestApp, resource_id: i64) -> i64 {
    count(
        app,
        Sql::per_engine(
            "SELECT CAST(COALESCE(SUM(n - 1), 0) AS SIGNED) AS n FROM \
             (SELECT COUNT(*) AS n FROM demo_bookings WHERE demo_resource_id = ? GROUP BY day) d",
            "SELECT CAST(COALESCE(SUM(n - 1), 0) AS BIGINT) AS n FROM \
             (SELECT COUNT(*) AS n FROM demo_bookings WHERE demo_resource_id = ? GROUP BY day) d",
        ),
        resource_id,
    )
}

fn booked(app: &TestApp, resource_id: i64) -> i64 {
    count(app, "SELECT COUNT(*) AS n FROM demo_bookings WHERE demo_resource_id = ?", resource_id)
}

/// Whether the server still has the session `connection_id` (on PostgreSQL, a backend's pid).
fn session_alive(app: &TestApp, connection_id: i64) -> bool {
    let sessions = Sql::per_engine(
        "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE ID = ?",
        "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE pid = ?",
    );
    count(app, sessions, connection_id) > 0
}

/// Whether the session `connection_id` is gone within a few seconds. Ending a session is
/// asynchronous on both engines: `KILL` and `pg_terminate_backend` return at once, and a
/// PostgreSQL backend leaves `pg_stat_activity` only after it has freed its locks (which is
/// what the race waits for), as one of the last steps of its exit.
fn session_ends(app: &TestApp, connection_id: i64) -> bool {
    poll::within(std::time::Duration::from_secs(5), || !session_alive(app, connection_id))
}

fn id_of(result: &Value) -> i64 {
    result["demo_resource_id"].as_i64().expect("demo_resource_id")
}

fn real_reservations(app: &TestApp) -> i64 {
    use haita::schema::reservations;
    reservations::table.count().get_result(&mut app.db.raw_connection()).expect("count")
}

#[actix_web::test]
async fn no_lock_with_32_clients_double_books() {
    let app = TestApp::spawn_lab().await;
    let client = logged_in(&app, "racer").await;

    let report =
        race(&client, json!({"strategy": "no-lock", "clients": 32, "attempts": 64, "pause_ms": 5})).await;

    let result = &report["results"][0];
    let resource = id_of(result);
    let beyond = beyond_capacity(&app, resource);
    assert!(
        beyond > 0,
        "no-lock should double-book with 32 clients; if not, the pause is too small: {result}"
    );
    assert_eq!(result["double_bookings"].as_i64(), Some(beyond), "the report counts what the database holds");
    assert_eq!(result["confirmed"].as_i64(), Some(booked(&app, resource)));
    assert!(
        result["verdict"]
            .as_str()
            .is_some_and(|v| v.contains("check-then-insert race (docs/named-lock-check-then-insert.md)")),
        "{result}"
    );
    assert_eq!(real_reservations(&app), 0, "the demo never writes real bookings");
}

/// The correct strategies that book days; `exclusion-constraint`, which books stays and runs on
/// PostgreSQL only, has a test of its own below.
#[actix_web::test]
async fn every_correct_strategy_books_each_day_at_most_once_over_five_runs() {
    let app = TestApp::spawn_lab().await;
    let correct: Vec<&str> =
        Strategy::ALL.iter().filter(|s| s.is_correct() && !s.books_stays()).map(|s| s.name()).collect();
    assert_eq!(
        correct,
        [
            "named-lock",
            "named-lock-coalesced",
            "named-lock-unqueued",
            "parent-row-lock",
            "unique-slot",
            "serializable",
            "redis-lock",
            "redis-lock-fenced",
            "file-lock",
            "lock-table"
        ]
    );

    for run in 1..=5 {
        // One user per run: a user waits out a cooldown between two races.
        let client = logged_in(&app, &format!("careful{run}")).await;
        let report =
            race(&client, json!({"strategy": correct, "clients": 32, "attempts": 64, "pause_ms": 5})).await;
        for result in report["results"].as_array().expect("results") {
            let resource = id_of(result);
            assert_eq!(beyond_capacity(&app, resource), 0, "run {run}: {result}");
            assert_eq!(result["double_bookings"], 0, "run {run}: {result}");
            assert_eq!(result["errors"], 0, "run {run}: {result}");
            // Two rounds, two days, one place each: both taken unless every client gave up.
            let confirmed = booked(&app, resource);
            assert!((1..=2).contains(&confirmed), "run {run}: {confirmed} booked: {result}");
            if result["strategy"] == "serializable" {
                // InnoDB makes the count a shared lock and the inserts deadlock; PostgreSQL's
                // SERIALIZABLE blocks nobody and aborts all but one with a serialization failure
                // (40001). Either way the losers are retried, and the verdict says which it was.
                let cause = match app.db.pool.engine() {
                    haita::db::Engine::Mysql => "InnoDB rolled all but one back",
                    haita::db::Engine::Postgres => "serialization failure (40001)",
                };
                assert!(result["verdict"].as_str().is_some_and(|v| v.contains(cause)), "{result}");
            }
        }
    }
    invariants::no_named_lock_left_held(&app.db);
    assert_eq!(real_reservations(&app), 0);
}

/// A lease is exclusive only until its TTL. With each day's first holder paused three times past
/// a 200 ms lease, Redis lets a second client in and both book the day; with a fencing token
/// checked by the database, the paused holder's write is refused and no day is booked twice.
/// Counted in the database, on a real Redis.
#[actix_web::test]
async fn a_lease_that_runs_out_lets_a_second_holder_in_and_a_fencing_token_refuses_the_late_write() {
    let app = TestApp::spawn_lab().await;
    let client = logged_in(&app, "leases").await;
    let strategies = ["redis-lock-expiring", "redis-lock-fenced"];
    let report =
        race(&client, json!({"strategy": strategies, "clients": 16, "attempts": 48, "pause_ms": 5})).await;
    let [expiring, fenced] = &report["results"].as_array().expect("results")[..] else { panic!("{report}") };
    let days = 3;
    let number = |r: &Value, field: &str| r[field].as_i64().unwrap_or_else(|| panic!("{field}: {r}"));

    assert_eq!(number(expiring, "paused"), days, "one paused holder per day: {expiring}");
    let beyond = beyond_capacity(&app, id_of(expiring));
    assert!(beyond > 0, "the paused holder wrote after its lease went to another client: {expiring}");
    assert_eq!(number(expiring, "double_bookings"), beyond, "{expiring}");
    assert!(number(expiring, "leases_lost") >= days, "each paused holder found its lease gone: {expiring}");
    assert!(expiring["verdict"].as_str().is_some_and(|v| v.contains("docs/other-locks.md")), "{expiring}");

    assert_eq!(number(fenced, "paused"), days, "the same pauses: {fenced}");
    assert_eq!(beyond_capacity(&app, id_of(fenced)), 0, "{fenced}");
    assert_eq!(booked(&app, id_of(fenced)), days, "every day booked once: {fenced}");
    // Each paused holder's write is refused; on a loaded machine a holder slower than its lease
    // between grant and fence may be refused too.
    assert!(number(fenced, "fenced_off") >= days, "each paused holder's write was refused: {fenced}");
    assert_eq!(number(fenced, "errors"), 0, "{fenced}");
    let fence = count(&app, "SELECT fence AS n FROM demo_resources WHERE id = ?", id_of(fenced));
    assert!(fence > days, "the fence holds the highest token shown ({fence}): {fenced}");
}

/// The two rows about contention. Without the per-key queue, a hot day's waiters hold every
/// connection of the race's pool (a request needing no lock then waits for one); with it, the
/// clients hold one or two. With the batches, a round of 32 clients needs a handful of
/// transactions, not 32. Counted, not timed: the pool's own gauge and the batches run.
#[actix_web::test]
async fn without_the_queue_waiters_fill_the_pool_and_batches_book_a_round_in_a_few_transactions() {
    let app = TestApp::spawn_lab().await;
    let client = logged_in(&app, "lanes").await;
    let strategies = ["named-lock", "named-lock-unqueued", "named-lock-coalesced"];
    let report =
        race(&client, json!({"strategy": strategies, "clients": 32, "attempts": 128, "pause_ms": 5})).await;
    let results: Vec<&Value> = report["results"].as_array().expect("results").iter().collect();
    let [queued, unqueued, coalesced] = results[..] else { panic!("three results: {report}") };
    for result in &results {
        assert_eq!(result["double_bookings"], 0, "{result}");
        assert_eq!(result["errors"], 0, "{result}");
        assert_eq!(beyond_capacity(&app, id_of(result)), 0, "{result}");
    }
    let peak = |r: &Value| r["pool_peak_in_use"].as_u64().expect("peak");
    let pool = unqueued["pool_size"].as_u64().expect("pool size");
    assert!(pool >= 4, "the race's pool: {unqueued}");
    assert_eq!(peak(unqueued), pool, "unqueued waiters hold every connection: {unqueued}");
    assert!(peak(queued) <= 2, "queued clients hold one connection per day at a time: {queued}");
    let attempts = coalesced["attempts"].as_u64().expect("attempts");
    let batches = coalesced["batches"].as_u64().expect("batches");
    assert!(batches >= 4 && batches < attempts / 4, "{batches} transactions for {attempts}: {coalesced}");
    invariants::no_named_lock_left_held(&app.db);
}

/// A user waits between races (429 with Retry-After); only the newest races are kept, and the
/// demo rows of older ones are deleted once no race can still be using them.
#[actix_web::test]
async fn races_are_rationed_per_user_and_old_ones_are_cleaned_up() {
    let app = TestApp::spawn_lab().await;
    let client = logged_in(&app, "eager").await;
    let small = json!({"strategy": "named-lock", "clients": 2, "attempts": 2});
    race(&client, small.clone()).await;
    let again = client.post_json("/api/v1/demo/races", &small).await;
    assert_eq!(again.status(), 429);
    assert!(again.headers().get("retry-after").is_some());
    assert_eq!(error_code(again).await, "too_many_races");

    // Twenty later races (copies of that one, naming a later resource), and the first race's
    // resource as old as a settled race's.
    let sql = |statement: Sql<'_>| {
        haita::db::cached_sql::<diesel::sql_types::Untyped>(statement)
            .execute(&mut app.db.raw_connection())
            .unwrap_or_else(|e| panic!("{statement:?}: {e}"));
    };
    let old_resource = count(&app, "SELECT MAX(id) AS n FROM demo_resources WHERE id > ?", 0);
    let later = format!("\"demo_resource_id\":{}", old_resource + 1_000_000);
    for _ in 0..20 {
        sql(Sql::from(&format!(
            "INSERT INTO demo_races (started_by, report) SELECT started_by, \
             REPLACE(report, '\"demo_resource_id\":{old_resource}', '{later}') FROM demo_races ORDER BY id LIMIT 1"
        )));
    }
    // An hour ago in UTC, as `created_at` is kept; this connection is not the pool's, so on
    // PostgreSQL its time zone is the server's, and `now() AT TIME ZONE 'UTC'` says UTC itself.
    sql(Sql::per_engine(
        "UPDATE demo_resources SET created_at = NOW() - INTERVAL 1 HOUR",
        "UPDATE demo_resources SET created_at = (now() AT TIME ZONE 'UTC') - INTERVAL '1 hour'",
    ));
    assert_eq!(booked(&app, old_resource), 1, "the first race booked its one day");

    let report = race(&logged_in(&app, "patient").await, small).await;
    assert_eq!(
        count(&app, "SELECT COUNT(*) AS n FROM demo_races WHERE id > ?", 0),
        haita::lab::demo::KEEP_RACES
    );
    assert_eq!(booked(&app, old_resource), 0, "an old race's bookings are gone");
    assert_eq!(count(&app, "SELECT COUNT(*) AS n FROM demo_resources WHERE id = ?", old_resource), 0);
    assert_eq!(booked(&app, id_of(&report["results"][0])), 1, "the new race's are kept");
}

#[actix_web::test]
async fn pool_pitfall_leaks_locks_and_the_race_closes_exactly_the_leaking_sessions() {
    let app = TestApp::spawn_lab().await;
    let client = logged_in(&app, "pitfall").await;

    let report = race(
        &client,
        json!({"strategy": "named-lock-pool-pitfall", "clients": 32, "attempts": 96, "pause_ms": 5}),
    )
    .await;

    let result = &report["results"][0];
    let leaked = result["leaked_locks"].as_i64().expect("leaked_locks");
    let beyond = beyond_capacity(&app, id_of(result));
    assert!(leaked + beyond > 0, "the pitfall should leak a lock or double-book: {result}");
    assert_eq!(result["double_bookings"].as_i64(), Some(beyond));
    let closed: Vec<i64> =
        result["closed_sessions"].as_array().expect("closed").iter().filter_map(Value::as_i64).collect();
    assert_eq!(closed.is_empty(), leaked == 0, "{result}");
    if result["missed_releases"].as_i64() > Some(0) {
        let release = match app.db.pool.engine() {
            haita::db::Engine::Mysql => "RELEASE_LOCK",
            haita::db::Engine::Postgres => "pg_advisory_unlock",
        };
        assert!(result["verdict"].as_str().is_some_and(|v| v.contains(release)), "{result}");
    }
    // Nothing connected to this database holds a named lock any more: the leaking sessions
    // were closed and the race's pool dropped; the app's own pool was never involved.
    invariants::no_named_lock_left_held(&app.db);
    let alive: Vec<i64> = closed.iter().copied().filter(|id| !session_ends(&app, *id)).collect();
    assert!(alive.is_empty(), "closed sessions are gone, still there: {alive:?}");
}

#[actix_web::test]
async fn anyone_may_look_but_only_a_logged_in_user_may_race_within_bounds() {
    let app = TestApp::spawn_lab().await;
    let anonymous = app.client(0);
    let page = anonymous.get("/demo").await;
    assert_eq!(page.status(), 200);
    let page = page.text().await.expect("page");
    for s in Strategy::ALL {
        assert!(page.contains(s.name()), "{} explained", s.name());
    }
    assert!(page.contains("Watch a race</button>") && page.contains("No race has run yet"));
    assert!(page.contains("Log in</a> to choose the strategies"));
    let refused = anonymous.post_json("/api/v1/demo/races", &json!({"strategy": "no-lock"})).await;
    assert_eq!(refused.status(), 401);

    let client = logged_in(&app, "bounded").await;
    for (body, status, code) in [
        (json!({"strategy": "no-lock", "clients": 0}), 422, "invalid_input"),
        (json!({"strategy": "no-lock", "clients": 257}), 422, "invalid_input"),
        (json!({"strategy": "no-lock", "attempts": 10_001}), 422, "invalid_input"),
        (json!({"strategy": "no-lock", "pause_ms": 1_001}), 422, "invalid_input"),
        (json!({"strategy": "optimistic"}), 422, "invalid_input"),
        (json!({"strategy": []}), 422, "invalid_input"),
        (json!({"strategy": "no-lock", "clients": -1}), 400, "malformed_body"),
        (json!({"strategy": "no-lock", "threads": 4}), 400, "malformed_body"),
    ] {
        let response = client.post_json("/api/v1/demo/races", &body).await;
        assert_eq!(response.status(), status, "{body}");
        assert_eq!(error_code(response).await, code, "{body}");
    }

    let code = anonymous.get("/demo/code/named-lock-pool-pitfall").await.text().await.expect("code");
    assert!(code.contains("fn named_lock_pool_pitfall(") && code.contains("RELEASE_LOCK"));
    assert_eq!(anonymous.get("/demo/code/nonsense").await.status(), 404);
    assert_eq!(anonymous.get("/api/v1/demo/races/999").await.status(), 404);
}

#[actix_web::test]
async fn a_second_race_on_the_same_instance_is_refused_while_one_runs() {
    let app = TestApp::spawn_lab().await;
    let first = logged_in(&app, "first").await;
    let second = logged_in(&app, "second").await;

    // Five rounds of a 200 ms pause: about a second.
    let slow = json!({"strategy": "no-lock", "clients": 4, "attempts": 20, "pause_ms": 200});
    let running = actix_web::rt::spawn(async move { race(&first, slow).await });
    poll::until_async("the first race to be running", std::time::Duration::from_secs(30), async || {
        let live: Value = second.get("/api/v1/demo/races/live").await.json().await.expect("live");
        !live["race"].is_null()
    })
    .await;

    let refused = second.post_json("/api/v1/demo/races", &json!({"strategy": "no-lock"})).await;
    assert_eq!(refused.status(), 409);
    assert!(refused.headers().contains_key("retry-after"));
    assert_eq!(error_code(refused).await, "busy");

    let report = running.await.expect("first race");
    assert_eq!(report["results"][0]["attempts"], 20);
    let again = second
        .post_json("/api/v1/demo/races", &json!({"strategy": "no-lock", "clients": 2, "attempts": 2}))
        .await;
    assert_eq!(again.status(), 201, "the slot is free once the race is over");
}

/// Starts, from the page's form, a race slow enough to be watched: about 40 rounds of a 20 ms
/// pause per strategy, over a second each.
async fn start_a_slow_race(racer: &Client) {
    let token = racer.csrf_token("/demo").await;
    let form = [
        ("csrf_token", token.as_str()),
        ("strategy", "no-lock"),
        ("strategy", "named-lock"),
        ("clients", "8"),
        ("attempts", "320"),
        ("pause_ms", "20"),
    ];
    assert_eq!(racer.post_form("/demo/races", &form).await.status(), 303);
}

/// Waits (bounded) until this instance has no race running, and returns the id of the report
/// the last one stored.
async fn race_over(client: &Client) -> i64 {
    let mut live = Value::Null;
    poll::until_async("the race to end", std::time::Duration::from_secs(120), async || {
        live = client.get("/api/v1/demo/races/live").await.json().await.expect("live");
        live["race"].is_null()
    })
    .await;
    assert_eq!(live["finished"]["outcome"], "report", "{live}");
    live["finished"]["race_id"].as_i64().expect("race id")
}

#[actix_web::test]
async fn the_page_runs_a_race_from_its_form_and_shows_table_chart_and_verdicts() {
    let app = TestApp::spawn_lab().await;
    let browser = logged_in(&app, "viewer").await;
    let token = browser.csrf_token("/demo").await;

    let posted = browser
        .post_form(
            "/demo/races",
            &[
                ("csrf_token", &token),
                ("strategy", "no-lock"),
                ("strategy", "named-lock"),
                ("clients", "16"),
                ("attempts", "32"),
                ("pause_ms", "5"),
            ],
        )
        .await;
    assert_eq!(posted.status(), 303, "the race runs on; the browser is sent to watch it");
    assert_eq!(posted.headers()["location"], "/demo#live");
    let id = race_over(&browser).await;

    let page = browser.get(&format!("/demo?race={id}")).await.text().await.expect("page");
    assert!(page.contains("<svg") && page.contains("Double bookings"));
    assert!(page.contains("docs/named-lock-check-then-insert.md"), "the verdict names the pitfall");
    let anonymous = app.client(0).get("/demo").await.text().await.expect("page");
    assert!(anonymous.contains(&format!("Race #{id}")), "the latest race is shown to anyone");

    let forged = browser.post_form("/demo/races", &[("csrf_token", "forged"), ("strategy", "no-lock")]).await;
    assert_eq!(forged.status(), 403);
    let bad = browser
        .post_form("/demo/races", &[("csrf_token", &token), ("strategy", "unique-slot"), ("clients", "many")])
        .await;
    assert_eq!(bad.status(), 422);
    let page = bad.text().await.expect("page");
    assert!(page.contains("id=\"refused\"") && page.contains("not a whole number"), "said on the page");
    assert!(page.contains(r#"name="clients" value="many""#), "the form as typed");
    assert!(page.contains(r#"value="unique-slot" checked"#) && !page.contains(r#"value="no-lock" checked"#));
}

/// Reads server-sent events from `response` until `enough` says so (bounded by `secs`); each
/// event's data is returned as JSON.
async fn events_until(
    mut response: reqwest::Response,
    secs: u64,
    enough: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let mut events = Vec::new();
    let mut buffer = String::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let chunk = tokio::time::timeout_at(deadline, response.chunk())
            .await
            .unwrap_or_else(|_| panic!("no end within {secs} s; events: {events:?}"))
            .expect("stream")
            .expect("the stream stays open");
        buffer.push_str(std::str::from_utf8(&chunk).expect("utf-8"));
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            if let Some(data) = event.strip_prefix("data: ") {
                let value: Value = serde_json::from_str(data.trim()).expect("event data is JSON");
                let done = enough(&value);
                events.push(value);
                if done {
                    return events;
                }
            }
        }
    }
}

#[actix_web::test]
async fn a_race_is_streamed_to_every_visitor_while_it_runs_and_holds_the_form() {
    let app = TestApp::spawn_lab().await;
    let racer = logged_in(&app, "streamer").await;
    let visitor = app.client(0);
    let stream = visitor.get("/demo/races/live").await;
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()["content-type"], "text/event-stream");

    start_a_slow_race(&racer).await;

    // Another visitor's page, while it runs: the race shown, the button held.
    let page = visitor.get("/demo").await.text().await.expect("page");
    let section = page.split("<section id=\"live\"").nth(1).and_then(|rest| rest.split('>').next());
    assert!(section.is_some_and(|tag| !tag.contains(" hidden")), "shown, not hidden: {section:?}");
    assert!(page.contains("Race in progress") && page.contains("by streamer"), "{page}");
    assert!(page.contains(r#"class="run-race" disabled"#), "nobody can start a second race meanwhile");
    // A second race from the form is refused on the page, with the form as typed.
    let second = logged_in(&app, "impatient").await;
    let token = second.csrf_token("/demo").await;
    let refused = second
        .post_form("/demo/races", &[("csrf_token", &token), ("strategy", "serializable"), ("clients", "3")])
        .await;
    assert_eq!(refused.status(), 409);
    assert!(refused.headers().contains_key("retry-after"));
    let refused = refused.text().await.expect("page");
    assert!(
        refused.contains("already running") && refused.contains(r#"name="clients" value="3""#),
        "{refused}"
    );

    let events =
        events_until(stream, 120, |live| live["race"].is_null() && live["finished"]["outcome"] == "report")
            .await;
    let during: Vec<&Value> = events.iter().filter(|e| !e["race"].is_null()).collect();
    let strategies = |e: &Value| e["race"]["strategies"].as_array().expect("strategies").clone();
    let midway = during.iter().any(|e| {
        strategies(e)
            .iter()
            .any(|s| s["stage"] == "running" && s["attempts"].as_u64().is_some_and(|n| n > 0 && n < 320))
    });
    assert!(midway, "progress is shown before a strategy ends: {during:?}");
    let seen_double = during.iter().any(|e| {
        let s = &strategies(e)[0];
        s["stage"] == "running" && s["double_bookings"].as_i64().is_some_and(|n| n > 0)
    });
    assert!(seen_double, "no-lock's double bookings show while it runs, counted in the database");
    // Counts only go up, strategy by strategy.
    for pair in during.windows(2) {
        for (before, after) in strategies(pair[0]).iter().zip(strategies(pair[1]).iter()) {
            assert!(after["attempts"].as_u64() >= before["attempts"].as_u64());
        }
    }
    // The last state of each strategy is what the stored report says, and the database holds.
    let last = strategies(during.last().expect("a state while running"));
    let id = events.last().expect("the end")["finished"]["race_id"].as_i64().expect("race id");
    let report: Value = visitor.get(&format!("/api/v1/demo/races/{id}")).await.json().await.expect("report");
    for (shown, result) in last.iter().zip(report["results"].as_array().expect("results")) {
        assert_eq!(shown["stage"], "done");
        for field in ["attempts", "confirmed", "double_bookings"] {
            assert_eq!(shown[field], result[field], "{field}: {shown} vs {result}");
        }
        assert_eq!(result["double_bookings"].as_i64(), Some(beyond_capacity(&app, id_of(result))));
    }
    assert!(report["results"][0]["double_bookings"].as_i64() > Some(0));
    assert_eq!(report["results"][1]["double_bookings"], 0);
}

#[actix_web::test]
async fn a_visitor_without_an_account_may_start_the_standard_race_and_is_rationed() {
    let app = TestApp::spawn_lab().await;
    let visitor = app.client(0);
    let token = visitor.csrf_token("/demo").await;
    let started = visitor.post_form("/demo/races", &[("csrf_token", &token)]).await;
    assert_eq!(started.status(), 303);
    let live: Value = visitor.get("/api/v1/demo/races/live").await.json().await.expect("live");
    assert_eq!(live["race"]["started_by"], "a visitor");
    assert_eq!(live["race"]["clients"], 8, "a visitor gets the small race");
    let names: Vec<&str> = live["race"]["strategies"]
        .as_array()
        .expect("strategies")
        .iter()
        .filter_map(|s| s["strategy"].as_str())
        .collect();
    let available: Vec<&str> =
        Strategy::available_on(app.db.pool.engine()).into_iter().map(|s| s.name()).collect();
    assert_eq!(names, available, "every strategy this server can run");
    let id = race_over(&visitor).await;
    // The page says who in the reader's language: 訪問者 on a Japanese page, not "a visitor".
    let japanese = reading_in(&app, "ja").await.get("/demo").await.text().await.expect("page");
    // (The stored name stays in one attribute, for the live race's script to translate it too.)
    let shown = japanese.replace("data-visitor-name=\"a visitor\"", "");
    assert!(shown.contains("訪問者") && !shown.contains("a visitor"), "{japanese}");
    let report: Value = visitor.get(&format!("/api/v1/demo/races/{id}")).await.json().await.expect("report");
    for result in report["results"].as_array().expect("results") {
        let strategy = Strategy::parse(result["strategy"].as_str().expect("name")).expect("known");
        if strategy.is_correct() {
            assert_eq!(result["double_bookings"], 0, "{result}");
        }
    }
    // Visitors share one cooldown: the next visitor's race is refused, said on the page.
    let next = app.client(0);
    let token = next.csrf_token("/demo").await;
    let refused = next.post_form("/demo/races", &[("csrf_token", &token)]).await;
    assert_eq!(refused.status(), 429);
    assert!(refused.text().await.expect("page").contains("you may start another in"));
    assert_eq!(
        next.post_json("/api/v1/demo/races", &json!({"strategy": "no-lock"})).await.status(),
        401,
        "the API still wants an account"
    );
}

/// The most connections a visitor's race may hold at once (`race::Bounds::VISITOR`).
const VISITOR_CONNECTIONS: i64 = 4;

/// Sessions connected to the test's database, other than the one asking.
fn sessions_on(database: &str, conn: &mut haita::db::DbConn) -> i64 {
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    const SESSIONS: Sql = Sql::per_engine(
        "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()",
        "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE datname = ? AND pid <> pg_backend_pid()",
    );
    haita::db::cached_sql::<diesel::sql_types::Untyped>(SESSIONS)
        .bind::<diesel::sql_types::Text, _>(database)
        .get_result::<Count>(conn)
        .expect("sessions")
        .n
}

/// A visitor may not ask for a bigger race than a visitor's (422, said on the page), their race
/// holds at most four connections of its own at once, counted by the server while it runs, and
/// the same address waits the visitors' longer cooldown before the next one. Before, a visitor's
/// race took every strategy to `POOL_SIZE` connections (24 here), and the cooldown was 30 s.
#[actix_web::test]
async fn a_visitors_race_is_bounded_and_holds_at_most_its_connection_budget() {
    let db = crate::common::TestDb::new();
    haita::lab::prepare(&db.pool).expect("lab migrations");
    let app = TestApp::spawn_on(db, 1, |c| {
        c.demo_mode = true;
        c.pool_size = 24;
    })
    .await;
    let visitor = app.client(0);
    let token = visitor.csrf_token("/demo").await;
    let too_big = visitor.post_form("/demo/races", &[("csrf_token", &token), ("clients", "64")]).await;
    assert_eq!(too_big.status(), 422, "more clients than a visitor may ask for");
    assert!(too_big.text().await.expect("page").contains("between 1 and 8"), "the page names the bound");

    // Sample the server's sessions on the test database from the start of the race to its end.
    let racing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (racing, url, name) = (racing.clone(), app.db.url.clone(), app.db.name.clone());
        std::thread::spawn(move || {
            let mut conn = haita::db::DbConn::open(&url).expect("the sampler's session");
            let mut peak = 0;
            while racing.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(sessions_on(&name, &mut conn));
                std::thread::sleep(poll::INTERVAL);
            }
            peak
        })
    };
    let started = visitor.post_form("/demo/races", &[("csrf_token", &token)]).await;
    assert_eq!(started.status(), 303, "a visitor's race within the bounds");
    let id = race_over(&visitor).await;
    racing.store(false, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.join().expect("sampler");

    // The app's own pool and the test's pool only grow while the race runs: read at the end,
    // they are at least what they were at the peak, so what is left over is the race's own.
    let metrics = visitor.metrics().await;
    let app_pool: i64 = metrics
        .lines()
        .find_map(|line| line.strip_prefix("haita_pool_connections "))
        .and_then(|n| n.trim().parse().ok())
        .expect("haita_pool_connections");
    let test_pool = i64::from(app.db.pool.state().connections);
    let race_sessions = peak - app_pool - test_pool;
    assert!(
        race_sessions <= VISITOR_CONNECTIONS,
        "the race held {race_sessions} sessions of its own at once (peak {peak}, app pool {app_pool}, test pool {test_pool})"
    );
    let report: Value = visitor.get(&format!("/api/v1/demo/races/{id}")).await.json().await.expect("report");
    for result in report["results"].as_array().expect("results") {
        assert!(result["pool_size"].as_i64() <= Some(VISITOR_CONNECTIONS), "{result}");
    }

    let again = visitor.post_form("/demo/races", &[("csrf_token", &token)]).await;
    assert_eq!(again.status(), 429, "the same address, right after its race");
    let retry_after: u64 = again
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!(retry_after > 30, "a visitor's own cooldown is longer than a user's 30 s: {retry_after}");
}

#[actix_web::test]
async fn one_booking_endpoint_serves_the_correct_strategies_and_refuses_the_race_only_ones() {
    let app = TestApp::spawn_lab().await;
    let client = logged_in(&app, "bencher").await;
    let day = "2300-01-01";
    for strategy in [
        "named-lock",
        "parent-row-lock",
        "unique-slot",
        "serializable",
        "redis-lock",
        "file-lock",
        "lock-table",
    ] {
        let resource = haita::lab::demo::create_resource(
            &mut app.db.conn(),
            Strategy::parse(strategy).expect("known"),
            1,
        )
        .expect("demo resource");
        let body = json!({"strategy": strategy, "resource_id": resource, "date": day});
        assert_eq!(client.post_json("/api/v1/demo/bookings", &body).await.status(), 201, "{strategy}");
        let full = client.post_json("/api/v1/demo/bookings", &body).await;
        assert_eq!(full.status(), 409, "{strategy}");
        assert_eq!(error_code(full).await, "fully_booked");
        assert_eq!(booked(&app, resource), 1);
    }
    for (body, code) in [
        (json!({"strategy": "no-lock", "resource_id": 1, "date": day}), "unsafe_strategy"),
        (json!({"strategy": "named-lock-pool-pitfall", "resource_id": 1, "date": day}), "unsafe_strategy"),
        (json!({"strategy": "named-lock-unqueued", "resource_id": 1, "date": day}), "race_only"),
        (json!({"strategy": "named-lock-coalesced", "resource_id": 1, "date": day}), "race_only"),
        (json!({"strategy": "redis-lock-expiring", "resource_id": 1, "date": day}), "unsafe_strategy"),
        (json!({"strategy": "redis-lock-fenced", "resource_id": 1, "date": day}), "race_only"),
        (
            json!({"strategy": "exclusion-constraint", "resource_id": 1, "date": day}),
            match app.db.pool.engine() {
                haita::db::Engine::Postgres => "race_only",
                haita::db::Engine::Mysql => "strategy_unavailable",
            },
        ),
        (json!({"strategy": "named-lock", "resource_id": 999_999, "date": day}), "unknown_resource"),
        (json!({"strategy": "named-lock", "resource_id": 0, "date": day}), "invalid_input"),
        (json!({"strategy": "named-lock", "resource_id": 1, "date": "tomorrow"}), "invalid_input"),
        (json!({"strategy": "named-lock", "resource_id": 1, "date": "+262142-12-18"}), "invalid_input"),
        (json!({"strategy": "named-lock", "resource_id": 1, "date": "-0001-01-01"}), "invalid_input"),
    ] {
        let response = client.post_json("/api/v1/demo/bookings", &body).await;
        assert_eq!(response.status(), 422, "{body}");
        assert_eq!(error_code(response).await, code, "{body}");
    }
    invariants::no_named_lock_left_held(&app.db);
}

/// The single-booking API cannot grow the demo's tables without bound: a demo resource holds at
/// most `MAX_BOOKINGS_PER_DEMO_RESOURCE` bookings.
#[actix_web::test]
async fn a_demo_resource_takes_a_bounded_number_of_bookings() {
    let app = TestApp::spawn_lab().await;
    let client = logged_in(&app, "filler").await;
    let strategy = Strategy::parse("unique-slot").expect("known");
    let resource = haita::lab::demo::create_resource(&mut app.db.conn(), strategy, 1).expect("demo resource");
    let max = haita::lab::demo::routes::MAX_BOOKINGS_PER_DEMO_RESOURCE;
    let start = chrono::NaiveDate::from_ymd_opt(2300, 1, 1).expect("day");
    let rows: Vec<String> = (0..max - 1)
        .map(|i| format!("({resource}, '{}', 1)", start + chrono::Days::new(u64::try_from(i).expect("i"))))
        .collect();
    haita::db::cached_sql::<diesel::sql_types::Untyped>(&format!(
        "INSERT INTO demo_bookings (demo_resource_id, day, client) VALUES {}",
        rows.join(", ")
    ))
    .execute(&mut app.db.conn())
    .expect("fill");
    let day = |offset: u64| (start + chrono::Days::new(offset)).to_string();
    let body = |date: String| json!({"strategy": "unique-slot", "resource_id": resource, "date": date});

    let last = client.post_json("/api/v1/demo/bookings", &body(day(1000))).await;
    assert_eq!(last.status(), 201, "the last booking within the bound");
    let over = client.post_json("/api/v1/demo/bookings", &body(day(1001))).await;
    assert_eq!((over.status().as_u16(), error_code(over).await.as_str()), (409, "demo_resource_full"));
    assert_eq!(booked(&app, resource), max);
}

#[actix_web::test]
async fn the_cli_prints_the_race_table() {
    let app = TestApp::spawn().await;
    let race = ["demo", "race", "--strategy", "no-lock", "--strategy", "unique-slot"];
    let output = haita(&app, &[&race[..], &["--clients", "8", "--attempts", "16"]].concat());
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains("8 clients, 16 attempts"), "{table}");
    assert!(table.lines().any(|l| l.starts_with("no-lock ")), "{table}");
    assert!(table.lines().any(|l| l.starts_with("unique-slot ")), "{table}");
    assert!(table.contains("unique-slot: No double booking"), "{table}");

    let bad = haita(&app, &["demo", "race", "--strategy", "nope"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no-lock, named-lock"));
}

/// Both load generators: the built-in HTTP clients, and `wrk` with its generated script (the
/// test set-up installs it). Every request of either is answered as a booking or a refusal;
/// `named-lock` books on a small realistic history, its users taking turns with cookies the
/// bench sealed itself, and no night ends over capacity.
#[actix_web::test]
async fn the_bench_measures_app_and_raw_and_drops_its_database() {
    let app = TestApp::spawn().await;
    for (driver, strategy) in [("builtin", "unique-slot"), ("wrk", "named-lock")] {
        let bench = ["bench", "bookings", "--clients", "2", "--keys", "hot,spread", "--strategy", strategy];
        let small = ["--users", "200", "--history", "20000"];
        let output = haita(
            &app,
            &[&bench[..], &["--seconds", "1", "--repeat", "1", "--driver", driver], &small[..]].concat(),
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
        for keys in ["hot", "spread"] {
            let row = stdout
                .lines()
                .find(|l| l.starts_with(&format!("{strategy:<16} {keys:<7}")))
                .unwrap_or_else(|| panic!("no {keys} row: {stdout}"));
            let answered: f64 = row
                .split('|')
                .nth(1)
                .and_then(|app| app.split_whitespace().next()?.parse().ok())
                .expect("app ans/s");
            assert!(answered > 0.0, "{driver}: {row}");
        }
        assert!(
            !stdout.lines().any(|l| l.starts_with("    app: ") && !l.contains(", 0 errors")),
            "{driver}: requests answered with errors: {stdout}"
        );
        assert!(
            stdout.contains(
                "after the bench: 0 nights over capacity and 0 users booked twice on a night (real), \
                 0 overbooked demo keys"
            ),
            "{stdout}"
        );
    }

    #[derive(QueryableByName)]
    struct Exists {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let left: Exists = haita::db::cached_sql::<diesel::sql_types::Untyped>(Sql::per_engine(
        "SELECT COUNT(*) AS n FROM information_schema.SCHEMATA \
         WHERE LOCATE(CONCAT(DATABASE(), '_bench_'), SCHEMA_NAME) = 1",
        "SELECT COUNT(*) AS n FROM pg_database WHERE starts_with(datname, current_database() || '_bench_')",
    ))
    .get_result(&mut app.db.raw_connection())
    .expect("schemata");
    assert_eq!(left.n, 0, "the bench database is dropped");
    assert_eq!(real_reservations(&app), 0, "the bench never touches DATABASE_URL's data");
}

#[actix_web::test]
async fn the_coalescing_bench_runs_all_three_paths_and_drops_its_database() {
    let app = TestApp::spawn().await;
    let output =
        haita(&app, &["bench", "coalescing", "--clients", "4", "--seconds", "1", "--history", "20000"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    for path in ["unqueued ", "one at a time ", "coalesced "] {
        assert!(stdout.lines().any(|l| l.starts_with(path)), "{path}: {stdout}");
    }
    assert!(stdout.contains("coalesced / one at a time: "), "{stdout}");
    assert_eq!(real_reservations(&app), 0, "the bench never touches DATABASE_URL's data");
}

/// Every path of both parts runs and places orders without a failure; the numbers themselves
/// are the machine's, not the test's.
#[actix_web::test]
async fn the_orders_bench_runs_every_path_in_process_and_through_http_and_drops_its_database() {
    let app = TestApp::spawn().await;
    let output = haita(
        &app,
        &["bench", "orders", "--clients", "4", "--seconds", "1", "--repeat", "1", "--keys", "hot"],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    let rows: Vec<&str> =
        ["hot     raw FOR UPDATE ", "hot     one at a time ", "hot     coalesced ", "hot     ", "spread  "]
            .iter()
            .map(|start| {
                stdout.lines().rfind(|l| l.starts_with(start)).unwrap_or_else(|| panic!("{start}: {stdout}"))
            })
            .collect();
    for row in &rows {
        let columns: Vec<&str> = row.split_whitespace().collect();
        let at = columns.iter().position(|c| c.parse::<f64>().is_ok()).expect("a number");
        let (placed, failed): (f64, u64) =
            (columns[at].parse().expect("orders/s"), columns[at + 3].parse().expect("failed"));
        assert!(placed > 0.0 && failed == 0, "{row}");
    }
    assert!(
        !stdout.lines().any(|l| l.starts_with("spread  raw")),
        "--keys hot measures hot in process: {stdout}"
    );
    assert!(stdout.contains("hot: coalesced / one at a time "), "{stdout}");
    assert!(stdout.contains("through HTTP: hot / spread "), "{stdout}");
    let orders: i64 =
        haita::schema::orders::table.count().get_result(&mut app.db.raw_connection()).expect("count");
    assert_eq!(orders, 0, "the bench never touches DATABASE_URL's data");
}

#[actix_web::test]
async fn the_stuck_holder_bench_runs_both_paths_with_no_error_on_the_hot_day() {
    let app = TestApp::spawn().await;
    let output = haita(&app, &["bench", "stuck-holder", "--clients", "8", "--hold", "1"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    for path in ["unqueued ", "coalesced "] {
        let row = stdout.lines().find(|l| l.starts_with(path)).unwrap_or_else(|| panic!("{path}: {stdout}"));
        assert_eq!(
            row.split_whitespace().last(),
            Some("0"),
            "no hot-day request failed otherwise than busy: {row}"
        );
    }
    assert!(stdout.contains("bystander p99, unqueued / coalesced: "), "{stdout}");
    assert_eq!(real_reservations(&app), 0, "the bench never touches DATABASE_URL's data");
}

/// Runs the `haita` binary against the test's database and waits for it.
fn haita(app: &TestApp, args: &[&str]) -> std::process::Output {
    crate::common::haita(&app.db.url).args(args).env("DEMO_MODE", "1").output().expect("run haita")
}

/// A client reading the pages in `lang`, picked with the header's switch.
async fn reading_in(app: &TestApp, lang: &str) -> Client {
    let client = app.client(0);
    client.speak(lang).await;
    client
}

/// Issue 34, item 9: while the first race runs, the place of its results says a race is running,
/// not "No race has run yet"; in English and Japanese.
#[actix_web::test]
async fn while_the_first_race_runs_its_results_place_says_a_race_is_running() {
    let app = TestApp::spawn_lab().await;
    let readers = [(reading_in(&app, "en").await, "en"), (reading_in(&app, "ja").await, "ja")];
    for (reader, lang) in &readers {
        let page = reader.get("/demo").await.text().await.expect("page");
        let results = page.split("id=\"race-results\"").nth(1).expect("results");
        let none = if *lang == "en" { "No race has run yet" } else { "まだ競争が走っていません" };
        assert!(results.contains(none), "{lang}, before any race: {results}");
    }
    let racer = logged_in(&app, "first").await;
    start_a_slow_race(&racer).await;
    for (reader, lang) in &readers {
        let page = reader.get("/demo").await.text().await.expect("page");
        assert!(page.contains(r#"class="run-race" disabled"#), "{lang}: the race still runs");
        let results = page.split("id=\"race-results\"").nth(1).expect("results");
        let (running, none) = if *lang == "en" {
            ("A race is running", "No race has run yet")
        } else {
            ("競争が走っています", "まだ競争が走っていません")
        };
        assert!(results.contains(running) && !results.contains(none), "{lang}: {results}");
    }
    race_over(&racer).await;
}

/// The page's text with every link's text taken out: what it says in plain words.
fn outside_links(page: &str) -> String {
    let mut plain = String::new();
    let mut rest = page;
    while let Some(at) = rest.find("<a ") {
        plain.push_str(&rest[..at]);
        rest = rest[at..].find("</a>").map_or("", |end| &rest[at + end + 4..]);
    }
    plain.push_str(rest);
    plain
}

/// Issue 34, item 9: every doc the demo page names is a link, to the doc served by the app
/// itself (so it works offline, in `DEMO_MODE`), in the reader's language.
#[actix_web::test]
async fn the_docs_the_demo_names_are_links_to_pages_the_app_serves() {
    let app = TestApp::spawn_lab().await;
    let racer = logged_in(&app, "reader").await;
    race(&racer, json!({"strategy": "all", "clients": 8, "attempts": 16})).await;
    for lang in ["en", "ja"] {
        let reader = reading_in(&app, lang).await;
        let page = reader.get("/demo").await.text().await.expect("page");
        let plain = outside_links(&page);
        if let Some(at) = plain.find(".md") {
            let before: String =
                plain[..at].chars().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
            panic!("{lang}: a doc named but not linked: …{before}.md");
        }
        let links: std::collections::BTreeSet<&str> =
            page.split("href=\"/demo/docs/").skip(1).filter_map(|rest| rest.split('"').next()).collect();
        assert!(links.len() >= 5, "{lang}: {links:?}");
        for name in links {
            let doc = reader.get(&format!("/demo/docs/{name}")).await;
            assert_eq!(doc.status(), 200, "{lang}: /demo/docs/{name}");
            let doc = doc.text().await.expect("doc");
            let folder = if lang == "en" { "docs" } else { "docs/ja" };
            let source = std::fs::read_to_string(format!("{}/{folder}/{name}", env!("CARGO_MANIFEST_DIR")))
                .expect("the doc in the repository");
            let title = source.lines().next().expect("a title").trim_start_matches("# ");
            assert!(doc.contains(&format!("<h1>{title}</h1>")), "{lang}: {name} shows {title:?}: {doc}");
            // Rendered, not shown as its Markdown: its sections are headings, not "## " lines.
            assert!(doc.contains("<h2>") && !doc.contains("\n## "), "{lang}: {name} rendered: {doc}");
        }
    }
    assert_eq!(app.client(0).get("/demo/docs/..%2FCargo.toml").await.status(), 404);
    assert_eq!(app.client(0).get("/demo/docs/README.md").await.status(), 404, "only the docs the demo names");
}

/// The demo accounts' passwords are on the login page, so logging in as one is not a credential:
/// a demo account gets a visitor's race (bounded, 422 past it) and a visitor's cooldown per
/// address, and the address's cooldown holds whoever logs in next, demo account or not. Before,
/// alice, bob and carol in turn started full-size races back to back from one address.
#[actix_web::test]
async fn demo_accounts_race_as_visitors_and_every_race_waits_its_address() {
    let app = TestApp::spawn_lab().await;
    let from = "192.0.2.44";
    let demo = |name: &'static str| {
        let app = &app;
        async move {
            let user = app.user(name, Role::Customer);
            diesel::sql_query(format!("UPDATE users SET is_demo = TRUE WHERE id = {}", user.id))
                .execute(&mut app.db.conn())
                .expect("make a demo account");
            let client = Client::forwarded_for(app.address(), from);
            client.login(&user).await;
            client
        }
    };
    let alice = demo("alice").await;
    let full = alice.post_json("/api/v1/demo/races", &json!({"strategy": "all", "clients": 256})).await;
    assert_eq!(full.status(), 422, "a demo account asks for a visitor's race at most");
    assert!(full.text().await.expect("body").contains("between 1 and 8"), "the bound is named");
    let small = race(&alice, json!({"strategy": "named-lock", "clients": 8, "attempts": 16})).await;
    assert!(small["results"][0]["pool_size"].as_i64() <= Some(VISITOR_CONNECTIONS), "{small}");

    let bob = demo("bob").await;
    let again = bob.post_json("/api/v1/demo/races", &json!({"strategy": "named-lock", "clients": 8})).await;
    assert_eq!(again.status(), 429, "another demo account from the same address");
    let retry_after: u64 = again.headers()["retry-after"].to_str().expect("ascii").parse().expect("seconds");
    assert!(retry_after > 30, "a visitor's cooldown, not a user's: {retry_after}");
    assert_eq!(error_code(again).await, "too_many_races");

    // A demo account's flash sale waits the same address's cooldown (the form answers in place).
    let token = bob.csrf_token("/demo").await;
    let sale = bob.post_form("/demo/flash-sales", &[("csrf_token", &token)]).await;
    assert_eq!(sale.status(), 429, "a demo account's flash sale from the same address");
    assert!(sale.headers().contains_key("retry-after"));
    assert!(sale.text().await.expect("page").contains("id=\"flash-refused\""));

    let real = Client::forwarded_for(app.address(), from);
    real.login(&app.user("dave", Role::Customer)).await;
    let own = real.post_json("/api/v1/demo/races", &json!({"strategy": "named-lock", "clients": 8})).await;
    assert_eq!(own.status(), 429, "the address's cooldown holds a real account too");
}

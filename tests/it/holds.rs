//! Checkout holds under concurrency and at their edges: never more held than on hand, at any
//! moment; expiry by the database's clock; an order from a hold exactly once; every refusal a
//! sentence, never a 500, never a trace — checked in the database.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use diesel::prelude::*;
use haita::auth::Role;
use serde_json::{Value, json};
use tokio::sync::Barrier;

use crate::common::{
    Client, TestApp, TestDb, error_code, expire_holds_of, invariants, on_both_engines, poll,
};

mod browser;
mod pages;

/// `POST /api/v1/holds`.
async fn hold(client: &Client, product: i64, quantity: i64) -> reqwest::Response {
    client.post_json("/api/v1/holds", &json!({"product_id": product, "quantity": quantity})).await
}

/// `POST /api/v1/holds` for a hold of `seconds`.
async fn hold_for(client: &Client, product: i64, quantity: i64, seconds: u64) -> reqwest::Response {
    client
        .post_json("/api/v1/holds", &json!({"product_id": product, "quantity": quantity, "seconds": seconds}))
        .await
}

/// A new hold's id (the answer must be a 201).
async fn held(response: reqwest::Response) -> i64 {
    assert_eq!(response.status(), 201, "hold refused: {:?}", response.text().await);
    let hold: Value = response.json().await.expect("json");
    assert_eq!(hold["state"], "live", "{hold}");
    hold["id"].as_i64().expect("id")
}

async fn order_from(client: &Client, hold: i64) -> reqwest::Response {
    client.send(reqwest::Method::POST, &format!("/api/v1/holds/{hold}/order")).await
}

async fn release(client: &Client, hold: i64) -> reqwest::Response {
    client.send(reqwest::Method::DELETE, &format!("/api/v1/holds/{hold}")).await
}

/// `n` clients, each logged in as a customer of its own (`{prefix}00`, …), spread over the app's
/// instances.
pub async fn customers(app: &TestApp, prefix: &str, n: usize) -> Vec<Client> {
    let clients: Vec<Client> = (0..n).map(|i| app.client(i)).collect();
    let users: Vec<_> = (0..n).map(|i| app.user(&format!("{prefix}{i:03}"), Role::Customer)).collect();
    // In waves, so a loaded machine's hashing slots are not all asked at once.
    for wave in clients.iter().zip(&users).collect::<Vec<_>>().chunks(25) {
        futures::future::join_all(wave.iter().map(|(c, u)| c.login(u))).await;
    }
    clients
}

fn orders_count(db: &TestDb) -> i64 {
    haita::schema::orders::table.count().get_result(&mut db.raw_connection()).expect("count")
}

fn holds_count(db: &TestDb) -> i64 {
    haita::schema::stock_holds::table.count().get_result(&mut db.raw_connection()).expect("count")
}

/// Checks, again and again on a connection of its own until told to stop, that nothing is
/// oversold *now*: on hand never below 0, live holds never above on hand, stock = ledger
/// (`invariants::holds_oversold_or_off_ledger`). Returns how many checks it made.
fn watch(db: &TestDb, stop: Arc<AtomicBool>, seen: Arc<AtomicUsize>) -> std::thread::JoinHandle<usize> {
    let pool = db.pool.clone();
    std::thread::spawn(move || {
        let mut conn = pool.get().expect("the watcher's connection");
        let mut checks = 0;
        while !stop.load(Ordering::SeqCst) {
            let found = invariants::holds_oversold_or_off_ledger(&mut conn);
            assert!(found.is_empty(), "oversold while the race ran: {found:?}");
            checks += 1;
            seen.store(checks, Ordering::SeqCst);
        }
        checks
    })
}

on_both_engines!(
    two_hundred_clients_racing_for_twenty_units_hold_exactly_twenty,
    two_hundred_clients_racing_for_twenty_units_hold_exactly_twenty_on_postgres => holds_race
);

/// The race: 200 customers at once, one unit each, 20 on hand, two instances. Exactly 20
/// hold, 180 are told there is none left, and at no moment is more held than on hand. When the
/// holds expire, the next customers hold those units; an order from an expired hold is refused;
/// an order without a hold never takes held units.
async fn holds_race(db: TestDb) {
    let app = TestApp::spawn_on(db, 2, |_| {}).await;
    let product = app.product("FLASH-1", 1500, 20);
    let clients = customers(&app, "racer", 200).await;

    // The watcher checks the invariants from before the first request to after the last answer.
    let (stop, seen) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let watcher = watch(&app.db, stop.clone(), seen.clone());
    poll::until("the watcher's first check", Duration::from_secs(10), || seen.load(Ordering::SeqCst) > 0);
    let at_start = seen.load(Ordering::SeqCst);
    let barrier = Arc::new(Barrier::new(clients.len()));
    let answers = futures::future::join_all(clients.iter().map(|client| {
        let barrier = barrier.clone();
        async move {
            barrier.wait().await;
            let response = hold(client, product, 1).await;
            let status = response.status().as_u16();
            let body: Value = response.json().await.expect("a JSON answer");
            (status, body)
        }
    }))
    .await;
    let before_the_end = seen.load(Ordering::SeqCst);
    stop.store(true, Ordering::SeqCst);
    let checks = watcher.join().expect("no check failed while the race ran");
    assert!(before_the_end > at_start, "the watcher checked while the requests were in flight");
    println!(
        "{checks} checks of the invariants, {} of them while the 200 requests were in flight",
        before_the_end - at_start
    );

    let won: Vec<i64> =
        answers.iter().filter(|(s, _)| *s == 201).filter_map(|(_, b)| b["id"].as_i64()).collect();
    let refused = answers.iter().filter(|(s, b)| *s == 409 && b["error"] == "insufficient_stock").count();
    assert_eq!(
        (won.len(), refused),
        (20, 180),
        "{:?}",
        answers.iter().filter(|(s, _)| *s != 201).map(|(s, b)| (s, b["error"].clone())).collect::<Vec<_>>()
    );
    assert!(
        answers.iter().filter(|(s, _)| *s == 409).all(|(_, b)| b["available"] == 0 && b["held"] == 20),
        "every refusal says why: none available, all 20 held"
    );
    assert_eq!(invariants::live_holds(&app.db, product), (20, 20));
    assert_eq!(invariants::on_hand(&app.db, product), 20, "a hold takes nothing from stock");
    invariants::holds_within_stock(&app.db);

    // Held units cannot be bought without their hold.
    let latecomer = &customers(&app, "late", 1).await[0];
    let refused = latecomer.order(&[(product, 1)]).await;
    assert_eq!(refused.status(), 409);
    let body: Value = refused.json().await.expect("json");
    assert_eq!((body["error"].as_str(), body["held"].as_i64()), (Some("insufficient_stock"), Some(20)));
    assert!(body["message"].as_str().is_some_and(|m| m.contains("checkouts")), "{body}");
    assert_eq!(orders_count(&app.db), 0);

    // The holds run out by the database's clock: the next buyers hold those units.
    assert_eq!(expire_holds_of(&app.db, product), 20);
    assert_eq!(invariants::live_holds(&app.db, product), (0, 0));
    let losers: Vec<&Client> =
        clients.iter().zip(&answers).filter(|(_, (s, _))| *s == 409).map(|(c, _)| c).take(21).collect();
    let again = futures::future::join_all(losers.iter().map(|c| hold(c, product, 1))).await;
    let statuses: Vec<u16> = again.iter().map(|r| r.status().as_u16()).collect();
    assert_eq!(
        (statuses.iter().filter(|s| **s == 201).count(), statuses.iter().filter(|s| **s == 409).count()),
        (20, 1),
        "{statuses:?}"
    );

    // A winner of the first round orders from its expired hold: refused, nothing taken.
    let (winner, first_hold) = clients
        .iter()
        .zip(&answers)
        .find(|(_, (s, _))| *s == 201)
        .map(|(c, (_, b))| (c, b["id"].clone()))
        .expect("a winner");
    let too_late = order_from(winner, first_hold.as_i64().expect("id")).await;
    assert_eq!(too_late.status(), 409);
    assert_eq!(error_code(too_late).await, "hold_expired");
    assert_eq!((orders_count(&app.db), invariants::on_hand(&app.db, product)), (0, 20));
    invariants::holds_within_stock(&app.db);
    invariants::orders_match_ledger(&app.db);
}

on_both_engines!(
    holders_and_buyers_racing_never_share_a_unit,
    holders_and_buyers_racing_never_share_a_unit_on_postgres => holders_and_buyers
);

/// Holds and plain orders of one product at once: 30 customers hold 1, 30 order 1 without a
/// hold, 12 on hand. Whatever the interleaving, held plus sold is exactly 12, never more.
async fn holders_and_buyers(db: TestDb) {
    let app = TestApp::spawn_on(db, 2, |_| {}).await;
    let product = app.product("MIXED-1", 900, 12);
    let clients = customers(&app, "mixed", 60).await;
    let (stop, seen) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let watcher = watch(&app.db, stop.clone(), seen.clone());
    poll::until("the watcher's first check", Duration::from_secs(10), || seen.load(Ordering::SeqCst) > 0);
    let barrier = Arc::new(Barrier::new(clients.len()));
    let statuses = futures::future::join_all(clients.iter().enumerate().map(|(i, client)| {
        let barrier = barrier.clone();
        async move {
            barrier.wait().await;
            let response =
                if i % 2 == 0 { hold(client, product, 1).await } else { client.order(&[(product, 1)]).await };
            (i % 2 == 0, response.status().as_u16())
        }
    }))
    .await;
    stop.store(true, Ordering::SeqCst);
    watcher.join().expect("no check failed while the race ran");

    let won = |holds: bool| statuses.iter().filter(|(h, s)| *h == holds && *s == 201).count();
    assert!(statuses.iter().all(|(_, s)| *s == 201 || *s == 409), "{statuses:?}");
    let (holders, buyers) = (won(true), won(false));
    assert_eq!(holders + buyers, 12, "{holders} held and {buyers} sold of 12");
    assert_eq!(invariants::live_holds(&app.db, product).1, i64::try_from(holders).expect("a count"));
    assert_eq!(invariants::on_hand(&app.db, product), 12 - u32::try_from(buyers).expect("a count"));
    invariants::holds_within_stock(&app.db);
    invariants::stock_matches_ledger(&app.db);
    invariants::orders_match_ledger(&app.db);
}

on_both_engines!(
    an_order_from_a_hold_takes_its_units_once_and_every_ended_hold_says_why,
    an_order_from_a_hold_takes_its_units_once_and_every_ended_hold_says_why_on_postgres => one_hold_one_order
);

async fn one_hold_one_order(db: TestDb) {
    let app = TestApp::spawn_on(db, 1, |_| {}).await;
    let tea = app.product("TEA-H", 1200, 5);
    let clients = customers(&app, "buyer", 2).await;
    let (alice, bob) = (&clients[0], &clients[1]);

    let first = held(hold(alice, tea, 3).await).await;
    // Alice's 3 are hers: bob can hold or buy the other 2, not 3.
    let short = hold(bob, tea, 3).await;
    assert_eq!(short.status(), 409);
    let body: Value = short.json().await.expect("json");
    assert_eq!((body["available"].as_i64(), body["held"].as_i64()), (Some(2), Some(3)), "{body}");
    assert_eq!(bob.order(&[(tea, 3)]).await.status(), 409);
    // One live hold per customer and product: a second says until when the first lasts.
    let twice = hold(alice, tea, 1).await;
    assert_eq!(twice.status(), 409);
    let body: Value = twice.json().await.expect("json");
    assert_eq!((body["error"].as_str(), body["hold_id"].as_i64()), (Some("already_held"), Some(first)));
    assert!(body["message"].as_str().is_some_and(|m| m.contains("until") && m.contains("UTC")), "{body}");

    // Bob may not touch alice's hold: to him it does not exist.
    let foreign = order_from(bob, first).await;
    assert_eq!(foreign.status(), 404);
    assert_eq!(error_code(foreign).await, "not_found");
    assert_eq!(release(bob, first).await.status(), 404);

    let placed = order_from(alice, first).await;
    assert_eq!(placed.status(), 201);
    let order: Value = placed.json().await.expect("json");
    assert_eq!(
        (order["lines"][0]["product_id"].as_i64(), order["lines"][0]["quantity"].as_i64()),
        (Some(tea), Some(3))
    );
    assert_eq!(order["total_cents"], 3600);
    assert_eq!(invariants::on_hand(&app.db, tea), 2);
    assert_eq!(invariants::live_holds(&app.db, tea), (0, 0));
    let mine: Value = alice.get("/api/v1/holds").await.json().await.expect("json");
    assert_eq!(
        (mine[0]["state"].as_str(), mine[0]["order_id"].as_i64()),
        (Some("used"), order["id"].as_i64())
    );

    // Used twice: refused, saying which order it became; released or ordered again: refused.
    let again = order_from(alice, first).await;
    assert_eq!(again.status(), 409);
    let body: Value = again.json().await.expect("json");
    assert_eq!(
        (body["error"].as_str(), body["order_id"].as_i64()),
        (Some("hold_used"), order["id"].as_i64())
    );
    let released_used = release(alice, first).await;
    assert_eq!(released_used.status(), 409);
    assert_eq!(error_code(released_used).await, "hold_used");

    // Released: the units are back at once, and the hold cannot be ordered from or released again.
    let second = held(hold(bob, tea, 2).await).await;
    assert_eq!(release(bob, second).await.status(), 204);
    assert_eq!(invariants::live_holds(&app.db, tea), (0, 0));
    for refused in [order_from(bob, second).await, release(bob, second).await] {
        assert_eq!(refused.status(), 409);
        let body: Value = refused.json().await.expect("json");
        assert_eq!(body["error"], "hold_released", "{body}");
        assert!(body["message"].as_str().is_some_and(|m| m.contains("released")), "{body}");
    }
    assert_eq!(bob.order(&[(tea, 2)]).await.status(), 201, "released units are for sale again");

    assert_eq!(orders_count(&app.db), 2);
    assert_eq!(invariants::on_hand(&app.db, tea), 0);
    invariants::holds_within_stock(&app.db);
    invariants::orders_match_ledger(&app.db);
}

on_both_engines!(
    a_short_hold_expires_by_the_database_clock_and_its_order_is_refused,
    a_short_hold_expires_by_the_database_clock_and_its_order_is_refused_on_postgres => short_hold
);

/// A client may ask for a shorter hold (`seconds`), never a longer one; it runs out by the
/// database's clock, and then its order, its release and its units say so.
async fn short_hold(db: TestDb) {
    let app = TestApp::spawn_on(db, 1, |c| c.hold_length = Duration::from_secs(120)).await;
    let cup = app.product("CUP-H", 800, 1);
    let clients = customers(&app, "short", 2).await;

    let long = hold_for(&clients[1], cup, 1, 86_400).await;
    assert_eq!(long.status(), 201);
    let long: Value = long.json().await.expect("json");
    let left = long["seconds_left"].as_i64().expect("seconds_left");
    assert!((119..=120).contains(&left), "cut to HOLD_MINUTES: {long}");
    assert_eq!(release(&clients[1], long["id"].as_i64().expect("id")).await.status(), 204);

    let short = hold_for(&clients[0], cup, 1, 1).await;
    assert_eq!(short.status(), 201);
    let short: Value = short.json().await.expect("json");
    assert!(short["seconds_left"].as_i64().is_some_and(|s| s <= 1), "{short}");
    let id = short["id"].as_i64().expect("id");
    poll::until("the one-second hold to expire by the database's clock", Duration::from_secs(15), || {
        invariants::live_holds(&app.db, cup) == (0, 0)
    });

    let mine: Value = clients[0].get("/api/v1/holds").await.json().await.expect("json");
    assert_eq!((mine[0]["state"].as_str(), mine[0]["seconds_left"].as_i64()), (Some("expired"), Some(0)));
    for refused in [order_from(&clients[0], id).await, release(&clients[0], id).await] {
        assert_eq!(refused.status(), 409);
        let body: Value = refused.json().await.expect("json");
        assert_eq!(body["error"], "hold_expired", "{body}");
        assert!(body["message"].as_str().is_some_and(|m| m.contains("ran out")), "{body}");
    }
    // Its unit is for sale again, without anyone having swept the hold away.
    assert_eq!(clients[1].order(&[(cup, 1)]).await.status(), 201);
    assert_eq!(orders_count(&app.db), 1);
    invariants::holds_within_stock(&app.db);
    invariants::orders_match_ledger(&app.db);
}

on_both_engines!(
    every_bad_hold_request_is_a_sentence_and_leaves_no_trace,
    every_bad_hold_request_is_a_sentence_and_leaves_no_trace_on_postgres => bad_requests
);

async fn bad_requests(db: TestDb) {
    let app = TestApp::spawn_on(db, 1, |_| {}).await;
    let product = app.product("BAD-H", 100, 3);
    let ghost = app.product("GHOST-H", 100, 0);
    let client = &customers(&app, "bad", 1).await[0];

    let cases: Vec<(Value, u16, &str)> = vec![
        (json!({"product_id": 0, "quantity": 1}), 422, "invalid_id"),
        (json!({"product_id": -4, "quantity": 1}), 422, "invalid_id"),
        (json!({"product_id": product, "quantity": 0}), 422, "invalid_quantity"),
        (json!({"product_id": product, "quantity": -1}), 422, "invalid_quantity"),
        (json!({"product_id": product, "quantity": 1001}), 422, "invalid_quantity"),
        (json!({"product_id": product, "quantity": 1, "seconds": 0}), 422, "invalid_seconds"),
        (json!({"product_id": product, "quantity": 1, "seconds": -3}), 422, "invalid_seconds"),
        (json!({"product_id": product, "quantity": 1, "seconds": 1.5}), 422, "invalid_seconds"),
        (json!({"product_id": product, "quantity": 1, "seconds": "30"}), 422, "invalid_seconds"),
        (json!({"product_id": 999_999, "quantity": 1}), 422, "unknown_product"),
        (json!({"product_id": ghost, "quantity": 1}), 409, "insufficient_stock"),
        (json!({"product_id": product, "quantity": 4}), 409, "insufficient_stock"),
        (json!({"product_id": product}), 400, "malformed_body"),
        (json!({"product_id": product, "quantity": 1, "extra": true}), 400, "malformed_body"),
        (json!({"product_id": "one", "quantity": 1}), 400, "malformed_body"),
    ];
    for (body, status, code) in cases {
        let answer = client.post_json("/api/v1/holds", &body).await;
        assert_eq!(answer.status().as_u16(), status, "{body}");
        assert_eq!(error_code(answer).await, code, "{body}");
    }
    // Not JSON, not logged in.
    let form = client.post_form("/api/v1/holds", &[("product_id", "1"), ("quantity", "1")]).await;
    assert_eq!(form.status(), 415);
    let stranger = app.client(0);
    assert_eq!(hold(&stranger, product, 1).await.status(), 401);
    assert_eq!(stranger.get("/api/v1/holds").await.status(), 401);
    // Paths that name no hold of this user.
    for path in ["/api/v1/holds/0", "/api/v1/holds/999999", "/api/v1/holds/abc"] {
        let gone = client.send(reqwest::Method::DELETE, path).await;
        assert_eq!(gone.status(), 404, "{path}");
        assert_eq!(error_code(gone).await, "not_found", "{path}");
        let gone = client.send(reqwest::Method::POST, &format!("{path}/order")).await;
        assert_eq!(gone.status(), 404, "{path}/order");
        assert_eq!(error_code(gone).await, "not_found", "{path}/order");
    }
    let bad_key = client
        .http
        .post(client.url("/api/v1/holds"))
        .header("Idempotency-Key", "with space")
        .json(&json!({"product_id": product, "quantity": 1}))
        .send()
        .await
        .expect("POST");
    assert_eq!(bad_key.status(), 400);

    assert_eq!((holds_count(&app.db), orders_count(&app.db)), (0, 0), "no refusal left a trace");
    assert_eq!(invariants::on_hand(&app.db, product), 3);
    invariants::holds_within_stock(&app.db);
}

async fn keyed(client: &Client, path: &str, key: &str, body: &Value) -> reqwest::Response {
    client.http.post(client.url(path)).header("Idempotency-Key", key).json(body).send().await.expect("POST")
}

on_both_engines!(
    a_resent_hold_or_order_from_a_hold_takes_effect_once,
    a_resent_hold_or_order_from_a_hold_takes_effect_once_on_postgres => resends
);

async fn resends(db: TestDb) {
    let app = TestApp::spawn_on(db, 2, |_| {}).await;
    let product = app.product("KEY-H", 700, 4);
    let client = &customers(&app, "resender", 1).await[0];
    let body = json!({"product_id": product, "quantity": 2});

    let first = keyed(client, "/api/v1/holds", "hold-key-1", &body).await;
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.expect("json");
    // The same request again (the answer was lost, say): the same hold, nothing more held.
    let resent = keyed(client, "/api/v1/holds", "hold-key-1", &body).await;
    assert_eq!(resent.status(), 201);
    let resent: Value = resent.json().await.expect("json");
    assert_eq!(resent["id"], first["id"]);
    assert_eq!(invariants::live_holds(&app.db, product), (1, 2));
    // The same key for another request is refused, not replayed.
    let other =
        keyed(client, "/api/v1/holds", "hold-key-1", &json!({"product_id": product, "quantity": 1})).await;
    assert_eq!(other.status(), 422);
    assert_eq!(error_code(other).await, "idempotency_key_reused");

    let id = first["id"].as_i64().expect("id");
    let path = format!("/api/v1/holds/{id}/order");
    let answers =
        futures::future::join_all((0..3).map(|_| keyed(client, &path, "order-key-1", &json!(null)))).await;
    let mut orders = Vec::new();
    for answer in answers {
        assert_eq!(answer.status(), 201);
        let order: Value = answer.json().await.expect("json");
        orders.push(order["id"].clone());
    }
    assert!(orders.windows(2).all(|w| w[0] == w[1]), "one order, answered three times: {orders:?}");
    assert_eq!(orders_count(&app.db), 1);
    assert_eq!(invariants::on_hand(&app.db, product), 2);
    // Without the key, the resend is a second use: refused, saying which order it became.
    let unkeyed = order_from(client, id).await;
    assert_eq!(unkeyed.status(), 409);
    assert_eq!(error_code(unkeyed).await, "hold_used");
    invariants::holds_within_stock(&app.db);
    invariants::orders_match_ledger(&app.db);
}

on_both_engines!(
    a_keyed_order_refused_at_payment_leaves_the_hold_live,
    a_keyed_order_refused_at_payment_leaves_the_hold_live_on_postgres => refused_at_payment
);

/// The stock under a live hold cut by hand (no sale can do it: every sale respects live holds):
/// the order from the hold is refused, and with an idempotency key that refusal is committed as
/// the key's answer. The hold must come out of it as it went in, live, not marked used with no
/// order behind it; once the stock is back, the hold still buys.
async fn refused_at_payment(db: TestDb) {
    let app = TestApp::spawn_on(db, 1, |_| {}).await;
    let product = app.product("CUT-H", 700, 4);
    let client = &customers(&app, "cut", 1).await[0];
    let id = held(hold(client, product, 2).await).await;
    let set_on_hand = |units: i32| {
        haita::db::cached_sql::<()>("UPDATE stock_levels SET on_hand = ? WHERE product_id = ?")
            .bind::<diesel::sql_types::Integer, _>(units)
            .bind::<diesel::sql_types::BigInt, _>(product)
            .execute(&mut *app.db.conn())
            .expect("cut the stock");
    };
    set_on_hand(1);

    let path = format!("/api/v1/holds/{id}/order");
    for _ in 0..2 {
        // The second is a resend: the stored refusal again, nothing run twice.
        let refused = keyed(client, &path, "cut-key", &json!(null)).await;
        assert_eq!(refused.status(), 409);
        assert_eq!(error_code(refused).await, "insufficient_stock");
        assert_eq!(invariants::live_holds(&app.db, product), (1, 2), "the hold is still live");
        assert_eq!(orders_count(&app.db), 0);
    }

    set_on_hand(4);
    let bought = order_from(client, id).await;
    assert_eq!(bought.status(), 201, "{:?}", bought.text().await);
    assert_eq!(invariants::live_holds(&app.db, product), (0, 0));
    assert_eq!(orders_count(&app.db), 1);
}

on_both_engines!(
    one_customer_cannot_hoard_the_stock,
    one_customer_cannot_hoard_the_stock_on_postgres => hoarding
);

/// The hoarder's moves, each answered with its own refusal and sentence: more units than one
/// customer may hold, a product past the products cap, the same product again the moment its
/// hold was released (the units go to someone else meanwhile), and holds taken and released
/// faster than the per-minute rate. Each of these was a 201 before the limits.
async fn hoarding(db: TestDb) {
    let app = TestApp::spawn_on(db, 1, |c| {
        c.max_held_units = 10;
        c.max_held_products = 2;
        c.max_holds_per_minute = 5;
    })
    .await;
    let big = app.product("HOARD-BIG", 100, 100);
    let small = app.product("HOARD-SMALL", 100, 5);
    let third = app.product("HOARD-THIRD", 100, 5);
    let clients = customers(&app, "hoard", 2).await;
    let (mallory, alice) = (&clients[0], &clients[1]);

    let all = hold(mallory, big, 100).await;
    assert_eq!(all.status(), 409);
    assert_eq!(error_code(all).await, "hold_limit", "100 units past a cap of 10");
    let five = held(hold(mallory, big, 5).await).await;
    let past_units = hold(mallory, small, 6).await;
    assert_eq!(error_code(past_units).await, "hold_limit", "5 held + 6 is past 10 units");
    held(hold(mallory, small, 5).await).await;
    let past_products = hold(mallory, third, 1).await;
    assert_eq!(past_products.status(), 409);
    assert_eq!(error_code(past_products).await, "hold_limit", "a third product past a cap of 2");

    assert_eq!(release(mallory, five).await.status(), 204);
    let again = hold(mallory, big, 5).await;
    assert_eq!(again.status(), 429, "the same product again at once");
    let retry_after: u64 = again.headers()["retry-after"].to_str().expect("ascii").parse().expect("seconds");
    assert!((1..=60).contains(&retry_after), "Retry-After {retry_after}");
    assert_eq!(error_code(again).await, "hold_cooldown");
    held(hold(alice, big, 5).await).await;

    // The rate: five holds within the minute, each of a product the customer never held.
    let rate = customers(&app, "cycler", 1).await;
    let products: Vec<i64> = (0..6).map(|i| app.product(&format!("CYCLE-{i}"), 100, 5)).collect();
    for product in &products[..5] {
        let id = held(hold(&rate[0], *product, 1).await).await;
        assert_eq!(release(&rate[0], id).await.status(), 204);
    }
    let sixth = hold(&rate[0], products[5], 1).await;
    assert_eq!(sixth.status(), 429);
    assert!(sixth.headers().get("retry-after").is_some());
    assert_eq!(error_code(sixth).await, "hold_rate");
}

on_both_engines!(
    one_customers_holds_at_once_stay_within_the_caps,
    one_customers_holds_at_once_stay_within_the_caps_on_postgres => caps_race
);

/// Twenty holds of twenty different products sent at once by one customer, over two instances:
/// each product's stock row is a different lock, so only the customer's own row keeps the count
/// exact. Exactly the cap's two are live afterwards, in the database. (Seen failing on
/// PostgreSQL with the user row lock taken out: three live holds and three 201s.)
async fn caps_race(db: TestDb) {
    let app = TestApp::spawn_on(db, 2, |c| {
        c.max_held_products = 2;
        c.max_holds_per_minute = 1_000;
    })
    .await;
    let products: Vec<i64> = (0..20).map(|i| app.product(&format!("CAP-{i:02}"), 100, 5)).collect();
    let user = app.user("greedy", Role::Customer);
    let clients: Vec<Client> = (0..products.len()).map(|i| app.client(i)).collect();
    futures::future::join_all(clients.iter().map(|c| c.login(&user))).await;
    let barrier = Arc::new(Barrier::new(clients.len()));
    let answers = futures::future::join_all(clients.iter().zip(&products).map(|(client, product)| {
        let barrier = barrier.clone();
        async move {
            barrier.wait().await;
            hold(client, *product, 1).await.status().as_u16()
        }
    }))
    .await;
    let live: i64 = haita::db::cached_sql::<diesel::sql_types::BigInt>(
        "SELECT COUNT(*) FROM stock_holds WHERE user_id = ? AND ended IS NULL AND expires_at > {now}",
    )
    .bind::<diesel::sql_types::BigInt, _>(user.id)
    .get_result(&mut app.db.conn())
    .expect("count");
    assert_eq!(live, 2, "answers {answers:?}");
    assert_eq!(answers.iter().filter(|s| **s == 201).count(), 2, "{answers:?}");
    assert!(answers.iter().all(|s| *s == 201 || *s == 409), "{answers:?}");
}

/// Ended holds are kept as the customer's history for `HOLD_HISTORY_DAYS`, then deleted; a live
/// hold, and one that ended within the history, stay.
#[actix_web::test]
async fn holds_that_ended_long_ago_are_deleted() {
    let db = TestDb::new();
    let product = crate::common::create_product(&db, "OLD-HOLDS", 100, 50);
    let user = crate::common::create_user(&db, "history", Role::Customer);
    let request = haita::holds::model::HoldRequest::parse(
        product,
        1,
        haita::holds::model::HoldLength::full(Duration::from_secs(600)),
    )
    .expect("a hold request");
    let limits = crate::common::NO_HOLD_LIMITS;
    let hold = || haita::holds::service::hold(&db.pool, user.id, &request, &limits, None).expect("hold").id;
    let old = hold_released(&db, user.id, hold());
    let recent = hold_released(&db, user.id, hold());
    let live = hold();
    // `old` ran out 31 days ago, `recent` was released now; the history kept is 30 days.
    haita::db::cached_sql::<()>(
        "UPDATE stock_holds SET created_at = {now} - {? microseconds}, expires_at = {now} - {? microseconds}, \
         ended_at = {now} - {? microseconds} WHERE id = ?",
    )
    .bind::<diesel::sql_types::BigInt, _>(31 * 86_400_000_000_i64 + 600_000_000)
    .bind::<diesel::sql_types::BigInt, _>(31 * 86_400_000_000_i64)
    .bind::<diesel::sql_types::BigInt, _>(31 * 86_400_000_000_i64 + 300_000_000)
    .bind::<diesel::sql_types::BigInt, _>(old)
    .execute(&mut db.conn())
    .expect("age the hold");
    assert_eq!(haita::holds::service::forget_old(&db.pool, limits.history).expect("housekeeping"), 1);
    let left: Vec<i64> = haita::schema::stock_holds::table
        .select(haita::schema::stock_holds::id)
        .order(haita::schema::stock_holds::id)
        .load(&mut db.conn())
        .expect("holds");
    assert_eq!(left, vec![recent, live]);
}

/// Releases `hold` and returns its id.
fn hold_released(db: &TestDb, user: i64, hold: i64) -> i64 {
    haita::holds::service::release(&mut db.conn(), user, hold).expect("release");
    hold
}

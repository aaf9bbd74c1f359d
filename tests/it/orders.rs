//! Orders under concurrency: no overselling, no deadlock reaching a client, no trace of a
//! failed order — checked in the database afterwards.

use std::sync::Arc;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::BigInt;
use haita::auth::Role;
use haita::db::DbConn;
use serde_json::Value;
use tokio::sync::Barrier;

use crate::common::{Client, TestApp, TestDb, error_code, invariants, on_both_engines, poll};

mod coalescing;

struct Answer {
    status: u16,
    code: String,
    attempts: Option<u32>,
}

/// Each client sends its cart; all are released by one barrier.
async fn order_all_at_once(carts: Vec<(Client, Vec<(i64, i64)>)>) -> Vec<Answer> {
    let barrier = Arc::new(Barrier::new(carts.len()));
    let tasks = carts.into_iter().map(|(client, lines)| {
        let barrier = barrier.clone();
        actix_web::rt::spawn(async move {
            barrier.wait().await;
            let response = client.order(&lines).await;
            let status = response.status().as_u16();
            let attempts = response
                .headers()
                .get("x-transaction-attempts")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok());
            let code = if status == 201 { String::new() } else { error_code(response).await };
            Answer { status, code, attempts }
        })
    });
    futures::future::join_all(tasks).await.into_iter().map(|r| r.expect("client task")).collect()
}

async fn logged_in_clients(app: &TestApp, n: usize) -> Vec<Client> {
    let clients: Vec<Client> = (0..n).map(|i| app.client(i)).collect();
    let users: Vec<_> = (0..n).map(|i| app.user(&format!("buyer{i:02}"), Role::Customer)).collect();
    futures::future::join_all(clients.iter().zip(&users).map(|(c, u)| c.login(u))).await;
    clients
}

fn orders_count(app: &TestApp) -> i64 {
    haita::schema::orders::table.count().get_result(&mut app.db.raw_connection()).expect("count")
}

on_both_engines!(
    fifty_orders_for_ten_units_sell_exactly_ten,
    fifty_orders_for_ten_units_sell_exactly_ten_on_postgres => fifty_orders_for_ten_units
);

on_both_engines!(
    fifty_orders_one_at_a_time_for_ten_units_sell_exactly_ten,
    fifty_orders_one_at_a_time_for_ten_units_sell_exactly_ten_on_postgres => fifty_orders_one_at_a_time
);

/// With `ORDER_COALESCING` on, the default: the orders are placed in batches.
async fn fifty_orders_for_ten_units(db: TestDb) {
    fifty_orders_on_two_instances(db, true).await;
}

/// `ORDER_COALESCING=false`: every order takes the stock row's lock for its own transaction.
async fn fifty_orders_one_at_a_time(db: TestDb) {
    fifty_orders_on_two_instances(db, false).await;
}

async fn fifty_orders_on_two_instances(db: TestDb, coalesce: bool) {
    let app = TestApp::spawn_on(db, 2, |c| c.coalesce_orders = coalesce).await;
    let product = app.product("HOT-1", 500, 10);
    let clients = logged_in_clients(&app, 50).await;

    let answers = order_all_at_once(clients.into_iter().map(|c| (c, vec![(product, 1)])).collect()).await;

    let sold = answers.iter().filter(|a| a.status == 201).count();
    let refused = answers.iter().filter(|a| a.status == 409 && a.code == "insufficient_stock").count();
    assert_eq!(
        (sold, refused),
        (10, 40),
        "{:?}",
        answers.iter().map(|a| (a.status, &a.code)).collect::<Vec<_>>()
    );
    assert_eq!(invariants::on_hand(&app.db, product), 0);
    assert_eq!(orders_count(&app), 10);
    invariants::stock_matches_ledger(&app.db);
    invariants::orders_match_ledger(&app.db);
}

#[actix_web::test]
async fn forty_carts_locking_two_products_in_opposite_orders_all_succeed_without_deadlock() {
    let app = TestApp::spawn_instances(2, |_| {}).await;
    let a = app.product("PAIR-A", 100, 1000);
    let b = app.product("PAIR-B", 200, 1000);
    let clients = logged_in_clients(&app, 40).await;
    let carts = clients
        .into_iter()
        .enumerate()
        .map(|(i, c)| (c, if i % 2 == 0 { vec![(a, 1), (b, 1)] } else { vec![(b, 1), (a, 1)] }))
        .collect();

    let answers = order_all_at_once(carts).await;

    assert!(
        answers.iter().all(|a| a.status == 201),
        "{:?}",
        answers.iter().map(|a| (a.status, &a.code)).collect::<Vec<_>>()
    );
    // Not merely absorbed by the retry: locking in product-id order means no deadlock happens.
    assert!(answers.iter().all(|a| a.attempts == Some(1)), "a transaction had to be retried");
    assert_eq!((invariants::on_hand(&app.db, a), invariants::on_hand(&app.db, b)), (960, 960));
    invariants::stock_matches_ledger(&app.db);
    invariants::orders_match_ledger(&app.db);
}

#[actix_web::test]
async fn a_shortfall_on_any_line_refuses_the_whole_order_and_leaves_no_trace() {
    let app = TestApp::spawn().await;
    let plenty = app.product("PLENTY", 100, 50);
    let scarce = app.product("SCARCE", 100, 2);
    let never_received = app.product("GHOST", 100, 0);
    let client = logged_in_clients(&app, 1).await.remove(0);

    let short = client.order(&[(plenty, 5), (scarce, 3)]).await;
    assert_eq!(short.status(), 409);
    let body: Value = short.json().await.expect("json");
    assert_eq!(body["error"], "insufficient_stock");
    assert_eq!(
        (body["product_id"].as_i64(), body["available"].as_i64(), body["requested"].as_i64()),
        (Some(scarce), Some(2), Some(3))
    );
    assert!(
        body["message"].as_str().is_some_and(|m| m.contains("Product SCARCE") && m.contains('2')),
        "{body}"
    );

    let none = client.order(&[(never_received, 1)]).await;
    assert_eq!(none.status(), 409);
    assert_eq!(error_code(none).await, "insufficient_stock");

    assert_eq!(orders_count(&app), 0);
    assert_eq!(invariants::on_hand(&app.db, plenty), 50);
    assert_eq!(invariants::on_hand(&app.db, scarce), 2);
    invariants::stock_matches_ledger(&app.db);
    invariants::orders_match_ledger(&app.db);
}

#[actix_web::test]
async fn duplicate_lines_are_merged_into_one() {
    let app = TestApp::spawn().await;
    let product = app.product("DUP", 250, 10);
    let client = logged_in_clients(&app, 1).await.remove(0);

    let placed = client.order(&[(product, 1), (product, 2)]).await;
    assert_eq!(placed.status(), 201);
    let order: Value = placed.json().await.expect("json");
    assert_eq!(order["lines"].as_array().map(Vec::len), Some(1));
    assert_eq!(order["lines"][0]["quantity"], 3);
    assert_eq!(order["total_cents"], 750);
    assert_eq!(invariants::on_hand(&app.db, product), 7);

    let mine: Value = client.get("/api/v1/orders").await.json().await.expect("json");
    assert_eq!(mine[0]["id"], order["id"]);
    invariants::orders_match_ledger(&app.db);
}

#[actix_web::test]
async fn a_row_lock_held_elsewhere_ends_in_a_clean_busy_answer_not_a_hang() {
    let app = TestApp::spawn_instances(1, |c| c.row_lock_wait_secs = 1).await;
    let product = app.product("STUCK", 100, 5);
    let client = logged_in_clients(&app, 1).await.remove(0);

    // Another session (say a slow batch job) holds the stock row.
    let mut holder = app.db.raw_connection();
    holder.batch_execute("BEGIN").expect("begin");
    #[derive(QueryableByName)]
    struct OnHand {
        #[diesel(sql_type = BigInt)]
        on_hand: i64,
    }
    let held: OnHand = haita::db::cached_sql::<diesel::sql_types::Untyped>(haita::db::Sql::per_engine(
        "SELECT on_hand FROM stock_levels WHERE product_id = ? FOR UPDATE",
        "SELECT CAST(on_hand AS BIGINT) AS on_hand FROM stock_levels WHERE product_id = ? FOR UPDATE",
    ))
    .bind::<BigInt, _>(product)
    .get_result(&mut holder)
    .expect("lock the row");
    assert_eq!(held.on_hand, 5);

    let busy = client.order(&[(product, 1)]).await;
    assert_eq!(busy.status(), 503);
    assert_eq!(busy.headers().get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
    assert_eq!(error_code(busy).await, "busy");
    assert_eq!(orders_count(&app), 0, "a timed-out order leaves no trace");

    holder.batch_execute("ROLLBACK").expect("rollback");
    assert_eq!(client.order(&[(product, 1)]).await.status(), 201);
    invariants::stock_matches_ledger(&app.db);
    invariants::orders_match_ledger(&app.db);
}

#[actix_web::test]
async fn ordering_through_the_html_form() {
    let app = TestApp::spawn().await;
    let tea = app.product("TEA", 1200, 3);
    let cup = app.product("CUP", 800, 3);
    app.user("ivan", Role::Customer);
    let browser = app.client(0);
    let token = browser.csrf_token("/login").await;
    let login = browser
        .post_form(
            "/login",
            &[("csrf_token", &token), ("username", "ivan"), ("password", crate::common::PASSWORD)],
        )
        .await;
    assert_eq!(login.status(), 303);

    let page = browser.get("/products").await.text().await.expect("page");
    assert!(page.contains(&format!("name=\"qty_{tea}\"")) && page.contains("Place order"));
    let token = browser.csrf_token("/products").await;
    let (tea_field, cup_field) = (format!("qty_{tea}"), format!("qty_{cup}"));
    let placed =
        browser.post_form("/orders", &[("csrf_token", &token), (&tea_field, "2"), (&cup_field, "0")]).await;
    assert_eq!(placed.status(), 303);
    let location = placed.headers()["location"].to_str().expect("location").to_string();
    assert!(location.starts_with("/orders?placed="));
    let orders = browser.get(&location).await.text().await.expect("page");
    assert!(orders.contains("placed") && orders.contains("Product TEA") && orders.contains("24.00"));

    let too_many =
        browser.post_form("/orders", &[("csrf_token", &token), (&tea_field, "5"), (&cup_field, "3")]).await;
    assert_eq!(too_many.status(), 409);
    // Answered in place: the catalog again, the quantities as typed, the short product marked.
    let page = too_many.text().await.expect("page");
    assert!(page.contains("id=\"order-refused\"") && page.contains("Only 1 of"), "{page}");
    assert!(page.contains(&format!("name=\"{tea_field}\" min=\"0\" max=\"1000\" value=\"5\"")), "{page}");
    assert!(page.contains(&format!("name=\"{cup_field}\" min=\"0\" max=\"1000\" value=\"3\"")), "{page}");
    assert!(page.contains("aria-invalid=\"true\""), "the short product's field is marked: {page}");
    let empty = browser.post_form("/orders", &[("csrf_token", &token), (&tea_field, "0")]).await;
    assert_eq!(empty.status(), 422);
    assert!(empty.text().await.expect("page").contains("Choose at least one product"));
    assert_eq!(invariants::on_hand(&app.db, tea), 1);
    invariants::orders_match_ledger(&app.db);
}

on_both_engines!(
    orders_and_receipts_running_together_keep_stock_equal_to_the_ledger,
    orders_and_receipts_running_together_keep_stock_equal_to_the_ledger_on_postgres
        => orders_and_receipts_together
);

async fn orders_and_receipts_together(db: TestDb) {
    let app = TestApp::spawn_on(db, 2, |_| {}).await;
    let product = app.product("BUSY", 100, 5);
    let buyers = logged_in_clients(&app, 20).await;
    let staff = app.user("receiver", Role::Staff);
    let receivers: Vec<Client> = (0..10).map(|i| app.client(i)).collect();
    futures::future::join_all(receivers.iter().map(|c| c.login(&staff))).await;

    let barrier = Arc::new(Barrier::new(30));
    let mut tasks = Vec::new();
    for buyer in buyers {
        let barrier = barrier.clone();
        tasks.push(actix_web::rt::spawn(async move {
            barrier.wait().await;
            buyer.order(&[(product, 2)]).await.status().as_u16()
        }));
    }
    for receiver in receivers {
        let barrier = barrier.clone();
        tasks.push(actix_web::rt::spawn(async move {
            barrier.wait().await;
            receiver
                .post_json(
                    "/api/v1/stock/receipts",
                    &serde_json::json!({"product_id": product, "quantity": 3}),
                )
                .await
                .status()
                .as_u16()
        }));
    }
    let statuses: Vec<u16> =
        futures::future::join_all(tasks).await.into_iter().map(|r| r.expect("task")).collect();
    assert!(statuses.iter().all(|s| [201, 409].contains(s)), "{statuses:?}");
    let sold = statuses[..20].iter().filter(|s| **s == 201).count() as u32;
    assert!(statuses[20..].iter().all(|s| *s == 201), "every receipt lands");
    assert_eq!(invariants::on_hand(&app.db, product), 5 + 30 - 2 * sold);
    invariants::stock_matches_ledger(&app.db);
    invariants::orders_match_ledger(&app.db);
    invariants::no_named_lock_left_held(&app.db);
}

/// A deadlock an order loses is kept as evidence: the server's description, read right after
/// the rollback, stored once, with what the retry did, and shown to the admin.
///
/// Orders lock their rows in product-id order and never deadlock with each other; another
/// session (a maintenance script, say) locks the second product and then the first. The order
/// must be the victim. InnoDB rolls back the transaction with less to undo, so that session
/// first writes ballast rows. PostgreSQL aborts the session whose deadlock check runs first,
/// after `deadlock_timeout` of waiting: the order, which waits first.
#[actix_web::test]
async fn a_deadlock_an_order_loses_is_kept_for_the_admin_next_to_its_retry() {
    let app = TestApp::spawn().await;
    let (first, second) = (app.product("DL-FIRST", 100, 5), app.product("DL-SECOND", 100, 5));
    let client = logged_in_clients(&app, 1).await.remove(0);
    let admin = app.client(0);
    admin.login(&app.user("root", Role::Admin)).await;
    let engine = app.db.pool.engine();

    let mut other = app.db.raw_connection();
    let other_id = crate::common::server::connection_id(&mut other).expect("session id");
    other
        .batch_execute(match engine {
            haita::db::Engine::Mysql => {
                "CREATE TABLE ballast (n INT NOT NULL) ENGINE = InnoDB; START TRANSACTION; \
                 INSERT INTO ballast WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 200) \
                   SELECT n FROM s"
            }
            haita::db::Engine::Postgres => "START TRANSACTION",
        })
        .expect("ballast");
    let lock = |conn: &mut DbConn, product: i64| {
        haita::db::cached_sql::<diesel::sql_types::Untyped>(
            "SELECT product_id FROM stock_levels WHERE product_id = ? FOR UPDATE",
        )
        .bind::<BigInt, _>(product)
        .execute(conn)
    };
    lock(&mut other, second).expect("the other session holds the second row");

    let ordering = actix_web::rt::spawn(async move {
        let response = client.order(&[(first, 1), (second, 1)]).await;
        let attempts =
            response.headers().get("x-transaction-attempts").map(|v| v.to_str().unwrap_or("").to_string());
        (response.status().as_u16(), attempts)
    });
    invariants::wait_until_a_transaction_waits_for_a_lock(&app.db).await;
    // The order holds the first row and waits for the second: closing the cycle is a deadlock.
    lock(&mut other, first).expect("the order, not this session, is rolled back");
    // Still in this transaction until the order has stored its evidence (before its retry, which
    // waits for this commit): on PostgreSQL the evidence reads this session's statement then.
    let mut watcher = app.db.raw_connection();
    poll::until_async(
        "the order to store its deadlock evidence",
        std::time::Duration::from_secs(30),
        async || {
            let stored: i64 = haita::db::cached_sql::<BigInt>("SELECT COUNT(*) FROM deadlock_reports")
                .get_result(&mut watcher)
                .expect("reports");
            stored > 0
        },
    )
    .await;
    other.batch_execute("COMMIT").expect("commit");
    assert_eq!(ordering.await.expect("order task"), (201, Some("2".to_string())), "placed by its retry");

    let listing: Value = admin.get("/api/v1/admin/locks").await.json().await.expect("json");
    let reports = listing["deadlocks"].as_array().expect("deadlocks");
    let report = reports.iter().find(|r| r["seen_by"] == "order").unwrap_or_else(|| panic!("{listing}"));
    assert!(report["outcome"].as_str().is_some_and(|o| o.contains("placed on attempt 2")), "{report}");
    let parties = report["deadlock"]["transactions"].as_array().expect("transactions");
    assert_eq!(parties.len(), 2, "{report}");
    let victim = report["deadlock"]["victim"].as_u64().expect("victim");
    let rolled_back = parties.iter().find(|p| p["number"] == victim).expect("the victim is listed");
    let survivor = parties.iter().find(|p| p["number"] != victim).expect("the other party");
    match engine {
        haita::db::Engine::Mysql => {
            let on_stock = |p: &Value| p["holds"].to_string().contains("`stock_levels`");
            assert!(parties.iter().all(on_stock), "each held a stock row the other wanted: {report}");
            assert!(rolled_back["statement"].as_str().is_some_and(|s| s.contains("FOR UPDATE")), "{report}");
        }
        haita::db::Engine::Postgres => {
            // A row is waited for as its holder's transaction; each holds what the other wants.
            for (waiter, holder) in [(rolled_back, survivor), (survivor, rolled_back)] {
                let wanted = waiter["waits_for"][0].as_str().expect("waits for");
                let object = wanted.split_once(" on ").map(|(_, o)| o).expect("lock on an object");
                assert!(holder["holds"].to_string().contains(object), "{report}");
            }
            // PostgreSQL names sessions; statements are in its log only. The survivor is this
            // test's session, still in that transaction when the evidence was taken, so its
            // statement was read from pg_stat_activity; the victim's is unknown.
            assert_eq!(survivor["thread_id"].as_i64(), Some(other_id), "{report}");
            assert!(survivor["statement"].as_str().is_some_and(|s| s.contains("FOR UPDATE")), "{report}");
        }
    }
    let page = admin.get("/admin/locks").await.text().await.expect("page");
    assert!(page.contains("lost by the order") && page.contains("rolled back"), "shown on the screen");
    invariants::stock_matches_ledger(&app.db);
}

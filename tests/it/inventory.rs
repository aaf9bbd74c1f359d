//! Stock receipts: the named lock against the gap-lock deadlock of a missing row.

use std::sync::{Arc, Barrier};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DbError};
use diesel::sql_types::{BigInt, Integer};
use haita::auth::Role;
use haita::db::DbConn;
use serde_json::{Value, json};

use crate::common::{Client, TestApp, TestDb, invariants};

#[actix_web::test]
async fn twenty_concurrent_first_receipts_create_one_row_and_lose_nothing() {
    let app = TestApp::spawn_instances(2, |_| {}).await;
    let product = app.product("NEW", 100, 0);
    let staff = app.user("stocker", Role::Staff);
    let clients: Vec<Client> = (0..20).map(|i| app.client(i)).collect();
    futures::future::join_all(clients.iter().map(|c| c.login(&staff))).await;

    let barrier = Arc::new(tokio::sync::Barrier::new(20));
    let tasks = clients.into_iter().enumerate().map(|(i, client)| {
        let barrier = barrier.clone();
        actix_web::rt::spawn(async move {
            barrier.wait().await;
            let body = json!({"product_id": product, "quantity": i + 1});
            let response = client.post_json("/api/v1/stock/receipts", &body).await;
            (response.status().as_u16(), response.json::<Value>().await.expect("json"))
        })
    });
    let answers: Vec<(u16, Value)> =
        futures::future::join_all(tasks).await.into_iter().map(|r| r.expect("task")).collect();

    assert!(answers.iter().all(|(s, _)| *s == 201), "{answers:?}");
    assert_eq!(
        answers.iter().filter(|(_, b)| b["created_stock_row"] == true).count(),
        1,
        "one receipt created the row"
    );
    assert_eq!(invariants::on_hand(&app.db, product), (1..=20).sum::<u32>());
    let rows: i64 =
        haita::schema::stock_levels::table.count().get_result(&mut app.db.raw_connection()).expect("count");
    assert_eq!(rows, 1);
    invariants::stock_matches_ledger(&app.db);
    invariants::no_named_lock_left_held(&app.db);
}

/// First receipts of *different* products at once: each is serialised only with its own product
/// (its named lock), and the locking read of a missing stock row must not lock the gap around it,
/// or two receipts of neighbouring new products deadlock each other (as first edit-lock acquires
/// did; `db::transaction_read_committed`).
#[test]
fn first_receipts_of_different_products_at_once_never_deadlock() {
    let db = TestDb::new();
    let staff = crate::common::create_user(&db, "receiver", Role::Staff);
    let products: Vec<i64> =
        (0..160).map(|i| crate::common::create_product(&db, &format!("GAP-{i}"), 100, 0)).collect();
    let all_ready = Arc::new(Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (pool, all_ready) = (db.pool.clone(), all_ready.clone());
            // Interleaved across the threads: neighbours in the index, in one gap.
            let mine: Vec<i64> = products.iter().skip(t).step_by(8).copied().collect();
            std::thread::spawn(move || {
                all_ready.wait();
                mine.into_iter()
                    .filter_map(|product| {
                        let turn = haita::locking::Turn::unqueued(
                            pool.names().stock(product),
                            std::time::Duration::from_secs(10),
                        );
                        let quantity =
                            haita::inventory::model::Quantity::parse(5, 100_000).expect("quantity");
                        haita::inventory::service::receive(&pool, turn, staff.id, product, quantity)
                            .err()
                            .map(|e| format!("{product}: {e}"))
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let failed: Vec<String> = threads.into_iter().flat_map(|t| t.join().expect("thread")).collect();
    assert!(
        failed.is_empty(),
        "{} of 160 receipts failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
    invariants::stock_matches_ledger(&db);
}

/// The same receipts written the naive way — `SELECT … FOR UPDATE`, then INSERT when no row was
/// found — under REPEATABLE READ, with no named lock. Kept in the suite as the contrast: it is
/// what `haita:{tag}:stock:{product}` exists for. The engines fail it differently. On MySQL each
/// "no row" read takes a gap lock, the inserts wait for each other's gaps and InnoDB kills
/// deadlock victims (`docs/named-lock-upsert.md`). PostgreSQL locks no gaps: a missing row locks
/// nothing, every client inserts, and all but the first meet the primary key. Either way,
/// receipts are lost to errors.
#[test]
fn the_naive_select_for_update_then_insert_loses_receipts_without_the_named_lock() {
    let db = TestDb::new();
    let product = crate::common::create_product(&db, "NAIVE", 100, 0);
    let clients = 20;
    // Everyone has read "no row" (and taken its gap lock) before anyone inserts: the window that
    // concurrent first receipts hit by chance, made certain.
    let all_have_read = Arc::new(Barrier::new(clients));
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let (url, all_have_read) = (db.url.clone(), all_have_read.clone());
            std::thread::spawn(move || -> Result<(), DbError> {
                let mut conn = DbConn::open(&url).expect("connect");
                conn.batch_execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")?;
                conn.transaction(|conn| {
                    #[derive(QueryableByName)]
                    struct Row {
                        #[diesel(sql_type = Integer)]
                        #[expect(dead_code, reason = "only whether a row exists matters")]
                        on_hand: i32,
                    }
                    let found: Option<Row> = haita::db::cached_sql::<diesel::sql_types::Untyped>(
                        "SELECT on_hand FROM stock_levels WHERE product_id = ? FOR UPDATE",
                    )
                    .bind::<BigInt, _>(product)
                    .get_result(conn)
                    .optional()?;
                    all_have_read.wait();
                    let quantity = i64::try_from(i).unwrap_or(0) + 1;
                    let sql = match found {
                        None => "INSERT INTO stock_levels (on_hand, product_id) VALUES (?, ?)",
                        Some(_) => "UPDATE stock_levels SET on_hand = on_hand + ? WHERE product_id = ?",
                    };
                    haita::db::cached_sql::<diesel::sql_types::Untyped>(sql)
                        .bind::<BigInt, _>(quantity)
                        .bind::<BigInt, _>(product)
                        .execute(conn)?;
                    Ok(())
                })
            })
        })
        .collect();
    let results: Vec<Result<(), DbError>> = threads.into_iter().map(|t| t.join().expect("thread")).collect();

    let deadlocks = results
        .iter()
        .filter(|r| matches!(r, Err(DbError::DatabaseError(DatabaseErrorKind::SerializationFailure, _))))
        .count();
    let duplicates = results
        .iter()
        .filter(|r| matches!(r, Err(DbError::DatabaseError(DatabaseErrorKind::UniqueViolation, _))))
        .count();
    let committed = results.iter().filter(|r| r.is_ok()).count();
    eprintln!(
        "naive first receipts: {committed} committed, {deadlocks} deadlocks, {duplicates} duplicate keys"
    );
    match db.pool.engine() {
        haita::db::Engine::Mysql => {
            assert!(deadlocks >= 1, "expected at least one 1213 without the named lock: {results:?}");
        }
        haita::db::Engine::Postgres => {
            assert_eq!(
                (deadlocks, duplicates),
                (0, clients - 1),
                "no gap locks, one insert wins: {results:?}"
            );
        }
    }
    assert!(committed < clients, "receipts were lost to errors, which the named lock prevents");
}

#[actix_web::test]
async fn staff_receive_through_the_html_form_and_customers_may_not() {
    let app = TestApp::spawn().await;
    let product = app.product("FORM", 100, 0);
    app.user("stella", Role::Staff);
    app.user("carl", Role::Customer);

    let customer = app.client(0);
    let token = customer.csrf_token("/login").await;
    customer
        .post_form(
            "/login",
            &[("csrf_token", &token), ("username", "carl"), ("password", crate::common::PASSWORD)],
        )
        .await;
    assert_eq!(customer.get("/stock/receipts").await.status(), 403);

    let staff = app.client(0);
    let token = staff.csrf_token("/login").await;
    staff
        .post_form(
            "/login",
            &[("csrf_token", &token), ("username", "stella"), ("password", crate::common::PASSWORD)],
        )
        .await;
    let token = staff.csrf_token("/stock/receipts").await;
    let received = staff
        .post_form(
            "/stock/receipts",
            &[("csrf_token", &token), ("product_id", &product.to_string()), ("quantity", "12")],
        )
        .await;
    assert_eq!(received.status(), 303);
    let location = received.headers()["location"].to_str().expect("location").to_string();
    let page = staff.get(&location).await.text().await.expect("page");
    assert!(page.contains("Received 12") && page.contains("12 now on hand") && page.contains("+12"));
    assert!(page.contains("Received 12 of Product "), "the product by name, not by id: {page}");
    assert_eq!(invariants::on_hand(&app.db, product), 12);
    invariants::stock_matches_ledger(&app.db);
}

/// Every row an order or a receipt could touch, as one string.
fn snapshot(app: &TestApp) -> String {
    let mut conn = app.db.raw_connection();
    [
        "SELECT CONCAT_WS(',', COUNT(*)) FROM orders",
        "SELECT CONCAT_WS(',', COUNT(*)) FROM order_lines",
        "SELECT CONCAT_WS(',', product_id, on_hand) FROM stock_levels ORDER BY product_id",
        "SELECT CONCAT_WS(',', id) FROM stock_movements ORDER BY id",
    ]
    .map(|sql| {
        haita::db::cached_sql::<diesel::sql_types::Text>(sql)
            .load::<String>(&mut conn)
            .expect("snapshot")
            .join(";")
    })
    .join("|")
}

#[actix_web::test]
async fn malformed_orders_and_receipts_get_a_clear_4xx_and_change_nothing() {
    let app = TestApp::spawn().await;
    let product = app.product("SAFE", 100, 5);
    let customer = app.user("cora", Role::Customer);
    let staff = app.user("sam", Role::Staff);
    let before = snapshot(&app);

    let line = |p: i64, q: &str| format!(r#"{{"product_id": {p}, "quantity": {q}}}"#);
    let order = |lines: &str| format!(r#"{{"lines": [{lines}]}}"#);
    let ten_thousand = vec![line(product, "1"); 10_000].join(",");
    let many_products = (1..=150).map(|p| line(p, "1")).collect::<Vec<_>>().join(",");
    // (what, who, path, body, status, code)
    let cases: Vec<(&str, Option<&_>, &str, String, u16, &str)> = vec![
        (
            "quantity zero",
            Some(&customer),
            "/api/v1/orders",
            order(&line(product, "0")),
            422,
            "invalid_quantity",
        ),
        (
            "negative quantity",
            Some(&customer),
            "/api/v1/orders",
            order(&line(product, "-2")),
            422,
            "invalid_quantity",
        ),
        (
            "quantity above the maximum",
            Some(&customer),
            "/api/v1/orders",
            order(&line(product, "1001")),
            422,
            "invalid_quantity",
        ),
        (
            "unknown product",
            Some(&customer),
            "/api/v1/orders",
            order(&line(999_999, "1")),
            422,
            "unknown_product",
        ),
        ("product id zero", Some(&customer), "/api/v1/orders", order(&line(0, "1")), 422, "invalid_id"),
        ("no lines", Some(&customer), "/api/v1/orders", order(""), 422, "empty_order"),
        ("10 000 lines", Some(&customer), "/api/v1/orders", order(&ten_thousand), 413, "too_large"),
        ("150 products", Some(&customer), "/api/v1/orders", order(&many_products), 422, "too_many_lines"),
        (
            "quantity as text",
            Some(&customer),
            "/api/v1/orders",
            order(&line(product, "\"two\"")),
            400,
            "malformed_body",
        ),
        (
            "lines not a list",
            Some(&customer),
            "/api/v1/orders",
            r#"{"lines": 3}"#.into(),
            400,
            "malformed_body",
        ),
        ("not logged in", None, "/api/v1/orders", order(&line(product, "1")), 401, "not_logged_in"),
        (
            "receipt by a customer",
            Some(&customer),
            "/api/v1/stock/receipts",
            line(product, "5"),
            403,
            "forbidden",
        ),
        (
            "receipt of zero",
            Some(&staff),
            "/api/v1/stock/receipts",
            line(product, "0"),
            422,
            "invalid_quantity",
        ),
        (
            "receipt above the maximum",
            Some(&staff),
            "/api/v1/stock/receipts",
            line(product, "100001"),
            422,
            "invalid_quantity",
        ),
        (
            "receipt of an unknown product",
            Some(&staff),
            "/api/v1/stock/receipts",
            line(424_242, "5"),
            422,
            "unknown_product",
        ),
        (
            "receipt with a negative id",
            Some(&staff),
            "/api/v1/stock/receipts",
            line(-4, "5"),
            422,
            "invalid_id",
        ),
        ("receipt not logged in", None, "/api/v1/stock/receipts", line(product, "5"), 401, "not_logged_in"),
    ];
    for (what, who, path, body, status, code) in cases {
        let client = Client::new(app.address());
        if let Some(user) = who {
            client.login(user).await;
        }
        let response = client
            .http
            .post(client.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("send");
        assert_eq!(response.status().as_u16(), status, "{what}");
        let body: Value = response.json().await.expect("JSON error");
        assert_eq!(body["error"], code, "{what}: {body}");
        assert!(body["message"].as_str().is_some_and(|m| m.len() > 10), "{what}: no readable message");
        assert_eq!(snapshot(&app), before, "{what}: the database changed");
    }

    // HTML forms: CSRF, bad numbers and the wrong role answer with a page and write nothing. A
    // refused order answers on the catalog itself (`order-refused`), the others with a page of
    // their own (`class="message"`).
    let browser = Client::new(app.address());
    browser.login(&customer).await;
    let token = browser.csrf_token("/products").await;
    let field = format!("qty_{product}");
    let (own_page, in_place) = ("class=\"message\"", "id=\"order-refused\"");
    for (what, form, status, marker) in [
        ("order form without a token", vec![(field.as_str(), "1")], 403, own_page),
        (
            "order form with a word for a quantity",
            vec![("csrf_token", token.as_str()), (field.as_str(), "lots")],
            422,
            in_place,
        ),
        (
            "order form with nothing chosen",
            vec![("csrf_token", token.as_str()), (field.as_str(), "0")],
            422,
            in_place,
        ),
        (
            "receipt form by a customer",
            vec![("csrf_token", token.as_str()), ("product_id", "1"), ("quantity", "1")],
            403,
            own_page,
        ),
    ] {
        let path = if what.starts_with("receipt") { "/stock/receipts" } else { "/orders" };
        let response = browser.post_form(path, &form).await;
        assert_eq!(response.status().as_u16(), status, "{what}");
        assert!(response.text().await.expect("page").contains(marker), "{what}: no readable page");
        assert_eq!(snapshot(&app), before, "{what}: the database changed");
    }
}

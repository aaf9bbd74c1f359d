//! Coalesced orders answer exactly as one-at-a-time orders would, and a hot product sold in
//! batches is never oversold.

use std::collections::BTreeSet;

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer};
use haita::auth::Role;
use haita::db::Engine;
use haita::idempotency::IdempotencyKey;
use haita::locking::retry::RetryPolicy;
use haita::orders::OrderError;
use haita::orders::batch::{self, BatchedOrder};
use haita::orders::model::Cart;
use haita::orders::service::{self, OrderView};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{
    Client, TestApp, TestDb, create_product, create_user, error_code, invariants, on_both_engines,
    postgres_database_url,
};

/// What one order was answered, as both paths must say it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Sold {
        order: i64,
        total_cents: i64,
    },
    Short {
        available: u32,
        requested: u32,
    },
    /// The rate's `Retry-After` depends on the clock of each run; its cap does not.
    TooFast {
        max: u32,
    },
    Unknown(i64),
    Reused,
}

fn outcome(answer: Result<OrderView, OrderError>) -> Outcome {
    match answer {
        Ok(order) => Outcome::Sold { order: order.id, total_cents: order.total_cents },
        Err(OrderError::InsufficientStock { available, requested, .. }) => {
            Outcome::Short { available, requested }
        }
        Err(OrderError::TooFast { max, .. }) => Outcome::TooFast { max },
        Err(OrderError::UnknownProduct(id)) => Outcome::Unknown(id),
        Err(OrderError::Idempotency(haita::idempotency::IdempotencyError::Reused)) => Outcome::Reused,
        Err(other) => panic!("unexpected answer {other}"),
    }
}

/// One order of the workload: who, which product, how many, and the idempotency key it carries.
#[derive(Clone, Debug)]
struct Step {
    user: i64,
    product: i64,
    quantity: i64,
    key: Option<String>,
}

impl Step {
    fn cart(&self) -> Cart {
        Cart::parse(&[(self.product, self.quantity)]).expect("a valid cart")
    }

    fn once(&self) -> Option<haita::idempotency::Once> {
        let key = self.key.as_ref()?;
        Some(IdempotencyKey::parse(key).expect("key").bind(self.user, &self.cart().describe()))
    }

    fn batched(&self) -> BatchedOrder {
        BatchedOrder::new(self.user, self.cart().lines()[0], self.once())
    }
}

/// The users' rate in this test: low enough that some of them reach it.
const MAX_PER_MINUTE: u32 = 2;

/// The same users (ids 1 to 12) and products (two with stock, one id that names no product) in
/// `db`, so two databases prepared alike give every row the same id.
struct Shop {
    users: Vec<i64>,
    hot: i64,
    second: i64,
    missing: i64,
}

fn open_shop(db: &TestDb) -> Shop {
    let users = (0..12).map(|i| create_user(db, &format!("c{i:02}"), Role::Customer).id).collect();
    let hot = create_product(db, "HOT-EQ", 250, 41);
    let second = create_product(db, "SECOND-EQ", 900, 12);
    Shop { users, hot, second, missing: second + 1000 }
}

/// A fixed workload of 120 orders (a seeded generator: the same every run) that runs both
/// products out of stock: varied quantities, users ordering more than their rate allows, a few
/// orders of a product that does not exist, keyed orders, their resends, and one key reused for
/// another quantity.
fn workload(shop: &Shop) -> Vec<Step> {
    let mut rng = StdRng::seed_from_u64(31);
    let mut steps: Vec<Step> = Vec::new();
    for n in 0..120 {
        let user = shop.users[rng.random_range(0..shop.users.len())];
        let product = match rng.random_range(0..10) {
            0 => shop.missing,
            1..=3 => shop.second,
            _ => shop.hot,
        };
        let step = Step { user, product, quantity: rng.random_range(1..=7), key: None };
        let keyed = match rng.random_range(0..8) {
            // A resend of an earlier keyed order, as it was sent.
            0 => steps.iter().rev().find(|s| s.key.is_some()).cloned(),
            // The key of an earlier order with another quantity: refused.
            1 => steps
                .iter()
                .rev()
                .find(|s| s.key.is_some())
                .map(|s| Step { quantity: s.quantity % 5 + 1, ..s.clone() }),
            2 | 3 => Some(Step { key: Some(format!("key-{n}")), ..step.clone() }),
            _ => None,
        };
        steps.push(keyed.unwrap_or(step));
    }
    steps
}

/// A second database on `db`'s server, for the same shop run the other way.
fn twin(db: &TestDb) -> TestDb {
    match db.pool.engine() {
        Engine::Mysql => TestDb::new(),
        Engine::Postgres => TestDb::on_server(&postgres_database_url()),
    }
}

on_both_engines!(
    the_same_arrival_order_gets_the_same_answers_coalesced_and_one_at_a_time,
    the_same_arrival_order_gets_the_same_answers_coalesced_and_one_at_a_time_on_postgres
        => same_answers_both_ways
);

/// One workload on two databases prepared alike: one order at a time on one
/// (`service::place_order`), in batches of 1 to 9 on the other (`batch::order_batch`), each
/// batch a run of consecutive orders of one product, so the arrival order is the same. Every
/// order gets the same answer both ways (a resend the same order), and the stock, the
/// orders and the ledger end up identical.
async fn same_answers_both_ways(alone: TestDb) {
    let batched = twin(&alone);
    let shop = open_shop(&alone);
    let twin_shop = open_shop(&batched);
    assert_eq!(
        (&shop.users, shop.hot, shop.second),
        (&twin_shop.users, twin_shop.hot, twin_shop.second),
        "both shops have the same ids"
    );
    let steps = workload(&shop);
    let policy = RetryPolicy::default();

    let one_at_a_time: Vec<Outcome> = steps
        .iter()
        .map(|step| {
            let placed = service::place_order(
                &alone.pool,
                &policy,
                step.user,
                &step.cart(),
                step.once().as_ref(),
                MAX_PER_MINUTE,
            );
            outcome(placed.map(|p| p.order))
        })
        .collect();

    let mut rng = StdRng::seed_from_u64(7);
    let mut in_batches = Vec::new();
    let mut rest = &steps[..];
    while let Some(first) = rest.first() {
        let run = rest.iter().take_while(|s| s.product == first.product).count();
        let (batch, tail) = rest.split_at(rng.random_range(1..=9).min(run));
        let orders: Vec<BatchedOrder> = batch.iter().map(Step::batched).collect();
        let decided = batch::order_batch(&batched.pool, &policy, first.product, &orders, MAX_PER_MINUTE)
            .expect("the batch runs");
        assert_eq!(decided.attempts, 1);
        in_batches.extend(decided.answers.into_iter().map(outcome));
        rest = tail;
    }

    // Order ids may differ by gaps (an auto-increment hands out ids a batch does not use); each
    // order is compared by its place among the orders placed.
    let (one_at_a_time, in_batches) = (by_place(one_at_a_time), by_place(in_batches));
    for (n, (step, (alone, batched))) in steps.iter().zip(one_at_a_time.iter().zip(&in_batches)).enumerate() {
        assert_eq!(alone, batched, "order {n} ({step:?})");
    }
    assert_eq!(one_at_a_time.len(), in_batches.len());

    // The workload met every answer, a partial shortfall and a replay among them.
    let kinds: BTreeSet<&str> = one_at_a_time
        .iter()
        .map(|o| match o {
            Outcome::Sold { .. } => "sold",
            Outcome::Short { available: 0, .. } => "sold out",
            Outcome::Short { .. } => "fewer left than asked",
            Outcome::TooFast { .. } => "too fast",
            Outcome::Unknown(_) => "unknown product",
            Outcome::Reused => "key reused",
        })
        .collect();
    assert_eq!(kinds.len(), 6, "{kinds:?}");
    let sold: Vec<i64> = one_at_a_time
        .iter()
        .filter_map(|o| if let Outcome::Sold { order, .. } = o { Some(*order) } else { None })
        .collect();
    assert!(sold.len() > sold.iter().collect::<BTreeSet<_>>().len(), "a resend was answered its first order");

    for product in [shop.hot, shop.second] {
        assert_eq!(invariants::on_hand(&alone, product), invariants::on_hand(&batched, product));
    }
    assert_eq!(invariants::on_hand(&alone, shop.hot), 0, "the hot product ran out");
    assert_eq!(rows(&alone), rows(&batched), "the same orders, lines and ledger");
    for db in [&alone, &batched] {
        invariants::stock_matches_ledger(db);
        invariants::orders_match_ledger(db);
    }
}

#[derive(QueryableByName, Debug, PartialEq, Eq)]
struct Row {
    #[diesel(sql_type = BigInt)]
    order_id: i64,
    #[diesel(sql_type = BigInt)]
    user_id: i64,
    #[diesel(sql_type = BigInt)]
    product_id: i64,
    #[diesel(sql_type = Integer)]
    quantity: i32,
    #[diesel(sql_type = BigInt)]
    total_cents: i64,
    #[diesel(sql_type = Integer)]
    delta: i32,
}

/// Every order with its line and its ledger movement, in id order, each order named by its
/// place among them.
fn rows(db: &TestDb) -> Vec<Row> {
    let rows: Vec<Row> = haita::db::cached_sql::<diesel::sql_types::Untyped>(
        "SELECT o.id AS order_id, o.user_id, l.product_id, l.quantity, o.total_cents, m.delta \
         FROM orders o JOIN order_lines l ON l.order_id = o.id \
         JOIN stock_movements m ON m.order_id = o.id AND m.product_id = l.product_id ORDER BY o.id",
    )
    .load(&mut db.raw_connection())
    .expect("orders");
    rows.into_iter().zip(1..).map(|(row, place)| Row { order_id: place, ..row }).collect()
}

/// The answers with each order id replaced by the order's place among the orders placed (ids
/// grow in the order orders are written, on both paths).
fn by_place(outcomes: Vec<Outcome>) -> Vec<Outcome> {
    let ids: BTreeSet<i64> = outcomes
        .iter()
        .filter_map(|o| if let Outcome::Sold { order, .. } = o { Some(*order) } else { None })
        .collect();
    let place = |id: i64| ids.iter().position(|&i| i == id).map_or(0, |p| i64::try_from(p).unwrap_or(0) + 1);
    outcomes
        .into_iter()
        .map(|o| match o {
            Outcome::Sold { order, total_cents } => Outcome::Sold { order: place(order), total_cents },
            other => other,
        })
        .collect()
}

on_both_engines!(
    sixty_four_clients_on_four_instances_buy_exactly_the_stock_of_a_hot_product,
    sixty_four_clients_on_four_instances_buy_exactly_the_stock_of_a_hot_product_on_postgres
        => sixty_four_clients_on_a_hot_product
);

/// Flash sales: 64 clients on four instances (four drainers, whose batches only the stock row's
/// lock keeps apart) order one unit each of a product with 20 in stock, all at once; eight
/// sales in a row, a product each (two batches must meet at the moment stock runs out for a
/// missing lock to show, and one sale is one such moment). Each time exactly 20 are sold and
/// everyone else is told it is sold out (never a 500), the stock equals the ledger, and batches
/// really formed.
async fn sixty_four_clients_on_a_hot_product(db: TestDb) {
    const STOCK: u32 = 20;
    // Four instances, but the connections of about one: a batch takes one at a time, and a
    // PostgreSQL server serves 100 in all, to every test running at once.
    let app = TestApp::spawn_on(db, 4, |c| {
        c.coalesce_orders = true;
        c.pool_size = 4;
    })
    .await;
    let clients: Vec<Client> = (0..64).map(|i| app.client(i)).collect();
    let users: Vec<_> = (0..64).map(|i| app.user(&format!("f{i:02}"), Role::Customer)).collect();
    futures::future::join_all(clients.iter().zip(&users).map(|(c, u)| c.login(u))).await;

    const SALES: i64 = 8;
    for sale in 1..=SALES {
        let product = app.product(&format!("FLASH-{sale}"), 1500, STOCK);
        let before = batch_stats(&app).await;
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(clients.len()));
        let answers = futures::future::join_all(clients.iter().map(|client| {
            let barrier = barrier.clone();
            async move {
                barrier.wait().await;
                let response = client.order(&[(product, 1)]).await;
                let status = response.status().as_u16();
                (status, if status == 201 { String::new() } else { error_code(response).await })
            }
        }))
        .await;
        let after = batch_stats(&app).await;

        let sold = answers.iter().filter(|(s, _)| *s == 201).count();
        assert_eq!(sold, STOCK as usize, "sale {sale}: {answers:?}");
        assert!(
            answers.iter().all(|(s, c)| *s == 201 || (*s == 409 && c == "insufficient_stock")),
            "sale {sale}: {answers:?}"
        );
        let (batches, orders) = (after.0 - before.0, after.1 - before.1);
        assert_eq!(orders, 64.0, "sale {sale}: every order went through a batch");
        assert!(
            orders > batches,
            "sale {sale}: some batch decided more than one order ({orders} in {batches})"
        );
        assert_eq!(invariants::on_hand(&app.db, product), 0, "sale {sale}");
        invariants::stock_matches_ledger(&app.db);
        invariants::orders_match_ledger(&app.db);
    }
    let sold: i64 =
        haita::schema::orders::table.count().get_result(&mut app.db.raw_connection()).expect("count");
    assert_eq!(sold, SALES * i64::from(STOCK));
    invariants::no_named_lock_left_held(&app.db);
}

/// (batches, orders in them) over every instance's `/metrics`.
async fn batch_stats(app: &TestApp) -> (f64, f64) {
    let mut total = (0.0, 0.0);
    for i in 0..app.addresses.len() {
        let metrics = app.client(i).metrics().await;
        let value = |name: &str| {
            metrics
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        total.0 += value("haita_order_batch_size_count");
        total.1 += value("haita_order_batch_size_sum");
    }
    total
}

/// A cart of several lines is never coalesced: it runs on its own, and says so by taking every
/// line or none, whatever single-line orders of the same products are being batched.
#[actix_web::test]
async fn a_cart_of_several_lines_runs_alone_beside_the_batches() {
    let app = TestApp::spawn_on(TestDb::new(), 1, |c| c.coalesce_orders = true).await;
    let (hot, other) = (app.product("HOT-MIX", 100, 20), app.product("OTHER-MIX", 100, 1));
    let clients: Vec<Client> = (0..12).map(|i| app.client(i)).collect();
    let users: Vec<_> = (0..12).map(|i| app.user(&format!("m{i:02}"), Role::Customer)).collect();
    futures::future::join_all(clients.iter().zip(&users).map(|(c, u)| c.login(u))).await;
    let before = batch_stats(&app).await;

    let answers = futures::future::join_all(clients.iter().enumerate().map(|(i, client)| async move {
        let lines: &[(i64, i64)] = if i < 2 { &[(hot, 1), (other, 1)] } else { &[(hot, 1)] };
        client.order(lines).await.status().as_u16()
    }))
    .await;
    let after = batch_stats(&app).await;

    assert_eq!(after.1 - before.1, 10.0, "the ten single-line orders were batched, the carts not");
    let carts = &answers[..2];
    assert_eq!(
        carts.iter().filter(|s| **s == 201).count(),
        1,
        "one cart got the last OTHER-MIX: {answers:?}"
    );
    assert!(answers[2..].iter().all(|s| *s == 201), "{answers:?}");
    assert_eq!(invariants::on_hand(&app.db, other), 0);
    assert_eq!(invariants::on_hand(&app.db, hot), 20 - 11);
    invariants::stock_matches_ledger(&app.db);
    invariants::orders_match_ledger(&app.db);
}

/// A key sent with the hot orders: 20 resends of one order, spread over two instances and sent
/// all at once, so several of them land in one batch. Each gets the first one's answer, and one
/// order is placed.
#[actix_web::test]
async fn twenty_resends_of_one_keyed_order_in_batches_place_it_once() {
    let app = TestApp::spawn_instances(2, |c| c.coalesce_orders = true).await;
    let product = app.product("KEYED-HOT", 300, 50);
    let user = app.user("resender", Role::Customer);
    let session = app.client(0);
    session.login(&user).await;
    let before = batch_stats(&app).await;

    let resends = (0..20).map(|i| {
        let client = Client { http: session.http.clone(), base: app.addresses[i % 2].clone() };
        async move {
            let response = client
                .http
                .post(client.url("/api/v1/orders"))
                .header("Idempotency-Key", "flash-7c1e")
                .json(&serde_json::json!({"lines": [{"product_id": product, "quantity": 2}]}))
                .send()
                .await
                .expect("POST");
            (response.status().as_u16(), response.json::<serde_json::Value>().await.expect("JSON answer"))
        }
    });
    let answers = futures::future::join_all(resends).await;
    let after = batch_stats(&app).await;

    assert!(answers.iter().all(|a| a == &answers[0]), "a resend got another answer: {answers:?}");
    assert_eq!(answers[0].0, 201, "{answers:?}");
    assert_eq!(after.1 - before.1, 20.0, "every resend went through a batch");
    assert_eq!(invariants::on_hand(&app.db, product), 48);
    let placed: i64 =
        haita::schema::orders::table.count().get_result(&mut app.db.raw_connection()).expect("count");
    assert_eq!(placed, 1);
    invariants::stock_matches_ledger(&app.db);
    invariants::orders_match_ledger(&app.db);
}

on_both_engines!(
    a_deadlock_a_batch_loses_is_kept_for_the_admin_and_the_whole_batch_runs_again,
    a_deadlock_a_batch_loses_is_kept_for_the_admin_and_the_whole_batch_runs_again_on_postgres
        => a_deadlock_a_batch_loses
);

/// A batch locks its buyers' rows, then the stock row. Another session (a maintenance script,
/// say) holds the stock row and then asks for a buyer's row: a deadlock, which the batch must
/// lose. InnoDB rolls back the transaction with less to undo, so that session first writes
/// ballast rows; PostgreSQL aborts the session whose deadlock check runs first, after
/// `deadlock_timeout` of waiting: the batch, which waits first. The batch's whole transaction
/// runs again once the other commits, and the deadlock is kept, with what the retry did.
async fn a_deadlock_a_batch_loses(db: TestDb) {
    let buyers: Vec<i64> = (0..3).map(|i| create_user(&db, &format!("d{i}"), Role::Customer).id).collect();
    let product = create_product(&db, "DL-BATCH", 100, 10);
    let mut other = session_that_outweighs_a_batch(&db);
    haita::db::cached_sql::<diesel::sql_types::Untyped>(
        "SELECT product_id FROM stock_levels WHERE product_id = ? FOR UPDATE",
    )
    .bind::<BigInt, _>(product)
    .execute(&mut other)
    .expect("the other session holds the stock row");

    let (pool, orders) = (
        db.pool.clone(),
        buyers
            .iter()
            .map(|&user| Step { user, product, quantity: 2, key: None }.batched())
            .collect::<Vec<_>>(),
    );
    let batch = std::thread::spawn(move || {
        batch::order_batch(&pool, &RetryPolicy::default(), product, &orders, 20)
            .map(|b| (b.attempts, b.answers.iter().filter(|a| a.is_ok()).count()))
    });
    invariants::wait_until_a_transaction_waits_for_a_lock(&db).await;
    // The batch holds its buyers' rows and waits for the stock row: asking for a buyer's row
    // closes the cycle.
    haita::db::cached_sql::<diesel::sql_types::Untyped>("SELECT id FROM users WHERE id = ? FOR UPDATE")
        .bind::<BigInt, _>(buyers[1])
        .execute(&mut other)
        .expect("the batch, not this session, is rolled back");
    let mut watcher = db.raw_connection();
    crate::common::poll::until_async(
        "the batch to store its deadlock evidence",
        std::time::Duration::from_secs(30),
        async || {
            let stored: i64 = haita::db::cached_sql::<BigInt>("SELECT COUNT(*) FROM deadlock_reports")
                .get_result(&mut watcher)
                .expect("reports");
            stored > 0
        },
    )
    .await;
    diesel::connection::SimpleConnection::batch_execute(&mut other, "COMMIT").expect("commit");

    let (attempts, placed) = batch.join().expect("batch thread").expect("the batch ran again and placed");
    assert_eq!((attempts, placed), (2, 3));
    let reports = haita::deadlocks::recent(&mut db.raw_connection(), 10).expect("reports");
    let report = reports.iter().find(|r| r.seen_by == "order batch").expect("seen by the batch");
    assert_eq!(report.outcome.as_deref(), Some("retried: 3 of 3 orders placed on attempt 2"), "{report:?}");
    assert_eq!(invariants::on_hand(&db, product), 4);
    invariants::stock_matches_ledger(&db);
    invariants::orders_match_ledger(&db);
}

on_both_engines!(
    an_order_whose_batch_lost_its_connection_is_answered_503_not_placed_again,
    an_order_whose_batch_lost_its_connection_is_answered_503_not_placed_again_on_postgres
        => a_batch_loses_its_connection
);

/// A batch's connection lost while it runs: lost at its COMMIT the batch may have been placed,
/// and nobody can tell, so its orders must not try again alone (an unkeyed one would be placed
/// twice). Here the connection is killed while the batch waits for the stock row (held by this
/// test), so nothing was placed, and the order is answered 503 `unavailable` all the same; the
/// next order goes through.
async fn a_batch_loses_its_connection(db: TestDb) {
    let engine = db.pool.engine();
    let app = TestApp::spawn_on(db, 1, |_| {}).await;
    let product = app.product("LOST-BATCH", 100, 10);
    let buyer = app.client(0);
    buyer.login(&app.user("lost0", Role::Customer)).await;
    let mut other = app.db.raw_connection();
    diesel::connection::SimpleConnection::batch_execute(&mut other, "START TRANSACTION").expect("begin");
    haita::db::cached_sql::<diesel::sql_types::Untyped>(
        "SELECT product_id FROM stock_levels WHERE product_id = ? FOR UPDATE",
    )
    .bind::<BigInt, _>(product)
    .execute(&mut other)
    .expect("this session holds the stock row");

    let order = actix_web::rt::spawn(async move { buyer.order(&[(product, 1)]).await });
    invariants::wait_until_a_transaction_waits_for_a_lock(&app.db).await;
    #[derive(QueryableByName)]
    struct Waiting {
        #[diesel(sql_type = BigInt)]
        id: i64,
    }
    let mut killer = app.db.raw_connection();
    let waiting: Vec<Waiting> =
        haita::db::cached_sql::<diesel::sql_types::Untyped>(haita::db::Sql::per_engine(
            "SELECT CAST(p.ID AS SIGNED) AS id FROM information_schema.INNODB_TRX t \
         JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id \
         WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()",
            "SELECT CAST(pid AS BIGINT) AS id FROM pg_stat_activity \
         WHERE datname = current_database() AND wait_event_type = 'Lock'",
        ))
        .load(&mut killer)
        .expect("the waiting session");
    assert_eq!(waiting.len(), 1, "one batch waits for the stock row");
    let kill = match engine {
        Engine::Mysql => format!("KILL CONNECTION {}", waiting[0].id),
        Engine::Postgres => format!("SELECT pg_terminate_backend({})", waiting[0].id),
    };
    diesel::connection::SimpleConnection::batch_execute(&mut killer, &kill)
        .expect("kill the batch's session");

    let answer = order.await.expect("order task");
    assert_eq!(answer.status(), 503, "not tried again alone");
    assert!(answer.headers().contains_key("retry-after"));
    assert_eq!(error_code(answer).await, "unavailable");
    diesel::connection::SimpleConnection::batch_execute(&mut other, "ROLLBACK").expect("release");
    let orders: i64 = haita::db::cached_sql::<BigInt>("SELECT COUNT(*) FROM orders")
        .get_result(&mut killer)
        .expect("orders");
    assert_eq!(orders, 0);

    let buyer = app.client(1);
    buyer.login(&app.user("lost1", Role::Customer)).await;
    let next = buyer.order(&[(product, 1)]).await;
    assert_eq!(next.status(), 201, "{:?}", next.text().await);
    assert_eq!(invariants::on_hand(&app.db, product), 9);
    invariants::stock_matches_ledger(&app.db);
    invariants::orders_match_ledger(&app.db);
}

on_both_engines!(
    a_batch_that_loses_a_deadlock_halfway_through_its_buyers_rows_runs_again,
    a_batch_that_loses_a_deadlock_halfway_through_its_buyers_rows_runs_again_on_postgres
        => a_deadlock_halfway_through_a_locking_read
);

/// The deadlock of the test above, met one statement earlier: while the batch locks its
/// buyers' rows (one `SELECT … FOR UPDATE` for all, in ascending id). The batch has locked and
/// read the first buyer's row when it waits for the second, which another session holds; that
/// session then asks for the first: the batch loses, and its error arrives in the middle of a
/// result set, after a row. On MariaDB's client library, the prepared statement that met it
/// was left expecting the rest of that result: run again on the same connection (the retry,
/// or the next request to be handed the connection), it waited for rows the server had
/// already ended, for ever, while the server showed the session idle. Under load on three
/// instances, this was the coalesced batch that never answered.
async fn a_deadlock_halfway_through_a_locking_read(db: TestDb) {
    let buyers: Vec<i64> = (0..3).map(|i| create_user(&db, &format!("h{i}"), Role::Customer).id).collect();
    let product = create_product(&db, "DL-HALFWAY", 100, 10);
    let mut other = session_that_outweighs_a_batch(&db);
    haita::db::cached_sql::<diesel::sql_types::Untyped>("SELECT id FROM users WHERE id = ? FOR UPDATE")
        .bind::<BigInt, _>(buyers[1])
        .execute(&mut other)
        .expect("the other session holds the second buyer's row");

    let (pool, orders) = (
        db.pool.clone(),
        buyers
            .iter()
            .map(|&user| Step { user, product, quantity: 1, key: None }.batched())
            .collect::<Vec<_>>(),
    );
    let batch = std::thread::spawn(move || {
        batch::order_batch(&pool, &RetryPolicy::default(), product, &orders, 20)
            .map(|b| (b.attempts, b.answers.iter().filter(|a| a.is_ok()).count()))
    });
    invariants::wait_until_a_transaction_waits_for_a_lock(&db).await;
    // The batch holds the first buyer's row and waits for the second: asking for the first
    // closes the cycle.
    haita::db::cached_sql::<diesel::sql_types::Untyped>("SELECT id FROM users WHERE id = ? FOR UPDATE")
        .bind::<BigInt, _>(buyers[0])
        .execute(&mut other)
        .expect("the batch, not this session, is rolled back");
    diesel::connection::SimpleConnection::batch_execute(&mut other, "COMMIT").expect("commit");

    // A hang has no end to wait for: a minute is far beyond the retry's few milliseconds.
    crate::common::poll::until_async(
        "the batch to run again and answer",
        std::time::Duration::from_secs(60),
        async || batch.is_finished(),
    )
    .await;
    let (attempts, placed) = batch.join().expect("batch thread").expect("the batch ran again and placed");
    assert_eq!((attempts, placed), (2, 3));
    assert_eq!(invariants::on_hand(&db, product), 7);
    invariants::stock_matches_ledger(&db);
    invariants::orders_match_ledger(&db);
}

/// Another session, in a transaction that has written ballast rows on MySQL, so that InnoDB
/// rolls back the batch (the transaction with less to undo) when the two deadlock; PostgreSQL
/// aborts whichever session's deadlock check runs first, so there this session's check is put
/// off.
fn session_that_outweighs_a_batch(db: &TestDb) -> haita::db::DbConn {
    let mut other = db.raw_connection();
    diesel::connection::SimpleConnection::batch_execute(
        &mut other,
        match db.pool.engine() {
            Engine::Mysql => {
                "CREATE TABLE ballast (n INT NOT NULL) ENGINE = InnoDB; START TRANSACTION; \
                 INSERT INTO ballast WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 200) \
                   SELECT n FROM s"
            }
            // Its own deadlock check comes a minute late: the batch's, after the server's
            // `deadlock_timeout`, is then the one to find the cycle, however loaded the machine
            // (which check runs first is otherwise a race between two timers).
            Engine::Postgres => "SET deadlock_timeout = '60s'; START TRANSACTION",
        },
    )
    .expect("ballast");
    other
}

//! The flash sale (`haita::lab::flash`): 500 buyers through the HTTP API of two instances on one
//! database, 50 units, sold at the click and with checkout holds. Whatever the buyers were told,
//! the database is what is checked: nothing sold beyond the stock, the stock row equal to its
//! ledger, one unit per buyer, every hold ended.

use diesel::prelude::*;
use diesel::sql_types::BigInt;
use haita::lab::flash::{FlashReport, Variant, VariantResult};
use haita::lab::schema::demo_flash_sales;

use crate::common::{TestApp, TestDb, invariants, on_both_engines};

/// Two instances in `DEMO_MODE` on `db`, its lab tables made.
async fn two_instances(db: TestDb) -> TestApp {
    haita::lab::prepare(&db.pool).expect("lab migrations");
    TestApp::spawn_on(db, 2, |c| c.demo_mode = true).await
}

/// `haita demo flash-sale` against every instance of `app`, on a blocking thread (the instances
/// serve the buyers meanwhile); its stdout. The pages' tests run a small one for its report.
pub async fn flash_sale(app: &TestApp, extra: &[&str]) -> String {
    let mut args: Vec<String> = ["demo", "flash-sale", "--seed", "31"].map(String::from).to_vec();
    for address in &app.addresses {
        args.extend(["--base-url".to_string(), address.clone()]);
    }
    args.extend(extra.iter().map(|a| a.to_string()));
    let url = app.db.url.clone();
    let output = actix_web::rt::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_haita"))
            .args(&args)
            .env("DATABASE_URL", url)
            .env("DEMO_MODE", "1")
            .env("RUST_LOG", "warn")
            .output()
            .expect("run haita")
    })
    .await
    .expect("the CLI's thread");
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    stdout
}

/// The latest sale's report, as stored for `/demo`.
fn stored_report(app: &TestApp) -> FlashReport {
    let (id, json): (i64, Option<String>) = demo_flash_sales::table
        .order(demo_flash_sales::id.desc())
        .select((demo_flash_sales::id, demo_flash_sales::report))
        .first(&mut app.db.raw_connection())
        .expect("a stored flash sale");
    let mut report: FlashReport = serde_json::from_str(&json.expect("a report")).expect("report JSON");
    report.id = id;
    report
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

fn count(app: &TestApp, sql: &str, product: i64) -> i64 {
    haita::db::cached_sql::<diesel::sql_types::Untyped>(sql)
        .bind::<BigInt, _>(product)
        .get_result::<Count>(&mut app.db.raw_connection())
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .n
}

/// Units of `product` in orders, counted from the order lines.
fn sold_in_orders(app: &TestApp, product: i64) -> i64 {
    count(app, "SELECT COUNT(*) AS n FROM order_lines WHERE product_id = ?", product)
}

/// Buyers with more than one order line of `product`.
fn buyers_served_twice(app: &TestApp, product: i64) -> i64 {
    count(
        app,
        "SELECT COUNT(*) AS n FROM (SELECT o.user_id FROM orders o JOIN order_lines l ON l.order_id = o.id \
         WHERE l.product_id = ? GROUP BY o.user_id HAVING COUNT(*) > 1) twice",
        product,
    )
}

/// What every variant of every sale must leave in the database.
fn sound(app: &TestApp, report: &FlashReport, v: &VariantResult) {
    let name = v.variant.name();
    assert_eq!(v.errors, 0, "{name}: answers no buyer expects (a 500?): {:?}", v.first_error);
    assert_eq!(v.oversold, 0, "{name}: oversold");
    assert!(v.sold <= i64::from(report.stock), "{name}: sold {}", v.sold);
    assert_eq!(
        v.sold,
        sold_in_orders(app, v.product_id),
        "{name}: the report counts what the database holds"
    );
    assert_eq!((v.on_hand, v.ledger), (i64::from(report.stock) - v.sold, i64::from(report.stock) - v.sold));
    assert_eq!(invariants::on_hand(&app.db, v.product_id), u32::try_from(v.on_hand).expect("on hand"));
    assert_eq!(buyers_served_twice(app, v.product_id), 0, "{name}: one unit per buyer");
    invariants::stock_matches_ledger(&app.db);
    invariants::orders_match_ledger(&app.db);
}

/// After the sale nobody is logged in as a buyer.
fn no_buyer_session_left(app: &TestApp) {
    use haita::schema::{user_sessions, users};
    let left: i64 = user_sessions::table
        .inner_join(users::table)
        .filter(users::username.eq_any(haita::lab::flash::buyer_names()))
        .count()
        .get_result(&mut app.db.raw_connection())
        .expect("buyers' sessions");
    assert_eq!(left, 0, "the buyers' sessions end with the sale");
}

/// How the holds of `product` ended, counted in the database by its clock: (taken, used,
/// released, expired, live).
fn hold_states(app: &TestApp, product: i64) -> (i64, i64, i64, i64, i64) {
    let n = |condition: &str| {
        count(
            app,
            &format!("SELECT COUNT(*) AS n FROM stock_holds WHERE product_id = ? AND ({condition})"),
            product,
        )
    };
    (
        n("TRUE"),
        n("ended = 'used'"),
        n("ended = 'released'"),
        n("ended IS NULL AND expires_at <= {now}"),
        n("ended IS NULL AND expires_at > {now}"),
    )
}

async fn sold_both_ways_over_two_instances(db: TestDb) {
    let app = two_instances(db).await;
    let stdout = flash_sale(&app, &[]).await;
    assert!(stdout.contains("500 buyers over 2 instance(s), 50 units"), "{stdout}");
    assert!(stdout.contains("without holds: nothing oversold"), "{stdout}");
    assert!(stdout.contains("with holds: nothing oversold"), "{stdout}");

    let report = stored_report(&app);
    assert_eq!((report.buyers, report.stock, report.instances, report.hold_seconds), (500, 50, 2, 3));
    let [click, held] = report.variants.as_slice() else { panic!("two variants: {stdout}") };

    // At the click: the stock row decides, once per buyer.
    assert_eq!(click.variant, Variant::WithoutHolds);
    assert_eq!(click.sold, 50, "every unit sold: {stdout}");
    assert_eq!(click.sold + i64::from(click.refused), 500, "every buyer bought or was refused: {stdout}");
    assert_eq!(click.refusals, click.refused, "one answer each");
    assert_eq!(click.holds_taken, 0);
    sound(&app, &report, click);

    // With holds: every hold ended, by the database's clock, and what was abandoned was held again.
    assert_eq!(held.variant, Variant::WithHolds);
    let (taken, used, released, expired, live) = hold_states(&app, held.product_id);
    assert_eq!(live, 0, "no hold is live after the sale");
    assert_eq!(taken, used + released + expired, "every hold ended used, released or expired");
    assert_eq!(
        (held.holds_taken, held.holds_used, held.holds_released, held.holds_expired),
        (taken, used, released, expired),
        "the report counts what the database holds"
    );
    assert_eq!(used, held.sold, "every unit sold was sold from a hold, and every used hold sold one");
    assert_eq!(held.used_without_order, 0, "no hold marked used without its order: {stdout}");
    assert!(held.abandoned > 0, "a fifth of the buyers walk away from their hold: {stdout}");
    assert!(expired >= i64::from(held.abandoned), "every abandoned hold expired: {stdout}");
    assert!(held.reheld > 0, "the abandoned units were held again: {stdout}");
    assert!(
        i64::from(held.expired_orders) <= expired - i64::from(held.abandoned),
        "an order refused as expired came from a hold that expired: {stdout}"
    );
    sound(&app, &report, held);
    no_buyer_session_left(&app);
    not_in_the_real_catalog(&app).await;
}

/// The sale's throwaway products are sold by their ids only: the catalog (page and JSON), the
/// stock receipts page and its ledger never show them.
async fn not_in_the_real_catalog(app: &TestApp) {
    let staff = app.client(0);
    staff.login(&app.user("stocker", haita::auth::Role::Staff)).await;
    for path in ["/products", "/api/v1/products", "/stock/receipts"] {
        let page = staff.get(path).await;
        assert_eq!(page.status(), 200, "{path}");
        let page = page.text().await.expect("a page");
        assert!(
            !page.contains("FLASH-") && !page.contains("Flash sale"),
            "{path} lists a sale's product: {page}"
        );
    }
}

on_both_engines!(
    a_flash_sale_over_two_instances_sells_the_stock_once_with_or_without_holds,
    a_flash_sale_over_two_instances_sells_the_stock_once_with_or_without_holds_on_postgres
        => sold_both_ways_over_two_instances
);

/// Whether `page` shows a flash sale's report.
fn shows_a_report(page: &str) -> bool {
    page.contains("id=\"flash-about\"") && page.contains("class=\"flash-sale cards\"")
}

/// From `/demo` a logged-in user starts the standard sale against the instance they are on; the
/// report is stored, so every instance shows it. Another sale is refused while one runs on any
/// instance, and within the user's cooldown; a visitor is asked to log in; a forged form is 403.
#[actix_web::test]
async fn the_demo_page_starts_a_flash_sale_that_every_instance_then_shows() {
    let app = two_instances(TestDb::new()).await;
    let seller = app.client(0);
    seller.login(&app.user("seller", haita::auth::Role::Customer)).await;
    let page = app.client(1).get("/demo").await.text().await.expect("page");
    assert!(
        page.contains("id=\"flash-none\"") && page.contains("/login?next=%2Fdemo"),
        "a visitor logs in first"
    );

    let token = seller.csrf_token("/demo").await;
    let forged = seller.post_form("/demo/flash-sales", &[("csrf_token", "forged")]).await;
    assert_eq!(forged.status(), 403);
    let started = seller.post_form("/demo/flash-sales", &[("csrf_token", &token)]).await;
    assert_eq!(started.status(), 303, "the sale runs on; the browser goes back to the page");
    assert_eq!(started.headers()["location"], "/demo#flash");

    let other = app.client(1);
    crate::common::poll::until_async(
        "the other instance to show how the sale ended",
        std::time::Duration::from_secs(180),
        async || {
            let page = other.get("/demo").await.text().await.expect("page");
            shows_a_report(&page) || page.contains("id=\"flash-failed\"")
        },
    )
    .await;
    let page = other.get("/demo").await.text().await.expect("page");
    assert!(!page.contains("id=\"flash-failed\""), "the sale failed: {page}");
    let report = stored_report(&app);
    assert_eq!((report.buyers, report.stock, report.instances), (500, 50, 1), "this instance only");
    assert_eq!(report.started_by, "seller");
    let page = other.get("/demo").await.text().await.expect("page");
    assert!(page.contains(&format!("Flash sale {}: 500 buyers over 1 instance(s)", report.id)), "{page}");

    let again = seller.post_form("/demo/flash-sales", &[("csrf_token", &token)]).await;
    assert_eq!(again.status(), 429, "within the user's cooldown");
    assert!(again.headers().contains_key("retry-after"));
    assert!(again.text().await.expect("page").contains("id=\"flash-refused\""));

    // Another instance's sale holds the slot: nobody else may start one meanwhile.
    haita::db::cached_sql::<()>(
        "INSERT INTO demo_flash_sales (started_by, running, lease_until) VALUES ('carol', 1, {now} + {? microseconds})",
    )
    .bind::<BigInt, _>(60_000_000_i64)
    .execute(&mut app.db.conn())
    .expect("a running sale");
    let second = app.client(1);
    second.login(&app.user("second", haita::auth::Role::Customer)).await;
    let token = second.csrf_token("/demo").await;
    let refused = second.post_form("/demo/flash-sales", &[("csrf_token", &token)]).await;
    assert_eq!(refused.status(), 409);
    let page = refused.text().await.expect("page");
    assert!(page.contains("A flash sale started by carol is running"), "{page}");
    assert!(page.contains("id=\"flash-running\""), "and the page says so");
}

async fn forgotten_with_their_products(db: TestDb) {
    let app = two_instances(db).await;
    let small = ["--buyers", "10", "--stock", "3", "--hold-seconds", "1"];
    flash_sale(&app, &small).await;
    let first = stored_report(&app);
    for _ in 0..haita::lab::flash::KEEP_SALES {
        flash_sale(&app, &small).await;
    }
    let kept: Vec<i64> = demo_flash_sales::table
        .select(demo_flash_sales::id)
        .order(demo_flash_sales::id)
        .load(&mut app.db.raw_connection())
        .expect("sales");
    assert_eq!(kept.len() as i64, haita::lab::flash::KEEP_SALES, "the newest are kept: {kept:?}");
    assert!(!kept.contains(&first.id), "the oldest is forgotten");
    for v in &first.variants {
        for table in ["products WHERE id", "stock_levels WHERE product_id", "order_lines WHERE product_id"] {
            let left = count(&app, &format!("SELECT COUNT(*) AS n FROM {table} = ?"), v.product_id);
            assert_eq!(left, 0, "{table} = {} is gone with its sale", v.product_id);
        }
        let ledger =
            count(&app, "SELECT COUNT(*) AS n FROM stock_movements WHERE product_id = ?", v.product_id);
        let holds = count(&app, "SELECT COUNT(*) AS n FROM stock_holds WHERE product_id = ?", v.product_id);
        assert_eq!((ledger, holds), (0, 0));
    }
    let latest = stored_report(&app);
    assert!(
        latest.variants.iter().all(|v| sold_in_orders(&app, v.product_id) == v.sold),
        "the kept ones stay"
    );
    invariants::stock_matches_ledger(&app.db);
    invariants::orders_match_ledger(&app.db);
}

on_both_engines!(
    old_flash_sales_are_forgotten_with_their_products_orders_and_holds,
    old_flash_sales_are_forgotten_with_their_products_orders_and_holds_on_postgres
        => forgotten_with_their_products
);

//! Every page on a phone (390 × 844 CSS pixels, in headless Chromium): nothing scrolls sideways,
//! and nothing a person acts on or reads first hides in a box that scrolls sideways.
//!
//! That every page, for every role, fits (no link, button or field beyond the screen's edges or
//! outside a box that clips it) is the visual check's (`tests/it/layout.rs`). Here, per page,
//! what a person reads first is on the screen too:
//! - a resource's days: each day with its booked and free counts and its Book button, "booked by
//!   you" or why it cannot be booked;
//! - products: each product with its price, its stock and the quantity field;
//! - checkout: each live hold with its quantity, price, expiry and time left, and its Place order
//!   and Release buttons;
//! - the live race: each strategy with its attempts, bookings and double bookings so far;
//! - a race's results: every figure of every strategy, and the sentence saying what it means;
//! - the admin's locks: each edit lock's key, owner, and the force-release reason and button;
//!   each batch run's job, progress and outcome, and "Run again" for a run left incomplete;
//! - the admin's metrics: each instance on the database with its state and key numbers.
//!
//! Wide tables show each row as a card on a phone (`table.cards` in `static/style.css`); the
//! tables that remain scroll inside their own box, and the page itself never does.

use fantoccini::Client;
#[cfg(feature = "lab")]
use haita::auth::Role;

use crate::common::TestApp;
use crate::common::browser::{Chromedriver, log_in, pick_language};
use crate::common::layout::out_of_sight;
#[cfg(feature = "lab")]
use crate::common::layout::overflow;
use crate::common::pages::every_page;

async fn at_phone_width(driver: &mut Chromedriver) -> Client {
    let browser = driver.browser().await;
    browser.set_window_size(390, 844).await.expect("window size");
    let inner = browser.execute("return window.innerWidth;", vec![]).await.expect("width");
    assert_eq!(inner.as_i64(), Some(390), "a phone-sized viewport");
    browser
}

/// The pages named at the top, in English and Japanese: what a person reads first on each is on
/// the screen, not in a box scrolled sideways.
#[actix_web::test]
async fn what_a_person_reads_and_acts_on_first_is_on_a_phone_screen() {
    let app = TestApp::spawn().await;
    let pages = every_page(&app).await;
    let path_of = |who: &str, prefix: &str| {
        let (_, paths) = pages.iter().find(|(w, _)| *w == who).expect("a role of the tour");
        paths.iter().find(|p| p.starts_with(prefix)).cloned().expect("a page of the tour")
    };
    let days = path_of("alice", "/resources/");
    let checks: [(&str, String, &str); 8] = [
        // Every cell of every day: the day, booked, free, and the Book button or what stands
        // in its place ("booked by you", past, full, closed).
        ("alice", days.clone(), "table.availability td, table.availability td > *"),
        ("alice", days, "table.availability .badge"),
        // The product, its price, its stock and the quantity field.
        ("alice", "/products".into(), "form[action=\"/orders\"] td, form[action=\"/orders\"] td > *"),
        // Each live hold: what, how many, until when and how long yet, Place order and Release.
        ("alice", "/checkout".into(), "#live-holds td, #live-holds td > *, #live-holds button"),
        // Each edit lock's key and owner, and the force release: reason and button.
        (
            "root",
            "/admin/locks".into(),
            "#edit-locks td:nth-child(1), #edit-locks td:nth-child(2), #edit-locks form.force-release input:not([type=hidden]), #edit-locks form.force-release button",
        ),
        // Each batch run: its job, its progress and outcome, and "Run again" for what is left.
        ("root", "/admin/locks".into(), "#batch-runs td, #batch-runs td > *"),
        ("root", "/admin/locks".into(), "#batch-runs form.run-again button"),
        // Each instance on the database: its name, state, version, times and key numbers.
        ("root", "/admin/metrics".into(), "#instances td, #instances td > *"),
    ];
    let base = app.address().to_string();
    let mut driver = Chromedriver::start();
    let mut unseen = Vec::new();
    for who in ["alice", "root"] {
        for lang in ["en", "ja"] {
            let browser = at_phone_width(&mut driver).await;
            log_in(&browser, &base, who).await;
            pick_language(&browser, &base, lang).await;
            for (_, path, css) in checks.iter().filter(|(w, _, _)| *w == who) {
                browser.goto(&format!("{base}{path}")).await.unwrap_or_else(|e| panic!("{path}: {e}"));
                for line in out_of_sight(&browser, css, true).await {
                    unseen.push(format!("{who} {path} ({lang}): {line}"));
                }
            }
            browser.close().await.expect("close");
        }
    }
    assert!(unseen.is_empty(), "out of sight at 390 px:\n{}", unseen.join("\n"));
}

/// The race demo, with a race's results on it, and a strategy's code.
#[cfg(feature = "lab")]
#[actix_web::test]
async fn the_race_demo_fits_a_phone_too() {
    let app = TestApp::spawn_lab().await;
    let racer = app.client(0);
    racer.login(&app.user("dora", Role::Customer)).await;
    let raced = racer
        .post_json("/api/v1/demo/races", &serde_json::json!({"strategy": "no-lock", "clients": 8}))
        .await;
    assert_eq!(raced.status(), 201);
    let base = app.address().to_string();
    let mut driver = Chromedriver::start();
    let browser = at_phone_width(&mut driver).await;
    let mut too_wide = Vec::new();
    for path in ["/demo", "/demo/code/named-lock-pool-pitfall"] {
        browser.goto(&format!("{base}{path}")).await.unwrap_or_else(|e| panic!("{path}: {e}"));
        let (over, widest) = overflow(&browser).await;
        if over > 0 {
            too_wide.push(format!("{path}: {over} px too wide ({widest})"));
        }
    }
    browser.close().await.expect("close");
    assert!(too_wide.is_empty(), "{}", too_wide.join("\n"));
}

/// A race's results on a phone, in English and Japanese: every figure of every strategy and the
/// sentence saying what it means are on the screen (they were some eleven screens wide, in a
/// box scrolled sideways).
#[cfg(feature = "lab")]
#[actix_web::test]
async fn a_races_results_read_on_a_phone_without_scrolling_sideways() {
    let app = TestApp::spawn_lab().await;
    let racer = app.client(0);
    racer.login(&app.user("dora", Role::Customer)).await;
    let raced = racer
        .post_json(
            "/api/v1/demo/races",
            &serde_json::json!({"strategy": ["no-lock", "named-lock"], "clients": 8}),
        )
        .await;
    assert_eq!(raced.status(), 201);
    let base = app.address().to_string();
    let mut driver = Chromedriver::start();
    let mut unseen = Vec::new();
    for lang in ["en", "ja"] {
        let browser = at_phone_width(&mut driver).await;
        pick_language(&browser, &base, lang).await;
        browser.goto(&format!("{base}/demo")).await.expect("the demo page");
        for line in out_of_sight(&browser, "table.results td, table.results td > *", true).await {
            unseen.push(format!("{lang}: {line}"));
        }
        browser.close().await.expect("close");
    }
    assert!(unseen.is_empty(), "out of sight at 390 px:\n{}", unseen.join("\n"));
}

/// A flash sale's results on a phone, in English and Japanese: each way of selling a card, every
/// figure of it on the screen.
#[cfg(feature = "lab")]
#[actix_web::test]
async fn a_flash_sales_results_read_on_a_phone_without_scrolling_sideways() {
    let app = TestApp::spawn_lab().await;
    crate::demo::flash_sale::flash_sale(&app, &["--buyers", "20", "--stock", "5", "--hold-seconds", "1"])
        .await;
    let base = app.address().to_string();
    let mut driver = Chromedriver::start();
    let mut unseen = Vec::new();
    for lang in ["en", "ja"] {
        let browser = at_phone_width(&mut driver).await;
        pick_language(&browser, &base, lang).await;
        browser.goto(&format!("{base}/demo")).await.expect("the demo page");
        for line in out_of_sight(&browser, "table.flash-sale td, table.flash-sale td > *", true).await {
            unseen.push(format!("{lang}: {line}"));
        }
        browser.close().await.expect("close");
    }
    assert!(unseen.is_empty(), "out of sight at 390 px:\n{}", unseen.join("\n"));
}

/// The live race on a phone: while a race runs, each strategy's counts, double bookings so far
/// above all, are on the screen as the page's script updates them.
#[cfg(feature = "lab")]
#[actix_web::test]
async fn the_live_race_shows_its_double_bookings_on_a_phone() {
    let app = TestApp::spawn_lab().await;
    app.user("alice", Role::Customer);
    let base = app.address().to_string();
    let mut driver = Chromedriver::start();
    let browser = at_phone_width(&mut driver).await;
    log_in(&browser, &base, "alice").await;
    browser.goto(&format!("{base}/demo")).await.expect("demo page");
    browser
        .execute(
            "document.querySelectorAll('input[name=strategy]').forEach(box => {
                 box.checked = box.value === 'no-lock' || box.value === 'named-lock'; });
             document.querySelector('input[name=clients]').value = '8';
             document.querySelector('input[name=attempts]').value = '320';
             document.querySelector('input[name=pause_ms]').value = '20';
             document.querySelector('button.run-race').click();",
            vec![],
        )
        .await
        .expect("start a race");
    // Counts that moved were put there by the page's script, from the race's events.
    let moving = "return [...document.querySelectorAll('#live-rows progress')]\
                  .some(p => p.value > 0 && p.value < p.max);";
    crate::common::poll::until_async(
        "the live race's counts to move",
        std::time::Duration::from_secs(60),
        async || browser.execute(moving, vec![]).await.ok().and_then(|v| v.as_bool()) == Some(true),
    )
    .await;
    let unseen = out_of_sight(&browser, "#live-rows td, #live-rows td > *", true).await;
    browser.close().await.expect("close");
    assert!(unseen.is_empty(), "out of sight at 390 px:\n{}", unseen.join("\n"));
}

//! Every page on a phone (390 × 844 CSS pixels, in headless Chromium): nothing scrolls sideways.
//! Wide tables scroll inside their own box; the page itself is never wider than the screen.

use std::time::Duration;

use fantoccini::Client;
use haita::auth::Role;
use haita::batch::closure::Closure;
use haita::batch::guard::BatchLock;
use haita::batch::{self as batch_job, Policy};

use crate::common::TestApp;
use crate::common::browser::{Chromedriver, log_in};

/// How much wider than the screen the page at `url` is, in CSS pixels (0 when it fits), and
/// the widest element sticking out, to say what to fix.
async fn overflow(browser: &Client, url: &str) -> (i64, String) {
    browser.goto(url).await.unwrap_or_else(|e| panic!("{url}: {e}"));
    let measured = browser
        .execute(
            "const width = window.innerWidth;
             let widest = '';
             let most = width;
             for (const el of document.querySelectorAll('body *')) {
               const right = el.getBoundingClientRect().right;
               if (right > most + 0.5) { most = right; widest = el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.className ? '.' + el.className : ''); }
             }
             return [document.documentElement.scrollWidth - width, widest];",
            vec![],
        )
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let over = measured[0].as_i64().unwrap_or(i64::MAX);
    (over, measured[1].as_str().unwrap_or("").to_string())
}

async fn at_phone_width(driver: &mut Chromedriver) -> Client {
    let browser = driver.browser().await;
    browser.set_window_size(390, 844).await.expect("window size");
    let inner = browser.execute("return window.innerWidth;", vec![]).await.expect("width");
    assert_eq!(inner.as_i64(), Some(390), "a phone-sized viewport");
    browser
}

#[actix_web::test]
async fn no_page_scrolls_sideways_on_a_phone_for_any_role() {
    let app = TestApp::spawn().await;
    let room = app.resource("Meeting room with a rather long name, second floor, east wing", 3);
    let product = app.product("KYUSU-TOKONAME-RED-CLAY", 4800, 20);
    let root = app.user("root", Role::Admin);
    app.user("carol", Role::Staff);
    let alice_user = app.user("alice", Role::Customer);
    let day = crate::common::future_day();
    // Something in every table: a booking, an order, an edit lock, a batch run, audit events.
    let alice = app.client(0);
    alice.login(&alice_user).await;
    assert_eq!(alice.book(room, day).await.status(), 201);
    assert_eq!(alice.order(&[(product, 2)]).await.status(), 201);
    let closing = Closure {
        from: day + chrono::Days::new(1),
        to: day + chrono::Days::new(2),
        reason: "Repainting the walls and replacing the carpet".into(),
        resources: vec![room],
        policy: Policy::Wait,
        by: root.id,
        wait: Duration::from_secs(5),
        throttle: Duration::ZERO,
        report_dir: None,
    };
    batch_job::run(&app.db.pool, &BatchLock::Db, &closing).expect("a closure");

    let base = app.address().to_string();
    let mut driver = Chromedriver::start();
    let mut pages: Vec<(&str, Vec<String>)> = vec![(
        "anonymous",
        vec![
            "/".into(),
            "/login".into(),
            "/resources".into(),
            format!("/resources/{room}"),
            "/products".into(),
        ],
    )];
    pages.push((
        "alice",
        vec![
            format!("/resources/{room}?from={day}"),
            "/bookings".into(),
            "/orders".into(),
            "/products".into(),
        ],
    ));
    pages.push((
        "carol",
        vec![
            format!("/resources/{room}/edit"),
            format!("/resources/{room}/view"),
            format!("/products/{product}/edit"),
            "/stock/receipts".into(),
        ],
    ));
    pages.push(("root", vec!["/admin/locks".into(), "/admin/audit".into(), "/admin/metrics".into()]));

    let mut too_wide = Vec::new();
    for (who, paths) in pages {
        let browser = at_phone_width(&mut driver).await;
        if who != "anonymous" {
            log_in(&browser, &base, who).await;
        }
        for path in paths {
            let (over, widest) = overflow(&browser, &format!("{base}{path}")).await;
            if over > 0 {
                too_wide.push(format!("{who} {path}: {over} px too wide ({widest})"));
            }
        }
        browser.close().await.expect("close");
    }
    assert!(too_wide.is_empty(), "pages that scroll sideways at 390 px:\n{}", too_wide.join("\n"));
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
        let (over, widest) = overflow(&browser, &format!("{base}{path}")).await;
        if over > 0 {
            too_wide.push(format!("{path}: {over} px too wide ({widest})"));
        }
    }
    browser.close().await.expect("close");
    assert!(too_wide.is_empty(), "{}", too_wide.join("\n"));
}

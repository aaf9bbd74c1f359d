//! Every page on a phone (390 × 844 CSS pixels, in headless Chromium): nothing scrolls sideways.
//! Wide tables scroll inside their own box; the page itself is never wider than the screen.

use fantoccini::Client;
#[cfg(feature = "lab")]
use haita::auth::Role;

use crate::common::TestApp;
use crate::common::browser::{Chromedriver, log_in};
use crate::common::pages::every_page;

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
    let pages = every_page(&app).await;
    let base = app.address().to_string();
    let mut driver = Chromedriver::start();
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

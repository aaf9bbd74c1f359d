//! Times on the pages are written in UTC and shown in the viewer's own time zone, with UTC on
//! hover: a browser in Tokyo reads the audit log in Japan time.

use fantoccini::Locator;
use haita::auth::Role;

use crate::common::TestApp;
use crate::common::browser::{Chromedriver, log_in, pick_language, text_when_shown};

#[actix_web::test]
async fn a_viewer_in_tokyo_reads_times_in_japan_time_with_utc_on_hover() {
    let app = TestApp::spawn().await;
    app.user("root", Role::Admin);
    let carol = app.client(0);
    carol.login(&app.user("carol", Role::Staff)).await;
    let room = app.resource("Tokyo room", 2);
    assert_eq!(carol.open_editor(room).await.status(), 200, "an audit event to show");

    let base = app.address().to_string();
    let mut driver = Chromedriver::start_in_time_zone(Some("Asia/Tokyo"));
    let browser = driver.browser().await;
    log_in(&browser, &base, "root").await;
    browser.goto(&format!("{base}/admin/audit")).await.expect("audit page");
    let shown = browser.find(Locator::Css("time[data-local]")).await.expect("a time");
    let text = shown.text().await.expect("text");
    let title = shown.attr("title").await.expect("title").unwrap_or_default();
    assert!(text.contains("GMT+9") && !text.contains("UTC"), "in the viewer's zone: {text:?}");
    assert!(title.ends_with(" UTC"), "UTC on hover: {title:?}");
    browser.close().await.expect("close");
}

/// Issue 34, item 7: one way to write a time, on every page that shows one, in both languages.
/// A browser in Tokyo reads each of them as `2026-11-26 02:18:53 JST` (`GMT+9` in English) or,
/// for a time of day, `02:18:53 JST`: its own zone, named, never UTC and never `11/26/2026,
/// 02:18:53 AM`. That includes the "being edited" page (423) and the read-only view, whose
/// holder sentence used to say UTC, the orders, the stock receipts and the admin's audit log,
/// whose column header used to claim UTC.
#[actix_web::test]
async fn every_page_writes_its_times_one_way_in_the_viewers_zone_with_the_zone_named() {
    let app = TestApp::spawn().await;
    let root = app.user("root", Role::Admin);
    let carol = app.client(0);
    carol.login(&app.user("carol", Role::Staff)).await;
    let room = app.resource("Tokyo room", 2);
    assert_eq!(carol.open_editor(room).await.status(), 200, "carol holds the edit lock");
    let tea = app.product("TEA-TOKYO", 1200, 5);
    let root_http = app.client(1);
    root_http.login(&root).await;
    assert_eq!(root_http.order(&[(tea, 1)]).await.status(), 201, "an order of root's to show");
    let hold = serde_json::json!({"product_id": tea, "quantity": 1});
    assert_eq!(root_http.post_json("/api/v1/holds", &hold).await.status(), 201, "a hold of root's to show");

    let base = app.address().to_string();
    let mut driver = Chromedriver::start_in_time_zone(Some("Asia/Tokyo"));
    for (lang, zone) in [("en", "GMT+9"), ("ja", "JST")] {
        let browser = driver.browser().await;
        log_in(&browser, &base, "root").await;
        pick_language(&browser, &base, lang).await;
        for (path, ready) in [
            ("/admin/audit".to_string(), "main table"),
            ("/admin/locks".to_string(), "main table"),
            ("/orders".to_string(), "main h2"),
            ("/checkout".to_string(), "#live-holds"),
            ("/stock/receipts".to_string(), "main table"),
            // Carol's lock: the editor's start page sends root on to the "being edited" page.
            (format!("/resources/{room}/edit"), "#holder time"),
            (format!("/resources/{room}/view"), "#holder time"),
        ] {
            browser.goto(&format!("{base}{path}")).await.expect("page");
            text_when_shown(&browser, ready).await;
            let times = browser.find_all(Locator::Css("main time[data-local]")).await.expect("times");
            assert!(!times.is_empty(), "{lang} {path}: shows a time");
            for time in times {
                let text = time.text().await.expect("text");
                assert!(
                    written_the_one_way(&text, zone),
                    "{lang} {path}: {text:?} in {zone}, as 2026-11-26 02:18:53 {zone}"
                );
            }
            let main = browser.find(Locator::Css("main")).await.expect("main").text().await.expect("text");
            for wrong in ["UTC", " AM", " PM"] {
                assert!(!main.contains(wrong), "{lang} {path}: no {wrong:?} on a page read in Tokyo: {main}");
            }
        }
        browser.close().await.expect("close");
    }
}

/// `2026-11-26 02:18:53 JST` or `02:18:53 JST`, with `zone` as the zone.
fn written_the_one_way(text: &str, zone: &str) -> bool {
    let Some(digits) = text.strip_suffix(&format!(" {zone}")) else { return false };
    let clock = |t: &str| {
        t.len() == 8
            && t.bytes()
                .enumerate()
                .all(|(i, b)| if i == 2 || i == 5 { b == b':' } else { b.is_ascii_digit() })
    };
    match digits.split_once(' ') {
        Some((day, time)) => haita::wire::input::parse_day(day).is_some() && clock(time),
        None => clock(digits),
    }
}

//! Times on the pages are written in UTC and shown in the viewer's own time zone, with UTC on
//! hover: a browser in Tokyo reads the audit log in Japan time.

use fantoccini::Locator;
use haita::auth::Role;

use crate::common::TestApp;
use crate::common::browser::{Chromedriver, log_in};

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

//! The booking race as two people meet it, in headless Chromium: alice and bob look at the same
//! last place; alice books it; bob, whose page still shows it free, clicks Book and stays on the
//! resource page, told why next to the day, with the day's places as they are now.

use fantoccini::Client;
use haita::auth::Role;

use crate::common::TestApp;
use crate::common::browser::{Chromedriver, click, log_in, text_when_shown};

async fn book(browser: &Client, day: chrono::NaiveDate) {
    click(browser, &format!("button[aria-label=\"Book {}\"]", day.format("%A %Y-%m-%d"))).await;
}

#[actix_web::test]
async fn the_loser_of_a_booking_race_stays_on_the_page_with_the_reason_and_the_places_as_they_are() {
    let app = TestApp::spawn().await;
    let room = app.resource("Last place room", 1);
    let day = crate::common::future_day();
    app.user("alice", Role::Customer);
    app.user("bob", Role::Customer);
    let base = app.address().to_string();
    let page = format!("{base}/resources/{room}?from={day}");

    let mut driver = Chromedriver::start();
    let (alice, bob) = (driver.browser().await, driver.browser().await);
    log_in(&alice, &base, "alice").await;
    log_in(&bob, &base, "bob").await;
    alice.goto(&page).await.expect("alice's page");
    bob.goto(&page).await.expect("bob's page: one place free");

    book(&alice, day).await;
    assert!(text_when_shown(&alice, ".flash.ok").await.contains("Booked!"));
    book(&bob, day).await;
    let told = text_when_shown(&bob, "#refused").await;
    assert!(told.contains("fully booked"), "{told}");
    let row = text_when_shown(&bob, "#refused-day").await;
    assert!(row.contains("1 / 1") && row.contains("fully booked"), "the day as it is now: {row}");
    assert!(
        bob.current_url().await.expect("url").path().starts_with(&format!("/resources/{room}")),
        "still there"
    );
    assert_eq!(crate::common::invariants::confirmed_on(&app.db, room, day), 1);
    alice.close().await.expect("close");
    bob.close().await.expect("close");
}

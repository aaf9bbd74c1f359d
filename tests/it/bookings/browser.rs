//! The booking race as two people meet it, in headless Chromium: alice and bob look at the same
//! last place; alice books it; bob, whose page still shows it free, clicks Book and stays on the
//! resource page, told why next to the day, with the day's places as they are now. The same race
//! for two stays that share a night, picked with the check-in and check-out fields.

use fantoccini::Client;
use haita::auth::Role;

use crate::common::browser::{Chromedriver, click, log_in, text_when_shown};
use crate::common::{TestApp, TestDb, on_both_engines};

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

/// Types `day` into the date field `css` as a person does in Chromium's English date field:
/// month, day and year, each part moving on to the next.
async fn type_day(browser: &Client, css: &str, day: chrono::NaiveDate) {
    let field = browser.find(fantoccini::Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}"));
    field.send_keys(&day.format("%m%d%Y").to_string()).await.expect("type the day");
}

/// Picks a stay in the resource page's check-in and check-out fields and asks for its nights
/// and price, as a person does.
async fn pick_stay(browser: &Client, page: &str, check_in: chrono::NaiveDate, check_out: chrono::NaiveDate) {
    browser.goto(page).await.expect("the resource page");
    type_day(browser, "#check-in", check_in).await;
    type_day(browser, "#check-out", check_out).await;
    click(browser, "#see-stay").await;
}

on_both_engines!(
    a_stay_is_booked_with_the_form_and_a_refused_one_names_the_full_night_in_place,
    a_stay_is_booked_with_the_form_and_a_refused_one_names_the_full_night_in_place_on_postgres
        => stays_with_the_form
);

/// Two guests pick overlapping stays of three nights on a room with one place: both pages show
/// the nights, the price and a Book button. Alice books hers and sees it in her bookings, from
/// check-in to check-out; bob, whose page still offered his, clicks Book and stays on the
/// resource page, told which night is full, that night's row marked with its places as they
/// are now.
async fn stays_with_the_form(db: TestDb) {
    use diesel::prelude::*;
    let app = TestApp::spawn_on(db, 1, |_| {}).await;
    let room = app.resource("Guest room", 1);
    diesel::update(haita::schema::resources::table.find(room))
        .set(haita::schema::resources::price_cents.eq(8500))
        .execute(&mut app.db.raw_connection())
        .expect("a price per night");
    let check_in = crate::common::future_day();
    let night = |n: u64| check_in + chrono::Days::new(n);
    app.user("alice", Role::Customer);
    app.user("bob", Role::Customer);
    let base = app.address().to_string();
    let page = format!("{base}/resources/{room}");

    let mut driver = Chromedriver::start();
    let (alice, bob) = (driver.browser().await, driver.browser().await);
    log_in(&alice, &base, "alice").await;
    log_in(&bob, &base, "bob").await;
    pick_stay(&alice, &page, check_in, night(3)).await;
    pick_stay(&bob, &page, night(2), night(5)).await;
    for browser in [&alice, &bob] {
        assert!(text_when_shown(browser, "#stay-nights").await.starts_with("3 nights"));
        let price = text_when_shown(browser, "#stay-price").await;
        assert!(price.contains("3 × 85.00 USD = 255.00 USD"), "{price}");
    }

    click(&alice, "#book-stay").await;
    let booked = text_when_shown(&alice, "#booked").await;
    assert!(booked.contains("Booked!") && booked.contains("(3 nights)"), "{booked}");
    let listed = text_when_shown(&alice, "main table tbody").await;
    assert!(listed.contains(&format!("{check_in} to {}, 3 nights", night(3))), "{listed}");

    click(&bob, "#book-stay").await;
    let told = text_when_shown(&bob, "#refused").await;
    assert!(told.contains(&format!("The night of {} is fully booked", night(2))), "{told}");
    let row = text_when_shown(&bob, "#refused-day").await;
    assert!(row.contains("1 / 1") && row.contains("fully booked"), "the night as it is now: {row}");
    assert!(
        bob.current_url().await.expect("url").path().starts_with(&format!("/resources/{room}")),
        "still there"
    );
    for n in 0..5 {
        let expected = if n < 3 { 1 } else { 0 };
        assert_eq!(crate::common::invariants::confirmed_on(&app.db, room, night(n)), expected, "night {n}");
    }
    alice.close().await.expect("close");
    bob.close().await.expect("close");
}

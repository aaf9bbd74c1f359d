//! A checkout hold as two people meet it, in headless Chromium: alice holds the last two
//! teapots from the catalog and watches her time left count down on the checkout page without a
//! reload; bob's catalog says they are reserved in checkouts, not out of stock; alice places the
//! order from her hold.

use std::time::Duration;

use fantoccini::{Client, Locator};
use haita::auth::Role;

use crate::common::TestApp;
use crate::common::browser::{Chromedriver, click, log_in, text_when_it_says, text_when_shown};
use crate::common::invariants;

/// Waits (bounded) until the element matching `css` says something other than `before`.
async fn text_when_changed(browser: &Client, css: &str, before: &str) -> String {
    for _ in 0..200 {
        if let Ok(element) = browser.find(Locator::Css(css)).await
            && let Ok(text) = element.text().await
            && text != before
        {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{css} still said {before:?} after 20 s");
}

/// Replaces what the field matching `css` holds with `text`, as typed.
async fn type_into(browser: &Client, css: &str, text: &str) {
    let field = browser.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}"));
    field.clear().await.expect("clear");
    field.send_keys(text).await.expect("type");
}

/// "9:58" → 598.
fn seconds(shown: &str) -> u32 {
    let (minutes, seconds) = shown.trim().split_once(':').unwrap_or_else(|| panic!("m:ss, not {shown:?}"));
    minutes.parse::<u32>().expect("minutes") * 60 + seconds.parse::<u32>().expect("seconds")
}

#[actix_web::test]
async fn a_customer_holds_watches_the_countdown_and_orders_while_another_sees_the_units_reserved() {
    let app = TestApp::spawn().await;
    let pot = app.product("KYUSU-H", 4800, 2);
    let cup = app.product("CUP-B", 800, 5);
    app.user("alice", Role::Customer);
    app.user("bob", Role::Customer);
    let base = app.address().to_string();

    let mut driver = Chromedriver::start();
    let (alice, bob) = (driver.browser().await, driver.browser().await);
    log_in(&alice, &base, "alice").await;
    log_in(&bob, &base, "bob").await;

    // Alice types 2 next to the teapot and holds them for checkout.
    alice.goto(&format!("{base}/products")).await.expect("catalog");
    type_into(&alice, &format!("input[name=qty_{pot}]"), "2").await;
    click(&alice, &format!("button.hold[value=\"{pot}\"]")).await;
    let said = text_when_shown(&alice, "#done").await;
    assert!(said.contains("Holding 2 of “Product KYUSU-H” for you until"), "{said}");

    // The time left counts down on the page itself: the page is not reloaded (a mark set on this
    // page is still there when the countdown has moved on).
    let first = text_when_shown(&alice, "#live-holds .countdown").await;
    alice.execute("window.stillThisPage = true;", vec![]).await.expect("mark the page");
    let later = text_when_changed(&alice, "#live-holds .countdown", &first).await;
    assert!(seconds(&later) < seconds(&first) && seconds(&first) <= 600, "{first} → {later}");
    let same_page =
        alice.execute("return window.stillThisPage === true;", vec![]).await.expect("read the mark");
    assert_eq!(same_page, serde_json::json!(true), "counted down without a reload");

    // Bob's catalog: both teapots are in a checkout — reserved, not sold out — and he cannot hold
    // them; the cup is his to order, with Enter in its field (which orders, it does not hold).
    bob.goto(&format!("{base}/products")).await.expect("catalog");
    let catalog = bob.find(Locator::Css("table.products")).await.expect("table").text().await.expect("text");
    assert!(
        catalog.contains("2 reserved in checkouts") && catalog.contains("all reserved in checkouts"),
        "{catalog}"
    );
    assert!(!catalog.contains("out of stock"), "{catalog}");
    assert!(
        bob.find(Locator::Css(&format!("button.hold[value=\"{pot}\"]"))).await.is_err(),
        "nothing to hold"
    );
    type_into(&bob, &format!("input[name=qty_{cup}]"), "1\u{E007}").await;
    let placed = text_when_shown(&bob, ".flash.ok").await;
    assert!(placed.contains("placed"), "{placed}");
    assert_eq!(invariants::live_holds(&app.db, cup), (0, 0), "Enter ordered the cup; it held nothing");

    // Alice places the order from her hold.
    click(&alice, "#live-holds button.place-order").await;
    let done = text_when_it_says(&alice, ".flash.ok", "placed").await;
    assert!(done.contains("placed"), "{done}");
    let orders = alice.find(Locator::Css("main")).await.expect("main").text().await.expect("text");
    assert!(orders.contains("Product KYUSU-H"), "{orders}");
    assert_eq!(invariants::on_hand(&app.db, pot), 0);
    assert_eq!(invariants::live_holds(&app.db, pot), (0, 0));

    // Now they are sold: bob's catalog says so.
    bob.goto(&format!("{base}/products")).await.expect("catalog");
    let catalog = bob.find(Locator::Css("table.products")).await.expect("table").text().await.expect("text");
    assert!(catalog.contains("out of stock") && !catalog.contains("reserved in checkouts"), "{catalog}");
    invariants::holds_within_stock(&app.db);
    invariants::orders_match_ledger(&app.db);
    alice.close().await.expect("close");
    bob.close().await.expect("close");
}

/// The background colour of the element matching `css`, as the browser computes it.
async fn background(browser: &Client, css: &str) -> String {
    let script = "return getComputedStyle(document.querySelector(arguments[0])).backgroundColor;";
    let colour = browser.execute(script, vec![serde_json::json!(css)]).await.expect("a colour");
    colour.as_str().unwrap_or_default().to_string()
}

/// A hold that runs out while its page is open: its Place order and Release are switched off and
/// look it (grey, not the live red), and "Hold again" holds the same quantity anew, from the page
/// as it stands and from the ended holds after a reload.
#[actix_web::test]
async fn an_expired_hold_looks_switched_off_and_is_held_again_in_one_click() {
    // Without the wait after a hold ends (`HOLD_COOLDOWN_SECS`, tested through the API in
    // `holds::one_customer_cannot_hoard_the_stock`): here the click itself is the point.
    let app = TestApp::spawn_instances(1, |c| c.hold_cooldown = std::time::Duration::ZERO).await;
    let pot = app.product("KYUSU-X", 4800, 5);
    let alice_user = app.user("alice", Role::Customer);
    let api = app.client(0);
    api.login(&alice_user).await;
    let base = app.address().to_string();
    let mut driver = Chromedriver::start();
    let alice = driver.browser().await;
    log_in(&alice, &base, "alice").await;
    // A hold of three seconds (a client may ask for less than the shop's length), shown at once.
    let short = serde_json::json!({"product_id": pot, "quantity": 2, "seconds": 3});
    assert_eq!(api.post_json("/api/v1/holds", &short).await.status(), 201);
    alice.goto(&format!("{base}/checkout")).await.expect("checkout");
    let live_red = background(&alice, "#live-holds button.place-order").await;

    text_when_it_says(&alice, "#live-holds .countdown", "expired").await;
    for button in ["button.place-order", "button.release"] {
        let enabled = alice
            .find(Locator::Css(&format!("#live-holds {button}")))
            .await
            .expect("the button")
            .is_enabled()
            .await
            .expect("enabled?");
        assert!(!enabled, "{button} switched off");
    }
    let off = background(&alice, "#live-holds button.place-order").await;
    assert_ne!(off, live_red, "a switched-off Place order does not look live");
    click(&alice, "#live-holds form.hold-again button").await;
    let said = text_when_shown(&alice, "#done").await;
    assert!(said.contains("Holding 2 of “Product KYUSU-X” for you until"), "{said}");
    assert_eq!(invariants::live_holds(&app.db, pot), (1, 2));

    // The new hold runs out too (the database's clock decides): after a reload, the ended holds
    // offer "Hold again" for each that ran out.
    // (Two rows: an expired hold is not marked ended, its time has simply passed.)
    assert_eq!(crate::common::expire_holds_of(&app.db, pot), 2, "the new hold made to run out");
    alice.goto(&format!("{base}/checkout")).await.expect("checkout");
    click(&alice, "#ended-holds form.hold-again button").await;
    let said = text_when_shown(&alice, "#done").await;
    assert!(said.contains("Holding 2"), "{said}");
    assert_eq!(invariants::live_holds(&app.db, pot), (1, 2));
    invariants::holds_within_stock(&app.db);
    alice.close().await.expect("close");
}

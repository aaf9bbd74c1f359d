//! Screenshots of the main pages as people meet them, in English and in Japanese, on a desktop
//! (1280 × 900) and a phone (390 × 844), in headless Chromium: the home page's first-visit path,
//! bob's lost booking race, a stay picked with its nights and price, an over-stock order, alice's
//! checkout page with a hold counting down, the race demo (and, on a desktop, its whole page:
//! `demo-page-*`, which docs/demo.md shows), carol's editor with its lock banner, and the admin's
//! locks. Written to `SCREENSHOTS_DIR` (`target/screenshots` by default), so
//! every test run leaves them to look at; `scripts/dev screenshots` writes them to
//! `docs/screenshots/`, where the README shows them.

use std::path::PathBuf;

use chrono::Days;
use fantoccini::{Client, Locator};
use haita::auth::Role;

use crate::common::TestApp;
use crate::common::browser::{Chromedriver, click, open, text_when_shown};

/// (name, width, height) of the two screens.
const SCREENS: [(&str, u32, u32); 2] = [("desktop", 1280, 900), ("phone", 390, 844)];

fn out_dir() -> PathBuf {
    let dir = std::env::var_os("SCREENSHOTS_DIR").map_or_else(
        || {
            let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
            PathBuf::from(target).join("screenshots")
        },
        PathBuf::from,
    );
    std::fs::create_dir_all(&dir).expect("screenshot directory");
    dir
}

/// Saves the page shown as `{name}-{lang}-{screen}.png` and checks it is a PNG of the screen's
/// width (a page wider than the screen would not be).
async fn shoot(browser: &Client, name: &str, lang: &str, screen: (&str, u32, u32)) {
    let png = browser.screenshot().await.expect("screenshot");
    assert_eq!(&png[1..4], b"PNG", "{name}: a PNG");
    let width = u32::from_be_bytes([png[16], png[17], png[18], png[19]]);
    assert_eq!(width, screen.1, "{name} ({lang}, {}): the screen's width", screen.0);
    let file = out_dir().join(format!("{name}-{lang}-{}.png", screen.0));
    std::fs::write(&file, png).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
}

#[actix_web::test]
async fn the_main_pages_in_both_languages_on_a_desktop_and_a_phone() {
    let app = TestApp::spawn_lab().await;
    for (name, role) in
        [("alice", Role::Customer), ("bob", Role::Customer), ("carol", Role::Staff), ("admin", Role::Admin)]
    {
        app.user(name, role);
    }
    haita::lab::seed::run(&app.db.pool).expect("demo data");
    let room = app.resource("Meeting room 2", 1);
    let guest_room: i64 = {
        use diesel::prelude::*;
        use haita::schema::resources;
        resources::table
            .filter(resources::name.eq("Guest room"))
            .select(resources::id)
            .first(&mut app.db.raw_connection())
            .expect("the seeded guest room")
    };
    let teapot: i64 = {
        use diesel::prelude::*;
        use haita::schema::products;
        products::table
            .filter(products::sku.eq("POT-KYUSU"))
            .select(products::id)
            .first(&mut app.db.raw_connection())
            .expect("the seeded teapot")
    };
    let alice_api = app.client(0);
    alice_api.login(&crate::common::TestUser { id: 0, username: "alice".into() }).await;
    // A checkout hold of alice's, for her checkout page.
    let matcha: i64 = {
        use diesel::prelude::*;
        use haita::schema::products;
        products::table
            .filter(products::sku.eq("TEA-MATCHA"))
            .select(products::id)
            .first(&mut app.db.raw_connection())
            .expect("the seeded matcha")
    };
    let hold = serde_json::json!({"product_id": matcha, "quantity": 2});
    assert_eq!(alice_api.post_json("/api/v1/holds", &hold).await.status(), 201);
    let race = serde_json::json!({"strategy": "all", "clients": 32, "attempts": 128});
    assert_eq!(alice_api.post_json("/api/v1/demo/races", &race).await.status(), 201);
    let base = app.address().to_string();
    let mut driver = Chromedriver::start();
    let mut day = crate::common::future_day();

    for lang in ["en", "ja"] {
        for screen in SCREENS {
            let visitor = open(&mut driver, &base, "anonymous", lang, screen).await;
            visitor.goto(&format!("{base}/")).await.expect("home");
            shoot(&visitor, "home", lang, screen).await;
            visitor.goto(&format!("{base}/demo#results")).await.expect("demo");
            shoot(&visitor, "demo", lang, screen).await;
            if screen.0 == "desktop" {
                // The whole demo page, its race's results under their headers (docs/demo.md).
                let (width, height) = (screen.1, screen.2);
                let tall = visitor.execute("return document.documentElement.scrollHeight;", vec![]).await;
                let tall = tall.ok().and_then(|t| t.as_u64()).and_then(|t| u32::try_from(t).ok());
                visitor
                    .set_window_size(width, tall.unwrap_or(height).clamp(height, 6_000))
                    .await
                    .expect("tall");
                visitor.goto(&format!("{base}/demo")).await.expect("demo");
                shoot(&visitor, "demo-page", lang, screen).await;
                visitor.set_window_size(width, height).await.expect("window size back");
            }
            visitor.close().await.expect("close");

            // Bob looks at the last place; alice takes it; bob clicks Book and is told.
            day = day + Days::new(1);
            let bob = open(&mut driver, &base, "bob", lang, screen).await;
            bob.goto(&format!("{base}/resources/{room}?from={day}")).await.expect("resource");
            assert_eq!(alice_api.book(room, day).await.status(), 201);
            click(&bob, &format!("form:has(input[name=date][value=\"{day}\"]) button")).await;
            text_when_shown(&bob, "#refused").await;
            shoot(&bob, "booking-refused", lang, screen).await;
            bob.close().await.expect("close");

            // Alice picks a stay in the guest room: its nights and its price, before she books.
            let alice = open(&mut driver, &base, "alice", lang, screen).await;
            let check_in = day + Days::new(20);
            let stay = format!("check_in={check_in}&check_out={}", check_in + Days::new(3));
            alice.goto(&format!("{base}/resources/{guest_room}?{stay}")).await.expect("a stay");
            text_when_shown(&alice, "#stay-preview").await;
            shoot(&alice, "stay-picked", lang, screen).await;
            alice.goto(&format!("{base}/products")).await.expect("products");
            let field =
                alice.find(Locator::Css(&format!("input[name=qty_{teapot}]"))).await.expect("a quantity");
            field.clear().await.expect("clear");
            field.send_keys("9").await.expect("type");
            click(&alice, "#place-order").await;
            text_when_shown(&alice, "#order-refused").await;
            shoot(&alice, "order-refused", lang, screen).await;
            alice.goto(&format!("{base}/checkout")).await.expect("checkout");
            text_when_shown(&alice, "#live-holds .countdown").await;
            shoot(&alice, "checkout", lang, screen).await;
            alice.close().await.expect("close");

            let carol = open(&mut driver, &base, "carol", lang, screen).await;
            carol.goto(&format!("{base}/resources/{room}/edit")).await.expect("editor");
            text_when_shown(&carol, "#lock-status").await;
            shoot(&carol, "editor", lang, screen).await;

            let admin = open(&mut driver, &base, "admin", lang, screen).await;
            admin.goto(&format!("{base}/admin/locks")).await.expect("locks");
            text_when_shown(&admin, "#edit-locks").await;
            shoot(&admin, "admin-locks", lang, screen).await;
            admin.close().await.expect("close");
            // Released before the next round's carol, in a browser of her own, opens the editor.
            click(&carol, "#cancel-form button").await;
            text_when_shown(&carol, "#edit").await;
            carol.close().await.expect("close");
        }
    }
}

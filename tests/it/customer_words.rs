//! Issue 34, item 9 (the customer's side): words a person understands, in both languages. A
//! booking names its room and day; one place is not "all 1 places"; a past day is past, not
//! "Free 1"; a day beyond the booking window says when it opens; a bad `?from=` names today and
//! the window, not the parser's limits; prices carry their currency and the order form adds them
//! up as the customer types; a product out of stock has no quantity field; a saved product is
//! named; each Edit link says which product it edits.

use chrono::{Days, NaiveDate};
use fantoccini::Locator;
use haita::auth::Role;
use haita::i18n::Lang;

use crate::common::browser::{Chromedriver, log_in, pick_language, text_when_it_says};
use crate::common::{Client, TestApp, future_day};

const LANGS: [Lang; 2] = [Lang::En, Lang::Ja];

/// `client` reads the pages in `lang`, switched with the header's form as a person would.
async fn speak(client: &Client, lang: Lang) {
    client.speak(lang.code()).await;
}

/// The text of each cell of the table row that starts with `first`, markup left out.
fn row_cells(page: &str, first: &str) -> Vec<String> {
    let row = page
        .split("<tr")
        .find(|row| row.contains(&format!(">{first}</td>")))
        .unwrap_or_else(|| panic!("a row for {first}: {page}"));
    let row = row.split("</tr>").next().unwrap_or_default();
    row.split("<td").skip(1).map(|cell| without_tags(cell.split_once('>').map_or("", |(_, c)| c))).collect()
}

fn without_tags(markup: &str) -> String {
    let mut text = String::new();
    let mut inside = false;
    for c in markup.chars() {
        match c {
            '<' => inside = true,
            '>' => inside = false,
            c if !inside => text.push(c),
            _ => {}
        }
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn today() -> NaiveDate {
    haita::bookings::service::today()
}

#[actix_web::test]
async fn a_booking_is_confirmed_with_its_room_and_day() {
    let app = TestApp::spawn().await;
    let room = app.resource("Meeting room 1", 2);
    for lang in LANGS {
        let alice = app.client(0);
        alice.login(&app.user(&format!("alice-{}", lang.code()), Role::Customer)).await;
        speak(&alice, lang).await;
        let day = future_day();
        let booked: serde_json::Value = alice.book(room, day).await.json().await.expect("json");
        let id = booked["id"].as_i64().expect("an id");
        let page = alice.get(&format!("/bookings?booked={id}")).await.text().await.expect("page");
        let said = without_tags(page.split("id=\"booked\"").nth(1).unwrap_or_else(|| panic!("{page}")));
        assert!(
            said.contains("Meeting room 1") && said.contains(&lang.long_day(&day)),
            "{lang:?}: names the room and the day: {said}"
        );
    }
}

#[actix_web::test]
async fn one_place_taken_is_said_in_the_singular() {
    let app = TestApp::spawn().await;
    let single = app.resource("Single room", 1);
    let double = app.resource("Double room", 2);
    let day = future_day();
    for (i, name) in ["bob", "carol"].iter().enumerate() {
        let other = app.client(i);
        other.login(&app.user(name, Role::Customer)).await;
        if i == 0 {
            assert_eq!(other.book(single, day).await.status(), 201);
        }
        assert_eq!(other.book(double, day).await.status(), 201);
    }
    for (lang, one, all_two, wrong) in [
        (Lang::En, "its one place is taken", "all 2 places are taken", "all 1 places"),
        (Lang::Ja, "1 つだけの枠が埋まっています", "2 枠すべて埋まっています", "1 枠すべて"),
    ] {
        let alice = app.client(2);
        alice.login(&app.user(&format!("alice-{}", lang.code()), Role::Customer)).await;
        speak(&alice, lang).await;
        for (room, expected) in [(single, one), (double, all_two)] {
            let refused = alice.book_with_form(room, day).await;
            assert_eq!(refused.status(), 409);
            let page = refused.text().await.expect("page");
            assert!(page.contains(expected) && !page.contains(wrong), "{lang:?}: {expected:?}: {page}");
        }
    }
}

#[actix_web::test]
async fn past_days_say_they_are_past_and_days_beyond_the_window_when_they_open() {
    let app = TestApp::spawn().await;
    let room = app.resource("Tennis court", 2);
    let last = haita::bookings::model::last_bookable_day(today());
    for (lang, past, opens, window) in [
        (Lang::En, "past: no longer bookable", "opens for booking on", "Bookings open 365 days ahead"),
        (Lang::Ja, "過去の日:予約できません", "から予約できます", "予約は 365 日先まで受け付けます"),
    ] {
        let alice = app.client(0);
        alice.login(&app.user(&format!("alice-{}", lang.code()), Role::Customer)).await;
        speak(&alice, lang).await;

        let yesterday = today() - Days::new(1);
        let page = alice.get(&format!("/resources/{room}?from={}", today() - Days::new(3))).await;
        let page = page.text().await.expect("page");
        let cells = row_cells(&page, &lang.day(&yesterday));
        assert_eq!(cells[2], "—", "{lang:?}: a past day offers no free place: {cells:?}");
        assert_eq!(cells[3], past, "{lang:?}: and says it is past, with no Book: {cells:?}");

        let beyond = last + Days::new(3);
        let page = alice.get(&format!("/resources/{room}?from={}", last - Days::new(1))).await;
        let page = page.text().await.expect("page");
        let cells = row_cells(&page, &lang.day(&beyond));
        let opening = lang.day(&(beyond - Days::new(365)));
        assert!(
            cells[3].contains(opens) && cells[3].contains(&opening),
            "{lang:?}: when it opens: {cells:?}"
        );
        let note = without_tags(page.split("id=\"window\"").nth(1).unwrap_or_else(|| panic!("{page}")));
        assert!(
            note.contains(window) && note.contains(&lang.long_day(&last)),
            "{lang:?}: the window: {note}"
        );
        assert!(!page.contains("not open yet") && !page.contains("まだ受付前"));
    }
}

#[actix_web::test]
async fn a_bad_from_names_today_and_the_booking_window() {
    let app = TestApp::spawn().await;
    let room = app.resource("Lab bench", 3);
    let last = haita::bookings::model::last_bookable_day(today());
    for lang in LANGS {
        let alice = app.client(0);
        speak(&alice, lang).await;
        let answer = alice.get(&format!("/resources/{room}?from=2026-13-45")).await;
        assert_eq!(answer.status(), 422);
        let page = answer.text().await.expect("page");
        assert!(
            page.contains(&today().to_string()) && page.contains(&last.to_string()),
            "{lang:?}: today and the window's end: {page}"
        );
        assert!(!page.contains("1000-01-01") && !page.contains("9999-10-30"), "{lang:?}: {page}");
    }
}

#[actix_web::test]
async fn prices_carry_their_currency_and_a_product_out_of_stock_has_no_quantity_field() {
    let app = TestApp::spawn().await;
    let sencha = app.product("TEA-SENCHA", 1200, 40);
    let chasen = app.product("WHISK-CHASEN", 3000, 0);
    for (lang, out) in [(Lang::En, "out of stock"), (Lang::Ja, "在庫切れ")] {
        let alice = app.client(0);
        alice.login(&app.user(&format!("alice-{}", lang.code()), Role::Customer)).await;
        speak(&alice, lang).await;
        let page = alice.get("/products").await.text().await.expect("page");
        let row = row_cells(&page, "<code>TEA-SENCHA</code>");
        assert_eq!(row[2], "12.00 USD", "{lang:?}: the price names its currency: {row:?}");
        assert!(page.contains(&format!("name=\"qty_{sencha}\"")), "in stock: a quantity field");
        let row = row_cells(&page, "<code>WHISK-CHASEN</code>");
        assert!(
            !page.contains(&format!("name=\"qty_{chasen}\"")),
            "{lang:?}: no field for what is not there"
        );
        assert_eq!(row[4], out, "{lang:?}: {row:?}");

        assert_eq!(alice.order(&[(sencha, 2)]).await.status(), 201);
        let orders = alice.get("/orders").await.text().await.expect("page");
        assert!(orders.contains("24.00 USD") && orders.contains("12.00 USD"), "{lang:?}: {orders}");
    }
}

#[actix_web::test]
async fn a_saved_product_is_named_and_each_edit_link_says_which_product() {
    let app = TestApp::spawn().await;
    let ids: Vec<i64> =
        ["TEA-SENCHA", "TEA-MATCHA", "CUP-YUNOMI"].iter().map(|sku| app.product(sku, 1200, 5)).collect();
    for (lang, saved, edit) in [
        (Lang::En, "Saved Product TEA-MATCHA (TEA-MATCHA).", "Edit Product "),
        (Lang::Ja, "Product TEA-MATCHA (TEA-MATCHA) を保存しました。", " を編集"),
    ] {
        let carol = app.client(0);
        carol.login(&app.user(&format!("carol-{}", lang.code()), Role::Staff)).await;
        speak(&carol, lang).await;
        let page = carol.get(&format!("/products?saved={}", ids[1])).await.text().await.expect("page");
        let said = without_tags(page.split("id=\"saved\"").nth(1).unwrap_or_else(|| panic!("{page}")));
        assert!(said.starts_with(saved), "{lang:?}: names the product: {said}");

        let mut names = Vec::new();
        for id in &ids {
            let link = page
                .split(&format!("href=\"/products/{id}/edit\""))
                .nth(1)
                .and_then(|rest| rest.split('>').next())
                .unwrap_or_else(|| panic!("an edit link for {id}"));
            let name =
                link.split("aria-label=\"").nth(1).and_then(|l| l.split('"').next()).unwrap_or_default();
            assert!(name.contains(edit) && name.contains("Product "), "{lang:?}: {link}");
            names.push(name.to_string());
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ids.len(), "{lang:?}: every Edit link tells its product apart: {names:?}");
    }
}

/// The order form adds up the prices as the customer types (a browser runs its script); the
/// order's own answer stays the truth, and the page says so.
#[actix_web::test]
async fn the_order_form_shows_a_running_total_as_quantities_are_typed() {
    let app = TestApp::spawn().await;
    let sencha = app.product("TEA-SENCHA", 1200, 40);
    let kyusu = app.product("POT-KYUSU", 4800, 2);
    app.user("alice", Role::Customer);
    let base = app.address().to_string();
    let mut driver = Chromedriver::start();
    for (lang, said) in [("en", "Total of this order: 1,224.00 USD"), ("ja", "この注文の合計:1,224.00 USD")]
    {
        let browser = driver.browser().await;
        log_in(&browser, &base, "alice").await;
        pick_language(&browser, &base, lang).await;
        browser.goto(&format!("{base}/products")).await.expect("products");
        // 98 × 12.00 + 1 × 48.00 = 1,224.00: past a thousand, so the grouping is checked too.
        for (id, quantity) in [(sencha, "98"), (kyusu, "1")] {
            let field = browser.find(Locator::Css(&format!("input[name=qty_{id}]"))).await.expect("field");
            field.clear().await.expect("clear");
            field.send_keys(quantity).await.expect("type");
        }
        let total = text_when_it_says(&browser, "#order-total", "1,224.00").await;
        assert!(total.starts_with(said), "{lang}: {total:?}");
        browser.close().await.expect("close");
    }
}

//! The holds as the pages serve them, without a browser: the catalog's "Hold for checkout", the
//! checkout page with its Release and Place order forms, each refusal answered in place with its
//! sentence, and what another customer's catalog says of held units.

use haita::auth::Role;

use super::customers;
use crate::common::{Client, TestApp, invariants};

/// The value of the hidden field `name` in `page` (the first one).
fn hidden(page: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = page.find(&marker).unwrap_or_else(|| panic!("the page has a {name} field")) + marker.len();
    page[start..].split('"').next().expect("a value").to_string()
}

/// Holds `quantity` of `product` with the catalog's form, as the button sends it.
async fn hold_with_form(client: &Client, product: i64, quantity: &str) -> reqwest::Response {
    let page = client.get("/products").await.text().await.expect("page");
    let (token, key) = (hidden(&page, "csrf_token"), hidden(&page, "idempotency_key"));
    let field = format!("qty_{product}");
    let id = product.to_string();
    client
        .post_form(
            "/checkout/holds",
            &[("csrf_token", &token), ("idempotency_key", &key), ("hold", &id), (&field, quantity)],
        )
        .await
}

fn location(response: &reqwest::Response) -> String {
    response.headers()["location"].to_str().expect("location").to_string()
}

#[actix_web::test]
async fn a_hold_from_the_catalog_is_on_the_checkout_page_and_others_see_it_reserved() {
    let app = TestApp::spawn().await;
    let pot = app.product("POT-H", 4800, 3);
    let clients = customers(&app, "page", 2).await;
    let (alice, bob) = (&clients[0], &clients[1]);

    let held = hold_with_form(alice, pot, "2").await;
    assert_eq!(held.status(), 303);
    let to = location(&held);
    assert!(to.starts_with("/checkout?held="), "{to}");
    let page = alice.get(&to).await.text().await.expect("page");
    assert!(page.contains("Holding 2 of “Product POT-H” for you until"), "{page}");
    assert!(
        page.contains("id=\"live-holds\"")
            && page.contains("data-seconds-left=\"")
            && page.contains("<time datetime=")
    );
    assert!(page.contains("Place order") && page.contains("Release") && page.contains("/static/checkout.js"));
    assert!(page.contains("96.00"), "the price of what is held: {page}");

    // Bob's catalog: 3 in stock, 2 of them in a checkout; only 1 left to hold or order.
    let seen = bob.get("/products").await.text().await.expect("page");
    assert!(seen.contains("2 reserved in checkouts"), "{seen}");
    let refused = hold_with_form(bob, pot, "2").await;
    assert_eq!(refused.status(), 409);
    let page = refused.text().await.expect("page");
    assert!(page.contains("id=\"order-refused\"") && page.contains("Not held:"), "{page}");
    assert!(
        page.contains("Only 1 of “Product POT-H” can be held now (2 more are in other checkouts)"),
        "{page}"
    );
    assert!(
        page.contains(&format!("name=\"qty_{pot}\" min=\"0\" max=\"1000\" value=\"2\"")),
        "as typed: {page}"
    );
    assert!(page.contains("aria-invalid=\"true\""), "the product's field is marked: {page}");
    // Nothing chosen: a sentence, not a hold.
    let empty = hold_with_form(bob, pot, "").await;
    assert_eq!(empty.status(), 422);
    assert!(empty.text().await.expect("page").contains("must be at least 1"));
    // The last unit: then bob's catalog says all are in checkouts, and when some may come back.
    assert_eq!(hold_with_form(bob, pot, "1").await.status(), 303);
    let seen = bob.get("/products").await.text().await.expect("page");
    assert!(seen.contains("all reserved in checkouts") && !seen.contains("out of stock"), "{seen}");
    assert!(seen.contains("some may be back at <time"), "{seen}");
    assert_eq!(invariants::live_holds(&app.db, pot), (2, 3));

    // In Japanese, the same refusal in place.
    let carol = &customers(&app, "ja", 1).await[0];
    carol.speak("ja").await;
    let refused = hold_with_form(carol, pot, "1").await;
    assert_eq!(refused.status(), 409);
    let page = refused.text().await.expect("page");
    assert!(
        page.contains("取り置けませんでした")
            && page.contains("すべてほかのお客様がお会計で取り置いています"),
        "{page}"
    );
    invariants::holds_within_stock(&app.db);
}

#[actix_web::test]
async fn the_checkout_page_orders_and_releases_and_answers_a_refusal_in_place() {
    let app = TestApp::spawn().await;
    let tea = app.product("TEA-P", 1200, 5);
    let cup = app.product("CUP-P", 800, 5);
    let alice = &customers(&app, "checkout", 1).await[0];
    assert_eq!(hold_with_form(alice, tea, "2").await.status(), 303);
    assert_eq!(hold_with_form(alice, cup, "1").await.status(), 303);
    let page = alice.get("/checkout").await.text().await.expect("page");
    let mine: serde_json::Value = alice.get("/api/v1/holds").await.json().await.expect("json");
    let id_of = |product: i64| {
        mine.as_array()
            .and_then(|all| all.iter().find(|h| h["product_id"] == product))
            .and_then(|h| h["id"].as_i64())
            .expect("a hold of the product")
    };
    let (tea_hold, cup_hold) = (id_of(tea), id_of(cup));
    let token = hidden(&page, "csrf_token");

    // Place order, with the form's key: the resend of a double click places nothing more.
    let form = format!("/checkout/holds/{tea_hold}/order");
    let key = hidden(&page[page.find(&form).expect("the order form")..], "idempotency_key");
    let placed = alice.post_form(&form, &[("csrf_token", &token), ("idempotency_key", &key)]).await;
    assert_eq!(placed.status(), 303);
    let to = location(&placed);
    assert!(to.starts_with("/orders?placed="), "{to}");
    let resent = alice.post_form(&form, &[("csrf_token", &token), ("idempotency_key", &key)]).await;
    assert_eq!((resent.status().as_u16(), location(&resent)), (303, to.clone()));
    let orders = alice.get(&to).await.text().await.expect("page");
    assert!(orders.contains("Product TEA-P") && orders.contains("24.00"), "{orders}");
    assert_eq!(invariants::on_hand(&app.db, tea), 3);

    // Release: back to the page, saying so; the units are for sale again.
    let released =
        alice.post_form(&format!("/checkout/holds/{cup_hold}/release"), &[("csrf_token", &token)]).await;
    assert_eq!(released.status(), 303);
    let page = alice.get(&location(&released)).await.text().await.expect("page");
    assert!(page.contains("Released your hold of “Product CUP-P”: it is back on sale."), "{page}");
    assert!(
        page.contains("id=\"ended-holds\"") && page.contains("released") && page.contains("ordered"),
        "{page}"
    );
    assert_eq!(invariants::live_holds(&app.db, cup), (0, 0));

    // Ordering from the released hold (a stale page, say): the checkout page again, the
    // sentence next to the hold, nothing ordered.
    let stale =
        alice.post_form(&format!("/checkout/holds/{cup_hold}/order"), &[("csrf_token", &token)]).await;
    assert_eq!(stale.status(), 409);
    let page = stale.text().await.expect("page");
    assert!(page.contains("id=\"hold-refused\"") && page.contains("You released this hold"), "{page}");
    assert!(page.contains(&format!("id=\"hold-{cup_hold}\" class=\"refused\"")), "{page}");
    let again =
        alice.post_form(&format!("/checkout/holds/{tea_hold}/release"), &[("csrf_token", &token)]).await;
    assert_eq!(again.status(), 409);
    assert!(again.text().await.expect("page").contains("became order"));
    // Without the CSRF token: refused before anything is read.
    let forged = alice.post_form(&format!("/checkout/holds/{tea_hold}/order"), &[]).await;
    assert_eq!(forged.status(), 403);

    assert_eq!(invariants::on_hand(&app.db, cup), 5);
    invariants::holds_within_stock(&app.db);
    invariants::orders_match_ledger(&app.db);
}

#[actix_web::test]
async fn checkout_is_for_a_logged_in_customer_and_the_menu_links_it() {
    let app = TestApp::spawn().await;
    let stranger = app.client(0);
    let page = stranger.get("/checkout").await;
    assert!(page.status().is_redirection() || page.status() == 401, "{}", page.status());
    app.user("dora", Role::Customer);
    let dora = &customers(&app, "menu", 1).await[0];
    let page = dora.get("/checkout").await.text().await.expect("page");
    assert!(page.contains("<a href=\"/checkout\" aria-current=\"page\">Checkout</a>"), "{page}");
    assert!(page.contains("id=\"no-holds\""), "{page}");
}

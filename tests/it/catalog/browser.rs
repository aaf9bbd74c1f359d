//! The optimistic edit screen as a person meets it, in headless Chromium: two tabs open the same
//! product, the first saves, the second saves later, lands on the conflict screen, takes the
//! other tab's name, keeps its own description, and saves again as version 3.

use fantoccini::{Client, Locator};
use haita::auth::Role;

use super::row;
use crate::common::TestApp;
use crate::common::browser::{Chromedriver, log_in, text_when_it_says, text_when_shown};

async fn replace(tab: &Client, css: &str, text: &str) {
    let field = tab.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}"));
    field.clear().await.expect("clear");
    field.send_keys(text).await.expect("type");
}

async fn click(tab: &Client, css: &str) {
    tab.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}")).click().await.expect("click");
}

#[actix_web::test]
async fn two_tabs_edit_one_product_and_the_second_resolves_the_conflict_per_field() {
    let app = TestApp::spawn().await;
    let product = app.product("TEAPOT", 4800, 0);
    app.user("carol", Role::Staff);
    let base = app.address().to_string();
    let edit = format!("{base}/products/{product}/edit");

    let mut driver = Chromedriver::start();
    let first = driver.browser().await;
    log_in(&first, &base, "carol").await;
    // The second tab: same browser, same session, its own copy of the form.
    let tab_a = first.window().await.expect("first tab");
    let tab_b = first.new_window(true).await.expect("second tab").handle;

    first.switch_to_window(tab_a.clone()).await.expect("tab A");
    first.goto(&edit).await.expect("tab A opens the editor");
    first.switch_to_window(tab_b.clone()).await.expect("tab B");
    first.goto(&edit).await.expect("tab B opens the editor");

    // Tab A saves first: new name and price.
    first.switch_to_window(tab_a).await.expect("tab A");
    replace(&first, "input[name=name]", "Kyusu, red clay").await;
    replace(&first, "input[name=price]", "52.00").await;
    click(&first, "main form button[type=submit]").await;
    assert!(text_when_shown(&first, ".flash.ok").await.contains("Saved Kyusu, red clay"));
    assert_eq!(row(&app, product).3, 2);

    // Tab B still holds version 1: a different name and a two-line Japanese description.
    first.switch_to_window(tab_b).await.expect("tab B");
    replace(&first, "input[name=name]", "Tokoname kyusu").await;
    replace(&first, "textarea[name=description]", "常滑焼の急須。\n<b>手作り</b>").await;
    click(&first, "main form button[type=submit]").await;

    // The editor has a heading too: read the conflict screen's once it has replaced the editor.
    text_when_it_says(&first, "main h1", "saved this product while you were editing").await;
    let name_row = text_when_shown(&first, "#field-name").await;
    assert!(name_row.contains("Tokoname kyusu") && name_row.contains("Kyusu, red clay"), "{name_row}");
    let description_row = text_when_shown(&first, "#field-description").await;
    assert!(
        description_row.contains("常滑焼の急須。") && description_row.contains("<b>手作り</b>"),
        "typed text shown as text"
    );
    assert_eq!(row(&app, product).3, 2, "nothing of tab B saved yet");

    // Only the name collides: take theirs for it; description and price merge on their own.
    click(&first, "input[name=choose_name][value=theirs]").await;
    click(&first, "form.conflict button[type=submit]").await;
    assert!(text_when_shown(&first, ".flash.ok").await.contains("Saved Kyusu, red clay"));

    assert_eq!(
        row(&app, product),
        ("Kyusu, red clay".to_string(), "常滑焼の急須。\n<b>手作り</b>".to_string(), 5200, 3)
    );
    let _ = first.close().await;
}

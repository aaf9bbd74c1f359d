//! Optimistic product edits: the version column, the conflict screen, ETag / If-Match.

mod browser;

use std::sync::Arc;

use diesel::prelude::*;
use haita::auth::Role;
use serde_json::{Value, json};
use tokio::sync::Barrier;

use crate::common::{Client, PASSWORD, TestApp, error_code};

pub(crate) fn row(app: &TestApp, id: i64) -> (String, String, i64, i32) {
    use haita::schema::products::dsl as p;
    p::products
        .find(id)
        .select((p::name, p::description, p::price_cents, p::version))
        .first(&mut app.db.raw_connection())
        .expect("product row")
}

async fn browser_login(app: &TestApp, username: &str) -> Client {
    let browser = app.client(0);
    let token = browser.csrf_token("/login").await;
    let login = browser
        .post_form("/login", &[("csrf_token", &token), ("username", username), ("password", PASSWORD)])
        .await;
    assert_eq!(login.status(), 303);
    browser
}

/// The hidden fields of an edit page, as the browser would post them back.
async fn edit_form_fields(browser: &Client, id: i64) -> Vec<(String, String)> {
    let page = browser.get(&format!("/products/{id}/edit")).await.text().await.expect("page");
    hidden_fields(&page)
}

/// `<input type="hidden" name=… value=…>` and `<textarea name=… hidden>` values of the page's
/// edit form (not the layout's logout form), unescaped as a browser would submit them.
fn hidden_fields(page: &str) -> Vec<(String, String)> {
    let form_start = page.find("<form method=\"post\" action=\"/products/").expect("an edit form");
    let page = &page[form_start..];
    let unescape = |s: &str| {
        s.replace("&#60;", "<")
            .replace("&#62;", ">")
            .replace("&#34;", "\"")
            .replace("&#39;", "'")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&#x27;", "'")
            .replace("&amp;", "&")
            .replace("&#38;", "&")
    };
    let mut fields = Vec::new();
    for chunk in page.split("<input type=\"hidden\" name=\"").skip(1) {
        let name = chunk.split('"').next().unwrap_or_default();
        let value = chunk.split("value=\"").nth(1).and_then(|v| v.split('"').next()).unwrap_or_default();
        fields.push((name.to_string(), unescape(value)));
    }
    for chunk in page.split("<textarea name=\"").skip(1) {
        let (name, rest) = chunk.split_once('"').unwrap_or_default();
        if !rest.starts_with(" hidden>") {
            continue;
        }
        let body = rest.trim_start_matches(" hidden>").split("</textarea>").next().unwrap_or_default();
        // The template writes one newline after the tag; the HTML parser drops it.
        fields.push((name.to_string(), unescape(body.strip_prefix('\n').unwrap_or(body))));
    }
    fields
}

fn with(mut fields: Vec<(String, String)>, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    for (k, v) in extra {
        fields.retain(|(name, _)| name != k);
        fields.push(((*k).to_string(), (*v).to_string()));
    }
    fields
}

async fn post(browser: &Client, id: i64, fields: &[(String, String)]) -> reqwest::Response {
    browser.http.post(browser.url(&format!("/products/{id}/edit"))).form(fields).send().await.expect("POST")
}

#[actix_web::test]
async fn the_second_of_two_saves_from_the_same_version_gets_the_conflict_screen_then_saves_as_version_3() {
    let app = TestApp::spawn().await;
    let id = app.product("KETTLE", 1500, 0);
    app.user("carol", Role::Staff);
    app.user("dave", Role::Staff);
    let (carol, dave) = (browser_login(&app, "carol").await, browser_login(&app, "dave").await);

    // Both open version 1.
    let carol_form = edit_form_fields(&carol, id).await;
    let dave_form = edit_form_fields(&dave, id).await;
    assert!(carol_form.contains(&("version".into(), "1".into())));

    // Carol renames it and changes the price: version 2.
    let saved = post(
        &carol,
        id,
        &with(carol_form, &[("name", "Iron kettle"), ("description", ""), ("price", "18.00")]),
    )
    .await;
    assert_eq!(saved.status(), 303);
    assert_eq!(row(&app, id), ("Iron kettle".into(), String::new(), 1800, 2));

    // Dave, still on version 1, renames it too and writes a description.
    let dave_typed = "鉄瓶です。\n二行目 <script>alert(1)</script>";
    let stale = post(
        &dave,
        id,
        &with(dave_form, &[("name", "Tetsubin"), ("description", dave_typed), ("price", "15.00")]),
    )
    .await;
    assert_eq!(stale.status(), 409);
    let page = stale.text().await.expect("page");
    assert_eq!(
        row(&app, id),
        ("Iron kettle".into(), String::new(), 1800, 2),
        "nothing of the stale save is written"
    );
    assert!(page.contains("saved this product while you were editing") && page.contains("carol"));
    assert!(
        page.contains("Tetsubin") && page.contains("Iron kettle") && page.contains("KETTLE"),
        "mine, theirs and base"
    );
    assert!(page.contains("鉄瓶です。\n二行目"), "multi-line Japanese text survives");
    assert!(!page.contains("<script>alert(1)</script>"), "typed markup is escaped");
    assert!(page.contains("&#60;script&#62;") || page.contains("&lt;script&gt;"));
    // Name collides (both changed it); description only Dave changed; price only Carol changed.
    assert!(page.contains("id=\"field-name\"") && page.contains("name=\"choose_name\""));
    assert!(!page.contains("name=\"choose_description\"") && !page.contains("name=\"choose_price\""));

    // Dave takes Carol's name and keeps his description: saved as version 3.
    let resolved = with(hidden_fields(&page), &[("choose_name", "theirs")]);
    let saved = post(&dave, id, &resolved).await;
    assert_eq!(saved.status(), 303);
    assert_eq!(row(&app, id), ("Iron kettle".into(), dave_typed.into(), 1800, 3));
}

/// The longest description the editor accepts, in the widest characters (4 bytes of UTF-8, 12
/// percent-encoded), goes through the conflict screen, which shows it three times (base, mine,
/// theirs: 30 000 characters) and posts it twice (about 240 KB of form), and through a PATCH.
#[actix_web::test]
async fn a_description_of_the_maximum_length_survives_the_conflict_screen_and_the_api() {
    let app = TestApp::spawn().await;
    let id = app.product("HOKKE", 900, 0);
    app.user("erin", Role::Staff);
    app.user("frank", Role::Staff);
    let (erin, frank) = (browser_login(&app, "erin").await, browser_login(&app, "frank").await);
    let max = haita::catalog::edit::DESCRIPTION_MAX_CHARS;
    let (base, theirs, mine) = ("鰤".repeat(max), "𩸽".repeat(max), "𠮷".repeat(max));
    let first = edit_form_fields(&erin, id).await;
    let saved =
        post(&erin, id, &with(first, &[("name", "HOKKE"), ("description", &base), ("price", "9.00")])).await;
    assert_eq!(saved.status(), 303, "the longest description is accepted by the editor");

    let (erin_form, frank_form) = (edit_form_fields(&erin, id).await, edit_form_fields(&frank, id).await);
    let saved =
        post(&erin, id, &with(erin_form, &[("name", "HOKKE"), ("description", &theirs), ("price", "9.00")]))
            .await;
    assert_eq!(saved.status(), 303);
    let stale =
        post(&frank, id, &with(frank_form, &[("name", "HOKKE"), ("description", &mine), ("price", "9.00")]))
            .await;
    assert_eq!(stale.status(), 409, "both changed the description: the conflict screen");
    let page = stale.text().await.expect("page");
    let keep_mine = with(hidden_fields(&page), &[("choose_description", "mine")]);
    let posted: usize = keep_mine.iter().map(|(_, v)| v.chars().count()).sum();
    assert!(posted >= 2 * max, "the screen posts the description twice: {posted} characters");
    let resolved = post(&frank, id, &keep_mine).await;
    assert_eq!(resolved.status(), 303, "{}", resolved.text().await.unwrap_or_default());
    assert_eq!(row(&app, id).1, mine);

    let url = frank.url(&format!("/api/v1/products/{id}"));
    let patched = frank
        .http
        .patch(&url)
        .header("if-match", "\"v4\"")
        .json(&json!({"description": theirs}))
        .send()
        .await
        .expect("PATCH");
    assert_eq!(patched.status(), 200, "{}", patched.text().await.unwrap_or_default());
    assert_eq!(row(&app, id).1, theirs);
}

#[actix_web::test]
async fn invalid_input_on_the_edit_form_is_shown_back_with_every_field_kept() {
    let app = TestApp::spawn().await;
    let id = app.product("MUG", 900, 0);
    app.user("erin", Role::Staff);
    let erin = browser_login(&app, "erin").await;
    let form = edit_form_fields(&erin, id).await;
    let response =
        post(&erin, id, &with(form, &[("name", " "), ("description", "keep me\nplease"), ("price", "-3")]))
            .await;
    assert_eq!(response.status(), 422);
    let page = response.text().await.expect("page");
    assert!(page.contains("Name must not be empty") && page.contains("is not a price"));
    assert!(page.contains("keep me\nplease"), "typed text is kept");
    assert_eq!(row(&app, id).3, 1, "nothing saved");
}

#[actix_web::test]
async fn thirty_concurrent_patches_with_the_same_if_match_apply_exactly_once() {
    let app = TestApp::spawn_instances(2, |_| {}).await;
    let id = app.product("RACE", 100, 0);
    let staff = app.user("sally", Role::Staff);
    let clients: Vec<Client> = (0..30).map(|i| app.client(i)).collect();
    futures::future::join_all(clients.iter().map(|c| c.login(&staff))).await;
    let etag = clients[0].get(&format!("/api/v1/products/{id}")).await.headers()["etag"]
        .to_str()
        .expect("etag")
        .to_string();
    assert_eq!(etag, "\"v1\"");

    let barrier = Arc::new(Barrier::new(30));
    let tasks = clients.into_iter().enumerate().map(|(i, client)| {
        let (barrier, etag) = (barrier.clone(), etag.clone());
        actix_web::rt::spawn(async move {
            barrier.wait().await;
            let response = client
                .http
                .patch(client.url(&format!("/api/v1/products/{id}")))
                .header("if-match", etag)
                .json(&json!({"price_cents": 1000 + i}))
                .send()
                .await
                .expect("PATCH");
            response.status().as_u16()
        })
    });
    let statuses: Vec<u16> =
        futures::future::join_all(tasks).await.into_iter().map(|r| r.expect("task")).collect();

    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 1, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 412).count(), 29, "{statuses:?}");
    assert_eq!(row(&app, id).3, 2, "invariant 6: one applied save, one version step");
}

#[actix_web::test]
async fn the_api_speaks_etag_and_if_match() {
    let app = TestApp::spawn().await;
    let id = app.product("API", 500, 0);
    let staff = app.client(0);
    staff.login(&app.user("stan", Role::Staff)).await;
    let customer = app.client(0);
    customer.login(&app.user("cust", Role::Customer)).await;
    let url = staff.url(&format!("/api/v1/products/{id}"));

    let got = staff.get(&format!("/api/v1/products/{id}")).await;
    assert_eq!(got.headers()["etag"], "\"v1\"");
    assert_eq!(got.json::<Value>().await.expect("json")["version"], 1);

    let missing = staff.http.patch(&url).json(&json!({"name": "New"})).send().await.expect("PATCH");
    assert_eq!(missing.status(), 428);
    assert_eq!(error_code(missing).await, "precondition_required");

    let forbidden = customer
        .http
        .patch(&url)
        .header("if-match", "\"v1\"")
        .json(&json!({"name": "x"}))
        .send()
        .await
        .expect("PATCH");
    assert_eq!(forbidden.status(), 403);

    let invalid = staff
        .http
        .patch(&url)
        .header("if-match", "\"v1\"")
        .json(&json!({"name": "", "price_cents": -5, "description": "x".repeat(10_001)}))
        .send()
        .await
        .expect("PATCH");
    assert_eq!(invalid.status(), 422);
    let body: Value = invalid.json().await.expect("json");
    assert_eq!(body["error"], "invalid_fields");
    for field in ["name", "price_cents", "description"] {
        assert!(body["fields"][field].is_string(), "{field} named: {body}");
    }
    let too_long = staff
        .http
        .patch(&url)
        .header("if-match", "\"v1\"")
        .json(&json!({"name": "n".repeat(201)}))
        .send()
        .await
        .expect("PATCH");
    assert_eq!(too_long.status(), 422);

    let saved = staff
        .http
        .patch(&url)
        .header("if-match", "\"v1\"")
        .json(&json!({"name": "Renamed"}))
        .send()
        .await
        .expect("PATCH");
    assert_eq!(saved.status(), 200);
    assert_eq!(saved.headers()["etag"], "\"v2\"");
    let saved: Value = saved.json().await.expect("json");
    assert_eq!(
        (saved["name"].as_str(), saved["price_cents"].as_i64(), saved["version"].as_i64()),
        (Some("Renamed"), Some(500), Some(2))
    );

    let stale = staff
        .http
        .patch(&url)
        .header("if-match", "\"v1\"")
        .json(&json!({"name": "Lost?"}))
        .send()
        .await
        .expect("PATCH");
    assert_eq!(stale.status(), 412);
    assert_eq!(stale.headers()["etag"], "\"v2\"");
    let body: Value = stale.json().await.expect("json");
    assert_eq!(body["error"], "stale_version");
    assert_eq!(body["etag"], "\"v2\"");
    assert_eq!(body["current"]["name"], "Renamed");
    assert_eq!(row(&app, id), ("Renamed".into(), String::new(), 500, 2), "the stale PATCH wrote nothing");

    for weird in ["*", "\"v2\", \"v3\""] {
        let response = staff
            .http
            .patch(&url)
            .header("if-match", weird)
            .json(&json!({"name": "x"}))
            .send()
            .await
            .expect("PATCH");
        assert_eq!(response.status(), 400, "{weird}");
    }
    let weak = staff
        .http
        .patch(&url)
        .header("if-match", "W/\"v2\"")
        .json(&json!({"name": "x"}))
        .send()
        .await
        .expect("PATCH");
    assert_eq!(weak.status(), 412, "a weak tag never matches a strong comparison");
    let unknown_field = staff
        .http
        .patch(&url)
        .header("if-match", "\"v2\"")
        .json(&json!({"sku": "X"}))
        .send()
        .await
        .expect("PATCH");
    assert_eq!(unknown_field.status(), 400);
    assert_eq!(row(&app, id).3, 2);
}

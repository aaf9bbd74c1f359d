//! English and Japanese: every page renders in both, with no text missing; the language comes
//! from the header's switch (kept across login) or else from `Accept-Language`; a refusal is said
//! in the reader's language on a page and in JSON, with the same error code.

use haita::auth::Role;
use serde_json::Value;

use crate::common::pages::every_page;
use crate::common::{Client, TestApp, TestUser, future_day};

/// Switches `client`'s language with the header's form, as a person would.
async fn switch(client: &Client, lang: &str) {
    let token = client.csrf_token("/").await;
    let switched =
        client.post_form("/language", &[("csrf_token", &token), ("lang", lang), ("next", "/products")]).await;
    assert_eq!(switched.status(), 303, "the switch answers with the page it was on");
    assert_eq!(switched.headers()["location"], "/products");
}

/// What a missing text looks like on a page: rust-i18n writes the key itself
/// (`booking.fully_booked`). The sections are those of `src/i18n/texts.yml`. Inside `<code>` are
/// names that only look alike (the audit's actions: `resource.closed`).
fn leaked_keys(page: &str) -> Vec<String> {
    let mut prose = String::new();
    let mut rest = page;
    while let Some(at) = rest.find("<code>") {
        prose.push_str(&rest[..at]);
        rest = rest[at..].find("</code>").map_or("", |end| &rest[at + end..]);
    }
    prose.push_str(rest);
    const SECTIONS: &[&str] = &[
        "layout",
        "nav",
        "role",
        "home",
        "login",
        "error",
        "resources",
        "resource",
        "booking",
        "bookings",
        "products",
        "product",
        "orders",
        "order",
        "edit",
        "locked",
        "lock",
        "start",
        "view",
        "field",
        "conflict",
        "receipts",
        "admin",
        "auth",
        "demo",
        "strategy",
        "verdict",
        "count",
    ];
    let mut leaked = Vec::new();
    for word in prose.split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_')) {
        let mut parts = word.split('.');
        let first = parts.next().unwrap_or("");
        let rest: Vec<&str> = parts.collect();
        let keyish = !rest.is_empty()
            && rest.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
            && !["html", "md", "rs", "css", "js", "csv", "lock", "ico"].contains(rest.last().unwrap_or(&""));
        if keyish && SECTIONS.contains(&first) {
            leaked.push(word.to_string());
        }
    }
    leaked
}

/// A user of the tour, to log in as (logging in needs only the name).
fn user_of(name: &str) -> TestUser {
    TestUser { id: 0, username: name.to_string() }
}

#[actix_web::test]
async fn every_page_renders_in_both_languages_with_no_text_missing() {
    let app = TestApp::spawn().await;
    let pages = every_page(&app).await;
    let mut problems = Vec::new();
    for (who, paths) in pages {
        for lang in ["en", "ja"] {
            let client = app.client(0);
            if who != "anonymous" {
                client.login(&user_of(who)).await;
            }
            switch(&client, lang).await;
            for path in &paths {
                let page = client.get(path).await.text().await.expect("page");
                if !page.contains(&format!("<html lang=\"{lang}\">")) {
                    problems.push(format!("{who} {path} ({lang}): not marked as {lang}"));
                }
                let menu = if lang == "ja" { "予約できるもの</a>" } else { "Resources</a>" };
                if !page.contains(menu) {
                    problems.push(format!("{who} {path} ({lang}): the menu is not in {lang}"));
                }
                for key in leaked_keys(&page) {
                    problems.push(format!("{who} {path} ({lang}): the text {key} is missing"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[actix_web::test]
async fn the_language_follows_the_switch_then_the_browser_and_refusals_are_said_in_it() {
    let app = TestApp::spawn().await;
    let room = app.resource("Single room", 1);
    let taker = app.user("taker", Role::Customer);
    let hanako = app.user("hanako", Role::Customer);
    let day = future_day();
    let first = app.client(0);
    first.login(&taker).await;
    assert_eq!(first.book(room, day).await.status(), 201);

    // No pick: the browser's language.
    let browser = app.client(0);
    let asked = |accept: &'static str| {
        let (http, url) = (browser.http.clone(), browser.url("/resources"));
        async move {
            http.get(url)
                .header("accept-language", accept)
                .send()
                .await
                .expect("GET")
                .text()
                .await
                .expect("page")
        }
    };
    assert!(asked("ja-JP,ja;q=0.9,en;q=0.8").await.contains("<html lang=\"ja\">"));
    assert!(
        asked("fr-FR,fr;q=0.9").await.contains("<html lang=\"en\">"),
        "English when haita speaks none of them"
    );
    // A pick beats the browser, and survives logging in.
    switch(&browser, "en").await;
    assert!(asked("ja").await.contains("<html lang=\"en\">"));
    switch(&browser, "ja").await;
    browser.login(&hanako).await;
    let page = browser.get(&format!("/resources/{room}?from={day}")).await.text().await.expect("page");
    assert!(page.contains("<html lang=\"ja\">") && page.contains("満員"), "still Japanese after login");
    assert!(page.contains(&format!("{} (", day.format("%Y-%m-%d"))), "days written the Japanese way");

    // The lost race, said in Japanese on the page and in JSON; the code stays the same.
    let refused = browser.book_with_form(room, day).await;
    assert_eq!(refused.status(), 409);
    let page = refused.text().await.expect("page");
    assert!(page.contains("その日は満員です(1 つだけの枠が埋まっています)。"), "{page}");
    let json = browser
        .post_json("/api/v1/reservations", &serde_json::json!({"resource_id": room, "date": day}))
        .await;
    assert_eq!(json.status(), 409);
    let body: Value = json.json().await.expect("body");
    assert_eq!(body["error"], "fully_booked");
    assert_eq!(body["message"], "その日は満員です(1 つだけの枠が埋まっています)。");
    // An English reader of the API gets English.
    let body: Value = first
        .post_json("/api/v1/reservations", &serde_json::json!({"resource_id": room, "date": day}))
        .await
        .json()
        .await
        .expect("body");
    assert_eq!(body["error"], "already_booked");
    assert_eq!(body["message"], "You have already booked this resource for that day.");

    // A language haita does not speak is refused in words.
    let token = browser.csrf_token("/").await;
    let bad = browser.post_form("/language", &[("csrf_token", &token), ("lang", "fr")]).await;
    assert_eq!(bad.status(), 422);
}

/// The lab's pages in `DEMO_MODE` too: the first-visit path, the demo accounts, the race with its
/// verdicts (said again from the stored numbers in the reader's language) and a strategy's code.
#[cfg(feature = "lab")]
#[actix_web::test]
async fn the_demo_pages_speak_both_languages_too() {
    let app = TestApp::spawn_lab().await;
    haita::lab::seed::run(&app.db.pool).expect("demo data");
    let racer = app.client(0);
    racer.login(&app.user("dora", Role::Customer)).await;
    let body = serde_json::json!({"strategy": "all", "clients": 8, "attempts": 16});
    assert_eq!(racer.post_json("/api/v1/demo/races", &body).await.status(), 201);
    let mut problems = Vec::new();
    for lang in ["en", "ja"] {
        let client = app.client(0);
        switch(&client, lang).await;
        for path in ["/", "/login", "/demo", "/demo/code/named-lock-pool-pitfall"] {
            let page = client.get(path).await.text().await.expect("page");
            if !page.contains(&format!("<html lang=\"{lang}\">")) {
                problems.push(format!("{path} ({lang}): not marked as {lang}"));
            }
            for key in leaked_keys(&page) {
                problems.push(format!("{path} ({lang}): the text {key} is missing"));
            }
        }
    }
    let ja = app.client(0);
    switch(&ja, "ja").await;
    let demo = ja.get("/demo").await.text().await.expect("page");
    assert!(demo.contains("二重予約なし"), "the verdicts, said again in Japanese");
    assert!(ja.get("/").await.text().await.expect("home").contains("ふたりと、ひとつの空き"));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The `next` hidden field of the header's language switch on `page`.
fn switch_next(page: &str) -> String {
    let form = page.split("action=\"/language\"").nth(1).expect("the language switch");
    let field = form.split("name=\"next\" value=\"").nth(1).expect("its next field");
    field.split('"').next().unwrap_or_default().replace("&#x2f;", "/").replace("&amp;", "&")
}

/// Issue 34, item 9: the switch on the login page comes back to the login page, in the other
/// language, with the page to go to after logging in kept; also after a refused login.
#[actix_web::test]
async fn the_switch_on_the_login_page_stays_there_and_keeps_where_to_go_next() {
    let app = TestApp::spawn().await;
    let user = app.user("kenji", Role::Customer);
    for (from, to, word) in [("en", "ja", "ログイン"), ("ja", "en", "Log in")] {
        let client = app.client(0);
        switch(&client, from).await;
        // Sent to log in by a page that needs it.
        let login =
            client.get("/bookings").await.headers()["location"].to_str().expect("location").to_string();
        assert!(login.starts_with("/login?next="), "{login}");
        let page = client.get(&login).await.text().await.expect("login page");
        let next = switch_next(&page);
        let token = client.csrf_token(&login).await;
        let switched =
            client.post_form("/language", &[("csrf_token", &token), ("lang", to), ("next", &next)]).await;
        assert_eq!(switched.status(), 303);
        let back = switched.headers()["location"].to_str().expect("location").to_string();
        assert!(back.starts_with("/login?next="), "{from} → {to}: back on the login page, not {back:?}");
        let page = client.get(&back).await.text().await.expect("login page");
        assert!(page.contains(&format!("<html lang=\"{to}\">")) && page.contains(word), "{page}");
        assert!(page.contains(r#"name="next" value="/bookings""#), "{from} → {to}: next kept: {page}");

        // A wrong password answers the login page at /login: its switch still keeps next.
        let token = client.csrf_token(&back).await;
        let refused = client
            .post_form(
                "/login",
                &[
                    ("csrf_token", &token),
                    ("username", &user.username),
                    ("password", "wrong"),
                    ("next", "/bookings"),
                ],
            )
            .await;
        assert_eq!(refused.status(), 401);
        let next = switch_next(&refused.text().await.expect("page"));
        let switched =
            client.post_form("/language", &[("csrf_token", &token), ("lang", from), ("next", &next)]).await;
        let back = switched.headers()["location"].to_str().expect("location").to_string();
        let page = client.get(&back).await.text().await.expect("login page");
        assert!(page.contains(r#"name="next" value="/bookings""#), "after a refusal, {back:?}: {page}");
    }
}

/// Issue 34, item 9: the home page's cards say what each does for a person before any SQL: the
/// first sentence of every card holds no code.
#[actix_web::test]
async fn the_home_pages_cards_say_what_each_does_before_the_sql() {
    let app = TestApp::spawn().await;
    for lang in ["en", "ja"] {
        let client = app.client(0);
        switch(&client, lang).await;
        let page = client.get("/").await.text().await.expect("home");
        let cards =
            page.split("<ul class=\"cards\">").nth(1).expect("the cards").split("</ul>").next().unwrap_or("");
        let texts: Vec<&str> =
            cards.split("<p>").skip(1).map(|p| p.split("</p>").next().unwrap_or_default()).collect();
        assert!(texts.len() >= 5, "{lang}: {cards}");
        for text in texts {
            let first = text.split_inclusive(['.', '。']).next().unwrap_or_default();
            assert!(!first.contains("<code>"), "{lang}: a card leads with SQL: {text}");
            let sql = ["GET_LOCK", "FOR UPDATE", "KILL", "edit_locks"];
            assert!(!sql.iter().any(|s| first.contains(s)), "{lang}: a card leads with SQL: {text}");
        }
    }
}

/// Issue 34, item 9: the demo accounts' roles, in the login page's language.
#[cfg(feature = "lab")]
#[actix_web::test]
async fn the_login_page_names_the_demo_roles_in_its_language() {
    let app = TestApp::spawn_lab().await;
    haita::lab::seed::run(&app.db.pool).expect("demo data");
    // (One demo account is called "admin": its name stays, its role is said.)
    let english = ["<td>staff</td>", "<td>customer</td>"];
    let japanese = ["<td>管理者</td>", "<td>スタッフ</td>", "<td>顧客</td>"];
    for (lang, roles, others) in [("en", &english[..], &japanese[..]), ("ja", &japanese[..], &english[..])] {
        let client = app.client(0);
        switch(&client, lang).await;
        let page = client.get("/login").await.text().await.expect("login page");
        let table = page.split("class=\"demo-users\"").nth(1).expect("the demo accounts");
        for role in roles {
            assert!(table.contains(*role), "{lang}: {role} missing: {table}");
        }
        for role in others {
            assert!(!table.contains(*role), "{lang}: {role} in the other language: {table}");
        }
    }
}

//! Logging in and out, roles, and where the login form sends you afterwards.

use haita::auth::Role;
use serde_json::{Value, json};

use crate::common::{PASSWORD, TestApp, error_code};

#[actix_web::test]
async fn api_login_sets_a_session_and_logout_ends_it() {
    let app = TestApp::spawn().await;
    let user = app.user("frank", Role::Staff);
    let client = app.client(0);

    assert_eq!(client.get("/api/v1/session").await.status(), 401);
    client.login(&user).await;
    let me: Value = client.get("/api/v1/session").await.json().await.expect("json");
    assert_eq!(me["user"]["username"], "frank");
    assert_eq!(me["user"]["role"], "staff");

    let out = client.send(reqwest::Method::DELETE, "/api/v1/session").await;
    assert_eq!(out.status(), 204);
    assert_eq!(client.get("/api/v1/session").await.status(), 401);
}

#[actix_web::test]
async fn wrong_passwords_and_unknown_users_get_the_same_answer() {
    let app = TestApp::spawn().await;
    app.user("grace", Role::Customer);
    let client = app.client(0);
    for (username, password) in [("grace", "wrong-password"), ("nobody", PASSWORD)] {
        let response =
            client.post_json("/api/v1/session", &json!({"username": username, "password": password})).await;
        assert_eq!(response.status(), 401);
        assert_eq!(error_code(response).await, "bad_credentials");
    }
}

#[actix_web::test]
async fn the_login_form_needs_its_csrf_token_and_only_redirects_within_the_site() {
    let app = TestApp::spawn().await;
    app.user("heidi", Role::Customer);
    let browser = app.client(0);

    let forged = browser.post_form("/login", &[("username", "heidi"), ("password", PASSWORD)]).await;
    assert_eq!(forged.status(), 403, "login CSRF is refused");

    let token = browser.csrf_token("/login").await;
    let wrong = browser
        .post_form("/login", &[("csrf_token", &token), ("username", "heidi"), ("password", "nope-nope")])
        .await;
    assert_eq!(wrong.status(), 401);
    let page = wrong.text().await.expect("page");
    assert!(
        page.contains("Wrong username or password") && page.contains("value=\"heidi\""),
        "typed username kept"
    );

    let fine = browser
        .post_form(
            "/login",
            &[
                ("csrf_token", &token),
                ("username", "heidi"),
                ("password", PASSWORD),
                ("next", "//evil.example/"),
            ],
        )
        .await;
    assert_eq!(fine.status(), 303);
    assert_eq!(fine.headers()["location"], "/", "no open redirect");

    // The token rotates at login: the pre-login token no longer works.
    let stale = browser.post_form("/logout", &[("csrf_token", &token)]).await;
    assert_eq!(stale.status(), 403);
    let fresh = browser.csrf_token("/").await;
    assert_eq!(browser.post_form("/logout", &[("csrf_token", &fresh)]).await.status(), 303);
    assert_eq!(browser.get("/api/v1/session").await.status(), 401);
}

/// Each way a `next` has been used to leave the site after login lands on `/`; the app's own
/// pages are returned to. The form sends `next` percent-encoded, so each trick reaches the
/// server exactly as a crafted link would deliver it.
#[actix_web::test]
async fn login_returns_only_to_the_apps_own_pages() {
    let app = TestApp::spawn().await;
    app.user("ivan", Role::Customer);
    for (next, expected) in [
        ("/%09/evil.example", "/"),
        ("/\t/evil.example", "/"),
        ("/\\evil.example", "/"),
        ("/%5Cevil.example", "/"),
        ("%2F%2Fevil.example", "/"),
        ("/%2F%2Fevil.example", "/"),
        ("//evil.example", "/"),
        ("/resources\r\nSet-Cookie: x=1", "/"),
        ("https://evil.example", "/"),
        ("/resources/1?from=2026-12-01", "/resources/1?from=2026-12-01"),
    ] {
        let browser = app.client(0);
        let token = browser.csrf_token("/login").await;
        let response = browser
            .post_form(
                "/login",
                &[("csrf_token", &token), ("username", "ivan"), ("password", PASSWORD), ("next", next)],
            )
            .await;
        assert_eq!(response.status(), 303, "{next:?}");
        assert_eq!(response.headers()["location"], expected, "{next:?}");
    }
}

#[cfg(feature = "lab")]
#[actix_web::test]
async fn demo_accounts_are_listed_on_the_login_page_only_when_seeded() {
    let app = TestApp::spawn().await;
    let before = app.client(0).get("/login").await.text().await.expect("page");
    assert!(!before.contains("Demo accounts"));

    haita::lab::seed::run(&app.db.pool).expect("seed");
    haita::lab::seed::run(&app.db.pool).expect("seed is idempotent");
    let after = app.client(0).get("/login").await.text().await.expect("page");
    assert!(after.contains("Demo accounts") && after.contains("alice-demo"));

    for (username, _, password, role) in haita::lab::seed::DEMO_USERS {
        let client = app.client(0);
        let response =
            client.post_json("/api/v1/session", &json!({"username": username, "password": password})).await;
        assert_eq!(response.status(), 200, "demo login {username}");
        let body: Value = response.json().await.expect("json");
        assert_eq!(body["user"]["role"], role.as_str());
    }
}

#[actix_web::test]
async fn unknown_pages_and_api_routes_answer_404_in_their_own_format() {
    let app = TestApp::spawn().await;
    let client = app.client(0);
    let api = client.get("/api/v1/nothing-here").await;
    assert_eq!(api.status(), 404);
    assert_eq!(error_code(api).await, "not_found");
    let page = client.get("/nothing-here").await;
    assert_eq!(page.status(), 404);
    assert!(page.text().await.expect("page").contains("There is nothing at this address"));
    let health: Value = client.get("/health").await.json().await.expect("json");
    assert_eq!(health["database"], "ok");
}

#[actix_web::test]
async fn the_openapi_document_describes_every_json_endpoint() {
    let app = TestApp::spawn().await;
    let response = app.client(0).get("/api/v1/openapi.json").await;
    assert_eq!(response.status(), 200);
    let document: Value = response.json().await.expect("JSON");
    assert!(document["openapi"].as_str().is_some_and(|v| v.starts_with("3.")));
    let expected = [
        ("/api/v1/session", "get"),
        ("/api/v1/session", "post"),
        ("/api/v1/session", "delete"),
        ("/api/v1/resources", "get"),
        ("/api/v1/resources/{id}/availability", "get"),
        ("/api/v1/reservations", "get"),
        ("/api/v1/reservations", "post"),
        ("/api/v1/reservations/{id}", "delete"),
        ("/api/v1/products", "get"),
        ("/api/v1/products/{id}", "get"),
        ("/api/v1/products/{id}", "patch"),
        ("/api/v1/orders", "get"),
        ("/api/v1/orders", "post"),
        ("/api/v1/stock/receipts", "post"),
        ("/api/v1/resources/{id}/edit-lock", "get"),
        ("/api/v1/resources/{id}/edit-lock", "post"),
        ("/api/v1/resources/{id}/edit-lock", "put"),
        ("/api/v1/resources/{id}/edit-lock", "delete"),
        ("/api/v1/resources/{id}", "patch"),
        ("/api/v1/admin/locks", "get"),
        ("/api/v1/admin/edit-locks/release-expired", "post"),
        ("/api/v1/admin/edit-locks/{key}", "delete"),
        ("/api/v1/admin/named-locks/{name}", "get"),
        ("/api/v1/admin/named-locks/{name}", "delete"),
        ("/api/v1/admin/audit", "get"),
    ];
    // The lab's endpoints are documented exactly when they are served.
    let lab = [
        ("/api/v1/demo/races", "post"),
        ("/api/v1/demo/races/{id}", "get"),
        ("/api/v1/demo/bookings", "post"),
    ];
    for (path, method) in expected {
        assert!(document["paths"][path][method].is_object(), "{method} {path} is not documented");
    }
    for (path, method) in lab {
        assert_eq!(
            document["paths"][path][method].is_object(),
            haita::LAB,
            "{method} {path} is documented if and only if the lab is built in"
        );
    }
    let demo_tag = document["tags"].as_array().expect("tags").iter().any(|t| t["name"] == "demo");
    assert_eq!(demo_tag, haita::LAB, "the demo tag comes with the lab");
    // Every documented operation exists: anonymous calls get 401/400/415/404-from-a-handler, never
    // the router's "nothing at this address".
    let client = app.client(0);
    for (path, item) in document["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("operations").keys() {
            let url = client
                .url(&path.replace("{id}", "1").replace("{key}", "resource:1").replace("{name}", "haita:x"));
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            let response = client
                .http
                .request(method.clone(), url)
                .header("content-type", "application/json")
                .send()
                .await
                .expect("request");
            let status = response.status();
            let body: Value = response.json().await.unwrap_or_default();
            assert!(
                !(status == 404 && body["message"] == "There is nothing at this address.") && status != 405,
                "{method} {path} is documented but not routed ({status})"
            );
        }
    }
}

/// 48 clients guess one account's password in a loop. The per-username throttle answers 429
/// (with Retry-After) after a handful of attempts, so only those few reach the database and the
/// password hasher; a bystander's product list is served meanwhile.
#[actix_web::test]
async fn a_password_guessing_storm_is_throttled_before_any_hashing() {
    let app = TestApp::spawn_instances(1, |c| {
        c.login_attempts_per_username = std::num::NonZeroU32::new(5).expect("non-zero");
        c.hashing_slots = 1;
    })
    .await;
    app.user("victim", Role::Customer);
    let answers = futures::future::join_all((0..48).map(|i| {
        let client = app.client(i);
        async move {
            let mut seen = Vec::new();
            for _ in 0..5 {
                let response = client
                    .post_json("/api/v1/session", &json!({"username": "victim", "password": "guess"}))
                    .await;
                let status = response.status().as_u16();
                let retry_after = response.headers().get("retry-after").is_some();
                seen.push((status, retry_after));
            }
            seen
        }
    }));
    let bystander = async {
        let started = std::time::Instant::now();
        let status = app.client(99).get("/api/v1/products").await.status().as_u16();
        (status, started.elapsed())
    };
    let (answers, (bystander_status, bystander_took)) = futures::future::join(answers, bystander).await;
    let answers: Vec<_> = answers.into_iter().flatten().collect();
    println!("bystander product list during the storm: {bystander_status} in {bystander_took:?}");

    assert_eq!(bystander_status, 200);
    let checked = answers.iter().filter(|(s, _)| *s == 401).count();
    let throttled = answers.iter().filter(|(s, retry)| *s == 429 && *retry).count();
    assert_eq!(checked + throttled, answers.len(), "only 401 and 429 (with Retry-After): {answers:?}");
    assert!(checked <= 6, "only the quota's worth of guesses reached the hasher, not {checked}");
    let body =
        app.client(0).post_json("/api/v1/session", &json!({"username": "victim", "password": "x"})).await;
    assert_eq!(error_code(body).await, "too_many_attempts");
}

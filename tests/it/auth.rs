//! Logging in and out, roles, and where the login form sends you afterwards.

use diesel::RunQueryDsl;
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

/// Instance 0 runs in `DEMO_MODE`, instance 1 with production defaults, on one database.
#[cfg(feature = "lab")]
#[actix_web::test]
async fn demo_accounts_are_listed_on_the_login_page_only_when_seeded_and_in_demo_mode() {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let app = TestApp::spawn_instances(2, |c| {
        c.demo_mode = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0
    })
    .await;
    let (demo, production) = (app.client(0), app.client(1));
    let before = demo.get("/login").await.text().await.expect("page");
    assert!(!before.contains("Demo accounts"));

    haita::lab::seed::run(&app.db.pool).expect("seed");
    haita::lab::seed::run(&app.db.pool).expect("seed is idempotent");
    let after = demo.get("/login").await.text().await.expect("page");
    assert!(after.contains("Demo accounts") && after.contains("alice-demo"));
    let elsewhere = production.get("/login").await.text().await.expect("page");
    assert!(
        !elsewhere.contains("Demo accounts") && !elsewhere.contains("alice-demo"),
        "no published passwords"
    );
    assert!(after.contains("href=\"/demo\"") && !elsewhere.contains("href=\"/demo\""), "the demo link");
    assert_eq!(production.get("/demo").await.status(), 404, "no race demo outside DEMO_MODE");
    let (home, production_home) = (
        demo.get("/").await.text().await.expect("home"),
        production.get("/").await.text().await.expect("home"),
    );
    assert!(home.contains("Start here") && home.contains("Meeting room 1"), "a first visit's path");
    assert!(!production_home.contains("Start here"), "a real deployment has no demo rooms");
    let (with_demo, without) = (
        demo.get("/api/v1/openapi.json").await.text().await.expect("document"),
        production.get("/api/v1/openapi.json").await.text().await.expect("document"),
    );
    assert!(
        with_demo.contains("/api/v1/demo/") && !without.contains("/api/v1/demo/"),
        "documented where served"
    );

    for (username, _, password, role) in haita::lab::seed::DEMO_USERS {
        let client = app.client(0);
        let response =
            client.post_json("/api/v1/session", &json!({"username": username, "password": password})).await;
        assert_eq!(response.status(), 200, "demo login {username}");
        let body: Value = response.json().await.expect("json");
        assert_eq!(body["user"]["role"], role.as_str());
    }
}

/// A database seeded once for a demo keeps its demo accounts, whose passwords are published.
/// Outside `DEMO_MODE` they cannot log in: the answer is a wrong password's, word for word, and
/// `serve` warns at start how many of them the database holds. In `DEMO_MODE` they work.
#[cfg(feature = "lab")]
#[actix_web::test]
async fn demo_accounts_cannot_log_in_outside_demo_mode_and_serve_counts_them_at_start() {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let app = TestApp::spawn_instances(2, |c| {
        c.demo_mode = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0
    })
    .await;
    haita::lab::seed::run(&app.db.pool).expect("seed, as in DEMO_MODE");
    let (demo, production) = (app.client(0), app.client(1));
    let published = json!({"username": "admin", "password": "admin-demo"});
    let wrong = json!({"username": "admin", "password": "not-the-password"});

    let refused = production.post_json("/api/v1/session", &published).await;
    assert_eq!(refused.status(), 401, "the published password outside DEMO_MODE");
    let refused: Value = refused.json().await.expect("json");
    assert_eq!(refused["error"], "bad_credentials");
    let mistyped: Value = production.post_json("/api/v1/session", &wrong).await.json().await.expect("json");
    assert_eq!(refused, mistyped, "the same answer as a wrong password");
    assert_eq!(production.get("/api/v1/admin/locks").await.status(), 401, "no admin API");
    let token = production.csrf_token("/login").await;
    let form = production
        .post_form("/login", &[("csrf_token", &token), ("username", "alice"), ("password", "alice-demo")])
        .await;
    assert_eq!(form.status(), 401, "nor through the login form");

    assert_eq!(demo.post_json("/api/v1/session", &published).await.status(), 200, "in DEMO_MODE");
    assert_eq!(demo.get("/api/v1/admin/locks").await.status(), 200);

    // `serve` without DEMO_MODE on that database says so before it serves.
    let mut serve = std::process::Command::new(env!("CARGO_BIN_EXE_haita"))
        .arg("serve")
        .env("DATABASE_URL", &app.db.url)
        .env("BIND", "127.0.0.1:0")
        .env("SESSION_KEY", "k".repeat(64))
        .env("RUST_LOG", "info")
        .env_remove("DEMO_MODE")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("haita serve");
    let stderr = serve.stderr.take().expect("stderr");
    let (lines, read) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut log = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while let Ok(line) = read.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
        let serving = line.contains("serving on");
        log.push(line);
        if serving {
            break;
        }
    }
    let _ = serve.kill();
    let _ = serve.wait();
    let count = haita::lab::seed::DEMO_USERS.len();
    assert!(log.iter().any(|l| l.contains("serving on")), "it serves: {log:#?}");
    assert!(
        log.iter().any(|l| l.contains("WARN") && l.contains(&format!("{count} demo users"))),
        "a warning naming how many demo users exist: {log:#?}"
    );
}

/// Outside `DEMO_MODE` the app will not start without `SESSION_KEY`, and the demo data cannot
/// be written; with it, it starts with a generated key.
#[cfg(feature = "lab")]
#[actix_web::test]
async fn production_defaults_refuse_a_missing_session_key_and_demo_data() {
    let app = TestApp::spawn().await;
    let run = |args: &[&str], demo: bool| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_haita"));
        command
            .args(args)
            .env("DATABASE_URL", &app.db.url)
            .env("BIND", "127.0.0.1:0")
            .env_remove("SESSION_KEY");
        if demo {
            command.env("DEMO_MODE", "1");
        } else {
            command.env_remove("DEMO_MODE");
        }
        command
    };
    let refused = run(&["serve"], false).output().expect("haita serve");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("SESSION_KEY is required unless DEMO_MODE=1"), "{stderr}");

    for args in [&["seed"][..], &["serve", "--seed"], &["demo", "race", "--strategy", "no-lock"]] {
        let refused = run(args, false).env("SESSION_KEY", "k".repeat(64)).output().expect("haita");
        assert!(!refused.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains("runs only with DEMO_MODE=1"), "{args:?}: {stderr}");
    }
    let users: i64 = {
        use diesel::prelude::*;
        haita::schema::users::table.count().get_result(&mut app.db.raw_connection()).expect("count")
    };
    assert_eq!(users, 0, "no demo user was written");

    // In DEMO_MODE it serves with a generated key (stopped as soon as it answers).
    let mut demo = run(&["serve"], true)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let started = std::time::Instant::now();
    let mut log = String::new();
    let stderr = demo.stderr.take().expect("stderr");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    while started.elapsed() < std::time::Duration::from_secs(30) {
        let Some(Ok(line)) = lines.next() else { break };
        log.push_str(&line);
        if line.contains("serving on") {
            break;
        }
    }
    let _ = demo.kill();
    let _ = demo.wait();
    assert!(
        log.contains("SESSION_KEY is not set: using a random key") && log.contains("serving on"),
        "{log}"
    );
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
    assert_eq!(health["status"], "ok");
    let ready: Value = client.get("/ready").await.json().await.expect("json");
    assert_eq!((&ready["status"], &ready["database"]), (&"ready".into(), &"ok".into()));
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
    // The lab's endpoints are documented exactly where they are served: not here (no DEMO_MODE;
    // `demo_accounts_are_listed...` checks an instance in DEMO_MODE).
    let lab = [
        ("/api/v1/demo/races", "post"),
        ("/api/v1/demo/races/{id}", "get"),
        ("/api/v1/demo/races/live", "get"),
        ("/api/v1/demo/bookings", "post"),
    ];
    for (path, method) in expected {
        assert!(document["paths"][path][method].is_object(), "{method} {path} is not documented");
    }
    for (path, method) in lab {
        assert!(
            !document["paths"][path][method].is_object(),
            "{method} {path} is not served outside DEMO_MODE, so not documented"
        );
    }
    let demo_tag = document["tags"].as_array().expect("tags").iter().any(|t| t["name"] == "demo");
    assert!(!demo_tag, "the demo tag comes with the demo");
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

/// 48 clients from one address guess one account's password in a loop, all at once. The
/// throttle counts each attempt before its password is checked, so past a handful the pair is
/// answered 429 (with Retry-After): only those few reach the password hasher; a bystander's
/// product list is served meanwhile.
#[actix_web::test]
async fn a_password_guessing_storm_is_throttled_before_any_hashing() {
    let app = TestApp::spawn_instances(1, |c| {
        c.login_failures = std::num::NonZeroU32::new(5).expect("non-zero");
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

/// Sessions are rows: a cookie copied before logout, a demoted admin, a user logged out
/// everywhere or deleted — each is refused on the very next request, on either instance.
#[actix_web::test]
async fn sessions_end_on_the_next_request_after_logout_demotion_or_deletion() {
    let app = TestApp::spawn_instances(2, |_| {}).await;
    let dana = app.user("dana", Role::Admin);
    // A client without a cookie jar: the test holds each session cookie itself, as a thief would.
    let raw = reqwest::Client::new();
    let log_in = || async {
        let response = raw
            .post(format!("{}/api/v1/session", app.addresses[0]))
            .json(&json!({"username": dana.username, "password": PASSWORD}))
            .send()
            .await
            .expect("login");
        assert_eq!(response.status(), 200);
        let cookie = response.headers()["set-cookie"].to_str().expect("cookie").to_string();
        cookie.split(';').next().expect("name=value").to_string()
    };
    let status = |cookie: String, instance: usize, method: reqwest::Method, path: &'static str| {
        let (raw, base) = (raw.clone(), app.addresses[instance].clone());
        async move {
            raw.request(method, format!("{base}{path}"))
                .header("cookie", cookie)
                .header("content-type", "application/json")
                .send()
                .await
                .expect("request")
                .status()
                .as_u16()
        }
    };
    let admin_screen = |cookie: &str, instance| {
        status(cookie.to_string(), instance, reqwest::Method::GET, "/api/v1/admin/locks")
    };
    let set_role = |role: &str| {
        haita::db::cached_sql::<diesel::sql_types::Untyped>(&format!(
            "UPDATE users SET role = '{role}' WHERE id = {}",
            dana.id
        ))
        .execute(&mut app.db.raw_connection())
        .expect("set role");
    };

    let (laptop, phone) = (log_in().await, log_in().await);
    assert_eq!((admin_screen(&laptop, 0).await, admin_screen(&phone, 1).await), (200, 200));

    set_role("customer");
    assert_eq!(
        (admin_screen(&laptop, 1).await, admin_screen(&phone, 0).await),
        (403, 403),
        "demoted at once"
    );
    set_role("admin");

    let out = status(laptop.clone(), 0, reqwest::Method::DELETE, "/api/v1/session").await;
    assert_eq!(out, 204);
    assert_eq!(admin_screen(&laptop, 1).await, 401, "the laptop's cookie, replayed after logout");
    assert_eq!(admin_screen(&phone, 1).await, 200, "the phone's session is another one");

    let tablet = log_in().await;
    let out = status(phone.clone(), 1, reqwest::Method::DELETE, "/api/v1/session?everywhere=true").await;
    assert_eq!(out, 204);
    assert_eq!(
        (admin_screen(&phone, 0).await, admin_screen(&tablet, 1).await),
        (401, 401),
        "logged out everywhere"
    );

    let last = log_in().await;
    assert_eq!(admin_screen(&last, 0).await, 200);
    haita::db::cached_sql::<diesel::sql_types::Untyped>(&format!("DELETE FROM users WHERE id = {}", dana.id))
        .execute(&mut app.db.raw_connection())
        .expect("delete user");
    assert_eq!(admin_screen(&last, 1).await, 401, "a deleted user's session ends with them");
}

/// Session checks of requests that arrive together share one query (`SessionChecks`): under
/// that batching each request still gets its own user, and an ended session is refused, however
/// the requests are grouped.
#[actix_web::test]
async fn sessions_checked_together_each_get_their_own_answer() {
    let app = TestApp::spawn().await;
    let ended = |i: usize| i.is_multiple_of(4);
    let mut clients = Vec::new();
    let mut ended_ids = Vec::new();
    for i in 0..48 {
        let user = app.user(&format!("user{i:02}"), Role::Customer);
        let client = app.client(0);
        client.login(&user).await;
        if ended(i) {
            ended_ids.push(user.id.to_string());
        }
        clients.push((user.username, client));
    }
    // Every fourth one is logged out elsewhere: the cookie is still sent, its row is gone.
    haita::db::cached_sql::<diesel::sql_types::Untyped>(&format!(
        "DELETE FROM user_sessions WHERE user_id IN ({})",
        ended_ids.join(", ")
    ))
    .execute(&mut app.db.raw_connection())
    .expect("end sessions");
    for round in 0..3 {
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(clients.len()));
        let answers = futures::future::join_all(clients.iter().map(|(_, client)| {
            let barrier = barrier.clone();
            async move {
                barrier.wait().await;
                let response = client.get("/api/v1/session").await;
                let status = response.status().as_u16();
                let body: Value = response.json().await.unwrap_or(Value::Null);
                (status, body["user"]["username"].as_str().map(String::from))
            }
        }))
        .await;
        for (i, ((username, _), (status, seen))) in clients.iter().zip(answers).enumerate() {
            if ended(i) {
                assert_eq!(status, 401, "round {round}: {username} logged out");
            } else {
                assert_eq!((status, seen.as_deref()), (200, Some(username.as_str())), "round {round}");
            }
        }
    }
}

/// A cookie replayed after its logout is refused before the booking asks for any lock: before, it
/// was refused only in the day's read, under the day's lock, so a stale cookie could keep taking
/// the lock everyone booking that day needs. Counted from the app's own lock metrics, with and
/// without an idempotency key (the coalesced and the one-at-a-time path), for a day and a stay.
#[actix_web::test]
async fn a_cookie_replayed_after_logout_takes_no_lock_before_it_is_refused() {
    let app = TestApp::spawn().await;
    let erin = app.user("erin", Role::Customer);
    let room = app.resource("Stale room", 3);
    let raw = reqwest::Client::new();
    let logged_in = raw
        .post(format!("{}/api/v1/session", app.address()))
        .json(&json!({"username": erin.username, "password": PASSWORD}))
        .send()
        .await
        .expect("login");
    let cookie = logged_in.headers()["set-cookie"]
        .to_str()
        .expect("cookie")
        .split(';')
        .next()
        .expect("name=value")
        .to_string();
    let out = raw
        .delete(format!("{}/api/v1/session", app.address()))
        .header("cookie", &cookie)
        .header("content-type", "application/json")
        .send()
        .await
        .expect("logout");
    assert_eq!(out.status(), 204);

    let metrics = crate::common::Client::new(app.address());
    let booking_locks = || async {
        let text = metrics.metrics().await;
        text.lines()
            .filter(|l| l.contains("named_lock_acquisitions_total") && l.contains("scope=\"book\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let before = booking_locks().await;
    let day = crate::common::future_day();
    let later = day + chrono::Days::new(2);
    for (key, body) in [
        (None, json!({"resource_id": room, "date": day.to_string()})),
        (Some("stale-1"), json!({"resource_id": room, "date": day.to_string()})),
        (None, json!({"resource_id": room, "from": day.to_string(), "to": later.to_string()})),
    ] {
        let mut request =
            raw.post(format!("{}/api/v1/reservations", app.address())).header("cookie", &cookie).json(&body);
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        let refused = request.send().await.expect("book");
        assert_eq!(refused.status(), 401, "{body}");
    }
    assert_eq!(booking_locks().await, before, "a day's lock was asked for with a stale cookie");
    assert_eq!(crate::common::invariants::confirmed_on(&app.db, room, day), 0);
}

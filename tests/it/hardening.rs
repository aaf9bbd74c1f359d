//! The smaller holes of the security read (issue 30), each closed and kept closed: API writes
//! reached through a percent-encoded path, a logout the database never saw, `/metrics` for
//! anyone, pages kept by caches, and the production defaults (docs/security.md).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use haita::auth::Role;
use reqwest::Method;
use serde_json::Value;

use crate::common::own_server::OwnServer;
use crate::common::{TestApp, TestDb, poll};

fn header<'a>(response: &'a reqwest::Response, name: &str) -> &'a str {
    response.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

fn count(db: &TestDb, table: &str) -> i64 {
    use diesel::prelude::*;
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    haita::db::cached_sql::<diesel::sql_types::Untyped>(&format!("SELECT COUNT(*) AS n FROM {table}"))
        .get_result::<Count>(&mut db.raw_connection())
        .expect("count")
        .n
}

/// The router decodes `%61` to `a` before it matches, so `/%61pi/v1/…` is the API: a write sent
/// there as text/plain (what another site can make a browser send) is refused like one sent to
/// `/api/v1/…`, and takes no edit lock.
#[actix_web::test]
async fn an_api_write_through_a_percent_encoded_path_must_be_json_too() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Encoded hall", 1);
    let staff = app.client(0);
    staff.login(&app.user("encoded-staff", Role::Staff)).await;
    for path in [
        format!("/%61pi/v1/resources/{resource}/edit-lock"),
        format!("/api/v1/%72esources/{resource}/edit-lock"),
        format!("/%61%70%69/v1/resources/{resource}/edit-lock"),
    ] {
        let response = staff
            .http
            .request(Method::POST, staff.url(&path))
            .header("content-type", "text/plain")
            .body("{}")
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), 415, "POST {path} as text/plain");
    }
    assert_eq!(count(&app.db, "edit_locks"), 0, "no edit lock was taken");
    // The same request marked JSON is the API's, as ever.
    let json = staff.send(Method::POST, &format!("/%61pi/v1/resources/{resource}/edit-lock")).await;
    assert_eq!(json.status(), 201);
}

/// A logout the database cannot record is not reported as done: 503 with Retry-After and a
/// sentence saying the session is still open, and the cookie kept, so the person logs out again
/// once the database is back, and then the session's row is gone for every copy of the cookie.
#[actix_web::test]
async fn logout_while_the_database_is_down_says_so_and_ends_the_session_once_it_is_back() {
    let mut server = OwnServer::start();
    let db = TestDb::on_server(&server.url());
    let app = TestApp::spawn_on(db, 1, |_| {}).await;
    let user = app.user("leaving", Role::Customer);
    let (api, browser) = (app.client(0), app.client(0));
    api.login(&user).await;
    browser.login(&user).await;
    let token = browser.csrf_token("/").await;
    assert_eq!(count(&app.db, "user_sessions"), 2);

    let server = actix_web::rt::task::spawn_blocking(move || {
        server.kill();
        server
    })
    .await
    .expect("kill");
    let refused = api.send(Method::DELETE, "/api/v1/session").await;
    assert_eq!(refused.status(), 503, "a logout the database did not record");
    assert!(!header(&refused, "retry-after").is_empty(), "with Retry-After");
    let body: Value = refused.json().await.expect("json");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.contains("still logged in"), "a sentence saying so: {body}");
    let form = browser.post_form("/logout", &[("csrf_token", &token)]).await;
    assert_eq!(form.status(), 503, "the logout button, too");
    assert!(form.text().await.expect("page").contains("still logged in"));

    let mut server = server;
    let server = actix_web::rt::task::spawn_blocking(move || {
        server.run();
        server
    })
    .await
    .expect("restart");
    poll::until_async("the kept session to be seen again", Duration::from_secs(60), async || {
        api.get("/api/v1/session").await.status() == 200
    })
    .await;
    assert_eq!(api.send(Method::DELETE, "/api/v1/session").await.status(), 204);
    assert_eq!(api.get("/api/v1/session").await.status(), 401);
    assert_eq!(browser.post_form("/logout", &[("csrf_token", &token)]).await.status(), 303);
    assert_eq!(count(&app.db, "user_sessions"), 0, "both sessions' rows are gone");
    drop(server);
}

/// Outside DEMO_MODE and without METRICS_TOKEN, `/metrics` is not served: pool saturation and
/// lock waits help time an attack. The answer says how to switch it on.
#[actix_web::test]
async fn metrics_are_not_public_outside_demo_mode() {
    let app = TestApp::spawn_instances(1, |c| c.metrics_token = None).await;
    let response = app.client(0).get("/metrics").await;
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.expect("json");
    assert!(body["message"].as_str().is_some_and(|m| m.contains("METRICS_TOKEN")), "{body}");
    let demo = TestApp::spawn_instances(1, |c| {
        c.demo_mode = true;
        c.metrics_token = None;
    })
    .await;
    let response = demo.client(0).get("/metrics").await;
    assert_eq!(response.status(), 200, "a local demo shows them to anyone");
}

/// With METRICS_TOKEN, `/metrics` answers only `Authorization: Bearer` with that token (401
/// with `WWW-Authenticate` otherwise), in DEMO_MODE too.
#[actix_web::test]
async fn metrics_answer_only_the_bearer_token() {
    for demo_mode in [false, true] {
        let app = TestApp::spawn_instances(1, |c| c.demo_mode = demo_mode).await;
        let client = app.client(0);
        for token in [None, Some("wrong-token-wrong-token-wrong"), Some("")] {
            let mut request = client.http.get(client.url("/metrics"));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let response = request.send().await.expect("GET /metrics");
            assert_eq!(response.status(), 401, "demo {demo_mode}, token {token:?}");
            assert_eq!(header(&response, "www-authenticate"), "Bearer realm=\"metrics\"");
            assert_eq!(crate::common::error_code(response).await, "metrics_token");
        }
        assert!(client.metrics().await.contains("haita_pool_connections"), "served with the token");
    }
}

/// Every answer that may depend on the session says `Cache-Control: no-store`, so no browser
/// or proxy cache keeps a logged-in page (or a CSRF token) for the next person at the machine;
/// the static assets keep their own caching.
#[actix_web::test]
async fn answers_for_a_session_are_never_stored_by_caches() {
    let app = TestApp::spawn().await;
    app.resource("Cached room", 1);
    let client = app.client(0);
    client.login(&app.user("cached", Role::Staff)).await;
    for path in ["/", "/resources", "/api/v1/session", "/api/v1/resources", "/login", "/no-such-page"] {
        let response = client.get(path).await;
        assert_eq!(header(&response, "cache-control"), "no-store", "{path} ({})", response.status());
    }
    let refused = client.send(Method::POST, "/api/v1/resources/999999/edit-lock").await;
    assert_eq!(header(&refused, "cache-control"), "no-store", "an error answer too");
    let style = client.get("/static/style.css").await;
    assert_eq!(header(&style, "cache-control"), "public, max-age=3600");
}

/// `haita serve` with DEMO_MODE=1 says loudly, before it serves, that it is a demo: published
/// passwords, a generated session key, plain HTTP.
#[actix_web::test]
async fn serve_in_demo_mode_warns_loudly_at_start() {
    let db = TestDb::new();
    let mut child = Command::new(env!("CARGO_BIN_EXE_haita"))
        .arg("serve")
        .env("DATABASE_URL", &db.url)
        .env("DEMO_MODE", "1")
        .env("BIND", "127.0.0.1:0")
        .env("RUST_LOG", "info")
        .env_remove("SESSION_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("haita serve");
    let stderr = child.stderr.take().expect("stderr");
    let (lines, read) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut before_serving = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match read.recv_timeout(left) {
            Ok(line) if line.contains("serving on") => break,
            Ok(line) => before_serving.push(line),
            Err(e) => {
                let _ = child.kill();
                panic!("waited for `serving on` in vain ({e}); the log: {before_serving:#?}");
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let warned: Vec<&String> =
        before_serving.iter().filter(|l| l.contains("WARN") && l.contains("DEMO_MODE")).collect();
    assert!(warned.len() >= 3, "several lines of warning naming DEMO_MODE: {before_serving:#?}");
    let said = before_serving.join("\n");
    assert!(said.contains("not for production") && said.contains("published"), "{said}");
}

/// Outside DEMO_MODE, `haita serve` without DATABASE_URL stops at once with a sentence naming
/// it, rather than trying the local server's `root` without a password.
#[test]
fn serve_without_database_url_outside_demo_mode_refuses_naming_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_haita"))
        .arg("serve")
        .env_remove("DATABASE_URL")
        .env_remove("DEMO_MODE")
        .env("SESSION_KEY", "k".repeat(64))
        .env("BIND", "127.0.0.1:0")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("haita serve");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "refused: {said}");
    assert!(said.contains("DATABASE_URL is not set") && said.contains("DEMO_MODE"), "{said}");
}

/// The compose file's production profile: no DEMO_MODE, no `--seed`, and every secret from the
/// environment, with compose refusing to start when one is missing (`${VAR:?message}`).
#[test]
fn the_production_compose_profile_has_no_demo_and_takes_its_secrets_from_the_environment() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docker-compose.yml"))
        .expect("docker-compose.yml");
    let compose: serde_yaml::Value = serde_yaml::from_str(&text).expect("YAML");
    let services = compose["services"].as_mapping().expect("services");
    let production: Vec<_> = services
        .iter()
        .filter(|(_, s)| {
            s["profiles"].as_sequence().is_some_and(|p| p.iter().any(|p| p.as_str() == Some("production")))
        })
        .collect();
    assert!(!production.is_empty(), "a service in the profile `production`");
    for (name, service) in production {
        let command: Vec<&str> =
            service["command"].as_sequence().expect("command").iter().filter_map(|a| a.as_str()).collect();
        assert!(command.contains(&"serve") && !command.contains(&"--seed"), "{name:?}: {command:?}");
        let environment = service["environment"].as_mapping().expect("environment");
        assert!(
            environment.get("DEMO_MODE").is_none(),
            "{name:?}: no DEMO_MODE in production, not even switched off"
        );
        for secret in ["DATABASE_URL", "SESSION_KEY", "METRICS_TOKEN"] {
            let value = environment.get(secret).and_then(|v| v.as_str()).unwrap_or_default();
            assert!(
                value.starts_with(&format!("${{{secret}:?")) && value.len() > secret.len() + 12,
                "{name:?}: {secret} must come from the environment, with a message if it is missing: {value:?}"
            );
        }
    }
}

/// The production image is the product alone: the Dockerfile builds no feature unless asked,
/// and the profile `production` does not ask, while the demo's services do (the race demo and
/// `serve --seed` are the lab's).
#[test]
fn the_production_image_and_profile_build_no_lab() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dockerfile = std::fs::read_to_string(format!("{root}/Dockerfile")).expect("Dockerfile");
    let default = dockerfile
        .lines()
        .find_map(|line| line.trim().strip_prefix("ARG FEATURES="))
        .expect("the Dockerfile declares its FEATURES argument");
    assert_eq!(default, "\"\"", "the image builds no feature by default");
    assert!(
        dockerfile.lines().filter(|l| l.contains("cargo build")).all(|l| l.contains("\"$FEATURES\"")),
        "every build takes its features from FEATURES alone"
    );
    let text = std::fs::read_to_string(format!("{root}/docker-compose.yml")).expect("docker-compose.yml");
    let compose: serde_yaml::Value = serde_yaml::from_str(&text).expect("YAML");
    let services = compose["services"].as_mapping().expect("services");
    let mut demo_with_lab = 0;
    for (name, service) in services {
        let Some(build) = service.get("build") else { continue };
        let features = build["args"]["FEATURES"].as_str().unwrap_or_default();
        let in_production = service["profiles"]
            .as_sequence()
            .is_some_and(|p| p.iter().any(|p| p.as_str() == Some("production")));
        let seeds =
            service["command"].as_sequence().is_some_and(|c| c.iter().any(|a| a.as_str() == Some("--seed")));
        if in_production {
            assert!(!features.contains("lab"), "{name:?} builds the lab into production: {build:?}");
        } else if seeds {
            assert_eq!(features, "lab", "{name:?} seeds demo data, the lab's: {build:?}");
            demo_with_lab += 1;
        }
    }
    assert!(demo_with_lab >= 2, "the demo services build the lab");
}

/// A body announced as 100 bytes and sent a byte at a time: before the deadline it kept its
/// connection open as long as the client liked (still open at 81 s, and 320 such connections
/// left `/health` unanswered). Now the body has `REQUEST_BODY_TIMEOUT_SECS` from the end of the
/// headers: then the answer is 408 `slow_body` and the server closes the connection, while the
/// client is still trickling.
#[actix_web::test]
async fn a_body_sent_a_byte_at_a_time_is_answered_408_and_its_connection_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = TestApp::spawn_instances(1, |c| c.request_body_timeout = Duration::from_secs(1)).await;
    let host = app.address().trim_start_matches("http://").to_string();
    let stream = tokio::net::TcpStream::connect(&host).await.expect("connect");
    let (mut from_server, mut to_server) = stream.into_split();
    let head = format!(
        "POST /api/v1/session HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Accept: application/json\r\nContent-Length: 100\r\n\r\n{{"
    );
    to_server.write_all(head.as_bytes()).await.expect("the headers");
    // The slow client: a byte every 200 ms, never the whole body (90 of the 99 bytes left), then
    // the connection held open, until the server stops listening or the test's own bound of
    // 30 s, far past the deadline.
    let trickle = actix_web::rt::spawn(async move {
        let mut every = actix_web::rt::time::interval(Duration::from_millis(200));
        for _ in 0..90 {
            every.tick().await;
            if to_server.write_all(b" ").await.is_err() {
                return;
            }
        }
        std::future::pending::<()>().await;
    });
    let mut answer = Vec::new();
    let read =
        actix_web::rt::time::timeout(Duration::from_secs(30), from_server.read_to_end(&mut answer)).await;
    trickle.abort();
    assert!(read.is_ok(), "the connection was still open after 30 s of a slow body");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("slow_body"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
}

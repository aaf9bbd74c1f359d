//! Malformed requests get a clear 4xx with a readable message and change nothing.

use diesel::prelude::*;
use diesel::sql_types::Text;
use haita::auth::Role;
use reqwest::Method;
use serde_json::Value;

use crate::common::{Client, TestApp, future_day};

enum Body {
    None,
    Json(String),
    Raw(&'static str, String),
    /// A form; the real CSRF token is added unless `csrf` says otherwise.
    Form {
        csrf: Csrf,
        fields: Vec<(&'static str, String)>,
    },
}

enum Csrf {
    Real,
    Missing,
    Wrong,
}

struct Case {
    what: &'static str,
    method: Method,
    path: String,
    body: Body,
    logged_in: bool,
    status: u16,
    /// The JSON error code; `None` for HTML answers (checked for a readable page instead).
    code: Option<&'static str>,
}

fn json(what: &'static str, body: &str, status: u16, code: &'static str) -> Case {
    Case {
        what,
        method: Method::POST,
        path: "/api/v1/reservations".into(),
        body: Body::Json(body.into()),
        logged_in: true,
        status,
        code: Some(code),
    }
}

/// Every row that a booking request could touch, as one string. (`CONCAT_WS` is text on both
/// engines and skips a NULL, so a cancellation shows as one more field.)
fn snapshot(app: &TestApp) -> String {
    let mut conn = app.db.raw_connection();
    [
        "SELECT CONCAT_WS(',', id, resource_id, user_id, day, check_out, status, cancelled_at) FROM reservations ORDER BY id",
        "SELECT CONCAT_WS(',', id, capacity, version) FROM resources ORDER BY id",
        "SELECT CONCAT_WS(',', COUNT(*)) FROM users",
    ]
    .map(|sql| haita::db::cached_sql::<Text>(sql).load::<String>(&mut conn).expect("snapshot").join(";"))
    .join("|")
}

#[actix_web::test]
async fn malformed_requests_get_a_clear_4xx_and_change_nothing() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Room", 2);
    let user = app.user("mallory", Role::Customer);
    let day = future_day();
    let today = haita::bookings::service::today();
    let yesterday = today.pred_opt().expect("date");
    let too_far = today + chrono::Days::new(400);
    let booking = |rid: &str, date: &str| format!(r#"{{"resource_id": {rid}, "date": "{date}"}}"#);

    let cases = vec![
        json("impossible date", &booking(&resource.to_string(), "2027-02-30"), 422, "invalid_date"),
        json("a word for a date", &booking(&resource.to_string(), "tomorrow"), 422, "invalid_date"),
        json(
            "date with a time",
            &booking(&resource.to_string(), &format!("{day}T10:00:00")),
            422,
            "invalid_date",
        ),
        json("date in the past", &booking(&resource.to_string(), &yesterday.to_string()), 422, "past_date"),
        json(
            "date beyond the horizon",
            &booking(&resource.to_string(), &too_far.to_string()),
            422,
            "too_far_ahead",
        ),
        json("negative resource id", &booking("-1", &day.to_string()), 422, "invalid_id"),
        json("zero resource id", &booking("0", &day.to_string()), 422, "invalid_id"),
        json("unknown resource", &booking("999999", &day.to_string()), 422, "unknown_resource"),
        json("resource id as a string", &booking("\"1\"", &day.to_string()), 400, "malformed_body"),
        json("resource id too large", &booking("1e30", &day.to_string()), 400, "malformed_body"),
        json(
            "date as a number",
            &format!(r#"{{"resource_id": {resource}, "date": 20261224}}"#),
            400,
            "malformed_body",
        ),
        json("neither a date nor a stay", &format!(r#"{{"resource_id": {resource}}}"#), 422, "invalid_stay"),
        json(
            "a stay without its check-out",
            &format!(r#"{{"resource_id": {resource}, "from": "{day}"}}"#),
            422,
            "invalid_stay",
        ),
        json(
            "a stay that ends on its check-in day",
            &format!(r#"{{"resource_id": {resource}, "from": "{day}", "to": "{day}"}}"#),
            422,
            "invalid_stay",
        ),
        json(
            "a stay of fifteen nights",
            &format!(
                r#"{{"resource_id": {resource}, "from": "{day}", "to": "{}"}}"#,
                day + chrono::Days::new(15)
            ),
            422,
            "invalid_stay",
        ),
        json(
            "a date and a stay together",
            &format!(
                r#"{{"resource_id": {resource}, "date": "{day}", "from": "{day}", "to": "{}"}}"#,
                day + chrono::Days::new(2)
            ),
            422,
            "invalid_stay",
        ),
        json(
            "a stay from the past",
            &format!(
                r#"{{"resource_id": {resource}, "from": "{yesterday}", "to": "{}"}}"#,
                today + chrono::Days::new(2)
            ),
            422,
            "past_date",
        ),
        json(
            "a stay beyond the horizon",
            &format!(
                r#"{{"resource_id": {resource}, "from": "{too_far}", "to": "{}"}}"#,
                too_far + chrono::Days::new(2)
            ),
            422,
            "too_far_ahead",
        ),
        json(
            "a check-out as a number",
            &format!(r#"{{"resource_id": {resource}, "from": "{day}", "to": 20261224}}"#),
            400,
            "malformed_body",
        ),
        json(
            "unknown field",
            &format!(r#"{{"resource_id": {resource}, "date": "{day}", "capacity": 99}}"#),
            400,
            "malformed_body",
        ),
        json("not JSON", "{{{", 400, "malformed_body"),
        json("JSON null", "null", 400, "malformed_body"),
        json(
            "huge body",
            &format!(r#"{{"resource_id": {resource}, "date": "{}"}}"#, "9".repeat(100_000)),
            413,
            "too_large",
        ),
        Case {
            body: Body::Raw("text/plain", booking(&resource.to_string(), &day.to_string())),
            ..json("wrong content type", "", 415, "unsupported_media_type")
        },
        Case {
            logged_in: false,
            ..json("not logged in", &booking(&resource.to_string(), &day.to_string()), 401, "not_logged_in")
        },
        Case {
            what: "cancel with a non-numeric id",
            method: Method::DELETE,
            path: "/api/v1/reservations/abc".into(),
            body: Body::None,
            logged_in: true,
            status: 404,
            code: Some("not_found"),
        },
        Case {
            what: "cancel with a negative id",
            method: Method::DELETE,
            path: "/api/v1/reservations/-5".into(),
            body: Body::None,
            logged_in: true,
            status: 404,
            code: Some("not_found"),
        },
        Case {
            what: "availability for zero days",
            method: Method::GET,
            path: format!("/api/v1/resources/{resource}/availability?days=0"),
            body: Body::None,
            logged_in: false,
            status: 422,
            code: Some("invalid_range"),
        },
        Case {
            what: "availability for a thousand days",
            method: Method::GET,
            path: format!("/api/v1/resources/{resource}/availability?days=1000"),
            body: Body::None,
            logged_in: false,
            status: 422,
            code: Some("invalid_range"),
        },
        Case {
            what: "availability from a non-date",
            method: Method::GET,
            path: format!("/api/v1/resources/{resource}/availability?from=soon"),
            body: Body::None,
            logged_in: false,
            status: 422,
            code: Some("invalid_date"),
        },
        Case {
            what: "availability with a non-numeric day count",
            method: Method::GET,
            path: format!("/api/v1/resources/{resource}/availability?days=many"),
            body: Body::None,
            logged_in: false,
            status: 400,
            code: Some("bad_query"),
        },
        Case {
            what: "availability of an unknown resource",
            method: Method::GET,
            path: "/api/v1/resources/424242/availability".into(),
            body: Body::None,
            logged_in: false,
            status: 404,
            code: Some("not_found"),
        },
        Case {
            what: "form post without a CSRF token",
            method: Method::POST,
            path: format!("/resources/{resource}/bookings"),
            body: Body::Form { csrf: Csrf::Missing, fields: vec![("date", day.to_string())] },
            logged_in: true,
            status: 403,
            code: None,
        },
        Case {
            what: "form post with a forged CSRF token",
            method: Method::POST,
            path: format!("/resources/{resource}/bookings"),
            body: Body::Form { csrf: Csrf::Wrong, fields: vec![("date", day.to_string())] },
            logged_in: true,
            status: 403,
            code: None,
        },
        Case {
            what: "form post with a bad date",
            method: Method::POST,
            path: format!("/resources/{resource}/bookings"),
            body: Body::Form { csrf: Csrf::Real, fields: vec![("date", "31/12/2026".into())] },
            logged_in: true,
            status: 422,
            code: None,
        },
        Case {
            what: "form post with a missing field",
            method: Method::POST,
            path: format!("/resources/{resource}/bookings"),
            body: Body::Form { csrf: Csrf::Real, fields: vec![] },
            logged_in: true,
            status: 400,
            code: None,
        },
        Case {
            what: "stay form with a check-out before its check-in",
            method: Method::POST,
            path: format!("/resources/{resource}/stays"),
            body: Body::Form {
                csrf: Csrf::Real,
                fields: vec![("check_in", day.to_string()), ("check_out", yesterday.to_string())],
            },
            logged_in: true,
            status: 422,
            code: None,
        },
        Case {
            what: "stay form without its check-out",
            method: Method::POST,
            path: format!("/resources/{resource}/stays"),
            body: Body::Form { csrf: Csrf::Real, fields: vec![("check_in", day.to_string())] },
            logged_in: true,
            status: 400,
            code: None,
        },
        Case {
            what: "a stay picked that is no stay",
            method: Method::GET,
            path: format!("/resources/{resource}?check_in={day}&check_out=someday"),
            body: Body::None,
            logged_in: false,
            status: 422,
            code: None,
        },
        Case {
            what: "form post for an unknown resource",
            method: Method::POST,
            path: "/resources/777777/bookings".into(),
            body: Body::Form { csrf: Csrf::Real, fields: vec![("date", day.to_string())] },
            logged_in: true,
            status: 404,
            code: None,
        },
        Case {
            what: "form post while logged out",
            method: Method::POST,
            path: format!("/resources/{resource}/bookings"),
            body: Body::Form { csrf: Csrf::Real, fields: vec![("date", day.to_string())] },
            logged_in: false,
            status: 401,
            code: None,
        },
        Case {
            what: "JSON sent to a form endpoint",
            method: Method::POST,
            path: format!("/resources/{resource}/bookings"),
            body: Body::Raw("application/json", booking(&resource.to_string(), &day.to_string())),
            logged_in: true,
            status: 415,
            code: None,
        },
        Case {
            what: "a page from a year chrono reads but cannot page through (it used to panic)",
            method: Method::GET,
            path: format!("/resources/{resource}?from=%2B262142-12-18"),
            body: Body::None,
            logged_in: false,
            status: 422,
            code: None,
        },
        Case {
            what: "a page from a negative year (it used to answer 500)",
            method: Method::GET,
            path: format!("/resources/{resource}?from=%2D0001-01-01"),
            body: Body::None,
            logged_in: false,
            status: 422,
            code: None,
        },
        Case {
            what: "availability from a six-digit year (it used to answer 500)",
            method: Method::GET,
            path: format!("/api/v1/resources/{resource}/availability?from=%2B262142-12-25"),
            body: Body::None,
            logged_in: false,
            status: 422,
            code: Some("invalid_date"),
        },
        Case {
            what: "availability from past the end of MySQL's dates",
            method: Method::GET,
            path: format!("/api/v1/resources/{resource}/availability?from=9999-12-31"),
            body: Body::None,
            logged_in: false,
            status: 422,
            code: Some("invalid_date"),
        },
        json(
            "a booking for a signed year",
            &booking(&resource.to_string(), "+2026-12-24"),
            422,
            "invalid_date",
        ),
        Case {
            what: "a page for a non-numeric resource",
            method: Method::GET,
            path: "/resources/abc".into(),
            body: Body::None,
            logged_in: false,
            status: 404,
            code: None,
        },
    ];
    assert!(cases.len() >= 15);

    // Something to protect: one real booking that must survive every bad request untouched.
    let owner = app.client(0);
    owner.login(&user).await;
    assert_eq!(owner.book(resource, day).await.status(), 201);
    let before = snapshot(&app);

    for case in cases {
        let client = Client::new(app.address());
        if case.logged_in {
            client.login(&user).await;
        }
        let mut request = client.http.request(case.method.clone(), client.url(&case.path));
        request = match case.body {
            // As a well-behaved API client sends every request that changes something.
            Body::None if case.method != Method::GET => request.header("content-type", "application/json"),
            Body::None => request,
            Body::Json(text) => request.header("content-type", "application/json").body(text),
            Body::Raw(content_type, text) => request.header("content-type", content_type).body(text),
            Body::Form { csrf, mut fields } => {
                let token = match csrf {
                    Csrf::Real => Some(client.csrf_token("/login").await),
                    Csrf::Wrong => Some("forged-token".to_string()),
                    Csrf::Missing => None,
                };
                if let Some(token) = token {
                    fields.push(("csrf_token", token));
                }
                request.form(&fields)
            }
        };
        let response = request.send().await.expect("request");
        let status = response.status().as_u16();
        let content_type =
            response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let text = response.text().await.expect("body");
        assert_eq!(status, case.status, "{}: got {status} {text}", case.what);
        match case.code {
            Some(code) => {
                let body: Value =
                    serde_json::from_str(&text).unwrap_or_else(|_| panic!("{}: not JSON: {text}", case.what));
                assert_eq!(body["error"], code, "{}: {body}", case.what);
                assert!(
                    body["message"].as_str().is_some_and(|m| m.len() > 10),
                    "{}: no readable message",
                    case.what
                );
            }
            None => {
                assert!(
                    content_type.starts_with("text/html"),
                    "{}: expected an HTML page, got {content_type}",
                    case.what
                );
                // A page of its own, or the form's page again with the refusal in place: either
                // way an alert a person (and a screen reader) is told of.
                assert!(text.contains("role=\"alert\""), "{}: page without a message: {text}", case.what);
            }
        }
        assert_eq!(snapshot(&app), before, "{}: the database changed", case.what);
    }
}

/// Pages, API answers and errors alike carry a strict Content-Security-Policy; HSTS only when
/// the app says it is served over HTTPS.
#[actix_web::test]
async fn every_answer_carries_the_security_headers_and_hsts_only_over_https() {
    let plain = TestApp::spawn().await;
    for path in ["/", "/api/v1/resources", "/no-such-page", "/api/v1/session"] {
        let response = plain.client(0).get(path).await;
        let csp =
            response.headers().get("content-security-policy").and_then(|v| v.to_str().ok()).unwrap_or("");
        assert!(
            csp.starts_with("default-src 'self'") && csp.contains("frame-ancestors 'none'"),
            "{path}: {csp:?}"
        );
        assert!(response.headers().get("strict-transport-security").is_none(), "{path}: no HSTS over HTTP");
    }
    let https = TestApp::spawn_instances(1, |c| c.cookie_secure = true).await;
    let response = https.client(0).get("/").await;
    let hsts =
        response.headers().get("strict-transport-security").and_then(|v| v.to_str().ok()).unwrap_or("");
    assert!(hsts.starts_with("max-age=31536000"), "{hsts:?}");
}

/// Every documented operation that changes something refuses a request that is not marked
/// JSON — no content type, text/plain, a form — with 415 before any handler runs, even for a
/// logged-in admin: such requests are what another site can make a browser send. Nothing is
/// written meanwhile (an edit lock taken by the body-less POST was the hole).
#[actix_web::test]
async fn state_changing_api_requests_must_be_json_even_without_a_body() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Hall", 1);
    let admin = Client::new(app.address());
    admin.login(&app.user("root-ish", Role::Admin)).await;
    let document: Value = admin.get("/api/v1/openapi.json").await.json().await.expect("openapi");
    let counts = |app: &TestApp| {
        ["edit_locks", "audit_events", "orders", "stock_movements", "stock_holds"]
            .map(|table| count_rows(app, table))
    };
    let before = (snapshot(&app), counts(&app));

    let mut checked = 0;
    for (path, item) in document["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("operations").keys().filter(|m| *m != "get") {
            let url = admin.url(
                &path
                    .replace("{id}", &resource.to_string())
                    .replace("{key}", &format!("resource:{resource}"))
                    .replace("{name}", "haita:x"),
            );
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            for (content_type, body) in [
                (None, ""),
                (Some("text/plain"), "{}"),
                (Some("application/x-www-form-urlencoded"), "a=1"),
                (Some("application/jsonp"), "{}"),
            ] {
                let mut request = admin.http.request(method.clone(), url.clone()).body(body);
                if let Some(content_type) = content_type {
                    request = request.header("content-type", content_type);
                }
                let response = request.send().await.expect("request");
                let status = response.status().as_u16();
                let code = crate::common::error_code(response).await;
                assert_eq!(
                    (status, code.as_str()),
                    (415, "unsupported_media_type"),
                    "{method} {path} as {content_type:?}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 4 * 12, "every state-changing operation, four ways: {checked}");
    let after = (snapshot(&app), counts(&app));
    assert_eq!(before, after, "a refused request changes nothing");
}

fn count_rows(app: &TestApp, table: &str) -> i64 {
    use diesel::sql_types::BigInt;
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    haita::db::cached_sql::<diesel::sql_types::Untyped>(&format!("SELECT COUNT(*) AS n FROM {table}"))
        .get_result::<Count>(&mut app.db.raw_connection())
        .expect("count")
        .n
}

/// Control characters and direction overrides in what staff and admins type: each refused with
/// 422 naming the field, and nothing saved. Before, a product was saved as `Tea\u{0}pot` and a
/// reason with an escape sequence went to the audit log as typed.
#[actix_web::test]
async fn control_characters_in_typed_text_are_refused_naming_the_field() {
    let app = TestApp::spawn().await;
    let product = app.product("CTRL", 500, 0);
    let room = app.resource("Quiet room", 2);
    let staff = app.client(0);
    staff.login(&app.user("stan", Role::Staff)).await;
    let admin = app.client(0);
    admin.login(&app.user("root", Role::Admin)).await;

    for (field, text) in [("name", "Tea\u{0}pot"), ("name", "Tea\npot"), ("description", "\u{202E}gnp.exe")] {
        let refused = staff
            .http
            .patch(staff.url(&format!("/api/v1/products/{product}")))
            .header("if-match", "\"v1\"")
            .json(&serde_json::json!({ field: text }))
            .send()
            .await
            .expect("PATCH");
        assert_eq!(refused.status(), 422, "{field} {text:?}");
        let body: Value = refused.json().await.expect("json");
        assert_eq!(body["error"], "invalid_fields");
        assert!(body["fields"][field].as_str().is_some_and(|m| m.contains("U+")), "{field} named: {body}");
    }
    let lines = staff
        .http
        .patch(staff.url(&format!("/api/v1/products/{product}")))
        .header("if-match", "\"v1\"")
        .json(&serde_json::json!({"description": "Cast iron.\r\nHolds 1 l.\tHand-made."}))
        .send()
        .await
        .expect("PATCH");
    assert_eq!(lines.status(), 200, "line breaks and tabs belong in a description");

    let lock: Value = staff
        .send(Method::POST, &format!("/api/v1/resources/{room}/edit-lock"))
        .await
        .json()
        .await
        .expect("the edit lock");
    let epoch = lock["epoch"].as_i64().expect("epoch").to_string();
    let refused = staff
        .http
        .patch(staff.url(&format!("/api/v1/resources/{room}")))
        .header("content-type", "application/json")
        .header("Edit-Lock-Epoch", &epoch)
        .body(r#"{"name": "Room \u001b[31mred"}"#)
        .send()
        .await
        .expect("PATCH");
    assert_eq!(refused.status(), 422);
    let body: Value = refused.json().await.expect("json");
    assert_eq!(body["fields"][0]["field"], "name", "{body}");

    let reason = admin
        .send(Method::DELETE, &format!("/api/v1/admin/edit-locks/resource:{room}?reason=gone%07%07%07home"))
        .await;
    assert_eq!(reason.status(), 422);
    let body: Value = reason.json().await.expect("json");
    assert_eq!(body["error"], "invalid_reason");
    assert_eq!(body["field"], "reason");

    let mut conn = app.db.conn();
    let name: String = haita::schema::products::table
        .find(product)
        .select(haita::schema::products::name)
        .first(&mut conn)
        .expect("product");
    assert!(!name.chars().any(char::is_control), "{name:?}");
    let room_name: String = haita::schema::resources::table
        .find(room)
        .select(haita::schema::resources::name)
        .first(&mut conn)
        .expect("room");
    assert_eq!(room_name, "Quiet room");
    assert!(
        crate::common::invariants::edit_lock_owner(&app.db, &format!("resource:{room}")).is_some(),
        "the lock stays"
    );
}

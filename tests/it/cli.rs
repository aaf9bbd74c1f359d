//! The operator's path: the binary creates the first admin, reading the password from stdin.

use std::io::Write;
use std::process::Stdio;

use serde_json::{Value, json};

use crate::common::TestApp;

fn haita(app: &TestApp, args: &[&str], stdin: &str) -> std::process::Output {
    let mut child = crate::common::haita(&app.db.url)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run haita");
    child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("write password");
    child.wait_with_output().expect("haita finished")
}

#[actix_web::test]
async fn user_create_makes_an_admin_who_can_log_in() {
    let app = TestApp::spawn().await;
    let created = haita(
        &app,
        &["user", "create", "--username", "root-admin", "--role", "admin"],
        "s3cret-passphrase\n",
    );
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    assert!(String::from_utf8_lossy(&created.stdout).contains("created user root-admin"));

    let client = app.client(0);
    let response = client
        .post_json("/api/v1/session", &json!({"username": "root-admin", "password": "s3cret-passphrase"}))
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["user"]["role"], "admin");
}

#[actix_web::test]
async fn user_create_refuses_bad_input_with_a_message() {
    let app = TestApp::spawn().await;
    let bad_role = haita(&app, &["user", "create", "--username", "x", "--role", "emperor"], "long-enough\n");
    assert!(!bad_role.status.success());
    assert!(String::from_utf8_lossy(&bad_role.stderr).contains("customer, staff, admin"));

    let short = haita(&app, &["user", "create", "--username", "y", "--role", "staff"], "short\n");
    assert!(!short.status.success());
    assert!(String::from_utf8_lossy(&short.stderr).contains("at least 8 characters"));

    let first = haita(&app, &["user", "create", "--username", "zed", "--role", "staff"], "long-enough\n");
    assert!(first.status.success());
    let twice = haita(&app, &["user", "create", "--username", "ZED", "--role", "staff"], "long-enough\n");
    assert!(!twice.status.success(), "usernames are unique regardless of case");
    assert!(String::from_utf8_lossy(&twice.stderr).contains("already taken"));
}

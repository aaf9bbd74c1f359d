//! Logins nobody can block: failures counted per account and client address, shared by every
//! instance through the database, the client address read through trusted proxies.

use haita::auth::Role;
use haita::config::Config;
use serde_json::json;

use crate::common::{Client, PASSWORD, TestApp, error_code};

/// Failures of one account from one address before that pair is refused.
const FAILURES: u32 = 4;

/// The instances sit behind a proxy on 127.0.0.1 that says who the client is.
fn behind_the_proxy(c: &mut Config) {
    c.login_failures = std::num::NonZeroU32::new(FAILURES).expect("non-zero");
    c.trusted_proxies = vec!["127.0.0.1/32".parse().expect("CIDR")];
}

async fn log_in_as(client: &Client, username: &str, password: &str) -> reqwest::Response {
    client.post_json("/api/v1/session", &json!({"username": username, "password": password})).await
}

/// An attacker sends wrong passwords for `admin` in a steady loop, through two instances; after
/// each of them the real admin logs in from another address, and gets in at once every time.
/// The attacker's own address is refused once its few failures are spent, on both instances:
/// two instances do not give it twice the allowance.
#[actix_web::test]
async fn an_attacker_cannot_lock_the_admin_out_and_is_refused_on_every_instance() {
    let app = TestApp::spawn_instances(2, behind_the_proxy).await;
    let admin = app.user("admin", Role::Admin);
    let attackers: Vec<_> = app.addresses.iter().map(|a| Client::forwarded_for(a, "203.0.113.7")).collect();

    let mut attacker_answers = Vec::new();
    for round in 0..(3 * FAILURES as usize) {
        let attempt = log_in_as(&attackers[round % 2], "admin", "guess").await;
        attacker_answers.push(attempt.status().as_u16());

        let from_home = Client::forwarded_for(&app.addresses[(round + 1) % 2], "198.51.100.20");
        let status = log_in_as(&from_home, &admin.username, PASSWORD).await.status();
        assert_eq!(status, 200, "round {round}: admin kept out by an attacker ({attacker_answers:?})");
    }
    println!("attacker's answers: {attacker_answers:?}");
    let failures_checked = attacker_answers.iter().filter(|s| **s == 401).count();
    assert_eq!(failures_checked, FAILURES as usize, "one allowance for both instances: {attacker_answers:?}");
    assert!(attacker_answers.iter().all(|s| *s == 401 || *s == 429), "{attacker_answers:?}");

    for attacker in &attackers {
        let refused = log_in_as(attacker, "admin", "guess").await;
        assert_eq!(refused.status(), 429, "the attacker is refused on {}", attacker.base);
        assert!(refused.headers().get("retry-after").is_some());
        assert_eq!(error_code(refused).await, "too_many_attempts");
    }
}

/// A kiosk or a load test logs one account in twenty times in quick succession, from one
/// address, through two instances: successes never count, so none of them is refused, though the
/// allowance for failures is a fifth of that.
#[actix_web::test]
async fn twenty_quick_logins_of_one_account_are_never_throttled() {
    let app = TestApp::spawn_instances(2, behind_the_proxy).await;
    let kiosk = app.user("kiosk", Role::Customer);
    let started = std::time::Instant::now();
    let mut answers = Vec::new();
    for i in 0..20 {
        let client = Client::forwarded_for(&app.addresses[i % 2], "192.0.2.50");
        answers.push(log_in_as(&client, &kiosk.username, PASSWORD).await.status().as_u16());
    }
    println!("20 logins of one account took {:?}", started.elapsed());
    assert!(answers.iter().all(|s| *s == 200), "{answers:?}");
}

/// A successful login resets its pair: a person who mistyped a few times and then got it right
/// starts again with the whole allowance.
#[actix_web::test]
async fn a_successful_login_resets_its_failures() {
    let app = TestApp::spawn_instances(1, behind_the_proxy).await;
    let user = app.user("typo", Role::Customer);
    let client = Client::forwarded_for(app.address(), "192.0.2.60");
    for _ in 0..3 {
        for _ in 1..FAILURES {
            assert_eq!(log_in_as(&client, &user.username, "mistyped").await.status(), 401);
        }
        assert_eq!(log_in_as(&client, &user.username, PASSWORD).await.status(), 200);
    }
}

/// The throttle must not tell which usernames exist. The stored name's collation folds `bób`
/// into `bob`; the throttle folds every typed name the same way, so a folded spelling of a
/// missing name is refused exactly like one of an existing name.
#[actix_web::test]
async fn a_folded_name_is_throttled_alike_whether_or_not_the_account_exists() {
    let app = TestApp::spawn_instances(1, behind_the_proxy).await;
    app.user("bob", Role::Customer);
    let mut answers = Vec::new();
    for (plain, folded) in [("bob", "Bób"), ("zed", "Zéd")] {
        let client = Client::forwarded_for(app.address(), "192.0.2.70");
        for _ in 0..FAILURES {
            assert_eq!(log_in_as(&client, plain, "guess").await.status(), 401);
        }
        answers.push(log_in_as(&client, folded, "guess").await.status().as_u16());
    }
    assert_eq!(answers[0], answers[1], "existing bob and missing zed must look alike: {answers:?}");
    assert_eq!(answers[0], 429);
}

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

crate::common::on_both_engines!(
    no_spelling_of_a_name_buys_a_fresh_allowance_or_a_login,
    no_spelling_of_a_name_buys_a_fresh_allowance_or_a_login_on_postgres => spellings
);

/// The column's collation ignores zero-width and control characters and reads `ß` as `ss`, so
/// `c\u{200C}ust2` found the account `cust2` while the throttle counted it as another: every
/// invisible character bought ten more guesses, and the right password through one logged in.
/// Now a name is one spelling: each variant spends the same allowance, and a variant with the
/// right password is refused as a wrong one.
async fn spellings(db: crate::common::TestDb) {
    let app = TestApp::spawn_on(db, 1, behind_the_proxy).await;
    let cust2 = app.user("cust2", Role::Customer);
    app.user("strasse", Role::Customer);
    let guesser = Client::forwarded_for(app.address(), "192.0.2.80");
    for (plain, variants) in [
        ("cust2", ["c\u{200C}ust2", "c\u{200D}\u{200D}ust2", "c\u{2060}\u{2060}\u{2060}ust2", "CUST2\u{0}"]),
        ("strasse", ["straße", "STRAßE", "stras\u{AD}se", "ｓｔｒａｓｓｅ"]),
    ] {
        for _ in 0..FAILURES {
            assert_eq!(log_in_as(&guesser, plain, "guess").await.status(), 401);
        }
        for variant in variants {
            let refused = log_in_as(&guesser, variant, "guess").await;
            assert_eq!(refused.status(), 429, "{variant:?} spends {plain:?}'s allowance");
            assert_eq!(error_code(refused).await, "too_many_attempts");
        }
    }

    let owner = Client::forwarded_for(app.address(), "198.51.100.81");
    for variant in ["cu\u{2060}st2", "c\u{200B}ust2", "cust2\u{7}"] {
        let answer = log_in_as(&owner, variant, PASSWORD).await;
        assert_eq!(answer.status(), 401, "{variant:?} is nobody's name, whatever the password");
        assert_eq!(error_code(answer).await, "bad_credentials");
    }
    for spelling in ["CUST2", " cust2 ", "ｃｕｓｔ２"] {
        let answer =
            log_in_as(&Client::forwarded_for(app.address(), "198.51.100.82"), spelling, PASSWORD).await;
        assert_eq!(answer.status(), 200, "{spelling:?} is cust2's name, folded as the column folds it");
        let body: serde_json::Value = answer.json().await.expect("json");
        assert_eq!(body["user"]["id"], cust2.id);
    }
    let straße = log_in_as(&Client::forwarded_for(app.address(), "198.51.100.83"), "Straße", PASSWORD).await;
    assert_eq!(straße.status(), 200, "ß reads as ss in the name as in the column");
}

/// A flood of made-up names from one address: each name is a pair of its own, so only the
/// address's budget across all accounts stops it, before any password is hashed. Meanwhile a
/// real user from another address logs in every time.
#[actix_web::test]
async fn a_flood_of_made_up_names_from_one_address_is_cut_off_and_real_users_get_in() {
    const PER_CLIENT: u32 = 12;
    let app = TestApp::spawn_instances(2, |c| {
        behind_the_proxy(c);
        c.login_failures_per_client = std::num::NonZeroU32::new(PER_CLIENT).expect("non-zero");
    })
    .await;
    let real = app.user("real", Role::Customer);
    let flooders: Vec<Client> =
        (0..8).map(|i| Client::forwarded_for(&app.addresses[i % 2], "203.0.113.99")).collect();
    let flood = futures::future::join_all(flooders.iter().enumerate().map(|(i, flooder)| async move {
        let mut answers = Vec::new();
        for n in 0..10 {
            let name = format!("nobody-{i}-{n}-{}", rand::random::<u32>());
            let answer = log_in_as(flooder, &name, "guess").await;
            let waits = answer.headers().contains_key("retry-after");
            answers.push((answer.status().as_u16(), waits));
        }
        answers
    }));
    let real_user = async {
        let mut answers = Vec::new();
        for i in 0..5 {
            let from_home = Client::forwarded_for(&app.addresses[i % 2], "198.51.100.90");
            let started = std::time::Instant::now();
            answers.push(log_in_as(&from_home, &real.username, PASSWORD).await.status().as_u16());
            println!("the real user's login {i} during the flood: {:?}", started.elapsed());
        }
        answers
    };
    let (flood, real_answers) = futures::join!(flood, real_user);
    let flood: Vec<(u16, bool)> = flood.into_iter().flatten().collect();
    let hashed = flood.iter().filter(|(s, _)| *s == 401).count();
    let cut = flood.iter().filter(|(s, waits)| *s == 429 && *waits).count();
    println!("flood: {hashed} checked (401), {cut} refused before hashing (429)");
    assert!(hashed <= PER_CLIENT as usize, "{hashed} failures hashed past a budget of {PER_CLIENT}");
    assert_eq!(hashed + cut, flood.len(), "only 401 and 429 with Retry-After: {flood:?}");
    assert!(real_answers.iter().all(|s| *s == 200), "the real user kept out: {real_answers:?}");
    let same_address = log_in_as(&flooders[0], &real.username, PASSWORD).await;
    assert_eq!(same_address.status(), 429, "the flooding address is refused for any account");
}

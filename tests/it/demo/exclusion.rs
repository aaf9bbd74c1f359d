//! `exclusion-constraint`: stays of 1–7 nights inserted with no lock at all, refused by
//! PostgreSQL's exclusion constraint, counted night by night in the database. On MariaDB and
//! MySQL, which have no exclusion constraint, it is refused wherever it can be asked for (the
//! race API, the page's form, the booking API, the CLI), saying why, and the page shows it as
//! not available on this server; in English and Japanese.

use diesel::prelude::*;
use haita::db::{Engine, Sql};
use serde_json::{Value, json};

use super::{count, haita, id_of, logged_in, race, race_over, reading_in};
use crate::common::{TestApp, error_code};

const STRATEGY: &str = "exclusion-constraint";

/// Pairs of stays of `resource` that share a night, straight from `demo_stays`: an independent
/// count beside the race's own, which unrolls the stays into nights.
fn overlapping_stays(app: &TestApp, resource: i64) -> i64 {
    count(
        app,
        "SELECT COUNT(*) AS n FROM demo_stays a JOIN demo_stays b \
         ON b.demo_resource_id = a.demo_resource_id AND b.id > a.id \
         AND b.check_in < a.check_out AND a.check_in < b.check_out \
         WHERE a.demo_resource_id = ?",
        resource,
    )
}

fn stays(app: &TestApp, resource: i64) -> i64 {
    count(app, "SELECT COUNT(*) AS n FROM demo_stays WHERE demo_resource_id = ?", resource)
}

/// The nights of the longest stay of `resource`.
fn longest_stay(app: &TestApp, resource: i64) -> i64 {
    count(
        app,
        Sql::per_engine(
            "SELECT CAST(COALESCE(MAX(DATEDIFF(check_out, check_in)), 0) AS SIGNED) AS n \
             FROM demo_stays WHERE demo_resource_id = ?",
            "SELECT CAST(COALESCE(MAX(check_out - check_in), 0) AS BIGINT) AS n \
             FROM demo_stays WHERE demo_resource_id = ?",
        ),
        resource,
    )
}

/// The English sentence of a refusal, and the Japanese one.
const UNAVAILABLE: [&str; 2] = [
    "exclusion-constraint runs only on PostgreSQL: MariaDB and MySQL have no exclusion constraint",
    "exclusion-constraint は PostgreSQL でだけ動きます",
];

/// Two races of 16 clients booking overlapping stays of one place on PostgreSQL: no two stays
/// share a night, counted in the database, and every client that lost was told "full" (or busy,
/// when its insert lost three deadlocks or waited past `lock_timeout`), never an error. On
/// MariaDB the race is refused, 422 with the sentence, and nothing is booked.
#[actix_web::test]
async fn the_constraint_books_no_night_twice_on_postgresql_and_is_refused_on_mariadb() {
    let app = TestApp::spawn_lab().await;
    let body = json!({"strategy": STRATEGY, "clients": 16, "attempts": 32, "pause_ms": 5});
    if app.db.pool.engine() == Engine::Mysql {
        let client = logged_in(&app, "stayer").await;
        let refused = client.post_json("/api/v1/demo/races", &body).await;
        assert_eq!(refused.status(), 422);
        let problem: Value = refused.json().await.expect("problem");
        assert_eq!(problem["error"], "strategy_unavailable", "{problem}");
        assert!(problem["message"].as_str().is_some_and(|m| m.starts_with(UNAVAILABLE[0])), "{problem}");
        let listed = json!({"strategy": ["named-lock", STRATEGY], "clients": 2, "attempts": 2});
        let refused = client.post_json("/api/v1/demo/races", &listed).await;
        assert_eq!(error_code(refused).await, "strategy_unavailable", "named in a list, too");
        let raced: i64 = haita::lab::schema::demo_races::table
            .count()
            .get_result(&mut app.db.raw_connection())
            .expect("races");
        assert_eq!(raced, 0, "no race ran");
        return;
    }

    let (mut longest, mut refused) = (0, 0);
    for run in 1..=2 {
        let client = logged_in(&app, &format!("stayer{run}")).await;
        let report = race(&client, body.clone()).await;
        let result = &report["results"][0];
        let resource = id_of(result);
        let number = |field: &str| result[field].as_i64().unwrap_or_else(|| panic!("{field}: {result}"));
        assert_eq!(overlapping_stays(&app, resource), 0, "run {run}: {result}");
        assert_eq!(number("double_bookings"), 0, "run {run}: {result}");
        assert_eq!(number("errors"), 0, "run {run}: {result}");
        assert_eq!(number("confirmed"), stays(&app, resource), "the report counts what the table holds");
        // Of 16 check-ins within one week, some fall on the same day: the round's stays overlap.
        assert!(number("confirmed") < number("attempts"), "run {run}: {result}");
        assert_eq!(number("confirmed") + number("refused") + number("busy"), number("attempts"), "{result}");
        assert!(result["verdict"].as_str().is_some_and(|v| v.contains("(23P01)")), "{result}");
        longest = longest.max(longest_stay(&app, resource));
        refused += number("refused");
    }
    assert!(refused > 0, "the constraint refused overlapping stays");
    assert!(longest > 1, "stays of several nights were booked, not single days: {longest}");
    assert_eq!(super::real_reservations(&app), 0);
}

/// On PostgreSQL a race started from the page's form shows the strategy's verdict and how its
/// rounds differ, in both languages, and `haita demo race` prints its row. On MariaDB the page
/// shows it as not available, with the sentence, its box cannot be ticked, a form that names it
/// anyway is answered in place (422), and the CLI refuses it, saying why.
#[actix_web::test]
async fn the_page_and_the_cli_race_it_or_say_why_not_in_both_languages() {
    let app = TestApp::spawn_lab().await;
    let racer = logged_in(&app, "form").await;
    let token = racer.csrf_token("/demo").await;
    let form = [
        ("csrf_token", token.as_str()),
        ("strategy", STRATEGY),
        ("clients", "8"),
        ("attempts", "16"),
        ("pause_ms", "5"),
    ];
    let posted = racer.post_form("/demo/races", &form).await;
    let cli = haita(&app, &["demo", "race", "--strategy", STRATEGY, "--clients", "8", "--attempts", "16"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&cli.stdout), String::from_utf8_lossy(&cli.stderr));

    match app.db.pool.engine() {
        Engine::Postgres => {
            assert_eq!(posted.status(), 303, "the race runs");
            let id = race_over(&racer).await;
            for (lang, stays_line, verdict) in [
                ("en", "exclusion-constraint books stays instead", "No night booked twice"),
                ("ja", "exclusion-constraint は代わりに滞在を予約します", "二重に予約された夜はなく"),
            ] {
                let reader = reading_in(&app, lang).await;
                let page = reader.get(&format!("/demo?race={id}")).await.text().await.expect("page");
                assert!(page.contains(stays_line) && page.contains(verdict), "{lang}: {page}");
                assert!(!page.contains(UNAVAILABLE[0]) && !page.contains(UNAVAILABLE[1]), "{lang}");
            }
            assert!(cli.status.success(), "{stdout}{stderr}");
            assert!(stdout.lines().any(|l| l.starts_with("exclusion-constraint ")), "{stdout}");
            assert!(stdout.contains("exclusion-constraint books stays instead"), "{stdout}");
            assert!(stdout.contains("exclusion-constraint: No night booked twice"), "{stdout}");
        }
        Engine::Mysql => {
            assert_eq!(posted.status(), 422, "answered in place");
            let page = posted.text().await.expect("page");
            assert!(page.contains("id=\"refused\"") && page.contains(UNAVAILABLE[0]), "{page}");
            for (lang, sentence, badge) in
                [("en", UNAVAILABLE[0], "not on this server"), ("ja", UNAVAILABLE[1], "このサーバーでは不可")]
            {
                // Logged in, so that the form and its boxes are shown.
                let reader = logged_in(&app, &format!("reader_{lang}")).await;
                reader.speak(lang).await;
                let page = reader.get("/demo").await.text().await.expect("page");
                assert!(page.contains(sentence) && page.contains(badge), "{lang}: {page}");
                let disabled =
                    format!(r#"value="{STRATEGY}" disabled aria-describedby="unavailable-{STRATEGY}""#);
                assert!(page.contains(&disabled), "{lang}: its box cannot be ticked: {page}");
            }
            assert!(!cli.status.success(), "{stdout}");
            assert!(stderr.contains(UNAVAILABLE[0]), "{stderr}");
        }
    }
}

/// `bench bookings --stays` measures stays under a named lock per night and through the app's
/// own stay path on both engines, and beside them the exclusion constraint where the server has
/// one (on MariaDB its row says why not); every row answered attempts, none failed, no night was
/// booked twice, and the bench's database is dropped. Nothing here is timed.
#[actix_web::test]
async fn the_stays_bench_sets_the_exclusion_constraint_beside_the_named_locks() {
    let app = TestApp::spawn().await;
    let bench = ["bench", "bookings", "--stays", "--clients", "2", "--keys", "hot,spread"];
    let output = haita(&app, &[&bench[..], &["--seconds", "1", "--repeat", "1"]].concat());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    let row = |path: &str, keys: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{path:<20} {keys:<7}")))
            .unwrap_or_else(|| panic!("no {path} {keys} row: {stdout}"))
    };
    let answered = |line: &str| -> f64 {
        line.split('|').nth(1).and_then(|m| m.split_whitespace().next()?.parse().ok()).unwrap_or(0.0)
    };
    for keys in ["hot", "spread"] {
        assert!(answered(row("named locks", keys)) > 0.0, "{stdout}");
        assert!(answered(row("app book_stay", keys)) > 0.0, "the app's own stay path: {stdout}");
        let exclusion = row("exclusion constraint", keys);
        match app.db.pool.engine() {
            Engine::Postgres => assert!(answered(exclusion) > 0.0, "{stdout}"),
            Engine::Mysql => {
                assert!(
                    exclusion.ends_with("n/a: MariaDB and MySQL have no exclusion constraint"),
                    "{stdout}"
                )
            }
        }
    }
    assert!(!stdout.contains(" errors (first: "), "{stdout}");
    assert!(stdout.contains("nights booked twice after the bench: 0 (must be 0)"), "{stdout}");

    let left: super::Count = haita::db::cached_sql::<diesel::sql_types::Untyped>(Sql::per_engine(
        "SELECT COUNT(*) AS n FROM information_schema.SCHEMATA \
         WHERE LOCATE(CONCAT(DATABASE(), '_bench_'), SCHEMA_NAME) = 1",
        "SELECT COUNT(*) AS n FROM pg_database WHERE starts_with(datname, current_database() || '_bench_')",
    ))
    .get_result(&mut app.db.raw_connection())
    .expect("databases");
    assert_eq!(left.n, 0, "the bench database is dropped");
}

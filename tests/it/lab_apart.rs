//! The lab (demo, benches, demo data) is apart from the product: a build without the `lab`
//! feature has no demo route, no lab subcommand and no demo table, and the lab's own migrations
//! share a database with the product's without either set tripping over the other.

use std::process::Command;

use diesel::prelude::*;
use diesel::sql_types::BigInt;

use crate::common::{TestApp, TestDb};

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

fn demo_tables(db: &TestDb) -> i64 {
    haita::db::cached_sql::<diesel::sql_types::Untyped>(haita::db::Sql::per_engine(
        "SELECT COUNT(*) AS n FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'demo\\_%'",
        "SELECT COUNT(*) AS n FROM information_schema.tables \
         WHERE table_catalog = current_database() AND table_schema = current_schema() \
           AND table_name LIKE 'demo\\_%'",
    ))
    .get_result::<Count>(&mut db.raw_connection())
    .expect("count demo tables")
    .n
}

fn haita(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_haita")).args(args).output().expect("run haita")
}

#[test]
fn a_freshly_migrated_product_database_has_no_demo_tables() {
    let db = TestDb::new();
    assert_eq!(demo_tables(&db), 0);
}

#[cfg(not(feature = "lab"))]
#[actix_web::test]
async fn the_product_serves_no_demo_and_does_not_link_to_it() {
    let app = TestApp::spawn().await;
    let client = app.client(0);
    for path in ["/demo", "/demo/code/no-lock", "/api/v1/demo/races/1"] {
        assert_eq!(client.get(path).await.status(), 404, "GET {path}");
    }
    let race = client.post_json("/api/v1/demo/races", &serde_json::json!({"strategy": "no-lock"})).await;
    assert_eq!(race.status(), 404);
    assert_eq!(crate::common::error_code(race).await, "not_found");
    let home = client.get("/").await.text().await.expect("home page");
    assert!(!home.contains("href=\"/demo\""), "the home page links to a demo that is not there");
}

#[cfg(not(feature = "lab"))]
#[test]
fn the_product_binary_knows_no_lab_subcommand() {
    let help = String::from_utf8_lossy(&haita(&["--help"]).stdout).to_string();
    assert!(help.contains("serve") && help.contains("migrate"), "{help}");
    for lab in ["seed", "demo", "bench"] {
        assert!(!help.lines().any(|l| l.trim_start().starts_with(lab)), "{lab} in {help}");
        let refused = haita(&[lab]);
        assert!(!refused.status.success(), "haita {lab} ran");
        assert!(String::from_utf8_lossy(&refused.stderr).contains("unrecognized subcommand"), "haita {lab}");
    }
    let seed = haita(&["serve", "--seed"]);
    assert!(!seed.status.success());
    assert!(String::from_utf8_lossy(&seed.stderr).contains("unexpected argument '--seed'"));
}

#[cfg(feature = "lab")]
#[test]
fn lab_and_product_migrations_share_one_database() {
    let db = TestDb::new();
    let applied = haita::lab::prepare(&db.pool).expect("lab migrations on a product database");
    assert_eq!(applied.len(), 8, "{applied:?}");
    assert_eq!(
        demo_tables(&db),
        7,
        "demo_resources, demo_bookings, demo_races, demo_lock_rows, demo_flash_sales, demo_stays, \
         demo_race_board"
    );
    // Each set ignores the versions of the other: nothing pending, no error, either way round.
    assert_eq!(haita::run_migrations(&db.pool).expect("product migrations again"), Vec::<String>::new());
    assert_eq!(haita::lab::prepare(&db.pool).expect("lab migrations again"), Vec::<String>::new());
}

#[cfg(feature = "lab")]
#[actix_web::test]
async fn the_lab_build_links_to_the_demo_and_knows_its_subcommands() {
    let app = TestApp::spawn_lab().await;
    let home = app.client(0).get("/").await.text().await.expect("home page");
    assert!(home.contains("href=\"/demo\""));
    let help = String::from_utf8_lossy(&haita(&["--help"]).stdout).to_string();
    for lab in ["seed", "demo", "bench"] {
        assert!(help.lines().any(|l| l.trim_start().starts_with(lab)), "{lab} missing from {help}");
    }
}

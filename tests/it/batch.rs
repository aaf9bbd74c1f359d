//! Batch jobs: the guard that lets one instance at a time run a job, with both guards
//! (`BATCH_LOCK=db|file`), against a real MariaDB and a real directory; the price revision
//! here, the maintenance closure in `closure`.

mod closure;

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::BigInt;
use haita::batch::guard::{BatchLock, GuardError, RunGuard};
use haita::batch::price_revision::Revision;
use haita::batch::{self as batch_job, Policy};
use haita::db;

use crate::common::{TestDb, create_product, create_user, invariants, poll, test_config};

#[test]
fn the_database_guard_admits_one_run_and_the_next_as_soon_as_the_first_session_ends() {
    let db = TestDb::new();
    // Two instances: two pools on one database.
    let other = db::build_pool(&test_config(&db.url)).expect("pool");
    let mut first = RunGuard::acquire(&BatchLock::Db, &db.pool, "price-revision").expect("free");
    match RunGuard::acquire(&BatchLock::Db, &other, "price-revision") {
        Err(GuardError::Busy { by, .. }) => assert!(by.starts_with("database session"), "{by}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("two runs at once"),
    }
    assert!(RunGuard::acquire(&BatchLock::Db, &other, "maintenance-closure").is_ok(), "per job");
    first.check().expect("still held");

    // The first run's session dies (an admin's KILL, a crashed process): its next check stops
    // it, and the next run may start at once.
    let name = db.pool.names().batch("price-revision");
    let mut admin = db.raw_connection();
    let holder = crate::common::server::holder_of(&mut admin, name.as_str()).expect("query").expect("held");
    crate::common::server::end_session(&mut admin, holder).expect("KILL");
    assert!(matches!(first.check(), Err(GuardError::Lost { .. })), "the run must stop");
    let mut next = RunGuard::acquire(&BatchLock::Db, &other, "price-revision").expect("free at once");
    next.check().expect("held");
    drop(first);
    next.check().expect("the dead run's end takes nothing from the next");
}

#[test]
fn the_file_guard_admits_one_run_until_it_ends() {
    let db = TestDb::new();
    let dir = std::env::temp_dir()
        .join(format!("haita-batch-guard-{}", haita::idempotency::IdempotencyKey::fresh()));
    std::fs::create_dir_all(&dir).expect("dir");
    let lock = BatchLock::File(dir.clone());
    let mut first = RunGuard::acquire(&lock, &db.pool, "price-revision").expect("free");
    match RunGuard::acquire(&lock, &db.pool, "price-revision") {
        Err(GuardError::Busy { by, .. }) => {
            assert!(by.contains(&format!("pid {}", std::process::id())), "{by}")
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("two runs at once"),
    }
    first.check().expect("renewed");
    assert!(first.describe().starts_with("lock file"));
    drop(first);
    let mut next = RunGuard::acquire(&lock, &db.pool, "price-revision").expect("free once released");
    next.check().expect("held");
    drop(next);
    let left: Vec<_> = std::fs::read_dir(&dir).expect("dir").filter_map(Result::ok).collect();
    assert!(left.is_empty(), "nothing left behind: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- the price revision beside online saves ------------------------------------------------

fn price_and_version(db: &TestDb, id: i64) -> (i64, i32) {
    use haita::schema::products::dsl as p;
    p::products
        .filter(p::id.eq(id))
        .select((p::price_cents, p::version))
        .first(&mut db.raw_connection())
        .expect("row")
}

fn revision(name: &str, percent: i32, policy: Policy) -> Revision {
    Revision { name: name.into(), percent, policy, throttle: Duration::ZERO, report_dir: None }
}

/// An online save in flight holds a product's row; the waiting revision waits for it, then
/// revises the saved price — and an editor who read the version before the batch gets a
/// conflict, never overwriting the batch.
#[actix_web::test]
async fn a_waiting_revision_waits_for_an_online_save_in_flight_and_loses_no_update() {
    let db = TestDb::new();
    let (a, b) = (create_product(&db, "REV-A", 1000, 0), create_product(&db, "REV-B", 2000, 0));
    let mut online = db.raw_connection();
    online.batch_execute("START TRANSACTION").expect("begin");
    haita::db::cached_sql::<diesel::sql_types::Untyped>(
        "SELECT version FROM products WHERE id = ? FOR UPDATE",
    )
    .bind::<BigInt, _>(a)
    .execute(&mut online)
    .expect("the online save locks its row");

    // A row wait far longer than the poll below may take to see it: on a loaded machine a fresh-
    // clone run once timed out the default 5 s wait before the poll had seen it.
    let config = haita::config::Config { row_lock_wait_secs: 30, ..crate::common::test_config(&db.url) };
    let pool = haita::db::build_pool(&config).expect("pool");
    let batch = std::thread::spawn(move || {
        batch_job::run(&pool, &BatchLock::Db, &revision("spring", 10, Policy::Wait)).expect("run")
    });
    invariants::wait_until_a_transaction_waits_for_a_lock(&db).await;
    haita::db::cached_sql::<diesel::sql_types::Untyped>(
        "UPDATE products SET price_cents = 1500, version = version + 1 WHERE id = ? AND version = 1",
    )
    .bind::<BigInt, _>(a)
    .execute(&mut online)
    .expect("the online save");
    online.batch_execute("COMMIT").expect("commit");
    let summary = batch.join().expect("batch thread");

    assert_eq!((summary.total, summary.done, summary.skipped), (2, 2, 0));
    assert_eq!(price_and_version(&db, a), (1650, 3), "the batch revised the online save's price");
    assert_eq!(price_and_version(&db, b), (2200, 2));
    // An editor who opened the product at version 2 (before the batch) saves: a conflict.
    let changes = haita::catalog::edit::ProductChanges::parse("Product REV-A", "", 1400).expect("valid");
    let editor = create_user(&db, "editor", haita::auth::Role::Staff);
    let stale = haita::catalog::edit::save(&mut db.raw_connection(), a, 2, &changes, editor.id);
    assert!(matches!(stale, Err(haita::catalog::CatalogError::Stale(_))), "no lost update");
    assert_eq!(price_and_version(&db, a), (1650, 3));
}

/// A row locked by an online save is skipped and recorded; the next run of the same revision
/// revises it, and only it: every product is revised exactly once.
#[test]
fn a_skipping_revision_leaves_locked_rows_for_the_next_run_and_revises_each_product_once() {
    let db = TestDb::new();
    let ids: Vec<i64> = (0..3).map(|i| create_product(&db, &format!("SKIP-{i}"), 1000, 0)).collect();
    let dir =
        std::env::temp_dir().join(format!("haita-reports-{}", haita::idempotency::IdempotencyKey::fresh()));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut online = db.raw_connection();
    online.batch_execute("START TRANSACTION").expect("begin");
    haita::db::cached_sql::<diesel::sql_types::Untyped>(
        "SELECT version FROM products WHERE id = ? FOR UPDATE",
    )
    .bind::<BigInt, _>(ids[1])
    .execute(&mut online)
    .expect("lock");

    let with_report = Revision { report_dir: Some(dir.clone()), ..revision("autumn", 10, Policy::Skip) };
    let first = batch_job::run(&db.pool, &BatchLock::Db, &with_report).expect("first run");
    assert_eq!((first.done, first.skipped), (2, 1), "the locked row was skipped, not waited for");
    assert_eq!(price_and_version(&db, ids[1]), (1000, 1));
    let report = std::fs::read_to_string(first.report.as_ref().expect("a report")).expect("report");
    assert!(report.contains(&format!("{},,,,skipped", ids[1])), "{report}");
    online.batch_execute("ROLLBACK").expect("the online save ends");

    let second = batch_job::run(&db.pool, &BatchLock::Db, &with_report).expect("second run");
    assert_eq!((second.total, second.done, second.skipped), (1, 1, 0), "only what was left");
    for id in ids {
        assert_eq!(price_and_version(&db, id), (1100, 2), "product {id} revised exactly once");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- two processes, both guards ------------------------------------------------------------

/// `haita batch price-revision …` as a process of its own, with the guard chosen by `env`.
fn spawn_batch(db: &TestDb, env: &[(&str, String)], args: &[&str]) -> Child {
    crate::common::haita(&db.url)
        .args(["batch", "price-revision", "--percent", "1"])
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("haita batch")
}

fn exit_code(child: Child) -> i32 {
    let out = child.wait_with_output().expect("finished");
    let code = out.status.code().unwrap_or(-1);
    if ![0, i32::from(haita::cli::EXIT_BUSY)].contains(&code) {
        eprintln!("haita batch exited {code}: {}", String::from_utf8_lossy(&out.stderr));
    }
    code
}

/// A guard's name, the environment that chooses it, and the shared directory.
type Guard = (&'static str, Vec<(&'static str, String)>, PathBuf);

fn guards() -> Vec<Guard> {
    let dir =
        std::env::temp_dir().join(format!("haita-batch-dir-{}", haita::idempotency::IdempotencyKey::fresh()));
    std::fs::create_dir_all(&dir).expect("dir");
    vec![
        ("db", vec![("BATCH_LOCK", "db".into())], dir.clone()),
        ("file", vec![("BATCH_LOCK", "file".into()), ("BATCH_LOCK_DIR", dir.display().to_string())], dir),
    ]
}

fn products(db: &TestDb, n: usize) {
    let rows: Vec<String> = (0..n).map(|i| format!("('BULK-{i}', 'Bulk {i}', '', 1000)")).collect();
    db.raw_connection()
        .batch_execute(&format!(
            "INSERT INTO products (sku, name, description, price_cents) VALUES {}",
            rows.join(",")
        ))
        .expect("products");
}

fn runs_of(db: &TestDb) -> i64 {
    haita::schema::batch_runs::table.count().get_result(&mut db.raw_connection()).expect("count")
}

/// Two processes started together, twenty times, with each guard: exactly one runs each time.
#[test]
fn of_two_runs_started_together_exactly_one_runs_twenty_times_over_with_either_guard() {
    let db = TestDb::new();
    products(&db, 100);
    haita::prepare_database(&test_config(&db.url)).expect("migrated before the processes race to");
    for (guard, env, _) in guards() {
        for round in 0..20 {
            let before = runs_of(&db);
            let name = format!("{guard}-{round}");
            // Five chunks, a pause between each: the run outlasts the other process's start.
            let args = ["--revision", name.as_str(), "--throttle-ms", "150"];
            let (one, two) = (spawn_batch(&db, &env, &args), spawn_batch(&db, &env, &args));
            let mut codes = [exit_code(one), exit_code(two)];
            codes.sort_unstable();
            assert_eq!(codes, [0, i32::from(haita::cli::EXIT_BUSY)], "{guard}, round {round}");
            assert_eq!(runs_of(&db) - before, 1, "{guard}, round {round}: one run recorded");
        }
    }
}

/// kill -9 of the running process: with the database guard the next run starts at once (the
/// server ends the dead session and its lock); with a lock file on this host, at once too (its
/// process is visibly gone); held by a process on another host, only after its expiry.
#[test]
fn a_killed_run_is_followed_at_once_or_after_its_expiry_never_earlier() {
    let db = TestDb::new();
    products(&db, 100);
    haita::prepare_database(&test_config(&db.url)).expect("migrated");
    for (guard, env, dir) in guards() {
        let name = format!("killed-{guard}");
        let args = ["--revision", name.as_str(), "--throttle-ms", "400"];
        let mut first = spawn_batch(&db, &env, &args);
        poll::until(&format!("{guard}: the first run to revise a product"), Duration::from_secs(30), || {
            done_for(&db, &name) > 0
        });
        first.kill().expect("kill -9");
        first.wait().expect("reaped");

        if guard == "file" {
            // Pretend the dead holder ran on another host: its process cannot be seen, so only
            // its expiry frees the lock.
            let path = haita::batch::lockfile::LockFile::path(&dir, "price-revision");
            let mut holder = haita::batch::lockfile::read_holder(&path).expect("read").expect("left behind");
            holder.host = "another-host".into();
            holder.expires_ms = now_ms() + 2_000;
            std::fs::write(&path, serde_json::to_vec(&holder).expect("json")).expect("rewrite");
            assert_eq!(
                exit_code(spawn_batch(&db, &env, &args)),
                i32::from(haita::cli::EXIT_BUSY),
                "not before its expiry"
            );
            // Until the lock file is stale by the judgement the next run makes of it.
            poll::until(
                &format!("{guard}: the dead holder's lock file to expire"),
                Duration::from_secs(30),
                || {
                    let holder =
                        haita::batch::lockfile::read_holder(&path).expect("read").expect("still there");
                    holder.is_stale(now_ms())
                },
            );
        }
        assert_eq!(exit_code(spawn_batch(&db, &env, &args)), 0, "{guard}: the next run starts");
        assert_eq!(done_for(&db, &name), 100, "{guard}: it finished the revision, each product once");
    }
}

fn done_for(db: &TestDb, revision: &str) -> i64 {
    use haita::schema::price_revision_items::dsl as i;
    i::price_revision_items
        .filter(i::revision.eq(revision))
        .filter(i::status.eq("done"))
        .count()
        .get_result(&mut db.raw_connection())
        .expect("count")
}

fn now_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis(),
    )
    .expect("ms")
}

// ---- from the admin screen -----------------------------------------------------------------

#[actix_web::test]
async fn an_admin_starts_a_revision_and_watches_it_on_the_locks_screen() {
    let app = crate::common::TestApp::spawn().await;
    products(&app.db, 30);
    let admin = app.client(0);
    admin.login(&app.user("root", haita::auth::Role::Admin)).await;
    let token = admin.csrf_token("/admin/locks").await;
    let start = |revision: &'static str, percent: &'static str, policy: &'static str| {
        let form = [
            ("csrf_token", token.clone()),
            ("revision", revision.to_string()),
            ("percent", percent.to_string()),
            ("policy", policy.to_string()),
            ("throttle_ms", "150".to_string()),
        ];
        let http = admin.http.clone();
        let url = admin.url("/admin/batch/price-revision");
        async move { http.post(url).form(&form).send().await.expect("POST") }
    };

    let started = start("from-admin", "10", "wait").await;
    assert_eq!(started.status(), 303);
    let location = started.headers().get("location").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    assert!(location.starts_with("/admin/locks?started="), "{location}");
    // While it runs, a second start is told so, and the screen shows it live.
    let again = start("from-admin", "10", "wait").await;
    assert_eq!(again.status(), 409);
    assert!(again.text().await.expect("page").contains("already running"));
    let page = admin.get("/admin/locks").await.text().await.expect("page");
    assert!(
        page.contains("id=\"batch-runs\"")
            && page.contains("data-status=\"running\"")
            && page.contains("/static/batch_runs.js")
            && !page.contains("http-equiv=\"refresh\""),
        "the running row is kept current by its script, never by reloading the page"
    );
    assert_eq!(start("bad", "ten", "wait").await.status(), 422);
    assert_eq!(start("bad", "10", "steal").await.status(), 422);

    let mut finished = serde_json::Value::Null;
    poll::until_async(
        "the revision started from the admin screen to be done",
        Duration::from_secs(60),
        async || {
            let listing: serde_json::Value =
                admin.get("/api/v1/admin/locks").await.json().await.expect("json");
            finished = listing["batch_runs"][0].clone();
            finished["status"] == "done"
        },
    )
    .await;
    assert_eq!((finished["done"].as_i64(), finished["total"].as_i64()), (Some(30), Some(30)), "{finished}");
    assert_eq!(done_for(&app.db, "from-admin"), 30);
    let row = admin.get(&format!("/admin/batch-runs/{}", finished["id"])).await;
    assert_eq!(row.status(), 200);
    let row = row.text().await.expect("row");
    assert!(row.starts_with("<tr") || row.trim_start().starts_with("<tr"), "the run's row alone: {row}");
    assert!(row.contains("data-status=\"done\""), "{row}");
    assert_eq!(admin.get("/admin/batch-runs/999999").await.status(), 404);
}

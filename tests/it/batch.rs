//! Batch jobs: the guard that lets one instance at a time run a job, with both guards
//! (`BATCH_LOCK=db|file`), against a real MariaDB and a real directory.

use haita::batch::guard::{BatchLock, GuardError, RunGuard};
use haita::db;
use haita::locking::sql;

use crate::common::{TestDb, test_config};

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
    let holder = sql::holder_of(&mut admin, name.as_str()).expect("query").expect("held");
    sql::kill_connection(&mut admin, holder).expect("KILL");
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

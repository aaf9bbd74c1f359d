//! The maintenance closure beside online users: staff editing resources under edit locks,
//! customers booking the very days being closed. Per policy, the promise it makes — and, always,
//! that no booking lands on a day after it closed, and the ones made before are counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::NaiveDate;
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Date, Integer, Text};
use haita::auth::Role;
use haita::batch::closure::Closure;
use haita::batch::guard::BatchLock;
use haita::batch::{self as batch_job, Policy};
use haita::edit_locks::service::{self as edit_locks, Policy as LockPolicy};
use haita::edit_locks::{EditLockKey, Owner};
use haita::locking::Turn;
use rand::seq::SliceRandom;

use crate::common::{Client, TestApp, TestDb, create_resource, create_user, future_day, invariants, poll};

fn closure(by: i64, resources: &[i64], from: NaiveDate, days: u64, policy: Policy) -> Closure {
    Closure {
        from,
        to: from + chrono::Days::new(days - 1),
        reason: "Floor repairs".into(),
        resources: resources.to_vec(),
        policy,
        by,
        wait: Duration::from_secs(30),
        throttle: Duration::ZERO,
        report_dir: None,
    }
}

#[derive(QueryableByName)]
struct ClosedDay {
    #[diesel(sql_type = BigInt)]
    resource_id: i64,
    #[diesel(sql_type = Date)]
    day: NaiveDate,
    #[diesel(sql_type = Integer)]
    at_close: i32,
    #[diesel(sql_type = BigInt)]
    now: i64,
}

/// The closure's promise, read from the database: on every closed day the confirmed bookings are
/// exactly the ones counted as it closed — none was made after. Answers how many days are closed.
fn no_booking_after_a_closure(db: &TestDb) -> usize {
    let days: Vec<ClosedDay> = haita::db::cached_sql::<diesel::sql_types::Untyped>(
        "SELECT c.resource_id, c.day, c.bookings_at_close AS at_close, \
           (SELECT COUNT(*) FROM reservations r \
             WHERE r.resource_id = c.resource_id AND r.day = c.day AND r.status = 'confirmed') AS now \
         FROM resource_closures c",
    )
    .load(&mut db.raw_connection())
    .expect("closed days");
    for d in &days {
        assert_eq!(
            i64::from(d.at_close),
            d.now,
            "resource {} on {}: {} booking(s) when it closed, {} now",
            d.resource_id,
            d.day,
            d.at_close,
            d.now
        );
    }
    days.len()
}

fn closed_days_of(db: &TestDb, resource: i64) -> i64 {
    use haita::schema::resource_closures::dsl as c;
    c::resource_closures
        .filter(c::resource_id.eq(resource))
        .count()
        .get_result(&mut db.raw_connection())
        .expect("count")
}

/// Whether a run of `job` is under way and has counted `total` items to do.
fn counted_run_of(db: &TestDb, job: &str, total: i32) -> bool {
    haita::batch::runs::recent(&mut db.raw_connection(), 1)
        .expect("runs")
        .first()
        .is_some_and(|run| run.job == job && run.status == "running" && run.total == total)
}

#[derive(QueryableByName)]
struct LockRow {
    #[diesel(sql_type = Bool)]
    held_by_batch: bool,
}

fn held_by_batch(db: &TestDb, resource: i64) -> Option<bool> {
    haita::db::cached_sql::<diesel::sql_types::Untyped>(
        "SELECT held_by_batch FROM edit_locks WHERE lock_key = ?",
    )
    .bind::<Text, _>(EditLockKey::resource(resource).as_str())
    .get_result::<LockRow>(&mut db.raw_connection())
    .optional()
    .expect("edit lock")
    .map(|row| row.held_by_batch)
}

/// A customer booking every (resource, day) in random order, round after round until `stop`
/// (at least one): the answers' statuses and error codes.
async fn keep_booking(client: Client, targets: Vec<(i64, NaiveDate)>, stop: Arc<AtomicBool>) -> Vec<String> {
    let mut answers = Vec::new();
    loop {
        let mut order = targets.clone();
        order.shuffle(&mut rand::rng());
        for (resource, day) in order {
            let answer = client.book(resource, day).await;
            let status = answer.status().as_u16();
            let code = if status == 201 {
                String::new()
            } else {
                answer.json::<serde_json::Value>().await.map(|b| b["error"].to_string()).unwrap_or_default()
            };
            answers.push(format!("{status} {code}"));
        }
        if stop.load(Ordering::Relaxed) {
            return answers;
        }
    }
}

/// `wait`: the closure waits for carol, who is editing the first room, while customers keep
/// booking the days it closes on every room. It closes every day once she has saved; every
/// booking of a closed day was made before it closed (and is counted), every later one refused.
#[actix_web::test]
async fn a_waiting_closure_waits_for_the_editor_and_no_booking_lands_on_a_closed_day() {
    let app = TestApp::spawn().await;
    let rooms: Vec<i64> = (0..3).map(|i| app.resource(&format!("Closing room {i}"), 1000)).collect();
    let (from, days) = (future_day(), 10);
    let root = app.user("root", Role::Admin);
    let early = app.client(0);
    early.login(&app.user("early", Role::Customer)).await;
    assert_eq!(early.book(rooms[0], from).await.status(), 201, "a booking made before the closure");
    let carol = app.client(1);
    carol.login(&app.user("carol", Role::Staff)).await;
    assert_eq!(carol.open_editor(rooms[0]).await.status(), 200);
    let epoch = carol.editor_epoch(rooms[0]).await;

    let targets: Vec<(i64, NaiveDate)> =
        rooms.iter().flat_map(|room| (0..days).map(move |d| (*room, from + chrono::Days::new(d)))).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let mut customers = Vec::new();
    for i in 0..12 {
        let client = app.client(2 + i);
        client.login(&app.user(&format!("customer-{i}"), Role::Customer)).await;
        customers.push(actix_web::rt::spawn(keep_booking(client, targets.clone(), stop.clone())));
    }
    let pool = app.db.pool.clone();
    let asked = closure(root.id, &rooms, from, days, Policy::Wait);
    let batch = std::thread::spawn(move || batch_job::run(&pool, &BatchLock::Db, &asked));

    // The batch is waiting for carol: it takes the rooms by ascending id, so once it has
    // counted its 30 days it is at her room (the first), and her room is not closed while she
    // edits it. (That it waited for her save, the order of the audit events shows below.)
    poll::until_async(
        "the closure to count its days and come to carol's room",
        Duration::from_secs(30),
        async || counted_run_of(&app.db, "resource-closure", 30),
    )
    .await;
    assert_eq!(closed_days_of(&app.db, rooms[0]), 0, "nothing closed under carol's edit lock");
    let token = carol.csrf_token(&format!("/resources/{}/edit", rooms[0])).await;
    let saved = carol
        .post_form(
            &format!("/resources/{}/edit", rooms[0]),
            &[
                ("csrf_token", &token),
                ("lock_epoch", &epoch),
                ("name", "Closing room 0"),
                ("description", "Carol's words"),
                ("capacity", "1000"),
            ],
        )
        .await;
    assert_eq!(saved.status(), 303, "carol's save is hers to make");
    let summary = actix_web::rt::task::spawn_blocking(move || batch.join().expect("batch thread"))
        .await
        .expect("joined")
        .expect("run");
    stop.store(true, Ordering::Relaxed);
    let mut answers = Vec::new();
    for customer in customers {
        answers.extend(customer.await.expect("customer"));
    }

    assert_eq!((summary.total, summary.done, summary.skipped), (30, 30, 0), "all done after carol left");
    assert_eq!(no_booking_after_a_closure(&app.db), 30);
    let unexpected: Vec<&String> = answers
        .iter()
        .filter(|a| !["201 ", "409 \"closed\"", "409 \"already_booked\""].contains(&a.as_str()))
        .collect();
    assert!(unexpected.is_empty(), "every booking booked or was refused: {unexpected:?}");
    assert!(answers.iter().any(|a| a == "409 \"closed\""), "some bookings met a closed day");
    let actions = invariants::audit_actions(&app.db, EditLockKey::resource(rooms[0]).as_str());
    let saved_at = actions.iter().position(|a| a == "resource.saved").expect("carol saved");
    let closed_at = actions.iter().position(|a| a == "resource.closed").expect("closed");
    assert!(saved_at < closed_at, "carol's save came first: {actions:?}");
    assert_eq!(carol.get(&format!("/resources/{}", rooms[0])).await.status(), 200);
    let refused = early.book(rooms[1], from).await;
    assert_eq!(refused.status(), 409);
    let body: serde_json::Value = refused.json().await.expect("json");
    assert_eq!(body["error"], "closed");
    assert!(body["message"].as_str().is_some_and(|m| m.contains("Floor repairs")), "{body}");
    invariants::no_named_lock_left_held(&app.db);
}

/// The race itself: two dozen customers book three rooms over thirty days, each target once,
/// while the closure closes them all. Every booking of a closed day committed before its day
/// closed (counted then), every other was refused. Without the day's lock and the row lock the
/// closure would count a day while a booking of it is in flight, and that booking would land.
#[actix_web::test]
async fn no_booking_lands_on_a_closed_day_however_many_customers_race_the_closure() {
    // Each customer books up to ninety days here: more than one person may hold (the quota has
    // tests of its own, `quotas`).
    let app = TestApp::spawn_instances(1, |c| c.max_future_bookings = 1000).await;
    let rooms: Vec<i64> = (0..3).map(|i| app.resource(&format!("Raced room {i}"), 1000)).collect();
    let (from, days) = (future_day(), 30);
    let root = app.user("root", Role::Admin);
    let targets: Vec<(i64, NaiveDate)> =
        rooms.iter().flat_map(|room| (0..days).map(move |d| (*room, from + chrono::Days::new(d)))).collect();
    let stop = Arc::new(AtomicBool::new(true)); // one round each
    let mut customers = Vec::new();
    for i in 0..24 {
        let client = app.client(i);
        client.login(&app.user(&format!("racer-{i}"), Role::Customer)).await;
        customers.push(actix_web::rt::spawn(keep_booking(client, targets.clone(), stop.clone())));
    }
    let pool = app.db.pool.clone();
    let asked = closure(root.id, &rooms, from, days, Policy::Wait);
    let summary = actix_web::rt::task::spawn_blocking(move || batch_job::run(&pool, &BatchLock::Db, &asked))
        .await
        .expect("joined")
        .expect("run");
    let mut answers = Vec::new();
    for customer in customers {
        answers.extend(customer.await.expect("customer"));
    }
    assert_eq!((summary.done, summary.skipped), (90, 0));
    assert_eq!(no_booking_after_a_closure(&app.db), 90);
    let booked = answers.iter().filter(|a| *a == "201 ").count();
    let closed = answers.iter().filter(|a| *a == "409 \"closed\"").count();
    assert_eq!(booked + closed, answers.len(), "booked or refused as closed: {answers:?}");
    assert!(booked > 0 && closed > 0, "the race was run: {booked} booked, {closed} refused");
}

/// `steal`: the batch takes carol's edit lock; while it holds it no admin can force it open and
/// her heartbeat says a batch holds it; once it is done her save is refused, says why, and what
/// she typed is kept as her draft.
#[actix_web::test]
async fn a_stealing_closure_takes_the_editors_lock_she_is_told_why_and_keeps_her_input() {
    let app = TestApp::spawn().await;
    let room = app.resource("Stolen room", 5);
    let from = future_day();
    let root = app.user("root", Role::Admin);
    let admin = app.client(0);
    admin.login(&root).await;
    let carol = app.client(1);
    carol.login(&app.user("carol", Role::Staff)).await;
    assert_eq!(carol.open_editor(room).await.status(), 200);
    let epoch = carol.editor_epoch(room).await;
    let token = carol.csrf_token(&format!("/resources/{room}/edit")).await;

    // The test holds the second day's booking lock: the batch is caught midway, holding the
    // edit lock it took.
    let day_lock = app.db.session_holding(&app.db.pool.names().booking(room, from + chrono::Days::new(1)));
    let pool = app.db.pool.clone();
    let asked = closure(root.id, &[room], from, 2, Policy::Steal);
    let batch = std::thread::spawn(move || batch_job::run(&pool, &BatchLock::Db, &asked));
    poll::until_async("the batch to take carol's edit lock over", Duration::from_secs(30), async || {
        held_by_batch(&app.db, room) == Some(true)
    })
    .await;
    let key = EditLockKey::resource(room);
    let forced = admin
        .send(reqwest::Method::DELETE, &format!("/api/v1/admin/edit-locks/{key}?reason=stuck%20editor"))
        .await;
    assert_eq!(forced.status(), 409, "no admin force-releases a batch's lock");
    let beat =
        carol.send(reqwest::Method::PUT, &format!("/api/v1/resources/{room}/edit-lock?epoch={epoch}")).await;
    assert_eq!(beat.status(), 423);
    let told: serde_json::Value = beat.json().await.expect("json");
    assert!(told["message"].as_str().is_some_and(|m| m.contains("batch job")), "{told}");

    drop(day_lock);
    let summary = actix_web::rt::task::spawn_blocking(move || batch.join().expect("batch thread"))
        .await
        .expect("joined")
        .expect("run");
    assert_eq!((summary.done, summary.skipped), (2, 0));
    assert_eq!(held_by_batch(&app.db, room), None, "released when done");

    // Her page's save, with what she typed meanwhile.
    let refused = carol
        .post_form(
            &format!("/resources/{room}/edit"),
            &[
                ("csrf_token", &token),
                ("lock_epoch", &epoch),
                ("name", "Stolen room"),
                ("description", "What carol typed"),
                ("capacity", "5"),
            ],
        )
        .await;
    assert_eq!(refused.status(), 423);
    let page = refused.text().await.expect("page");
    assert!(
        page.contains("NOT saved") && page.contains("A batch job started by root took your lock at"),
        "she sees why: {page}"
    );
    assert!(!page.contains("from carol") && !page.contains("edit_lock."), "told to her, not logged: {page}");
    let ended =
        carol.get(&format!("/resources/{room}/edit/ended?epoch={epoch}")).await.text().await.expect("part");
    assert!(ended.contains("A batch job started by root took your lock at"), "her page's sentence: {ended}");
    let draft: serde_json::Value =
        carol.get(&format!("/api/v1/resources/{room}/draft")).await.json().await.expect("draft");
    assert_eq!(draft["fields"]["description"], "What carol typed", "{draft}");
    let beat =
        carol.send(reqwest::Method::PUT, &format!("/api/v1/resources/{room}/edit-lock?epoch={epoch}")).await;
    let told: serde_json::Value = beat.json().await.expect("json");
    assert_eq!(told["error"], "edit_lock_not_held");
    assert!(told["message"].as_str().is_some_and(|m| m.contains("batch run")), "{told}");
    let actions = invariants::audit_actions(&app.db, key.as_str());
    assert!(actions.contains(&"edit_lock.batch_seized".to_string()), "{actions:?}");
    let view = carol.get(&format!("/resources/{room}/view")).await.text().await.expect("view");
    assert!(view.contains(&format!("{from}: Floor repairs")), "staff see the closed days: {view}");
    assert_eq!(no_booking_after_a_closure(&app.db), 2);
}

/// `skip`: a room under an online edit lock, a day whose booking lock is taken and a row locked
/// by a request in flight are left and listed in the report; the next run closes exactly those.
#[test]
fn a_skipping_closure_lists_what_it_left_and_the_next_run_closes_exactly_that() {
    let db = TestDb::new();
    let root = create_user(&db, "root", Role::Admin);
    let carol = create_user(&db, "carol", Role::Staff);
    let (edited, day_locked, row_locked) = (
        create_resource(&db, "Edited", 5),
        create_resource(&db, "Day locked", 5),
        create_resource(&db, "Row locked", 5),
    );
    let from = future_day();
    let second = from + chrono::Days::new(1);
    let key = EditLockKey::resource(edited);
    let owner = Owner { user_id: carol.id, session: "carols-browser".into() };
    let turn = Turn::unqueued(db.pool.names().edit_lock(key.as_str()), Duration::from_secs(5));
    edit_locks::acquire(&db.pool, turn, Duration::from_secs(300), &key, &owner, LockPolicy::FreeOrMine)
        .expect("carol edits");
    let day_lock = db.session_holding(&db.pool.names().booking(day_locked, second));
    let mut in_flight = db.raw_connection();
    in_flight.batch_execute("START TRANSACTION").expect("begin");
    haita::db::cached_sql::<diesel::sql_types::Untyped>(haita::db::Sql::per_engine(
        "SELECT id FROM resources WHERE id = ? LOCK IN SHARE MODE",
        "SELECT id FROM resources WHERE id = ? FOR SHARE",
    ))
    .bind::<BigInt, _>(row_locked)
    .execute(&mut in_flight)
    .expect("a booking in flight reads the row");

    let dir =
        std::env::temp_dir().join(format!("haita-closure-{}", haita::idempotency::IdempotencyKey::fresh()));
    std::fs::create_dir_all(&dir).expect("dir");
    let asked = Closure {
        report_dir: Some(dir.clone()),
        ..closure(root.id, &[edited, day_locked, row_locked], from, 2, Policy::Skip)
    };
    let first = batch_job::run(&db.pool, &BatchLock::Db, &asked).expect("first run");
    assert_eq!((first.total, first.done, first.skipped), (6, 1, 5));
    let report = std::fs::read_to_string(first.report.as_ref().expect("report")).expect("read");
    let line = |resource: i64, day: NaiveDate| {
        report
            .lines()
            .find(|l| l.starts_with(&format!("{resource},")) && l.contains(&day.to_string()))
            .unwrap_or("")
    };
    assert!(line(edited, from).contains("skipped") && line(edited, from).contains("carol"), "{report}");
    assert!(line(day_locked, from).contains(",closed,"), "{report}");
    assert!(line(day_locked, second).contains("booking lock"), "{report}");
    assert!(line(row_locked, second).contains("locked by an online request"), "{report}");

    edit_locks::release(&mut db.raw_connection(), &key, &owner, None, edit_locks::BY_ITS_OWNER)
        .expect("carol leaves");
    drop(day_lock);
    in_flight.batch_execute("COMMIT").expect("the booking ends");
    let next = batch_job::run(&db.pool, &BatchLock::Db, &asked).expect("next run");
    assert_eq!((next.total, next.done, next.skipped), (5, 5, 0), "exactly what was left");
    assert_eq!(no_booking_after_a_closure(&db), 6);
    for room in [edited, day_locked, row_locked] {
        let actions = invariants::audit_actions(&db, EditLockKey::resource(room).as_str());
        assert_eq!(actions.iter().filter(|a| *a == "resource.closed").count(), 2, "each day closed once");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// From the command line and from the admin screen; and what a customer then sees.
#[actix_web::test]
async fn a_closure_runs_from_the_command_line_and_the_admin_screen_and_customers_see_it() {
    let app = TestApp::spawn().await;
    let (cli_room, admin_room) = (app.resource("CLI room", 3), app.resource("Admin room", 3));
    let day = future_day();
    let root = app.user("root", Role::Admin);
    app.user("sam", Role::Customer);

    let cli = |by: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_haita"))
            .args(["batch", "close-resources", "--reason", "Painting", "--policy", "skip", "--by", by])
            .args(["--from", &day.to_string(), "--to", &day.to_string(), "--resource", &cli_room.to_string()])
            .env("DATABASE_URL", &app.db.url)
            .env("RUST_LOG", "warn")
            .output()
            .expect("haita batch")
    };
    let refused = cli("sam");
    assert_eq!(refused.status.code(), Some(1), "a customer closes nothing");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("no staff member"));
    let ran = cli("root");
    assert!(ran.status.success(), "{}", String::from_utf8_lossy(&ran.stderr));
    assert!(String::from_utf8_lossy(&ran.stdout).contains("1 resource-days, 1 done"));

    let admin = app.client(0);
    admin.login(&root).await;
    let token = admin.csrf_token("/admin/locks").await;
    let start = |from: String, policy: &'static str| {
        let form = [
            ("csrf_token", token.clone()),
            ("from", from.clone()),
            ("to", from),
            ("reason", "Deep clean".to_string()),
            ("resources", admin_room.to_string()),
            ("policy", policy.to_string()),
            ("wait_secs", "5".to_string()),
        ];
        let (http, url) = (admin.http.clone(), admin.url("/admin/batch/closure"));
        async move { http.post(url).form(&form).send().await.expect("POST") }
    };
    assert_eq!(start("tomorrow".into(), "wait").await.status(), 422);
    assert_eq!(start(day.to_string(), "bogus").await.status(), 422);
    assert_eq!(start(day.to_string(), "steal").await.status(), 303);
    poll::until_async(
        "the closure started from the admin screen to close its day",
        Duration::from_secs(30),
        async || closed_days_of(&app.db, admin_room) == 1,
    )
    .await;

    let customer = app.client(1);
    customer.login(&app.user("cora", Role::Customer)).await;
    for room in [cli_room, admin_room] {
        let answer = customer.book(room, day).await;
        assert_eq!(answer.status(), 409, "room {room}");
        let page = customer.get(&format!("/resources/{room}?from={day}")).await.text().await.expect("page");
        assert!(page.contains("closed: "), "the calendar shows the closed day: {page}");
    }
}

/// A row held past the lock wait leaves its day for a later run; a run that stops midway (its
/// guard's session killed meanwhile) still lets go of the edit lock it took: a batch's lock
/// blocks every editor, and no admin can force it open.
#[test]
fn a_closure_that_stops_midway_releases_the_edit_lock_it_took() {
    let db = TestDb::new();
    // Long enough a wait for the poll below to see it on a loaded machine; the kill ends it early.
    let config = haita::config::Config { row_lock_wait_secs: 5, ..crate::common::test_config(&db.url) };
    let pool = haita::db::build_pool(&config).expect("pool");
    let root = create_user(&db, "root", Role::Admin);
    let room = create_resource(&db, "Held room", 5);
    let mut holder = db.raw_connection();
    holder.batch_execute("START TRANSACTION").expect("begin");
    haita::db::cached_sql::<diesel::sql_types::Untyped>("SELECT id FROM resources WHERE id = ? FOR UPDATE")
        .bind::<BigInt, _>(room)
        .execute(&mut holder)
        .expect("a long transaction holds the row");

    let asked = closure(root.id, &[room], future_day(), 2, Policy::Wait);
    let run = std::thread::spawn(move || batch_job::run(&pool, &BatchLock::Db, &asked));
    // While it runs, an admin kills the run's guard session.
    let mut admin = db.raw_connection();
    let guard = db.pool.names().batch("resource-closure");
    // Midway: the run holds the resource's edit lock, or already waits for the row after it.
    let midway =
        poll::within_every(Duration::from_secs(30), invariants::lock_wait_poll_interval(&db), || {
            held_by_batch(&db, room) == Some(true) || invariants::a_transaction_waits_for_a_lock(&mut admin)
        });
    if !midway {
        holder.batch_execute("ROLLBACK").expect("rollback");
        panic!("the run never got midway: {:?}", run.join().expect("run thread"));
    }
    let session = crate::common::server::holder_of(&mut admin, guard.as_str()).expect("query").expect("held");
    crate::common::server::end_session(&mut admin, session).expect("KILL");
    let stopped = run.join().expect("run thread");
    holder.batch_execute("ROLLBACK").expect("rollback");

    assert!(stopped.is_err(), "the run stops once its guard is gone: {stopped:?}");
    assert_eq!(held_by_batch(&db, room), None, "the batch's edit lock is gone");
    let actions = invariants::audit_actions(&db, EditLockKey::resource(room).as_str());
    assert_eq!(actions.last().map(String::as_str), Some("edit_lock.released"), "{actions:?}");
    assert_eq!(closed_days_of(&db, room), 0);
}

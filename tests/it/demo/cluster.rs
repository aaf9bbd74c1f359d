//! The race is the cluster's (issue 33, item 5): a visitor on one instance watches, live, a race
//! started on another; one race runs at a time across every instance on the database; and a race
//! whose instance was killed blocks the next one only until its lease has passed.

use std::time::Duration;

use diesel::prelude::*;
use haita::auth::Role;
use serde_json::{Value, json};

use super::{events_until, start_a_slow_race};
use crate::common::app_process::AppProcess;
use crate::common::{Client, TestApp, TestDb, error_code, on_both_engines, poll};

/// The race's attempts so far, over its strategies.
fn attempts(live: &Value) -> u64 {
    live["race"]["strategies"].as_array().into_iter().flatten().filter_map(|s| s["attempts"].as_u64()).sum()
}

on_both_engines!(
    a_race_started_on_one_instance_is_watched_live_on_another,
    a_race_started_on_one_instance_is_watched_live_on_another_on_postgres => watched_from_another_instance
);

/// Instance B runs the race; a visitor of instance A, who opened A's event stream before it
/// started, sees it begin, its counts grow state after state, and its report when it ends; A's
/// JSON says the same meanwhile. Nothing of the race is in A's memory but what A's reader read.
async fn watched_from_another_instance(db: TestDb) {
    let app = TestApp::spawn_lab_on(db, 2).await;
    let visitor = app.client(0);
    let stream = visitor.get("/demo/races/live").await;
    assert_eq!(stream.status(), 200);

    let racer = Client::new(&app.addresses[1]);
    racer.login(&app.user("racer-on-b", Role::Customer)).await;
    start_a_slow_race(&racer).await;
    poll::until_async("instance A's JSON to show B's race", Duration::from_secs(30), async || {
        let live: Value = visitor.get("/api/v1/demo/races/live").await.json().await.expect("live");
        live["race"]["started_by"] == "racer-on-b"
    })
    .await;

    let events =
        events_until(stream, 120, |live| live["race"].is_null() && live["finished"]["outcome"] == "report")
            .await;
    let during: Vec<&Value> = events.iter().filter(|e| !e["race"].is_null()).collect();
    assert!(during.iter().all(|e| e["race"]["started_by"] == "racer-on-b"), "{during:?}");
    // Several states, each further on than the one before: the counts grow while it runs.
    let progressing = during.windows(2).filter(|pair| attempts(pair[1]) > attempts(pair[0])).count();
    assert!(progressing >= 3, "{progressing} growing states seen on A: {during:?}");
    for pair in events.windows(2) {
        assert!(pair[1]["seq"].as_u64() > pair[0]["seq"].as_u64(), "states in order, none twice: {pair:?}");
    }
    // The last state of each strategy is what the stored report says.
    let last = during.last().expect("a state while running")["race"]["strategies"].clone();
    let id = events.last().expect("the end")["finished"]["race_id"].as_i64().expect("race id");
    let report: Value = visitor.get(&format!("/api/v1/demo/races/{id}")).await.json().await.expect("report");
    for (shown, result) in
        last.as_array().expect("strategies").iter().zip(report["results"].as_array().expect("results"))
    {
        assert_eq!(shown["stage"], "done", "{shown}");
        for field in ["attempts", "confirmed", "double_bookings"] {
            assert_eq!(shown[field], result[field], "{field}: {shown} vs {result}");
        }
    }
}

on_both_engines!(
    one_race_runs_at_a_time_across_instances_and_a_killed_racer_blocks_only_until_its_lease_ends,
    one_race_runs_at_a_time_across_instances_and_a_killed_racer_blocks_only_until_its_lease_ends_on_postgres
        => one_race_across_instances
);

/// A race runs on a `haita serve` process; a race asked of the in-process instance meanwhile is
/// refused with today's 409 `busy` and its sentence. The process is then killed with SIGKILL
/// mid-race: the slot is still its own for the rest of its lease (refused at once), and then
/// freed, the race said to have stopped, and a race on the survivor runs.
async fn one_race_across_instances(db: TestDb) {
    let app = TestApp::spawn_lab_on(db, 1).await;
    let mut doomed = AppProcess::start(&app.db.url, &[("DEMO_MODE", "1"), ("INSTANCE_NAME", "doomed")]);
    let racer = Client::new(&doomed.address);
    racer.login(&app.user("racer-on-doomed", Role::Customer)).await;
    let token = racer.csrf_token("/demo").await;
    // Two strategies of up to 10 s each: long enough to be running when it is killed.
    let form = [
        ("csrf_token", token.as_str()),
        ("strategy", "no-lock"),
        ("strategy", "named-lock"),
        ("clients", "4"),
        ("attempts", "4000"),
        ("pause_ms", "50"),
    ];
    assert_eq!(racer.post_form("/demo/races", &form).await.status(), 303);

    let survivor = app.client(0);
    survivor.login(&app.user("racer-on-a", Role::Customer)).await;
    poll::until_async(
        "the survivor to see the doomed instance's race",
        Duration::from_secs(30),
        async || {
            let live: Value = survivor.get("/api/v1/demo/races/live").await.json().await.expect("live");
            live["race"]["started_by"] == "racer-on-doomed" && attempts(&live) > 0
        },
    )
    .await;
    let small = json!({"strategy": "no-lock", "clients": 2, "attempts": 2});
    let refused = survivor.post_json("/api/v1/demo/races", &small).await;
    assert_eq!(refused.status(), 409, "a second race on another instance");
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = refused.json().await.expect("problem");
    assert_eq!(body["error"], "busy");
    assert!(body["message"].as_str().is_some_and(|m| m.contains("already running")), "{body}");

    doomed.kill();
    // Renewed at most a few seconds ago: the lease still holds the slot.
    let refused = survivor.post_json("/api/v1/demo/races", &small).await;
    assert_eq!((refused.status().as_u16(), error_code(refused).await.as_str()), (409, "busy"));
    let mut live = Value::Null;
    poll::until_async_every(
        "the dead racer's lease to pass",
        Duration::from_secs(60),
        Duration::from_millis(250),
        async || {
            live = survivor.get("/api/v1/demo/races/live").await.json().await.expect("live");
            live["race"].is_null()
        },
    )
    .await;
    assert_eq!(live["finished"]["outcome"], "failed", "{live}");
    assert!(live["finished"]["message"].as_str().is_some_and(|m| m.contains("stopped")), "{live}");
    let ran = survivor.post_json("/api/v1/demo/races", &small).await;
    assert_eq!(ran.status(), 201, "the slot is free once the lease has passed");
}

on_both_engines!(
    races_asked_of_three_instances_at_once_run_one_at_a_time,
    races_asked_of_three_instances_at_once_run_one_at_a_time_on_postgres => one_of_many_at_once
);

/// Twelve users, four on each of three instances, each from an address of their own (a race
/// starts its address's cooldown), ask for a race at the same moment: one race runs, the eleven
/// others are refused with 409 `busy`, and the database stored one report.
async fn one_of_many_at_once(db: TestDb) {
    let app = TestApp::spawn_lab_on(db, 3).await;
    let mut clients = Vec::new();
    for i in 0..12 {
        let client = Client::forwarded_for(&app.addresses[i % 3], &format!("198.51.100.{}", 10 + i));
        client.login(&app.user(&format!("eager{i:02}"), Role::Customer)).await;
        clients.push(client);
    }
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(clients.len()));
    let asked = clients.into_iter().map(|client| {
        let barrier = barrier.clone();
        actix_web::rt::spawn(async move {
            barrier.wait().await;
            let body = json!({"strategy": "no-lock", "clients": 2, "attempts": 40, "pause_ms": 20});
            let answer = client.post_json("/api/v1/demo/races", &body).await;
            let status = answer.status().as_u16();
            let code = if status == 201 { String::new() } else { error_code(answer).await };
            (status, code)
        })
    });
    let answers: Vec<(u16, String)> =
        futures::future::join_all(asked).await.into_iter().map(|a| a.expect("client")).collect();
    let ran = answers.iter().filter(|(status, _)| *status == 201).count();
    let refused = answers.iter().filter(|(status, code)| *status == 409 && code == "busy").count();
    assert_eq!((ran, refused), (1, 11), "{answers:?}");
    let stored: i64 = haita::lab::schema::demo_races::table
        .count()
        .get_result(&mut app.db.conn())
        .expect("count the reports");
    assert_eq!(stored, 1, "one race ran");
}

//! Pessimistic edit locks under concurrency, checked in the database afterwards (invariant 7:
//! at most one holder per edit lock; a holder whose lock was released or taken over cannot save).

use std::sync::Arc;
use std::time::Duration;

use haita::auth::Role;
use serde_json::{Value, json};
use tokio::sync::Barrier;

use crate::common::{Client, TestApp, error_code, future_day, invariants};

mod browser;
mod drafts;
mod own_lock;

fn lock_url(resource: i64) -> String {
    format!("/api/v1/resources/{resource}/edit-lock")
}

async fn patch(client: &Client, resource: i64, body: &Value) -> reqwest::Response {
    patch_text(client, resource, body.to_string()).await
}

/// A PATCH whose JSON is written by hand (e.g. with escapes serde would not produce), under
/// the lock's current epoch (see [`patch_under`]).
async fn patch_text(client: &Client, resource: i64, json: String) -> reqwest::Response {
    let lock: Value = client.get(&lock_url(resource)).await.json().await.unwrap_or(Value::Null);
    let epoch = lock["epoch"].as_i64().unwrap_or(0).to_string();
    patch_under(client, resource, &epoch, json).await
}

/// A PATCH that names the edit-lock epoch `epoch` (what the client was told when it acquired).
async fn patch_under(client: &Client, resource: i64, epoch: &str, json: String) -> reqwest::Response {
    client
        .http
        .patch(client.url(&format!("/api/v1/resources/{resource}")))
        .header("Content-Type", "application/json")
        .header("Edit-Lock-Epoch", epoch)
        .body(json)
        .send()
        .await
        .expect("PATCH")
}

/// A second client sharing `client`'s cookie jar: the same browser session.
fn same_session(client: &Client) -> Client {
    Client { http: client.http.clone(), base: client.base.clone() }
}

/// Posts the edit form of `resource` as a browser would, with the page's CSRF token and the
/// lock epoch of the editor as it would be shown now.
async fn save_form(
    client: &Client,
    resource: i64,
    name: &str,
    description: &str,
    capacity: &str,
) -> reqwest::Response {
    let epoch = client.editor_epoch(resource).await;
    save_form_under(client, resource, &epoch, name, description, capacity).await
}

/// The edit form of a page opened under the lock epoch `epoch`.
async fn save_form_under(
    client: &Client,
    resource: i64,
    epoch: &str,
    name: &str,
    description: &str,
    capacity: &str,
) -> reqwest::Response {
    let token = client.csrf_token("/").await;
    let fields = [
        ("csrf_token", token.as_str()),
        ("lock_epoch", epoch),
        ("name", name),
        ("description", description),
        ("capacity", capacity),
    ];
    client.post_form(&format!("/resources/{resource}/edit"), &fields).await
}

#[actix_web::test]
async fn thirty_concurrent_first_acquires_leave_exactly_one_owner() {
    let app = TestApp::spawn_instances(2, |_| {}).await;
    let resource = app.resource("Meeting room", 1);
    let mut clients = Vec::new();
    for i in 0..30 {
        clients.push(app.logged_in(i, &format!("editor{i:02}"), Role::Staff).await);
    }
    let barrier = Arc::new(Barrier::new(clients.len()));
    let tasks = clients.into_iter().map(|(user, client)| {
        let barrier = barrier.clone();
        actix_web::rt::spawn(async move {
            barrier.wait().await;
            let response = client.post_json(&lock_url(resource), &json!({})).await;
            let status = response.status().as_u16();
            let code = if status == 201 { String::new() } else { error_code(response).await };
            (user.id, status, code)
        })
    });
    let answers: Vec<_> =
        futures::future::join_all(tasks).await.into_iter().map(|r| r.expect("task")).collect();

    let winners: Vec<i64> = answers.iter().filter(|(_, s, _)| *s == 201).map(|(id, _, _)| *id).collect();
    assert_eq!(winners.len(), 1, "exactly one acquire succeeds: {answers:?}");
    assert!(
        answers.iter().all(|(_, s, c)| *s == 201 || (*s == 423 && c == "edit_locked")),
        "everyone else is told the lock is taken: {answers:?}"
    );
    let key = format!("resource:{resource}");
    assert_eq!(invariants::edit_lock_owner(&app.db, &key).map(|(user, _)| user), Some(winners[0]));
    assert_eq!(invariants::audit_actions(&app.db, &key), ["edit_lock.acquired"], "one acquire, audited once");
    invariants::no_named_lock_left_held(&app.db);
}

/// First acquires of *different* keys at once, as staff open different resources: each is
/// serialised only with its own key (its named lock). A locking read of a missing row under
/// REPEATABLE READ locks the gap it would go in, and two such transactions both waiting to insert
/// into one gap deadlock — which `haita bench closure` met, a deadlock in the first seconds.
#[test]
fn first_acquires_of_different_keys_at_once_never_deadlock() {
    use haita::edit_locks::service::{self as edit_locks, Policy};
    use haita::edit_locks::{EditLockKey, Owner};
    let db = crate::common::TestDb::new();
    let staff = crate::common::create_user(&db, "opener", Role::Staff);
    let barrier = Arc::new(std::sync::Barrier::new(8));
    let threads: Vec<_> = (0..8_i64)
        .map(|t| {
            let (pool, barrier) = (db.pool.clone(), barrier.clone());
            std::thread::spawn(move || {
                let owner = Owner { user_id: staff.id, session: format!("opener-{t}") };
                barrier.wait();
                // Keys interleaved across the threads: neighbours in the index, in one gap.
                (0..40_i64)
                    .map(|i| {
                        let key = EditLockKey::resource(1 + i * 8 + t);
                        let turn = haita::locking::Turn::unqueued(
                            pool.names().edit_lock(key.as_str()),
                            Duration::from_secs(10),
                        );
                        edit_locks::acquire(
                            &pool,
                            turn,
                            Duration::from_secs(60),
                            &key,
                            &owner,
                            Policy::FreeOrMine,
                        )
                        .map(drop)
                        .map_err(|e| format!("{key}: {e}"))
                    })
                    .filter_map(Result::err)
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let failed: Vec<String> = threads.into_iter().flat_map(|t| t.join().expect("thread")).collect();
    assert!(
        failed.is_empty(),
        "{} of 320 acquires failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
}

#[actix_web::test]
async fn two_users_race_to_open_the_editor_then_the_loser_takes_over_and_the_old_holders_save_is_refused() {
    let app = TestApp::spawn_instances(2, |c| c.edit_lock_ttl = Duration::from_secs(2)).await;
    let resource = app.resource("Tennis court", 2);
    let (carol, carol_client) = app.logged_in(0, "carol", Role::Staff).await;
    let (bob, bob_client) = app.logged_in(1, "bob", Role::Staff).await;
    let path = format!("/resources/{resource}/edit");

    let barrier = Arc::new(Barrier::new(2));
    let open = |client: Client, barrier: Arc<Barrier>| async move {
        barrier.wait().await;
        let response = client.open_editor(resource).await;
        (response.status().as_u16(), response.text().await.expect("page"), client)
    };
    let ((carol_status, carol_page, carol_client), (bob_status, bob_page, bob_client)) =
        futures::join!(open(carol_client, barrier.clone()), open(bob_client, barrier.clone()));

    let key = format!("resource:{resource}");
    let mut statuses = [carol_status, bob_status];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 423], "exactly one opens the editor");
    let (holder, holder_client, loser, loser_client, loser_page) = if carol_status == 200 {
        (&carol, carol_client, &bob, bob_client, bob_page)
    } else {
        (&bob, bob_client, &carol, carol_client, carol_page)
    };
    assert_eq!(invariants::edit_lock_owner(&app.db, &key).map(|(u, _)| u), Some(holder.id));
    assert!(loser_page.contains(&format!("{} ({}) is editing this since", holder.username, holder.username)));
    assert!(!loser_page.contains("id=\"take-over\""), "no take-over button while the lock is live");

    invariants::wait_until_edit_lock_expired(&app.db, &key);
    let expired_page = loser_client.get(&path).await;
    assert_eq!(expired_page.status(), 423, "opening the page does not take an expired lock by itself");
    assert!(expired_page.text().await.expect("page").contains("id=\"take-over\""));
    let token = loser_client.csrf_token("/").await;
    let took = loser_client.post_form(&format!("{path}/take-over"), &[("csrf_token", &token)]).await;
    assert_eq!(took.status(), 303);
    assert_eq!(invariants::edit_lock_owner(&app.db, &key).map(|(u, _)| u), Some(loser.id));

    let refused = save_form(&holder_client, resource, "Renamed by the old holder", "my long text", "7").await;
    assert_eq!(refused.status(), 423);
    let page = refused.text().await.expect("page");
    assert!(page.contains("NOT saved") && page.contains("took it over at"), "told why: {page}");
    assert!(
        page.contains("value=\"Renamed by the old holder\"")
            && page.contains("my long text")
            && page.contains("value=\"7\""),
        "input shown back"
    );
    assert_eq!(
        invariants::resource_row(&app.db, resource),
        ("Tennis court".to_string(), 2, 1),
        "nothing saved"
    );
    assert_eq!(
        invariants::audit_actions(&app.db, &key),
        ["edit_lock.acquired", "edit_lock.expired", "edit_lock.taken_over"]
    );
}

#[actix_web::test]
async fn one_user_in_two_sessions_is_two_owners() {
    let app = TestApp::spawn_instances(1, |c| c.edit_lock_ttl = Duration::from_secs(2)).await;
    let resource = app.resource("Lab bench", 3);
    let (dave, first) = app.logged_in(0, "dave", Role::Staff).await;
    let second = app.client(0);
    second.login(&dave).await;

    assert_eq!(first.post_json(&lock_url(resource), &json!({})).await.status(), 201);
    assert_eq!(
        same_session(&first).post_json(&lock_url(resource), &json!({})).await.status(),
        200,
        "renewed"
    );
    let other = second.post_json(&lock_url(resource), &json!({})).await;
    assert_eq!(other.status(), 423, "the same user in another session does not hold it");
    let body: Value = other.json().await.expect("json");
    assert_eq!((body["error"].as_str(), body["holder"].as_str()), (Some("edit_locked"), Some("dave")));
    assert!(body["expires_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{body}");
    assert_eq!(patch(&second, resource, &json!({"capacity": 4})).await.status(), 423);

    let key = format!("resource:{resource}");
    invariants::wait_until_edit_lock_expired(&app.db, &key);
    assert_eq!(second.post_json(&lock_url(resource), &json!({})).await.status(), 201, "takes over");
    let refused = patch(&first, resource, &json!({"capacity": 5})).await;
    assert_eq!(refused.status(), 423);
    assert_eq!(error_code(refused).await, "edit_locked");
    assert_eq!(patch(&second, resource, &json!({"capacity": 4})).await.status(), 200);
    assert_eq!(invariants::resource_row(&app.db, resource), ("Lab bench".to_string(), 4, 2));
}

#[actix_web::test]
async fn the_holder_saves_through_the_form_and_the_version_rises_by_one() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Studio", 2);
    let (_, carol) = app.logged_in(0, "carol", Role::Staff).await;

    let page = carol.open_editor(resource).await;
    assert_eq!(page.status(), 200);
    let page = page.text().await.expect("page");
    assert!(page.contains("You are editing this resource") && page.contains("/static/edit_lock.js"));
    // A page whose lock is taken learns it within 15 s, whatever the lock's lifetime (5 min here).
    assert!(page.contains("data-heartbeat-ms=\"15000\""), "{page}");

    // 2000 characters of Japanese are 18 KB once form-encoded: still accepted.
    let description = format!("Bright room\r\nwith piano. {}", "会".repeat(1970));
    let saved = save_form(&carol, resource, "  Studio A ", &description, "3").await;
    assert_eq!(saved.status(), 303);
    assert_eq!(saved.headers()["location"], format!("/resources/{resource}?saved=1").as_str());
    let shown = carol.get(&format!("/resources/{resource}?saved=1")).await.text().await.expect("page");
    assert!(shown.contains("id=\"saved\"") && shown.contains("version 2"), "the save is confirmed: {shown}");
    assert_eq!(invariants::resource_row(&app.db, resource), ("Studio A".to_string(), 3, 2));
    let key = format!("resource:{resource}");
    assert_eq!(invariants::edit_lock_owner(&app.db, &key), None, "saving closes the editor");
    assert_eq!(
        invariants::audit_actions(&app.db, &key),
        ["edit_lock.acquired", "resource.saved", "edit_lock.released"]
    );
    assert_eq!(save_form(&carol, resource, "Again", "", "3").await.status(), 423, "no lock, no save");
}

#[actix_web::test]
async fn heartbeat_extends_only_my_lock_and_release_deletes_only_my_lock() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Kiln", 1);
    let (_, carol) = app.logged_in(0, "carol", Role::Staff).await;
    let (_, bob) = app.logged_in(0, "bob", Role::Staff).await;
    let key = format!("resource:{resource}");

    assert_eq!(bob.send(reqwest::Method::PUT, &lock_url(resource)).await.status(), 423, "nothing to beat");
    assert_eq!(carol.post_json(&lock_url(resource), &json!({})).await.status(), 201);
    let before = invariants::edit_lock_expiry(&app.db, &key).expect("lock");
    let beat = carol.send(reqwest::Method::PUT, &lock_url(resource)).await;
    assert_eq!(beat.status(), 200);
    assert!(invariants::edit_lock_expiry(&app.db, &key).expect("lock") > before, "expiry moved forward");

    let theirs = bob.send(reqwest::Method::PUT, &lock_url(resource)).await;
    assert_eq!((theirs.status().as_u16(), error_code(theirs).await.as_str()), (423, "edit_locked"));
    let not_mine = bob.send(reqwest::Method::DELETE, &lock_url(resource)).await;
    assert_eq!(not_mine.status(), 423, "someone else's lock is not released");
    assert!(invariants::edit_lock_owner(&app.db, &key).is_some());

    let cancel_token = carol.csrf_token("/").await;
    let cancelled = carol
        .post_form(&format!("/resources/{resource}/edit/cancel"), &[("csrf_token", &cancel_token)])
        .await;
    assert_eq!(cancelled.status(), 303);
    assert_eq!(invariants::edit_lock_owner(&app.db, &key), None);
    assert_eq!(carol.send(reqwest::Method::DELETE, &lock_url(resource)).await.status(), 204, "idempotent");
    assert_eq!(invariants::audit_actions(&app.db, &key), ["edit_lock.acquired", "edit_lock.released"]);
}

#[actix_web::test]
async fn capacity_may_not_drop_below_a_future_days_bookings() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Court", 3);
    let day = future_day();
    for name in ["ann", "ben"] {
        let (_, customer) = app.logged_in(0, name, Role::Customer).await;
        assert_eq!(customer.book(resource, day).await.status(), 201);
    }
    let (_, carol) = app.logged_in(0, "carol", Role::Staff).await;
    assert_eq!(carol.post_json(&lock_url(resource), &json!({})).await.status(), 201);

    let refused = patch(&carol, resource, &json!({"capacity": 1})).await;
    assert_eq!(refused.status(), 422);
    let body: Value = refused.json().await.expect("json");
    assert_eq!(body["error"], "capacity_below_bookings");
    assert_eq!(body["day"], day.to_string());
    assert!(body["message"].as_str().is_some_and(|m| m.contains(&day.to_string())), "{body}");

    let saved = patch(&carol, resource, &json!({"capacity": 2, "description": "Two groups a day"})).await;
    assert_eq!(saved.status(), 200);
    let saved: Value = saved.json().await.expect("json");
    assert_eq!((saved["capacity"].as_i64(), saved["version"].as_i64()), (Some(2), Some(2)));
    assert!(
        invariants::edit_lock_owner(&app.db, &format!("resource:{resource}")).is_some(),
        "PATCH keeps the lock"
    );
    invariants::no_day_over_capacity(&app.db);
}

#[actix_web::test]
async fn bad_edits_are_clear_4xx_answers_and_the_form_keeps_the_input() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Bench", 2);
    let (_, carol) = app.logged_in(0, "carol", Role::Staff).await;
    assert_eq!(carol.open_editor(resource).await.status(), 200);

    let long_name = "n".repeat(101);
    let cases = [
        (json!({"name": "  "}), 422, "invalid_input"),
        (json!({"name": long_name}), 422, "invalid_input"),
        (json!({"capacity": 0}), 422, "invalid_input"),
        (json!({"capacity": 99_999_999_999_i64}), 422, "invalid_input"),
        (json!({}), 422, "invalid_input"),
        (json!({"colour": "red"}), 400, "malformed_body"),
        (json!({"capacity": "3"}), 400, "malformed_body"),
    ];
    for (body, status, code) in cases {
        let response = patch(&carol, resource, &body).await;
        assert_eq!(
            (response.status().as_u16(), error_code(response).await.as_str()),
            (status, code),
            "{body}"
        );
    }
    assert_eq!(patch(&carol, 999_999, &json!({"capacity": 2})).await.status(), 404);
    assert_eq!(carol.get("/resources/999999/edit").await.status(), 404);

    let form = save_form(&carol, resource, "Bench", "kept text", "lots").await;
    assert_eq!(form.status(), 422);
    let page = form.text().await.expect("page");
    assert!(
        page.contains("a whole number from 1 to")
            && page.contains("kept text")
            && page.contains("value=\"lots\"")
    );
    assert_eq!(invariants::resource_row(&app.db, resource), ("Bench".to_string(), 2, 1));
    assert!(invariants::edit_lock_owner(&app.db, &format!("resource:{resource}")).is_some(), "still editing");

    // The longest description, each character escaped in JSON as a surrogate pair (12 bytes):
    // 24 KB of valid JSON that a PATCH must take.
    let escaped = format!(r#"{{"description": "{}"}}"#, r"\ud83d\ude00".repeat(2000));
    assert_eq!(patch_text(&carol, resource, escaped).await.status(), 200, "2000 escaped characters fit");
    assert_eq!(invariants::resource_row(&app.db, resource), ("Bench".to_string(), 2, 2));
}

/// Taking a lock changes something: a link, a prefetch or a preview (a GET) must never lock a
/// resource in a staff member's name. The edit page offers a start form, with the CSRF token.
#[actix_web::test]
async fn a_get_never_takes_the_edit_lock_only_the_start_form_does() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Attic", 1);
    let (carol_user, carol) = app.logged_in(0, "carol", Role::Staff).await;
    let key = format!("resource:{resource}");
    let path = format!("/resources/{resource}/edit");

    let page = carol.get(&path).await;
    assert_eq!(page.status(), 200);
    let page = page.text().await.expect("page");
    assert!(
        page.contains("id=\"start-editing\"") && page.contains("/static/edit_lock.js"),
        "a start form, which the page's script submits: {page}"
    );
    assert_eq!(invariants::edit_lock_owner(&app.db, &key), None, "a GET takes no lock");

    let forged = carol.post_form(&format!("{path}/start"), &[("csrf_token", "not-the-token")]).await;
    assert_eq!(forged.status(), 403);
    assert_eq!(invariants::edit_lock_owner(&app.db, &key), None, "nor does a forged form");

    let editor = carol.open_editor(resource).await;
    assert_eq!(editor.status(), 200);
    assert!(editor.text().await.expect("page").contains("You are editing this resource"));
    assert_eq!(invariants::edit_lock_owner(&app.db, &key).map(|(user, _)| user), Some(carol_user.id));
    assert_eq!(carol.get(&path).await.status(), 200, "the holder's GET shows the editor");
}

#[actix_web::test]
async fn customers_and_anonymous_users_cannot_edit() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Room", 1);
    let (_, alice) = app.logged_in(0, "alice", Role::Customer).await;
    assert_eq!(alice.get(&format!("/resources/{resource}/edit")).await.status(), 403);
    assert_eq!(alice.post_json(&lock_url(resource), &json!({})).await.status(), 403);
    assert_eq!(patch(&alice, resource, &json!({"capacity": 2})).await.status(), 403);
    let anonymous = app.client(0);
    assert_eq!(anonymous.post_json(&lock_url(resource), &json!({})).await.status(), 401);
    let page = anonymous.get(&format!("/resources/{resource}/edit")).await;
    assert_eq!(page.status(), 303, "a browser is sent to the login page");
    assert_eq!(invariants::edit_lock_owner(&app.db, &format!("resource:{resource}")), None);
}

#[actix_web::test]
async fn a_late_release_from_a_reloaded_page_does_not_end_the_renewed_lock() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Darkroom", 1);
    let (_, carol) = app.logged_in(0, "carol", Role::Staff).await;
    let key = format!("resource:{resource}");

    let first: Value = carol.post_json(&lock_url(resource), &json!({})).await.json().await.expect("json");
    let old_beat = first["heartbeat_at"].as_str().expect("heartbeat_at").to_string();
    // The reload's acquire arrives before the old page's release-on-leave.
    let renewed = carol.post_json(&lock_url(resource), &json!({})).await;
    assert_eq!(renewed.status(), 200);
    let new_beat =
        renewed.json::<Value>().await.expect("json")["heartbeat_at"].as_str().expect("at").to_string();
    assert_ne!(old_beat, new_beat);

    let late =
        carol.send(reqwest::Method::DELETE, &format!("{}?if_heartbeat={old_beat}", lock_url(resource))).await;
    assert_eq!(late.status(), 204);
    assert!(
        invariants::edit_lock_owner(&app.db, &key).is_some(),
        "the renewed lock survives the late release"
    );
    let current =
        carol.send(reqwest::Method::DELETE, &format!("{}?if_heartbeat={new_beat}", lock_url(resource))).await;
    assert_eq!(current.status(), 204);
    assert_eq!(invariants::edit_lock_owner(&app.db, &key), None);
    let bad =
        carol.send(reqwest::Method::DELETE, &format!("{}?if_heartbeat=yesterday", lock_url(resource))).await;
    assert_eq!(bad.status(), 400, "a malformed time is refused, not guessed");
}

/// Fencing (invariant 7 for one owner in several tabs): every acquisition of a lock gets a
/// higher epoch, and a save must name the one its editor was opened under.
///
/// Carol opens the editor (tab 1). An admin force-releases her lock; she opens the editor again
/// in a second tab of the same browser session, which takes the lock anew. Tab 1 — paused all
/// this time, a laptop lid closed — now saves: same user, same session, lock held, and still
/// refused (423, her input shown back), because tab 1 never saw what tab 2 may have changed.
/// Tab 1's heartbeat learns it too. Tab 2 saves.
///
/// Then a save in flight: a takeover's transaction holds the lock row while carol's API save
/// arrives; the save waits for it (the row is read `FOR UPDATE` in the save's own transaction),
/// sees the new acquisition once it commits, and is refused. Nothing is written either time.
#[actix_web::test]
async fn a_save_from_an_editor_opened_under_an_earlier_acquisition_is_refused() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Fenced room", 4);
    let key = format!("resource:{resource}");
    let (_, carol) = app.logged_in(0, "carol", Role::Staff).await;
    let (_, admin) = app.logged_in(0, "root", Role::Admin).await;
    let tab1 = carol.open_editor(resource).await.text().await.expect("editor");
    let first = crate::common::lock_epoch_in(&tab1).expect("tab 1 names its epoch");

    let token = admin.csrf_token("/").await;
    let fields = [("csrf_token", token.as_str()), ("key", key.as_str()), ("reason", "stuck")];
    assert_eq!(admin.post_form("/admin/edit-locks/force-release", &fields).await.status(), 303);
    let tab2 = same_session(&carol);
    let second =
        crate::common::lock_epoch_in(&tab2.open_editor(resource).await.text().await.expect("editor"))
            .expect("tab 2 names its epoch");
    assert!(
        second.parse::<i64>().expect("number") > first.parse::<i64>().expect("number"),
        "{first} → {second}"
    );
    assert!(invariants::edit_lock_owner(&app.db, &key).is_some(), "carol holds the lock again");

    let refused = save_form_under(&carol, resource, &first, "Renamed in tab 1", "typed in tab 1", "9").await;
    assert_eq!(refused.status(), 423);
    let page = refused.text().await.expect("page");
    assert!(
        page.contains("NOT saved") && page.contains("You opened this editor again in another tab at"),
        "told why: {page}"
    );
    assert!(
        page.contains("value=\"Renamed in tab 1\"") && page.contains("typed in tab 1"),
        "input shown back"
    );
    let expiry = invariants::edit_lock_expiry(&app.db, &key);
    let beat = carol.send(reqwest::Method::PUT, &format!("{}?epoch={first}", lock_url(resource))).await;
    assert_eq!((beat.status().as_u16(), error_code(beat).await.as_str()), (423, "edit_lock_superseded"));
    assert_eq!(invariants::edit_lock_expiry(&app.db, &key), expiry, "a refused heartbeat extends nothing");
    let resource_now: Value = carol.get("/api/v1/resources").await.json().await.expect("resources");
    let stored = resource_now.as_array().expect("list").iter().find(|r| r["id"] == resource).cloned();
    assert_eq!(
        stored.as_ref().map(|r| (r["name"].clone(), r["version"].clone())),
        Some((json!("Fenced room"), json!(1)))
    );

    let api = patch_under(&carol, resource, &second, json!({"capacity": 5}).to_string()).await;
    assert_eq!(api.status(), 200, "tab 2's epoch is the lock's");

    // In flight: a takeover (by carol's own session, as tab 3 would make it) holds the row.
    use diesel::connection::SimpleConnection;
    let mut takeover = app.db.raw_connection();
    takeover
        .batch_execute(&format!(
            "START TRANSACTION; SELECT epoch FROM edit_locks WHERE lock_key = '{key}' FOR UPDATE"
        ))
        .expect("takeover starts");
    let saving = {
        let (carol, second) = (same_session(&carol), second.clone());
        actix_web::rt::spawn(async move {
            let response = patch_under(&carol, resource, &second, json!({"capacity": 6}).to_string()).await;
            (response.status().as_u16(), error_code(response).await)
        })
    };
    invariants::wait_until_a_transaction_waits_for_a_lock(&app.db).await;
    let now = match app.db.pool.engine() {
        haita::db::Engine::Mysql => "NOW(6)",
        haita::db::Engine::Postgres => "LOCALTIMESTAMP",
    };
    takeover
        .batch_execute(&format!(
            "UPDATE edit_lock_epochs SET last_epoch = last_epoch + 1 WHERE lock_key = '{key}'; \
             UPDATE edit_locks SET epoch = (SELECT last_epoch FROM edit_lock_epochs WHERE lock_key = '{key}'), \
               acquired_at = {now}, heartbeat_at = {now} WHERE lock_key = '{key}'; \
             COMMIT"
        ))
        .expect("takeover commits");
    assert_eq!(saving.await.expect("save task"), (423, "edit_lock_superseded".to_string()));
    let capacity: Value = carol.get("/api/v1/resources").await.json().await.expect("resources");
    let stored = capacity.as_array().expect("list").iter().find(|r| r["id"] == resource).cloned();
    assert_eq!(stored.map(|r| r["capacity"].clone()), Some(json!(5)), "only tab 2's save was applied");
}

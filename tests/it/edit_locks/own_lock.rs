//! A person's own edit lock, over HTTP (issue 34, item 3): logging out ends the session's locks
//! in the logout's transaction, with an audit event; "continue here" takes the person's own lock
//! from their other session at once — a new acquisition, with a new fencing epoch, so the other
//! session's page cannot save — and only theirs.

use diesel::prelude::*;
use haita::auth::Role;
use serde_json::json;

use super::{lock_url, save_form_under};
use crate::common::{TestApp, invariants};

/// The audit details recorded about `subject`, oldest first.
fn audit_details(app: &TestApp, subject: &str) -> Vec<(String, String)> {
    use haita::schema::audit_events::dsl as a;
    a::audit_events
        .filter(a::subject.eq(subject))
        .order(a::id)
        .select((a::action, a::detail))
        .load(&mut app.db.raw_connection())
        .expect("audit")
}

#[actix_web::test]
async fn logging_out_ends_the_sessions_edit_locks_and_everywhere_ends_every_sessions() {
    let app = TestApp::spawn().await;
    let rooms = [app.resource("Room A", 2), app.resource("Room B", 2), app.resource("Room C", 2)];
    let keys = rooms.map(|r| format!("resource:{r}"));
    let (carol, laptop) = app.logged_in(0, "carol", Role::Staff).await;
    let phone = app.client(0);
    phone.login(&carol).await;
    let tablet = app.client(0);
    tablet.login(&carol).await;
    let (_, bob) = app.logged_in(0, "bob", Role::Staff).await;
    let bobs_room = app.resource("Bob's room", 2);
    for (client, room) in [(&laptop, rooms[0]), (&phone, rooms[1]), (&tablet, rooms[2]), (&bob, bobs_room)] {
        assert_eq!(client.post_json(&lock_url(room), &json!({})).await.status(), 201);
    }

    // The laptop logs out: its lock ends with it, audited; the phone's stays.
    assert_eq!(laptop.send(reqwest::Method::DELETE, "/api/v1/session").await.status(), 204);
    assert_eq!(invariants::edit_lock_owner(&app.db, &keys[0]), None);
    let (action, detail) = audit_details(&app, &keys[0]).pop().expect("an event");
    assert_eq!(action, "edit_lock.released");
    assert!(detail.starts_with("on logout (session "), "{detail}");
    assert_eq!(invariants::edit_lock_owner(&app.db, &keys[1]).map(|(u, _)| u), Some(carol.id));

    // The phone logs out everywhere: the tablet's lock ends too; bob's is bob's.
    let everywhere = phone.send(reqwest::Method::DELETE, "/api/v1/session?everywhere=true").await;
    assert_eq!(everywhere.status(), 204);
    for key in &keys {
        assert_eq!(invariants::edit_lock_owner(&app.db, key), None, "{key}");
    }
    let bobs = format!("resource:{bobs_room}");
    assert!(invariants::edit_lock_owner(&app.db, &bobs).is_some(), "another person's lock is untouched");
    assert_eq!(tablet.get("/api/v1/session").await.status(), 401, "the tablet's session ended");
}

#[actix_web::test]
async fn continue_here_moves_my_own_lock_at_once_and_the_other_sessions_page_cannot_save() {
    let app = TestApp::spawn().await;
    let room = app.resource("Studio", 3);
    let key = format!("resource:{room}");
    let (carol, laptop) = app.logged_in(0, "carol", Role::Staff).await;
    let phone = app.client(0);
    phone.login(&carol).await;
    let (_, bob) = app.logged_in(0, "bob", Role::Staff).await;
    assert_eq!(laptop.open_editor(room).await.status(), 200);
    let laptop_epoch = laptop.editor_epoch(room).await;
    let (_, laptop_session) = invariants::edit_lock_owner(&app.db, &key).expect("lock");

    // Bob may not continue carol's work: it is hers (423, the lock unchanged).
    let token = bob.csrf_token("/").await;
    let refused =
        bob.post_form(&format!("/resources/{room}/edit/continue-here"), &[("csrf_token", &token)]).await;
    assert_eq!(refused.status(), 423);
    assert_eq!(invariants::edit_lock_owner(&app.db, &key).map(|(_, s)| s), Some(laptop_session.clone()));

    // The phone is offered "continue here" on the page of the lock, and takes it at once.
    let page = phone.get(&format!("/resources/{room}/edit")).await;
    assert_eq!(page.status(), 423);
    let page = page.text().await.expect("page");
    assert!(page.contains("id=\"continue-here\"") && !page.contains("id=\"take-over\""), "{page}");
    let token = phone.csrf_token("/").await;
    let moved =
        phone.post_form(&format!("/resources/{room}/edit/continue-here"), &[("csrf_token", &token)]).await;
    assert_eq!(moved.status(), 303, "to the editor (no draft to bring along)");
    let (owner, session) = invariants::edit_lock_owner(&app.db, &key).expect("lock");
    assert_eq!(owner, carol.id);
    assert_ne!(session, laptop_session, "the phone's session holds it now");
    let phone_epoch = phone.editor_epoch(room).await;
    assert!(
        phone_epoch.parse::<i64>().unwrap_or(0) > laptop_epoch.parse().unwrap_or(i64::MAX),
        "a new epoch"
    );
    let (action, detail) = audit_details(&app, &key).pop().expect("an event");
    assert_eq!(action, "edit_lock.taken_over");
    assert!(detail.starts_with("continued here from their other session"), "{detail}");

    // The laptop's page, opened under the earlier acquisition, cannot save; the phone can.
    let stale = save_form_under(&laptop, room, &laptop_epoch, "Studio", "from the laptop", "3").await;
    assert_eq!(stale.status(), 423);
    let page = stale.text().await.expect("page");
    assert!(page.contains("You continued editing this in another browser or window at"), "{page}");
    assert_eq!(invariants::resource_row(&app.db, room), ("Studio".to_string(), 3, 1), "nothing saved");
    let saved = save_form_under(&phone, room, &phone_epoch, "Studio", "from the phone", "4").await;
    assert_eq!(saved.status(), 303, "saved, then the resource page");
    assert_eq!(invariants::resource_row(&app.db, room), ("Studio".to_string(), 4, 2));
}

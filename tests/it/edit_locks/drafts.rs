//! A takeover keeps the displaced editor's work: their input is kept as a draft tied to them,
//! offered back when they next open the editor, and anyone on staff can see a locked record
//! read-only meanwhile. Checked over real HTTP and in the database.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use haita::auth::Role;
use serde_json::{Value, json};

use super::save_form_under;
use crate::common::{Client, TestApp, error_code, invariants};

#[derive(QueryableByName)]
struct Kept {
    #[diesel(sql_type = Text)]
    fields: String,
}

/// The fields of `user_id`'s kept draft of `resource`, as stored.
fn draft_in_db(app: &TestApp, user_id: i64, resource: i64) -> Option<Value> {
    haita::db::cached_sql::<diesel::sql_types::Untyped>(
        "SELECT fields FROM edit_drafts WHERE user_id = ? AND lock_key = ?",
    )
    .bind::<BigInt, _>(user_id)
    .bind::<Text, _>(format!("resource:{resource}"))
    .get_result::<Kept>(&mut app.db.raw_connection())
    .optional()
    .expect("draft")
    .map(|k| serde_json::from_str(&k.fields).expect("JSON fields"))
}

async fn put_draft(client: &Client, resource: i64, body: &Value) -> reqwest::Response {
    client
        .http
        .put(client.url(&format!("/api/v1/resources/{resource}/draft")))
        .json(body)
        .send()
        .await
        .expect("PUT")
}

async fn force_release(admin: &Client, resource: i64) {
    let released = admin
        .send(reqwest::Method::DELETE, &format!("/api/v1/admin/edit-locks/resource:{resource}?reason=lunch"))
        .await;
    assert_eq!(released.status(), 200);
}

#[actix_web::test]
async fn a_refused_save_is_kept_as_a_draft_and_offered_back_at_the_next_open() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Board room", 4);
    let (carol, carols) = app.logged_in(0, "carol", Role::Staff).await;
    let (_, admin) = app.logged_in(0, "root", Role::Admin).await;

    assert_eq!(carols.open_editor(resource).await.status(), 200);
    let epoch = carols.editor_epoch(resource).await;
    force_release(&admin, resource).await;

    // Her save is refused (she no longer holds the lock); what she typed is kept, for her.
    let refused =
        save_form_under(&carols, resource, &epoch, "Board room (new chairs)", "Twelve chairs.", "12").await;
    assert_eq!(refused.status(), 423);
    let page = refused.text().await.expect("page");
    assert!(page.contains("kept as your draft"), "{page}");
    assert!(!page.contains("readonly"), "her input stays hers to change: {page}");
    let kept = json!({"name": "Board room (new chairs)", "description": "Twelve chairs.", "capacity": "12"});
    assert_eq!(draft_in_db(&app, carol.id, resource), Some(kept.clone()));

    // While someone else holds the lock, she changes her input on that page and keeps it.
    let token = carols.csrf_token(&format!("/resources/{resource}/view")).await;
    let changed = [
        ("csrf_token", token.as_str()),
        ("name", "Board room (new chairs)"),
        ("description", "Twelve chairs, one more."),
        ("capacity", "12"),
    ];
    let kept_again = carols.post_form(&format!("/resources/{resource}/draft/keep"), &changed).await;
    assert_eq!(kept_again.status(), 303);
    assert_eq!(kept_again.headers()["location"], format!("/resources/{resource}/view?draft=kept").as_str());
    let shown =
        carols.get(&format!("/resources/{resource}/view?draft=kept")).await.text().await.expect("view");
    assert!(shown.contains("id=\"draft-kept\""), "{shown}");
    let kept = json!({"name": "Board room (new chairs)", "description": "Twelve chairs, one more.", "capacity": "12"});
    assert_eq!(draft_in_db(&app, carol.id, resource), Some(kept.clone()));
    // Back to what the rest of this test expects.
    let kept = json!({"name": "Board room (new chairs)", "description": "Twelve chairs.", "capacity": "12"});
    let restore = [
        ("csrf_token", token.as_str()),
        ("name", "Board room (new chairs)"),
        ("description", "Twelve chairs."),
        ("capacity", "12"),
    ];
    assert_eq!(carols.post_form(&format!("/resources/{resource}/draft/keep"), &restore).await.status(), 303);
    assert_eq!(draft_in_db(&app, carol.id, resource), Some(kept.clone()));
    let draft: Value =
        carols.get(&format!("/api/v1/resources/{resource}/draft")).await.json().await.expect("json");
    assert_eq!(draft["fields"], kept);
    assert_eq!(
        invariants::resource_row(&app.db, resource),
        ("Board room".to_string(), 4, 1),
        "nothing saved"
    );

    // Opening the editor again offers it back; restoring puts it in the form.
    let page = carols.open_editor(resource).await.text().await.expect("editor");
    assert!(page.contains("id=\"draft-offer\""), "the draft is offered");
    assert!(page.contains("value=\"Board room\""), "the form shows the record as stored");
    let restored =
        carols.get(&format!("/resources/{resource}/edit?draft=restore")).await.text().await.expect("page");
    assert!(restored.contains("value=\"Board room (new chairs)\""), "the draft is in the form");
    assert!(!restored.contains("id=\"draft-offer\""), "and no longer offered");

    // Saving it spends the draft.
    let epoch = carols.editor_epoch(resource).await;
    let saved =
        save_form_under(&carols, resource, &epoch, "Board room (new chairs)", "Twelve chairs.", "12").await;
    assert_eq!(saved.status(), 303);
    assert_eq!(invariants::resource_row(&app.db, resource), ("Board room (new chairs)".to_string(), 12, 2));
    assert_eq!(draft_in_db(&app, carol.id, resource), None);
    assert_eq!(carols.get(&format!("/api/v1/resources/{resource}/draft")).await.status(), 404);
}

#[actix_web::test]
async fn drafts_are_their_authors_bounded_and_gone_when_cancelled_or_discarded() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Studio", 2);
    let (carol, carols) = app.logged_in(0, "carol", Role::Staff).await;
    let (dave, daves) = app.logged_in(0, "dave", Role::Staff).await;
    let (_, alices) = app.logged_in(0, "alice", Role::Customer).await;
    let typed = json!({"name": "Studio B", "description": "half-typed", "capacity": "3x"});

    assert_eq!(put_draft(&alices, resource, &typed).await.status(), 403, "customers do not edit");
    assert_eq!(alices.get(&format!("/resources/{resource}/view")).await.status(), 403);
    let too_long = json!({"name": "n".repeat(101)});
    let refused = put_draft(&carols, resource, &too_long).await;
    assert_eq!(refused.status(), 422);
    assert_eq!(error_code(refused).await, "invalid_input");
    assert_eq!(draft_in_db(&app, carol.id, resource), None, "a refused draft writes nothing");
    assert_eq!(put_draft(&carols, resource + 100, &typed).await.status(), 404);

    // Half-typed input is kept as typed (no validation: it is a draft), and it is carol's only.
    assert_eq!(put_draft(&carols, resource, &typed).await.status(), 204);
    assert_eq!(draft_in_db(&app, carol.id, resource), Some(typed.clone()));
    assert_eq!(daves.get(&format!("/api/v1/resources/{resource}/draft")).await.status(), 404);
    assert_eq!(draft_in_db(&app, dave.id, resource), None);

    // Cancelling the editor says "I do not want these changes".
    assert_eq!(carols.open_editor(resource).await.status(), 200);
    let token = carols.csrf_token("/").await;
    let cancelled =
        carols.post_form(&format!("/resources/{resource}/edit/cancel"), &[("csrf_token", &token)]).await;
    assert_eq!(cancelled.status(), 303);
    assert_eq!(draft_in_db(&app, carol.id, resource), None);

    // And the API and the offer's button discard it.
    assert_eq!(put_draft(&carols, resource, &typed).await.status(), 204);
    let discarded =
        carols.send(reqwest::Method::DELETE, &format!("/api/v1/resources/{resource}/draft")).await;
    assert_eq!(discarded.status(), 204);
    assert_eq!(draft_in_db(&app, carol.id, resource), None);
    assert_eq!(put_draft(&carols, resource, &typed).await.status(), 204);
    let discard =
        carols.post_form(&format!("/resources/{resource}/draft/discard"), &[("csrf_token", &token)]).await;
    assert_eq!(discard.status(), 303);
    assert_eq!(draft_in_db(&app, carol.id, resource), None);
}

#[actix_web::test]
async fn anyone_on_staff_can_read_a_locked_record_without_touching_the_lock() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Library", 6);
    let (carol, carols) = app.logged_in(0, "carol", Role::Staff).await;
    let (_, daves) = app.logged_in(0, "dave", Role::Staff).await;
    assert_eq!(carols.open_editor(resource).await.status(), 200);
    let key = format!("resource:{resource}");
    let before = invariants::edit_lock_expiry(&app.db, &key);

    let view = daves.get(&format!("/resources/{resource}/view")).await;
    assert_eq!(view.status(), 200);
    let page = view.text().await.expect("page");
    assert!(page.contains("carol (carol) is editing this since"), "who is editing");
    assert!(page.contains("id=\"view-name\">Library<"), "the stored values");
    assert_eq!(invariants::edit_lock_owner(&app.db, &key).map(|(u, _)| u), Some(carol.id), "still carol's");
    assert_eq!(invariants::edit_lock_expiry(&app.db, &key), before, "not even renewed");
    assert_eq!(invariants::audit_actions(&app.db, &key), ["edit_lock.acquired"]);
}

//! The edit lock as people meet it, in headless Chromium: carol opens the editor, bob sees that
//! carol is editing, an admin force-releases carol's lock, carol's page learns it lost the lock
//! (its heartbeat is refused) and her save shows her input back, and bob takes the lock. And a
//! takeover that keeps carol's work: what she typed survives as her draft, she reads the record
//! read-only while the admin holds it, and she gets her draft back and saves it.

use std::time::Duration;

use fantoccini::Locator;
use haita::auth::Role;

use crate::common::browser::{Chromedriver, log_in, text_when_shown};
use crate::common::{Client as HttpClient, TestApp, invariants};

#[actix_web::test]
async fn bob_sees_carol_editing_and_takes_the_lock_after_an_admin_force_release() {
    // A short TTL makes the page's heartbeat run every second, so the test sees it work.
    let app = TestApp::spawn_instances(1, |c| c.edit_lock_ttl = Duration::from_secs(3)).await;
    let resource = app.resource("Meeting room", 2);
    let (carol, bob, _root) =
        (app.user("carol", Role::Staff), app.user("bob", Role::Staff), app.user("root", Role::Admin));
    let key = format!("resource:{resource}");
    let base = app.address().to_string();
    let edit = format!("{base}/resources/{resource}/edit");

    let mut driver = Chromedriver::start();
    let (carols, bobs, admins) = (driver.browser().await, driver.browser().await, driver.browser().await);
    log_in(&carols, &base, "carol").await;
    log_in(&bobs, &base, "bob").await;
    log_in(&admins, &base, "root").await;

    carols.goto(&edit).await.expect("carol opens the editor");
    text_when_shown(&carols, "#lock-status").await;
    assert_eq!(invariants::edit_lock_owner(&app.db, &key).map(|(u, _)| u), Some(carol.id));
    let first_beat = invariants::edit_lock_expiry(&app.db, &key).expect("lock");

    bobs.goto(&edit).await.expect("bob opens the editor");
    let holder = text_when_shown(&bobs, "#holder").await;
    assert!(holder.contains("carol (carol) is editing this since"), "{holder}");
    assert!(bobs.find(Locator::Css("#edit-form")).await.is_err(), "bob gets no form");

    // The page's script keeps carol's lock alive (the database clock moves its expiry on).
    for _ in 0..100 {
        if invariants::edit_lock_expiry(&app.db, &key).expect("lock") > first_beat {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(invariants::edit_lock_expiry(&app.db, &key).expect("lock") > first_beat, "heartbeat sent");

    admins.goto(&format!("{base}/admin/locks")).await.expect("locks screen");
    let row = format!("tr[data-key=\"{key}\"]");
    admins
        .find(Locator::Css(&format!("{row} input[name=reason]")))
        .await
        .expect("reason field")
        .send_keys("carol left for lunch")
        .await
        .expect("type");
    admins.find(Locator::Css(&format!("{row} button"))).await.expect("button").click().await.expect("click");
    assert!(text_when_shown(&admins, "#done").await.contains(&key));
    assert_eq!(invariants::edit_lock_owner(&app.db, &key), None);

    // Carol's next heartbeat is refused and her page says so; her save shows her input back.
    let lost = text_when_shown(&carols, "#lock-lost").await;
    assert!(lost.contains("do not hold the edit lock"), "{lost}");
    assert!(lost.contains("carol left for lunch"), "the admin's reason reaches her: {lost}");
    let name = carols.find(Locator::Css("input[name=name]")).await.expect("name field");
    name.clear().await.expect("clear");
    name.send_keys("Carol's new name").await.expect("type");
    carols.find(Locator::Css("#save")).await.expect("save").click().await.expect("click");
    let refused = text_when_shown(&carols, "#refused").await;
    assert!(refused.contains("NOT saved"), "{refused}");
    let shown = carols.find(Locator::Css("#unsaved input[name=name]")).await.expect("input shown back");
    assert_eq!(shown.prop("value").await.expect("value").as_deref(), Some("Carol's new name"));

    bobs.goto(&edit).await.expect("bob tries again");
    text_when_shown(&bobs, "#lock-status").await;
    assert_eq!(invariants::edit_lock_owner(&app.db, &key).map(|(u, _)| u), Some(bob.id));
    assert_eq!(
        invariants::resource_row(&app.db, resource),
        ("Meeting room".to_string(), 2, 1),
        "nothing saved"
    );
    assert_eq!(
        invariants::audit_actions(&app.db, &key),
        ["edit_lock.acquired", "edit_lock.force_released", "edit_lock.acquired"]
    );

    for browser in [carols, bobs, admins] {
        let _ = browser.close().await;
    }
}

/// The description in carol's kept draft of `resource`, as stored.
fn drafted_description(app: &TestApp, user_id: i64, resource: i64) -> Option<String> {
    use diesel::prelude::*;
    use diesel::sql_types::{BigInt, Text};
    #[derive(QueryableByName)]
    struct Kept {
        #[diesel(sql_type = Text)]
        fields: String,
    }
    let kept: Option<Kept> = haita::db::cached_sql::<diesel::sql_types::Untyped>(
        "SELECT fields FROM edit_drafts WHERE user_id = ? AND lock_key = ?",
    )
    .bind::<BigInt, _>(user_id)
    .bind::<Text, _>(format!("resource:{resource}"))
    .get_result(&mut app.db.raw_connection())
    .optional()
    .expect("draft");
    kept.and_then(|k| serde_json::from_str::<serde_json::Value>(&k.fields).ok())
        .and_then(|f| f["description"].as_str().map(str::to_string))
}

#[actix_web::test]
async fn carols_typing_survives_an_admin_takeover_as_a_draft_she_restores_and_saves() {
    let app = TestApp::spawn_instances(1, |c| c.edit_lock_ttl = Duration::from_secs(3)).await;
    let resource = app.resource("Seminar room", 8);
    let (carol, root) = (app.user("carol", Role::Staff), app.user("root", Role::Admin));
    let key = format!("resource:{resource}");
    let base = app.address().to_string();
    let edit = format!("{base}/resources/{resource}/edit");
    let typed = "Projector fixed; the blinds stick, pull gently.";

    let mut driver = Chromedriver::start();
    let carols = driver.browser().await;
    log_in(&carols, &base, "carol").await;
    carols.goto(&edit).await.expect("carol opens the editor");
    text_when_shown(&carols, "#lock-status").await;
    let description = carols.find(Locator::Css("textarea[name=description]")).await.expect("field");
    description.clear().await.expect("clear");
    description.send_keys(typed).await.expect("type");

    // Her page keeps what she types with its heartbeat, before anything goes wrong.
    for _ in 0..100 {
        if drafted_description(&app, carol.id, resource).as_deref() == Some(typed) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(drafted_description(&app, carol.id, resource).as_deref(), Some(typed), "kept while typing");

    // An admin ends her lock and takes it (over the API, as another tool would).
    let admin = HttpClient::new(&base);
    admin.login(&root).await;
    let released = admin
        .send(reqwest::Method::DELETE, &format!("/api/v1/admin/edit-locks/{key}?reason=urgent%20fix"))
        .await;
    assert_eq!(released.status(), 200);
    assert_eq!(
        admin
            .post_json(&format!("/api/v1/resources/{resource}/edit-lock"), &serde_json::json!({}))
            .await
            .status(),
        201
    );

    // Her next heartbeat is refused; the page says her input is kept, and it is.
    let lost = text_when_shown(&carols, "#lock-lost").await;
    assert!(lost.contains("kept as your draft"), "{lost}");
    assert!(lost.contains("Your edit lock was taken") && lost.contains("urgent fix"), "who and why: {lost}");
    assert_eq!(drafted_description(&app, carol.id, resource).as_deref(), Some(typed));

    // While the admin holds the lock she can read the record as stored, without the lock.
    carols.find(Locator::Css("#lock-lost-box a")).await.expect("link").click().await.expect("click");
    let holder = text_when_shown(&carols, "#holder").await;
    assert!(holder.contains("root (root) is editing this since"), "{holder}");
    assert_eq!(text_when_shown(&carols, "#view-name").await, "Seminar room");
    assert_eq!(invariants::edit_lock_owner(&app.db, &key).map(|(u, _)| u), Some(root.id));

    // The admin is done; carol opens the editor and is offered her draft, restores and saves it.
    let done = admin.send(reqwest::Method::DELETE, &format!("/api/v1/resources/{resource}/edit-lock")).await;
    assert_eq!(done.status(), 204);
    carols.goto(&edit).await.expect("carol opens the editor again");
    let offer = text_when_shown(&carols, "#draft-offer").await;
    assert!(offer.contains("unsaved input"), "{offer}");
    carols.find(Locator::Css("#restore-draft")).await.expect("restore").click().await.expect("click");
    text_when_shown(&carols, "#notice").await;
    let restored = carols.find(Locator::Css("textarea[name=description]")).await.expect("field");
    assert_eq!(restored.prop("value").await.expect("value").as_deref(), Some(typed));
    carols.find(Locator::Css("#save")).await.expect("save").click().await.expect("click");
    carols
        .wait()
        .at_most(Duration::from_secs(20))
        .for_url(&format!("{base}/resources/{resource}?saved=1").parse().expect("url"))
        .await
        .expect("saved and back on the resource");
    assert!(text_when_shown(&carols, "#saved").await.contains("Saved"), "the save is confirmed");

    let (_, capacity, version) = invariants::resource_row(&app.db, resource);
    assert_eq!((capacity, version), (8, 2), "saved once");
    let stored: String = {
        use diesel::prelude::*;
        use haita::schema::resources::dsl as r;
        r::resources
            .filter(r::id.eq(resource))
            .select(r::description)
            .first(&mut app.db.raw_connection())
            .expect("row")
    };
    assert_eq!(stored, typed, "what she typed before the takeover is what was saved");
    assert_eq!(drafted_description(&app, carol.id, resource), None, "the draft is spent");
    let _ = carols.close().await;
}

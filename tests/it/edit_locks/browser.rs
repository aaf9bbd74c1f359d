//! The edit lock as people meet it, in headless Chromium: carol opens the editor, bob sees that
//! carol is editing, an admin force-releases carol's lock, carol's page learns it lost the lock
//! (its heartbeat is refused) and her save shows her input back, and bob takes the lock. And a
//! takeover that keeps carol's work: what she typed survives as her draft, she reads the record
//! read-only while the admin holds it, and she gets her draft back and saves it.

use std::time::Duration;

use fantoccini::Locator;
use haita::auth::Role;

use crate::common::browser::{Chromedriver, click, log_in, pick_language, text_when_shown};
use crate::common::{Client as HttpClient, TestApp, invariants, poll};

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

    // Carol's next heartbeat is refused and her page says so, with Save gone; a save sent all
    // the same (a page whose script had not run yet) shows her input back.
    let lost = text_when_shown(&carols, "#lock-lost").await;
    assert!(lost.contains("root released your lock at"), "{lost}");
    assert!(lost.contains("because: carol left for lunch"), "the admin's reason reaches her: {lost}");
    let name = carols.find(Locator::Css("input[name=name]")).await.expect("name field");
    name.clear().await.expect("clear");
    name.send_keys("Carol's new name").await.expect("type");
    carols.execute("document.getElementById('edit-form').submit()", vec![]).await.expect("submit");
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
    assert!(lost.contains("Your text is kept"), "{lost}");
    assert!(lost.contains("root released your lock") && lost.contains("urgent fix"), "who and why: {lost}");
    assert!(lost.contains("root (root) is editing this since"), "and who holds it now: {lost}");
    assert!(carols.find(Locator::Css("#reopen")).await.is_err(), "reopening cannot work while root edits");
    assert_eq!(drafted_description(&app, carol.id, resource).as_deref(), Some(typed));

    // While the admin holds the lock she can read the record as stored, without the lock.
    carols.find(Locator::Css("#lock-lost-box #read-only")).await.expect("link").click().await.expect("click");
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

/// Whether the element matching `css` is on the page and displayed.
async fn displayed(browser: &fantoccini::Client, css: &str) -> bool {
    match browser.find(Locator::Css(css)).await {
        Ok(element) => element.is_displayed().await.unwrap_or(false),
        Err(_) => false,
    }
}

/// Types `text` into the editor's description, and waits until the page's heartbeat has kept it
/// as `user_id`'s draft.
async fn type_description(
    browser: &fantoccini::Client,
    app: &TestApp,
    user_id: i64,
    resource: i64,
    text: &str,
) {
    let description = browser.find(Locator::Css("textarea[name=description]")).await.expect("field");
    description.clear().await.expect("clear");
    description.send_keys(text).await.expect("type");
    poll::until_async("the page to keep the draft with its heartbeat", Duration::from_secs(20), async || {
        drafted_description(app, user_id, resource).as_deref() == Some(text)
    })
    .await;
}

/// Issue 34, item 3: logging out in the editor ends the session's edit lock, in the logout's
/// own transaction and audited, so carol, logging in again, edits at once instead of reading
/// that "Carol (carol) is editing this" until the lock expires. Failed before the change: the
/// lock stayed with her former session and she met the "being edited" page.
#[actix_web::test]
async fn carol_logs_out_in_the_editor_and_edits_at_once_when_she_logs_in_again() {
    // The default lifetime (5 minutes): only a logout can have freed the lock in this test.
    let app = TestApp::spawn().await;
    let resource = app.resource("Reading room", 4);
    let carol = app.user("carol", Role::Staff);
    let key = format!("resource:{resource}");
    let base = app.address().to_string();
    let edit = format!("{base}/resources/{resource}/edit");

    let mut driver = Chromedriver::start();
    let browser = driver.browser().await;
    log_in(&browser, &base, "carol").await;
    browser.goto(&edit).await.expect("carol opens the editor");
    text_when_shown(&browser, "#lock-status").await;
    let (_, first_session) = invariants::edit_lock_owner(&app.db, &key).expect("her lock");

    click(&browser, "header form[action='/logout'] button").await;
    browser
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("a[href='/login']"))
        .await
        .expect("logged out");
    assert_eq!(invariants::edit_lock_owner(&app.db, &key), None, "the logout ended her lock");
    assert_eq!(invariants::audit_actions(&app.db, &key), ["edit_lock.acquired", "edit_lock.released"]);

    log_in(&browser, &base, "carol").await;
    browser.goto(&edit).await.expect("carol opens the editor again");
    text_when_shown(&browser, "#lock-status").await;
    assert!(browser.find(Locator::Css("#holder")).await.is_err(), "no 'being edited' page");
    let (owner, session) = invariants::edit_lock_owner(&app.db, &key).expect("her new lock");
    assert_eq!(owner, carol.id);
    assert_ne!(session, first_session, "held by the session she logged in with");
    let _ = browser.close().await;
}

/// Issue 34, item 3: carol in two browsers. The second is offered "continue here" at once (no
/// waiting for expiry, no "take over" from herself); what she typed in the first comes along; the
/// first learns it in a sentence about *her*, loses its Save, and a save it sends anyway is
/// refused (the continuation is a new acquisition, with a new fencing epoch). In English and
/// Japanese. Failed before the change: the second browser read "carol (carol) is editing this"
/// with no way in.
#[actix_web::test]
async fn carol_in_two_browsers_continues_here_with_her_draft_and_the_first_cannot_save() {
    let app = TestApp::spawn_instances(1, |c| c.edit_lock_ttl = Duration::from_secs(3)).await;
    let base = app.address().to_string();
    let mut driver = Chromedriver::start();
    for (lang, name, elsewhere, continued, not_saved) in [
        (
            "en",
            "carol",
            "You are editing this in another browser or window since",
            "You continued editing this in another browser or window at",
            "NOT saved",
        ),
        (
            "ja",
            "kaori",
            "別のブラウザかウィンドウでこれを編集中です",
            "別のブラウザかウィンドウでこの編集を続けました",
            "保存されていません",
        ),
    ] {
        let user = app.user(name, Role::Staff);
        let resource = app.resource(&format!("Studio {lang}"), 3);
        let key = format!("resource:{resource}");
        let edit = format!("{base}/resources/{resource}/edit");
        let typed = format!("Typed in the first browser ({lang}).");
        let (first, second) = (driver.browser().await, driver.browser().await);
        for browser in [&first, &second] {
            log_in(browser, &base, name).await;
            pick_language(browser, &base, lang).await;
        }

        first.goto(&edit).await.expect("the first browser opens the editor");
        text_when_shown(&first, "#lock-status").await;
        type_description(&first, &app, user.id, resource, &typed).await;
        let (_, first_session) = invariants::edit_lock_owner(&app.db, &key).expect("lock");
        let first_epoch = lock_epoch(&app, &key);

        second.goto(&edit).await.expect("the second browser opens the editor");
        let holder = text_when_shown(&second, "#holder").await;
        assert!(holder.contains(elsewhere), "{lang}: {holder}");
        assert!(
            !holder.contains(&format!("({name})")),
            "{lang}: never about herself in the third person: {holder}"
        );
        assert!(second.find(Locator::Css("#take-over")).await.is_err(), "{lang}: no take-over from herself");
        click(&second, "#continue-here").await;
        text_when_shown(&second, "#lock-status").await;
        let description = second.find(Locator::Css("textarea[name=description]")).await.expect("field");
        assert_eq!(
            description.prop("value").await.expect("value"),
            Some(typed.clone()),
            "{lang}: the draft comes along"
        );
        let (owner, session) = invariants::edit_lock_owner(&app.db, &key).expect("lock");
        assert_eq!(owner, user.id);
        assert_ne!(session, first_session, "{lang}: the lock moved to the second browser");
        assert!(lock_epoch(&app, &key) > first_epoch, "{lang}: a new acquisition, a new fencing epoch");

        // The first browser is told, about herself, and offered only what can work.
        let lost = text_when_shown(&first, "#lock-lost").await;
        assert!(lost.contains(continued), "{lang}: {lost}");
        assert!(
            !displayed(&first, "#save").await && !displayed(&first, "#cancel-form").await,
            "{lang}: Save and Cancel hidden"
        );
        assert!(displayed(&first, "#read-only").await, "{lang}: the read-only view offered");
        // A save sent anyway (as by a page whose script did not run) is refused.
        first.execute("document.getElementById('edit-form').submit()", vec![]).await.expect("submit");
        let refused = text_when_shown(&first, "#refused").await;
        assert!(refused.contains(not_saved), "{lang}: {refused}");
        assert_eq!(invariants::resource_row(&app.db, resource).2, 1, "{lang}: nothing saved");
        assert_eq!(invariants::audit_actions(&app.db, &key), ["edit_lock.acquired", "edit_lock.taken_over"]);
        for browser in [first, second] {
            let _ = browser.close().await;
        }
    }
}

/// The fencing epoch of the lock `key`.
fn lock_epoch(app: &TestApp, key: &str) -> i64 {
    use diesel::prelude::*;
    use haita::schema::edit_locks::dsl as l;
    l::edit_locks
        .filter(l::lock_key.eq(key))
        .select(l::epoch)
        .first(&mut app.db.raw_connection())
        .expect("lock")
}

/// Issue 34, item 4: an admin force-releases carol's lock with a reason; her page says who, when
/// (in her own time zone, named) and why, that her text is kept, offers "open the editor again"
/// and the read-only view, and no longer Save nor "Cancel and release the lock". Reopening works:
/// the editor opens with her draft offered. In English and Japanese, in a browser in Tokyo.
/// Failed before the change: the page read "You do not hold the edit lock resource:… Last lock
/// event: edit_lock.force_released by root … held by carol (session …) …", in UTC, beside Save.
#[actix_web::test]
async fn a_force_release_tells_carol_who_when_and_why_in_her_zone_and_offers_what_works() {
    let app = TestApp::spawn_instances(1, |c| c.edit_lock_ttl = Duration::from_secs(3)).await;
    let root = app.user("root", Role::Admin);
    let base = app.address().to_string();
    let admin = HttpClient::new(&base);
    admin.login(&root).await;
    let mut driver = Chromedriver::start_in_time_zone(Some("Asia/Tokyo"));
    for (lang, name, said, why, kept) in [
        ("en", "carol", "root released your lock at", "because: Carol went to lunch.", "Your text is kept"),
        ("ja", "kaori", "root さんが", "解放しました。理由:Carol went to lunch", "入力は残っています"),
    ] {
        let user = app.user(name, Role::Staff);
        let resource = app.resource(&format!("Lab bench {lang}"), 2);
        let key = format!("resource:{resource}");
        let edit = format!("{base}/resources/{resource}/edit");
        let browser = driver.browser().await;
        log_in(&browser, &base, name).await;
        pick_language(&browser, &base, lang).await;
        browser.goto(&edit).await.expect("she opens the editor");
        text_when_shown(&browser, "#lock-status").await;
        let typed = format!("Whiteboard markers in the drawer ({lang}).");
        type_description(&browser, &app, user.id, resource, &typed).await;

        let released = admin
            .send(
                reqwest::Method::DELETE,
                &format!("/api/v1/admin/edit-locks/{key}?reason=Carol%20went%20to%20lunch"),
            )
            .await;
        assert_eq!(released.status(), 200);

        let lost = text_when_shown(&browser, "#lock-lost").await;
        assert!(lost.contains(said) && lost.contains(why) && lost.contains(kept), "{lang}: {lost}");
        assert!(!lost.contains("edit_lock.") && !lost.contains("session"), "{lang}: no log line: {lost}");
        let time = browser.find(Locator::Css("#lock-lost time")).await.expect("when");
        let shown = time.text().await.expect("text");
        assert!(
            !shown.contains("UTC") && (shown.contains("GMT+9") || shown.contains("JST")),
            "{lang}: in Tokyo time, named: {shown:?}"
        );
        assert!(
            displayed(&browser, "#reopen").await && displayed(&browser, "#read-only").await,
            "{lang}: what works"
        );
        assert!(!displayed(&browser, "#save").await, "{lang}: no Save");
        assert!(!displayed(&browser, "#cancel-form").await, "{lang}: no Cancel and release");

        click(&browser, "#reopen").await;
        text_when_shown(&browser, "#draft-offer").await;
        assert_eq!(
            invariants::edit_lock_owner(&app.db, &key).map(|(u, _)| u),
            Some(user.id),
            "{lang}: hers again"
        );
        let _ = browser.close().await;
    }
}

/// Take over from the editor itself: an admin who opens a record carol is editing is offered,
/// on that "carol is editing" screen, the locks page's force release (a reason, audited) and is
/// taken on to the editor holding the lock; carol's page says who released it and why. Staff
/// are not offered it. In English and Japanese.
#[actix_web::test]
async fn an_admin_takes_over_from_the_editing_screen_with_a_reason_in_the_audit_log() {
    let app = TestApp::spawn_instances(1, |c| c.edit_lock_ttl = Duration::from_secs(3)).await;
    let root = app.user("root", Role::Admin);
    app.user("bob", Role::Staff);
    let base = app.address().to_string();
    let mut driver = Chromedriver::start();
    for (lang, name, reason, said) in [
        ("en", "carol", "Carol is on leave today", "root released your lock at"),
        ("ja", "kaori", "本日は休暇のため", "root さんが"),
    ] {
        let holder = app.user(name, Role::Staff);
        let resource = app.resource(&format!("Lab bench {lang}"), 2);
        let key = format!("resource:{resource}");
        let edit = format!("{base}/resources/{resource}/edit");
        let (hers, bobs, admins) = (driver.browser().await, driver.browser().await, driver.browser().await);
        for (browser, who) in [(&hers, name), (&bobs, "bob"), (&admins, "root")] {
            log_in(browser, &base, who).await;
            pick_language(browser, &base, lang).await;
        }
        hers.goto(&edit).await.expect("she opens the editor");
        text_when_shown(&hers, "#lock-status").await;

        bobs.goto(&edit).await.expect("bob opens the editor");
        text_when_shown(&bobs, "#holder").await;
        assert!(!displayed(&bobs, "#force-release").await, "{lang}: staff may not force-release");

        admins.goto(&edit).await.expect("the admin opens the editor");
        text_when_shown(&admins, "#holder").await;
        let field = admins.find(Locator::Css("#force-release input[name=reason]")).await.expect("a reason");
        field.send_keys(reason).await.expect("type");
        click(&admins, "#force-release button").await;
        text_when_shown(&admins, "#lock-status").await;
        assert_eq!(
            invariants::edit_lock_owner(&app.db, &key).map(|(u, _)| u),
            Some(root.id),
            "{lang}: the admin holds the lock, in the editor"
        );
        assert_eq!(
            invariants::audit_actions(&app.db, &key),
            ["edit_lock.acquired", "edit_lock.force_released", "edit_lock.acquired"],
            "{lang}"
        );
        let detail: String = {
            use diesel::prelude::*;
            use haita::schema::audit_events::dsl as a;
            a::audit_events
                .filter(a::subject.eq(&key).and(a::action.eq("edit_lock.force_released")))
                .select(a::detail)
                .first(&mut app.db.raw_connection())
                .expect("the release's audit event")
        };
        assert!(detail.contains(reason) && detail.contains(name), "{lang}: {detail}");

        let lost = text_when_shown(&hers, "#lock-lost").await;
        assert!(lost.contains(said) && lost.contains(reason), "{lang}: {lost}");
        assert_ne!(invariants::edit_lock_owner(&app.db, &key).map(|(u, _)| u), Some(holder.id));
        for browser in [hers, bobs, admins] {
            let _ = browser.close().await;
        }
    }
}

//! The edit lock as people meet it, in headless Chromium: carol opens the editor, bob sees that
//! carol is editing, an admin force-releases carol's lock, carol's page learns it lost the lock
//! (its heartbeat is refused) and her save shows her input back, and bob takes the lock.

use std::time::Duration;

use fantoccini::Locator;
use haita::auth::Role;

use crate::common::browser::{Chromedriver, log_in, text_when_shown};
use crate::common::{TestApp, invariants};

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

//! The admin's locks screen and force releases: edit locks (rows) and named locks (sessions),
//! who may use them, and what the audit log says afterwards.

use std::time::Duration;

use diesel::prelude::*;
use haita::auth::Role;
use haita::db::dialect::postgres::ADVISORY_LABEL;
use haita::db::{DbConn, Engine};
use haita::edit_locks::service::{self, Policy};
use haita::edit_locks::{EditLockKey, Owner};
use haita::locking::{LockName, Turn};
use rand::Rng;
use serde_json::{Value, json};

use crate::common::{
    Client, TestApp, TestDb, TestUser, accounts, error_code, invariants, lock_epoch_in, on_both_engines,
    server,
};

async fn logged_in(app: &TestApp, name: &str, role: Role) -> (TestUser, Client) {
    let user = app.user(name, role);
    let client = app.client(0);
    client.login(&user).await;
    (user, client)
}

async fn post_form(client: &Client, path: &str, fields: &[(&str, &str)]) -> reqwest::Response {
    let token = client.csrf_token("/").await;
    let mut form = vec![("csrf_token", token.as_str())];
    form.extend_from_slice(fields);
    client.post_form(path, &form).await
}

/// How the admin's listing names `name`: itself, or on PostgreSQL its advisory key (a key does
/// not tell the name it was hashed from).
fn listed_as(db: &TestDb, name: &LockName) -> String {
    match db.pool.engine() {
        Engine::Mysql => name.to_string(),
        Engine::Postgres => format!("{ADVISORY_LABEL}{}", name.advisory_key()),
    }
}

on_both_engines!(
    a_force_release_refuses_the_holders_save_shows_their_input_and_is_audited,
    a_force_release_refuses_the_holders_save_shows_their_input_and_is_audited_on_postgres
        => force_release_refuses_the_holders_save
);

/// The admin's locks screen reads edit locks, named locks, deadlock reports and batch runs, each
/// in its engine's words.
async fn force_release_refuses_the_holders_save(db: TestDb) {
    let app = TestApp::spawn_on(db, 1, |_| {}).await;
    let resource = app.resource("Meeting room", 4);
    let (_, carol) = logged_in(&app, "carol", Role::Staff).await;
    let (_, admin) = logged_in(&app, "root", Role::Admin).await;
    let key = format!("resource:{resource}");
    let editor = carol.open_editor(resource).await;
    assert_eq!(editor.status(), 200);
    let epoch = lock_epoch_in(&editor.text().await.expect("page")).expect("the editor names its epoch");

    let screen = admin.get("/admin/locks").await.text().await.expect("page");
    assert!(screen.contains(&format!("data-key=\"{key}\"")) && screen.contains("carol"), "listed");
    let no_reason =
        post_form(&admin, "/admin/edit-locks/force-release", &[("key", &key), ("reason", " ")]).await;
    assert_eq!(no_reason.status(), 422, "a reason is required");
    assert!(invariants::edit_lock_owner(&app.db, &key).is_some());

    let released =
        post_form(&admin, "/admin/edit-locks/force-release", &[("key", &key), ("reason", "carol went home")])
            .await;
    assert_eq!(released.status(), 303);
    assert_eq!(invariants::edit_lock_owner(&app.db, &key), None);

    let token = carol.csrf_token("/").await;
    let refused = carol
        .post_form(
            &format!("/resources/{resource}/edit"),
            &[
                ("csrf_token", &token),
                ("lock_epoch", &epoch),
                ("name", "Board room"),
                ("description", "typed for an hour"),
                ("capacity", "6"),
            ],
        )
        .await;
    assert_eq!(refused.status(), 423);
    let page = refused.text().await.expect("page");
    assert!(page.contains("NOT saved") && page.contains("root released your lock at"), "told who: {page}");
    assert!(page.contains("because: carol went home."), "and why");
    assert!(page.contains("value=\"Board room\"") && page.contains("typed for an hour"), "input shown back");
    assert!(page.contains("id=\"take-over\""), "and may take the lock again with it");
    assert_eq!(invariants::resource_row(&app.db, resource), ("Meeting room".to_string(), 4, 1));

    let log: Value = admin.get("/api/v1/admin/audit").await.json().await.expect("json");
    let newest = &log["events"][0];
    assert_eq!(
        (newest["action"].as_str(), newest["actor"].as_str()),
        (Some("edit_lock.force_released"), Some("root"))
    );
    assert!(newest["detail"].as_str().is_some_and(|d| d.contains("carol went home") && d.contains("carol")));

    // The same through the JSON API; the holder's PATCH is refused afterwards.
    let acquired = carol.post_json(&format!("/api/v1/resources/{resource}/edit-lock"), &json!({})).await;
    assert_eq!(acquired.status(), 201);
    let lock: Value = acquired.json().await.expect("lock");
    let path = format!("/api/v1/admin/edit-locks/{key}?reason=stuck%20client");
    assert_eq!(admin.send(reqwest::Method::DELETE, &path).await.status(), 200);
    let patch = carol
        .http
        .patch(carol.url(&format!("/api/v1/resources/{resource}")))
        .header("Edit-Lock-Epoch", lock["epoch"].to_string())
        .json(&json!({"capacity": 6}))
        .send()
        .await
        .expect("PATCH");
    assert_eq!((patch.status().as_u16(), error_code(patch).await.as_str()), (423, "edit_lock_not_held"));
    assert_eq!(admin.send(reqwest::Method::DELETE, &path).await.status(), 404, "nothing left to release");
    assert_eq!(
        invariants::audit_actions(&app.db, &key),
        ["edit_lock.acquired", "edit_lock.force_released", "edit_lock.acquired", "edit_lock.force_released"]
    );
}

#[actix_web::test]
async fn only_admins_reach_any_admin_route_or_action() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Room", 1);
    let key = format!("resource:{resource}");
    let (_, carol) = logged_in(&app, "carol", Role::Staff).await;
    let (_, alice) = logged_in(&app, "alice", Role::Customer).await;
    assert_eq!(
        carol.post_json(&format!("/api/v1/resources/{resource}/edit-lock"), &json!({})).await.status(),
        201
    );
    let named = "haita:test:nobody";

    for client in [&carol, &alice] {
        for path in
            ["/admin/locks", "/admin/audit", "/admin/metrics", "/api/v1/admin/locks", "/api/v1/admin/audit"]
        {
            assert_eq!(client.get(path).await.status(), 403, "GET {path}");
        }
        assert_eq!(client.get(&format!("/api/v1/admin/named-locks/{named}")).await.status(), 403);
        let forms: [(&str, &[(&str, &str)]); 4] = [
            ("/admin/edit-locks/force-release", &[("key", &key), ("reason", "because")]),
            ("/admin/edit-locks/release-expired", &[]),
            ("/admin/named-locks/force-release", &[("name", named), ("reason", "because")]),
            ("/admin/batch/price-revision", &[("revision", "r"), ("percent", "5"), ("policy", "wait")]),
        ];
        for (path, fields) in forms {
            assert_eq!(post_form(client, path, fields).await.status(), 403, "POST {path}");
        }
        for (method, path) in [
            (reqwest::Method::DELETE, format!("/api/v1/admin/edit-locks/{key}?reason=because")),
            (reqwest::Method::POST, "/api/v1/admin/edit-locks/release-expired".to_string()),
            (reqwest::Method::DELETE, format!("/api/v1/admin/named-locks/{named}?reason=because")),
        ] {
            let response = client.send(method.clone(), &path).await;
            assert_eq!(
                (response.status().as_u16(), error_code(response).await.as_str()),
                (403, "forbidden"),
                "{method} {path}"
            );
        }
    }
    let anonymous = app.client(0);
    assert_eq!(anonymous.get("/api/v1/admin/locks").await.status(), 401);
    assert_eq!(anonymous.get("/admin/locks").await.status(), 303, "a browser is sent to log in");
    assert_eq!(anonymous.get("/admin/metrics").await.status(), 303);
    assert_eq!(
        anonymous
            .send(reqwest::Method::DELETE, &format!("/api/v1/admin/edit-locks/{key}?reason=x"))
            .await
            .status(),
        401
    );
    assert!(invariants::edit_lock_owner(&app.db, &key).is_some(), "nobody but an admin released it");
    assert!(invariants::audit_actions(&app.db, &key).iter().all(|a| a == "edit_lock.acquired"));
}

#[actix_web::test]
async fn a_leaked_named_lock_is_listed_with_its_connection_and_the_admins_force_release_frees_it() {
    let app = TestApp::spawn().await;
    let (_, admin) = logged_in(&app, "root", Role::Admin).await;
    let name = app.db.pool.names().name("test", &format!("{:016x}", rand::rng().random::<u64>()));
    let mut leaker = app.db.raw_connection();
    assert!(server::try_lock(&mut leaker, &name));
    let leaker_id = server::connection_id(&mut leaker).expect("id");
    let listed = listed_as(&app.db, &name);

    let found = admin.listed_named_lock(&listed).await;
    assert_eq!(found["connection_id"].as_i64(), Some(leaker_id));
    assert!(found["state_secs"].as_i64().is_some());
    let screen = admin.get("/admin/locks").await.text().await.expect("page");
    assert!(
        screen.contains(&format!("data-name=\"{listed}\" data-connection=\"{leaker_id}\"")),
        "on the screen"
    );
    let lookup: Value =
        admin.get(&format!("/api/v1/admin/named-locks/{name}")).await.json().await.expect("json");
    assert_eq!(lookup["connection_id"].as_i64(), Some(leaker_id), "the lookup by name agrees");

    let foreign =
        admin.send(reqwest::Method::DELETE, "/api/v1/admin/named-locks/other_app:lock?reason=no").await;
    assert_eq!((foreign.status().as_u16(), error_code(foreign).await.as_str()), (422, "not_haita_lock"));
    let stale = post_form(
        &admin,
        "/admin/named-locks/force-release",
        &[
            ("name", name.as_str()),
            ("connection_id", &(leaker_id + 1_000_000).to_string()),
            ("reason", "stale screen"),
        ],
    )
    .await;
    assert_eq!(stale.status(), 409, "the holder is re-checked before any KILL");
    assert_eq!(
        server::holder_of(&mut app.db.raw_connection(), name.as_str()).expect("holder"),
        Some(leaker_id)
    );

    // Freed as the screen's button does it: with the name as listed.
    let killed = post_form(
        &admin,
        "/admin/named-locks/force-release",
        &[
            ("name", listed.as_str()),
            ("connection_id", &leaker_id.to_string()),
            ("reason", "leaked by a test"),
        ],
    )
    .await;
    assert_eq!(killed.status(), 303);
    assert_eq!(killed.headers()["location"], format!("/admin/locks?killed={leaker_id}&freed=true").as_str());
    let mut next = app.db.raw_connection();
    assert!(server::lock_within(&mut next, &name, Duration::from_secs(5)), "another session gets it");
    assert!(
        haita::db::cached_sql::<diesel::sql_types::Untyped>("SELECT 1").execute(&mut leaker).is_err(),
        "the leaking session was ended"
    );
    assert_eq!(invariants::audit_actions(&app.db, &listed), ["named_lock.force_released"]);
}

on_both_engines!(
    a_session_of_another_database_account_holding_our_lock_is_not_killed,
    a_session_of_another_database_account_holding_our_lock_is_not_killed_on_postgres
        => another_accounts_session_is_not_killed
);

/// A name with our prefix says nothing about who took it: any session on the server may ask for
/// it (a person's CLI, another application). The force release ends only sessions of the app's
/// own account in its own database; another's is refused with a sentence naming whose it is,
/// and keeps its lock. Our own leaked session is freed as before.
async fn another_accounts_session_is_not_killed(db: TestDb) {
    let app = TestApp::spawn_on(db, 1, |_| {}).await;
    let (_, admin) = logged_in(&app, "root", Role::Admin).await;
    let name = app.db.pool.names().name("test", &format!("{:016x}", rand::rng().random::<u64>()));
    let engine = app.db.pool.engine();
    let other = accounts::Account::create(&mut app.db.raw_connection(), &app.db.url, "haita_o_");
    // MySQL's named locks are server-wide, so the other account needs no database (and has no
    // grant on ours); PostgreSQL's advisory locks belong to a database, which PUBLIC may join.
    let database = if engine == Engine::Postgres { app.db.name.as_str() } else { "" };
    let mut theirs = DbConn::open(&other.url(&app.db.url, database)).expect("their session");
    assert!(server::try_lock(&mut theirs, &name));
    let their_id = server::connection_id(&mut theirs).expect("id");

    let refused = admin
        .send(
            reqwest::Method::DELETE,
            &format!("/api/v1/admin/named-locks/{name}?reason=not%20ours&connection_id={their_id}"),
        )
        .await;
    assert_eq!(refused.status(), 409);
    let body: Value = refused.json().await.expect("json");
    assert_eq!(body["error"], "not_our_session", "{body}");
    let said = body["message"].as_str().expect("message");
    assert!(said.contains(&other.user) && said.contains(&their_id.to_string()), "whose session: {said}");
    assert_eq!(
        server::holder_of(&mut app.db.raw_connection(), name.as_str()).expect("holder"),
        Some(their_id),
        "their lock is still held"
    );
    assert!(
        haita::db::cached_sql::<diesel::sql_types::Untyped>("SELECT 1").execute(&mut theirs).is_ok(),
        "their session lives on"
    );
    let page = post_form(
        &admin,
        "/admin/named-locks/force-release",
        &[("name", name.as_str()), ("connection_id", &their_id.to_string()), ("reason", "not ours")],
    )
    .await;
    assert_eq!(page.status(), 409, "the screen's button is refused the same way");
    assert!(page.text().await.expect("page").contains(&other.user), "and says whose session it is");
    assert!(server::release(&mut theirs, &name));
    drop(theirs);

    if engine == Engine::Mysql {
        // The app's own account, but outside its database (a person's CLI as the same user):
        // not the app's session either. (A PostgreSQL advisory lock belongs to one database.)
        let mut elsewhere = DbConn::open(&accounts::url_without_database(&app.db.url)).expect("session");
        assert!(server::try_lock(&mut elsewhere, &name));
        let elsewhere_id = server::connection_id(&mut elsewhere).expect("id");
        let refused = admin
            .send(
                reqwest::Method::DELETE,
                &format!("/api/v1/admin/named-locks/{name}?reason=not%20ours&connection_id={elsewhere_id}"),
            )
            .await;
        assert_eq!(refused.status(), 409);
        let body: Value = refused.json().await.expect("json");
        assert_eq!(body["error"], "not_our_session", "{body}");
        assert!(body["message"].as_str().is_some_and(|m| m.contains("no database")), "{body}");
        assert!(server::release(&mut elsewhere, &name), "still its lock");
    }

    // Our own account's session, in our own database, is still ours to end.
    let mut ours = app.db.session_holding(&name);
    let our_id = server::connection_id(&mut ours).expect("id");
    let killed = admin
        .send(
            reqwest::Method::DELETE,
            &format!("/api/v1/admin/named-locks/{name}?reason=leaked&connection_id={our_id}"),
        )
        .await;
    assert_eq!(killed.status(), 200);
    assert!(
        haita::db::cached_sql::<diesel::sql_types::Untyped>("SELECT 1").execute(&mut ours).is_err(),
        "our leaked session was ended"
    );
}

/// Named locks are server-wide: another deployment (another database on the same server) holds
/// a lock with the same scope and key. This deployment's admin neither lists it nor may kill it,
/// and this deployment's bookings do not wait for it.
#[actix_web::test]
async fn another_deployments_locks_are_neither_listed_nor_killable_nor_in_the_way() {
    let app = TestApp::spawn().await;
    let other = TestApp::spawn().await;
    let (_, admin) = logged_in(&app, "root", Role::Admin).await;
    let resource = app.resource("Shared id", 1);
    let day = crate::common::future_day();
    let theirs = other.db.pool.names().booking(resource, day);
    let ours = app.db.pool.names().booking(resource, day);
    assert_ne!(theirs, ours, "same resource id and day, different deployments");
    let mut their_session = other.db.raw_connection();
    assert!(server::try_lock(&mut their_session, &theirs));

    let listing: Value = admin.get("/api/v1/admin/locks").await.json().await.expect("json");
    let prefix = listing["named_locks"]["prefix"].as_str().expect("prefix").to_string();
    assert_eq!(prefix, app.db.pool.names().prefix());
    let names: Vec<&str> = listing["named_locks"]["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .filter_map(|l| l["name"].as_str())
        .collect();
    assert!(!names.contains(&listed_as(&other.db, &theirs).as_str()), "their lock is not listed: {names:?}");
    if app.db.pool.engine() == Engine::Mysql {
        // On PostgreSQL the listing is of this database's advisory locks, by key.
        assert!(names.iter().all(|n| n.starts_with(&prefix)), "only this deployment's locks: {names:?}");
    }
    let kill = admin
        .send(reqwest::Method::DELETE, &format!("/api/v1/admin/named-locks/{theirs}?reason=not%20mine"))
        .await;
    assert_eq!((kill.status().as_u16(), error_code(kill).await.as_str()), (422, "not_haita_lock"));
    assert!(
        haita::db::cached_sql::<diesel::sql_types::Untyped>("SELECT 1").execute(&mut their_session).is_ok(),
        "their session lives on"
    );

    let customer = app.client(1);
    customer.login(&app.user("booker", Role::Customer)).await;
    assert_eq!(customer.book(resource, day).await.status(), 201, "their lock is not ours to wait for");
}

#[actix_web::test]
async fn batch_held_locks_cannot_be_force_released_and_release_all_expired_skips_them() {
    let app = TestApp::spawn_instances(1, |c| c.edit_lock_ttl = Duration::from_secs(1)).await;
    let (online, batch) = (app.resource("Online", 1), app.resource("Batch", 1));
    let (_, carol) = logged_in(&app, "carol", Role::Staff).await;
    let (root, admin) = logged_in(&app, "root", Role::Admin).await;
    let (online_key, batch_key) = (format!("resource:{online}"), format!("resource:{batch}"));

    assert_eq!(
        carol.post_json(&format!("/api/v1/resources/{batch}/edit-lock"), &json!({})).await.status(),
        201
    );
    // The nightly job takes the lock from carol (a batch's "steal" strategy).
    let operator = Owner { user_id: root.id, session: "batch:nightly".into() };
    service::acquire(
        &app.db.pool,
        Turn::unqueued(app.db.pool.names().edit_lock(&batch_key), Duration::from_secs(5)),
        Duration::from_secs(1),
        &EditLockKey::resource(batch),
        &operator,
        Policy::SeizeForBatch,
    )
    .expect("batch seizes the lock");
    assert_eq!(
        invariants::edit_lock_owner(&app.db, &batch_key),
        Some((root.id, "batch:nightly".to_string()))
    );
    let refused = admin
        .send(reqwest::Method::DELETE, &format!("/api/v1/admin/edit-locks/{batch_key}?reason=try"))
        .await;
    assert_eq!((refused.status().as_u16(), error_code(refused).await.as_str()), (409, "batch_held"));

    assert_eq!(
        carol.post_json(&format!("/api/v1/resources/{online}/edit-lock"), &json!({})).await.status(),
        201
    );
    invariants::wait_until_edit_lock_expired(&app.db, &online_key);
    invariants::wait_until_edit_lock_expired(&app.db, &batch_key);
    let released = admin.post_json("/api/v1/admin/edit-locks/release-expired", &json!({})).await;
    assert_eq!(released.status(), 200);
    let released: Value = released.json().await.expect("json");
    let keys: Vec<&str> =
        released["released"].as_array().expect("list").iter().filter_map(|l| l["key"].as_str()).collect();
    assert_eq!(keys, [online_key.as_str()]);
    assert_eq!(invariants::edit_lock_owner(&app.db, &online_key), None);
    assert!(invariants::edit_lock_owner(&app.db, &batch_key).is_some(), "the batch keeps its lock");
    assert_eq!(invariants::audit_actions(&app.db, &online_key), ["edit_lock.acquired", "edit_lock.expired"]);
    assert_eq!(
        invariants::audit_actions(&app.db, &batch_key),
        ["edit_lock.acquired", "edit_lock.batch_seized"]
    );
}

#[actix_web::test]
async fn the_audit_log_pages_newest_first() {
    let app = TestApp::spawn().await;
    let resource = app.resource("Room", 1);
    let (_, carol) = logged_in(&app, "carol", Role::Staff).await;
    let (_, admin) = logged_in(&app, "root", Role::Admin).await;
    let url = format!("/api/v1/resources/{resource}/edit-lock");
    for _ in 0..3 {
        assert_eq!(carol.post_json(&url, &json!({})).await.status(), 201);
        assert_eq!(carol.send(reqwest::Method::DELETE, &url).await.status(), 204);
    }

    let first: Value = admin.get("/api/v1/admin/audit?limit=4").await.json().await.expect("json");
    let ids = |page: &Value| {
        page["events"].as_array().expect("events").iter().filter_map(|e| e["id"].as_i64()).collect::<Vec<_>>()
    };
    let first_ids = ids(&first);
    assert_eq!(first_ids.len(), 4);
    assert!(first_ids.windows(2).all(|w| w[0] > w[1]), "newest first: {first_ids:?}");
    assert_eq!(first["events"][0]["action"], "edit_lock.released");
    let older = first["older"].as_i64().expect("an older page");
    let second: Value =
        admin.get(&format!("/api/v1/admin/audit?limit=4&before={older}")).await.json().await.expect("json");
    assert_eq!(ids(&second).len(), 2);
    assert!(second["older"].is_null(), "last page");
    assert!(ids(&second).iter().all(|id| *id < older));

    let html = admin.get(&format!("/admin/audit?before={older}")).await;
    assert_eq!(html.status(), 200);
    assert!(html.text().await.expect("page").contains("edit_lock.acquired"));
}

/// Issue 34, item 9: the audit page says what it records and where what it does not record is
/// found (bookings, orders, stock receipts and product saves are their own records; batch runs
/// are listed on the locks page), in English and Japanese.
#[actix_web::test]
async fn the_audit_page_says_what_it_records_and_where_the_rest_is() {
    let app = TestApp::spawn().await;
    let (_, admin) = logged_in(&app, "auditor", Role::Admin).await;
    for (lang, words) in [
        ("en", ["bookings", "orders", "stock receipts", "product saves", "batch runs"]),
        ("ja", ["予約", "注文", "入荷", "商品の保存", "バッチ"]),
    ] {
        admin.speak(lang).await;
        let page = admin.get("/admin/audit").await.text().await.expect("page");
        let about =
            page.split("<h1>").nth(1).and_then(|rest| rest.split("id=\"audit\"").next()).unwrap_or("");
        let about = about.split("<nav class=\"pager\"").next().unwrap_or(about);
        for word in words {
            assert!(about.contains(word), "{lang}: {word:?} not said: {about}");
        }
        assert!(
            about.contains(r##"href="/admin/locks#batch""##),
            "{lang}: a link to the batch runs: {about}"
        );
    }
}

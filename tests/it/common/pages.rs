//! Every page of the app, as each role meets it, with something in every table: the tour the
//! phone test and the accessibility test take.

use std::time::Duration;

use haita::auth::Role;
use haita::batch::closure::Closure;
use haita::batch::guard::BatchLock;
use haita::batch::{self as batch_job, Policy};

use super::TestApp;

/// Who looks ("anonymous", or the username to log in as) and the paths they open.
pub type Tour = Vec<(&'static str, Vec<String>)>;

/// Users (root, carol, alice), a long-named room with a booking, a stay and a closed day,
/// products with a long SKU and a short one, an order and checkout holds, a batch run with its audit events and one left
/// incomplete by carol's edit lock;
/// then every page each of them may open.
pub async fn every_page(app: &TestApp) -> Tour {
    let room = app.resource("Meeting room with a rather long name, second floor, east wing", 3);
    let product = app.product("KYUSU-TOKONAME-RED-CLAY", 4800, 20);
    // A short SKU too: its card's figures fit one line, and the quantity and its Hold button must
    // still fit the card (they ran past a phone's edge beside them).
    app.product("CUP", 1800, 3);
    let root = app.user("root", Role::Admin);
    let carol = app.user("carol", Role::Staff);
    let alice_user = app.user("alice", Role::Customer);
    let day = super::future_day();
    let alice = app.client(0);
    alice.login(&alice_user).await;
    assert_eq!(alice.book(room, day).await.status(), 201);
    // A stay of three nights after the closed days below: my bookings list it from–to.
    let (check_in, check_out) = (day + chrono::Days::new(3), day + chrono::Days::new(6));
    let stay =
        serde_json::json!({"resource_id": room, "from": check_in.to_string(), "to": check_out.to_string()});
    assert_eq!(alice.post_json("/api/v1/reservations", &stay).await.status(), 201);
    assert_eq!(alice.order(&[(product, 2)]).await.status(), 201);
    // Checkout holds: one released, one live, and the last tin of matcha held, so the catalog
    // says "reserved" and "all reserved" and the checkout page lists live and ended holds.
    let matcha = app.product("MATCHA-TIN-UJI", 1800, 1);
    let hold = |product: i64| {
        let alice = &alice;
        async move {
            let held = alice
                .post_json("/api/v1/holds", &serde_json::json!({"product_id": product, "quantity": 1}))
                .await;
            assert_eq!(held.status(), 201);
            held.json::<serde_json::Value>().await.expect("json")["id"].as_i64().expect("id")
        }
    };
    // The released hold is of a product of its own: the same customer holds a product again
    // only after HOLD_COOLDOWN_SECS.
    let kukicha = app.product("KUKICHA-200G", 1200, 4);
    let released = hold(kukicha).await;
    assert_eq!(alice.send(reqwest::Method::DELETE, &format!("/api/v1/holds/{released}")).await.status(), 204);
    hold(product).await;
    hold(matcha).await;
    let closing = Closure {
        from: day + chrono::Days::new(1),
        to: day + chrono::Days::new(2),
        reason: "Repainting the walls and replacing the carpet".into(),
        resources: vec![room],
        policy: Policy::Wait,
        by: root.id,
        wait: Duration::from_secs(5),
        throttle: Duration::ZERO,
        report_dir: None,
    };
    batch_job::run(&app.db.pool, &BatchLock::Db, &closing).expect("a closure");
    // An edit lock in the admin's list, with its force-release form.
    let court = app.resource("Tennis court", 2);
    let editor = app.client(0);
    editor.login(&carol).await;
    assert_eq!(editor.open_editor(court).await.status(), 200);
    // A run that skipped the court carol edits: incomplete, with its reason and "Run again".
    let skipping = Closure {
        resources: vec![court],
        policy: Policy::Skip,
        reason: "Relining the court".into(),
        ..closing
    };
    batch_job::run(&app.db.pool, &BatchLock::Db, &skipping).expect("a closure that skips");

    vec![
        (
            "anonymous",
            vec![
                "/".into(),
                "/login".into(),
                "/resources".into(),
                format!("/resources/{room}"),
                // A stay picked: its nights and price, and the way to log in to book it.
                format!(
                    "/resources/{room}?check_in={check_out}&check_out={}",
                    check_out + chrono::Days::new(2)
                ),
                "/products".into(),
                "/no-such-page".into(),
            ],
        ),
        (
            "alice",
            vec![
                format!("/resources/{room}?from={day}"),
                // A stay picked, free to book; and one whose nights are taken (by her own stay).
                format!(
                    "/resources/{room}?check_in={check_out}&check_out={}",
                    check_out + chrono::Days::new(2)
                ),
                format!("/resources/{room}?check_in={check_in}&check_out={check_out}"),
                // Dates that are no stay: the sentence in place (422).
                format!("/resources/{room}?check_in={check_out}&check_out={check_in}"),
                "/bookings".into(),
                "/orders".into(),
                "/checkout".into(),
                "/products".into(),
                "/admin/locks".into(), // 403, on the layout
            ],
        ),
        (
            "carol",
            vec![
                format!("/resources/{room}/edit"),
                format!("/resources/{room}/view"),
                format!("/products/{product}/edit"),
                "/stock/receipts".into(),
            ],
        ),
        (
            "root",
            vec![
                "/admin/locks".into(),
                "/admin/audit".into(),
                "/admin/metrics".into(),
                // The court carol is editing: "carol is editing", and the admin's take over.
                format!("/resources/{court}/edit"),
            ],
        ),
    ]
}

//! The race as people watch it, in headless Chromium: alice starts a race from the form; a
//! visitor who had the page open before sees it appear, its counts move while it runs, the run
//! button held, and the results put in place when it ends, all without reloading.

use std::time::Duration;

use fantoccini::Client;
use haita::auth::Role;

use crate::common::TestApp;
use crate::common::browser::{Chromedriver, click, log_in, text_when_shown};

/// Polls `script` (a JavaScript expression) until it is true, for at most `secs`.
async fn until(browser: &Client, secs: u64, script: &str) -> bool {
    for _ in 0..secs * 20 {
        let seen = browser.execute(&format!("return Boolean({script});"), vec![]).await.expect("script");
        if seen.as_bool() == Some(true) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[actix_web::test]
async fn a_visitor_watches_a_race_move_and_sees_its_result_without_reloading() {
    let app = TestApp::spawn_lab().await;
    app.user("alice", Role::Customer);
    let base = app.address().to_string();
    let mut driver = Chromedriver::start();
    let (alice, visitor) = (driver.browser().await, driver.browser().await);
    log_in(&alice, &base, "alice").await;
    visitor.goto(&format!("{base}/demo")).await.expect("the demo page, before any race");
    assert!(text_when_shown(&visitor, "#results").await.contains("No race has run yet"));

    alice.goto(&format!("{base}/demo")).await.expect("demo page");
    alice
        .execute(
            "document.querySelectorAll('input[name=strategy]').forEach(box => {
                 box.checked = box.value === 'no-lock' || box.value === 'named-lock'; });
             document.querySelector('input[name=clients]').value = '8';
             document.querySelector('input[name=attempts]').value = '320';
             document.querySelector('input[name=pause_ms]').value = '20';",
            vec![],
        )
        .await
        .expect("fill the form");
    click(&alice, "button.run-race").await;
    assert!(text_when_shown(&alice, "#live").await.contains("Race in progress"));

    // The visitor's page, loaded before the race began, follows it.
    let moving = "[...document.querySelectorAll('#live-rows progress')]\
                  .some(p => p.value > 0 && p.value < p.max)";
    assert!(until(&visitor, 60, moving).await, "counts move while the race runs");
    let pending = "document.querySelector('#results').textContent.includes('A race is running')";
    assert!(until(&visitor, 5, pending).await, "where the results will be, the page says a race runs");
    assert!(
        until(&visitor, 5, "document.querySelector('button.run-race').disabled").await,
        "the visitor's button is held while a race runs"
    );
    let doubles = "[...document.querySelectorAll('#live-rows tr')]\
                   .some(r => r.textContent.includes('no-lock') && r.classList.contains('bad'))";
    assert!(until(&visitor, 60, doubles).await, "no-lock's double bookings show as they happen");

    let results = "document.querySelector('#results') && document.querySelector('#results').textContent.startsWith('Race #')";
    assert!(until(&visitor, 120, results).await, "the result is put in place when the race ends");
    assert!(text_when_shown(&visitor, "#live-status").await.contains("is over"));
    assert!(
        until(&visitor, 5, "!document.querySelector('button.run-race').disabled").await,
        "the button is free again"
    );
    let url = visitor.current_url().await.expect("url");
    assert!(url.query().is_some_and(|q| q.starts_with("race=")), "the address names the race: {url}");
    let table = text_when_shown(&visitor, "table.results").await;
    assert!(table.contains("no-lock") && table.contains("named-lock"), "{table}");
    assert!(until(&alice, 30, results).await, "and the one who started it sees it too");
    alice.close().await.expect("close");
    visitor.close().await.expect("close");
}

/// Issue 34, item 9: the button that starts a race is on the first screen, for a visitor on a
/// desktop and on a phone, and for a logged-in user on a desktop (it was some 1 900 px down,
/// under the strategies' table).
#[actix_web::test]
async fn the_race_button_is_on_the_first_screen() {
    let app = TestApp::spawn_lab().await;
    app.user("alice", Role::Customer);
    let base = app.address().to_string();
    let mut driver = Chromedriver::start();
    let mut below = Vec::new();
    for (who, width, height) in [("visitor", 1280, 800), ("visitor", 390, 844), ("alice", 1280, 800)] {
        let browser = driver.browser().await;
        browser.set_window_size(width, height).await.expect("window size");
        if who != "visitor" {
            log_in(&browser, &base, who).await;
        }
        browser.goto(&format!("{base}/demo")).await.expect("the demo page");
        let bottom = browser
            .execute(
                "const b = document.querySelector('button.run-race');
                 return b ? [b.getBoundingClientRect().bottom, window.innerHeight] : [1e9, 0];",
                vec![],
            )
            .await
            .expect("measure");
        let (bottom, screen) = (bottom[0].as_f64().unwrap_or(1e9), bottom[1].as_f64().unwrap_or(0.0));
        if bottom > screen {
            below.push(format!(
                "{who} at {width} px: the button ends {bottom:.0} px down, the screen {screen:.0}"
            ));
        }
        browser.close().await.expect("close");
    }
    assert!(below.is_empty(), "{}", below.join("\n"));
}

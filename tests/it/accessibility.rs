//! Accessibility, checked by a tool: axe-core (pinned in `tests/axe`, installed by
//! `scripts/dev test`, found through `AXE_CORE_JS`) runs in headless Chromium on every page,
//! logged out and per role, in English and in Japanese, at a desktop's and a phone's width, and
//! on the pages that answer a refusal. No serious or critical
//! violation may remain.
//!
//! What axe does not check is checked here on every page: a skip link first, the menu marking
//! the page it is on (`aria-current`), a focus ring that shows, input borders of at least 3:1
//! against their background; and on the refusals, the field in error marked `aria-invalid` and
//! holding the focus.

use std::time::Duration;

use fantoccini::{Client, Locator};
use haita::auth::Role;
use serde_json::Value;

use crate::common::TestApp;
use crate::common::browser::{Chromedriver, click, fill_login, log_in, pick_language};
use crate::common::pages::every_page;

/// axe-core's source. Missing is a failure that says how to install it, never a skip.
fn axe_source() -> String {
    let path = std::env::var("AXE_CORE_JS").unwrap_or_else(|_| {
        let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
        format!("{target}/axe/node_modules/axe-core/axe.min.js")
    });
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("axe-core not found at {path} ({e}): scripts/dev test installs it (npm ci in target/axe)")
    })
}

/// The serious and critical violations axe finds on the page shown, one line each.
async fn axe_violations(browser: &Client, axe: &str) -> Vec<String> {
    browser.execute(axe, vec![]).await.expect("axe loads");
    let found = browser
        .execute_async(
            "const done = arguments[arguments.length - 1];
             axe.run(document, { resultTypes: ['violations'] })
               .then(r => done(r.violations
                 .filter(v => v.impact === 'serious' || v.impact === 'critical')
                 .map(v => v.id + ' (' + v.impact + '): ' + v.help + ' at ' +
                           v.nodes.slice(0, 3).map(n => n.target.join(' ')).join(', '))))
               .catch(e => done(['axe failed: ' + e]));",
            vec![],
        )
        .await
        .expect("axe runs");
    found
        .as_array()
        .map(|v| v.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default()
}

/// What axe leaves out, as the list of what is wrong on the page shown. `reached_by_get`: the
/// address is the page's own, so the menu must mark the link to it (a form's answer shown at the
/// form's address marks the page it shows instead).
async fn own_checks(browser: &Client, reached_by_get: bool) -> Vec<String> {
    let found = browser
        .execute(
            r#"
            const wrong = [];
            // WCAG relative luminance and contrast.
            const rgb = c => (c.match(/[\d.]+/g) || []).map(Number);
            const lum = ([r, g, b]) => [r, g, b].map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
                                                .reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
            const contrast = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
            const background = el => {
              for (; el; el = el.parentElement) {
                const c = rgb(getComputedStyle(el).backgroundColor);
                if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c.slice(0, 3);
              }
              return [255, 255, 255];
            };
            // A skip link comes first and leads to the main content.
            const first = document.querySelector('body a, body button, body input, body select, body textarea');
            if (!first || first.getAttribute('href') !== '#main' || !document.getElementById('main'))
              wrong.push('no skip link to #main first in the page');
            // The menu marks the page it is on, and only that one.
            const marked = [...document.querySelectorAll('header nav a[aria-current]')];
            if (marked.length > 1) wrong.push('the menu marks ' + marked.length + ' links as the current page');
            if (arguments[0]) {
              for (const a of document.querySelectorAll('header nav a')) {
                const here = a.getAttribute('href') === location.pathname;
                if (here !== (a.getAttribute('aria-current') === 'page'))
                  wrong.push('menu link ' + a.getAttribute('href') + (here ? ' lacks' : ' has a wrong') + ' aria-current');
              }
            }
            // Input borders stand out from what is around them (3:1, WCAG 1.4.11).
            for (const el of document.querySelectorAll('input:not([type=hidden]):not([type=checkbox]):not([type=radio]), select, textarea')) {
              if (!el.offsetParent) continue;
              const style = getComputedStyle(el);
              const ratio = contrast(rgb(style.borderTopColor), background(el.parentElement));
              if (ratio < 3) wrong.push((el.name || el.tagName) + ' border ' + ratio.toFixed(2) + ':1');
            }
            // Focus shows: a ring of 2 px or more on a link, a button and a field.
            for (const sel of ['main a[href]', 'main button', 'main input:not([type=hidden])']) {
              const el = [...document.querySelectorAll(sel)].find(e => e.offsetParent);
              if (!el) continue;
              el.focus({ focusVisible: true });
              const style = getComputedStyle(el);
              const ring = style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) >= 2;
              if (!ring) wrong.push('no visible focus ring on ' + sel);
              el.blur();
            }
            return wrong;
            "#,
            vec![Value::Bool(reached_by_get)],
        )
        .await
        .expect("checks run");
    found
        .as_array()
        .map(|v| v.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default()
}

async fn check_page(browser: &Client, axe: &str, what: &str, problems: &mut Vec<String>) {
    for line in axe_violations(browser, axe).await.into_iter().chain(own_checks(browser, true).await) {
        problems.push(format!("{what}: {line}"));
    }
}

/// [`check_page`] for a form's answer, shown at the address the form posted to.
async fn check_answer(browser: &Client, axe: &str, what: &str, problems: &mut Vec<String>) {
    for line in axe_violations(browser, axe).await.into_iter().chain(own_checks(browser, false).await) {
        problems.push(format!("{what}: {line}"));
    }
}

/// The focused element: its tag, its name (or id) and its `aria-invalid`, as "input price true".
async fn focused(browser: &Client) -> String {
    let focused = browser
        .execute(
            "const el = document.activeElement;
             return [el.tagName.toLowerCase(), el.getAttribute('name') || el.id || '', el.getAttribute('aria-invalid') || ''];",
            vec![],
        )
        .await
        .expect("active element");
    let part = |i: usize| focused[i].as_str().unwrap_or("").to_string();
    format!("{} {} {}", part(0), part(1), part(2)).trim().to_string()
}

/// Clicks a form's button, then waits (bounded) until the answer has put the focus on
/// `expected` (as [`focused`] describes it), and returns what holds the focus by then.
async fn submit_then_focus(browser: &Client, css: &str, expected: &str) -> String {
    click(browser, css).await;
    let mut now = String::new();
    for _ in 0..200 {
        now = focused(browser).await;
        if now == expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    now
}

/// The screens every page is checked at: a desktop's and a phone's (CSS pixels).
const SCREENS: [(u32, u32); 2] = [(1280, 900), (390, 844)];

#[actix_web::test]
async fn every_page_for_every_role_passes_axe_and_the_checks_axe_leaves_out() {
    let app = TestApp::spawn().await;
    let pages = every_page(&app).await;
    let base = app.address().to_string();
    let axe = axe_source();
    let mut driver = Chromedriver::start();
    let mut problems = Vec::new();
    for (who, paths) in pages {
        for lang in ["en", "ja"] {
            let browser = driver.browser().await;
            if who != "anonymous" {
                log_in(&browser, &base, who).await;
            }
            pick_language(&browser, &base, lang).await;
            // A desktop's width and a phone's: on a phone, wide tables become cards, and a table
            // still scrolling in a box would need a way in for the keyboard.
            for (width, height) in SCREENS {
                browser.set_window_size(width, height).await.expect("window size");
                for path in &paths {
                    browser.goto(&format!("{base}{path}")).await.unwrap_or_else(|e| panic!("{path}: {e}"));
                    check_page(&browser, &axe, &format!("{who} {path} ({lang}, {width} px)"), &mut problems)
                        .await;
                }
            }
            browser.close().await.expect("close");
        }
    }
    assert!(problems.is_empty(), "accessibility problems:\n{}", problems.join("\n"));
}

#[actix_web::test]
async fn a_refusal_marks_the_field_in_error_and_moves_the_focus_to_it() {
    let app = TestApp::spawn().await;
    let room = app.resource("One-place room", 1);
    let product = app.product("KYUSU", 4800, 2);
    app.user("alice", Role::Customer);
    let bob = app.user("bob", Role::Customer);
    app.user("carol", Role::Staff);
    let day = crate::common::future_day();
    let base = app.address().to_string();
    let axe = axe_source();
    let mut driver = Chromedriver::start();
    let mut problems = Vec::new();

    // A wrong password: the password field.
    let browser = driver.browser().await;
    fill_login(&browser, &base, "alice", "wrong").await;
    let focus = submit_then_focus(&browser, "main form button[type=submit]", "input password true").await;
    assert_eq!(focus, "input password true", "after a wrong password");
    check_answer(&browser, &axe, "login refused", &mut problems).await;

    // Too many of a product: its quantity field.
    log_in(&browser, &base, "alice").await;
    browser.goto(&format!("{base}/products")).await.expect("products");
    let field = format!("input[name=qty_{product}]");
    browser.find(Locator::Css(&field)).await.expect("quantity").send_keys("5").await.expect("type");
    let expected = format!("input qty_{product} true");
    let focus = submit_then_focus(&browser, "main form button[type=submit]", &expected).await;
    assert_eq!(focus, expected, "after too many");
    check_answer(&browser, &axe, "order refused", &mut problems).await;
    let marked = browser
        .execute("return document.querySelector('header nav a[aria-current]').getAttribute('href');", vec![])
        .await
        .expect("the marked link");
    assert_eq!(marked, "/products", "the menu marks the page shown, not the address posted to");

    // The last place taken by bob meanwhile: the message next to the day.
    browser.goto(&format!("{base}/resources/{room}?from={day}")).await.expect("resource");
    let bob_client = app.client(0);
    bob_client.login(&bob).await;
    assert_eq!(bob_client.book(room, day).await.status(), 201);
    let book = format!("button[aria-label=\"Book {}\"]", day.format("%A %Y-%m-%d"));
    let focus = submit_then_focus(&browser, &book, "p refused").await;
    assert_eq!(focus, "p refused", "after a lost booking race");
    check_answer(&browser, &axe, "booking refused", &mut problems).await;

    // A night of a stay taken by bob meanwhile: the message naming the night, on top.
    let (check_in, check_out) = (day + chrono::Days::new(2), day + chrono::Days::new(5));
    browser
        .goto(&format!("{base}/resources/{room}?check_in={check_in}&check_out={check_out}"))
        .await
        .expect("a stay picked");
    check_page(&browser, &axe, "stay picked", &mut problems).await;
    assert_eq!(bob_client.book(room, day + chrono::Days::new(3)).await.status(), 201);
    let focus = submit_then_focus(&browser, "#book-stay", "p refused").await;
    assert_eq!(focus, "p refused", "after a lost stay");
    check_answer(&browser, &axe, "stay refused", &mut problems).await;
    browser.close().await.expect("close");

    // A resource saved with a bad capacity: the capacity field.
    let carol = driver.browser().await;
    log_in(&carol, &base, "carol").await;
    carol.goto(&format!("{base}/resources/{room}/edit")).await.expect("editor");
    let capacity = carol.find(Locator::Css("input[name=capacity]")).await.expect("capacity");
    capacity.clear().await.expect("clear");
    capacity.send_keys("lots").await.expect("type");
    let focus = submit_then_focus(&carol, "#save", "input capacity true").await;
    assert_eq!(focus, "input capacity true", "after a bad capacity");
    check_answer(&carol, &axe, "resource edit refused", &mut problems).await;
    // A product saved with a bad price: the price field.
    carol.goto(&format!("{base}/products/{product}/edit")).await.expect("product editor");
    let price = carol.find(Locator::Css("input[name=price]")).await.expect("price");
    price.clear().await.expect("clear");
    price.send_keys("cheap").await.expect("type");
    let focus = submit_then_focus(&carol, "main form button[type=submit]", "input price true").await;
    assert_eq!(focus, "input price true", "after a bad price");
    check_answer(&carol, &axe, "product edit refused", &mut problems).await;
    carol.close().await.expect("close");

    assert!(problems.is_empty(), "accessibility problems:\n{}", problems.join("\n"));
}

/// The editor whose lock was lost (its sentence and actions put in place by its script), the
/// "being edited" page offering "continue here" to the same person in another browser, and the
/// page of a save refused after the lock moved: in English and Japanese.
#[actix_web::test]
async fn a_lost_edit_lock_and_continue_here_pass_axe() {
    let app = TestApp::spawn_instances(1, |c| c.edit_lock_ttl = Duration::from_secs(3)).await;
    let root = app.user("root", Role::Admin);
    let base = app.address().to_string();
    let admin = crate::common::Client::new(&base);
    admin.login(&root).await;
    let axe = axe_source();
    let mut driver = Chromedriver::start();
    let mut problems = Vec::new();
    for lang in ["en", "ja"] {
        let name = format!("editor_{lang}");
        app.user(&name, Role::Staff);
        let room = app.resource(&format!("Axe room {lang}"), 2);
        let edit = format!("{base}/resources/{room}/edit");
        let (first, second) = (driver.browser().await, driver.browser().await);
        for browser in [&first, &second] {
            log_in(browser, &base, &name).await;
            pick_language(browser, &base, lang).await;
        }
        first.goto(&edit).await.expect("editor");
        crate::common::browser::text_when_shown(&first, "#lock-status").await;
        let path = format!("/api/v1/admin/edit-locks/resource:{room}?reason=axe");
        assert_eq!(admin.send(reqwest::Method::DELETE, &path).await.status(), 200);
        crate::common::browser::text_when_shown(&first, "#lock-lost").await;
        check_page(&first, &axe, &format!("editor, lock lost ({lang})"), &mut problems).await;

        first.goto(&edit).await.expect("the editor again");
        crate::common::browser::text_when_shown(&first, "#lock-status").await;
        second.goto(&edit).await.expect("the other browser");
        crate::common::browser::text_when_shown(&second, "#continue-here").await;
        check_page(&second, &axe, &format!("continue here ({lang})"), &mut problems).await;
        click(&second, "#continue-here").await;
        crate::common::browser::text_when_shown(&second, "#lock-status").await;
        first.execute("document.getElementById('edit-form').submit()", vec![]).await.expect("submit");
        crate::common::browser::text_when_shown(&first, "#refused").await;
        check_answer(&first, &axe, &format!("save refused, lock moved ({lang})"), &mut problems).await;
        for browser in [first, second] {
            browser.close().await.expect("close");
        }
    }
    assert!(problems.is_empty(), "accessibility problems:\n{}", problems.join("\n"));
}

/// The lab's pages in `DEMO_MODE`: the home page's first-visit path, the login page listing the
/// demo accounts, the race demo with a race's results (to a visitor and to a user) and a
/// strategy's code.
#[cfg(feature = "lab")]
#[actix_web::test]
async fn the_demo_pages_pass_axe_too() {
    let app = TestApp::spawn_lab().await;
    haita::lab::seed::run(&app.db.pool).expect("demo data");
    let racer = app.client(0);
    racer.login(&app.user("dora", Role::Customer)).await;
    let raced = racer
        .post_json(
            "/api/v1/demo/races",
            &serde_json::json!({"strategy": ["no-lock", "named-lock"], "clients": 8}),
        )
        .await;
    assert_eq!(raced.status(), 201);
    let base = app.address().to_string();
    let axe = axe_source();
    let mut driver = Chromedriver::start();
    let mut problems = Vec::new();
    for (who, lang) in [("anonymous", "en"), ("dora", "en"), ("anonymous", "ja"), ("dora", "ja")] {
        let browser = driver.browser().await;
        if who != "anonymous" {
            log_in(&browser, &base, who).await;
        }
        pick_language(&browser, &base, lang).await;
        for (width, height) in SCREENS {
            browser.set_window_size(width, height).await.expect("window size");
            for path in [
                "/",
                "/login",
                "/demo",
                "/demo/docs/named-lock-guard.md",
                "/demo/code/named-lock-pool-pitfall",
            ] {
                browser.goto(&format!("{base}{path}")).await.unwrap_or_else(|e| panic!("{path}: {e}"));
                check_page(&browser, &axe, &format!("{who} {path} ({lang}, {width} px)"), &mut problems)
                    .await;
            }
        }
        browser.close().await.expect("close");
    }
    assert!(problems.is_empty(), "accessibility problems:\n{}", problems.join("\n"));
}

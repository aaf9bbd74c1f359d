//! The visual check: every page, for every role, at a desktop's width (1280 px) and a phone's
//! (390 px), in English and in Japanese, measured in headless Chromium against what a person
//! needs to see:
//! - the page never scrolls sideways, and no link, button or field lies beyond the screen's
//!   edges or hides in a box that scrolls sideways;
//! - every table laid out as a table has each cell under its column's header; on a desktop every
//!   table is laid out as a table (the phone's cards stay on the phone), whole, not in a box
//!   scrolled sideways;
//! - no word is cut in two across lines ("Descr/iption", "resou/rce"), and no sentence squeezed
//!   into a sliver a word or two a line.
//!
//! These are layout assertions per element rather than pixel diffs against stored screenshots:
//! the pages hold dates, times and counts that change from run to run, and a failure names the
//! element and where it lies. They are what broke unseen before: a phone's fix
//! (`.cards { display: grid }`) that also laid every desktop table out as a grid, its header row
//! apart from its rows, the race's double bookings under "Deadlocks retried". Any new page is
//! checked once it is in the tour (`common/pages.rs`).
//!
//! To look at what was measured, `LAYOUT_SHOTS=dir` saves each page checked, whole, as a PNG in
//! `dir` (named by who, page, language and screen): `LAYOUT_SHOTS=target/layout cargo test
//! --features lab --test it layout::`.

use diesel::prelude::*;
use fantoccini::Client;

use crate::common::TestApp;
use crate::common::browser::{Chromedriver, click, open, text_when_shown};
use crate::common::layout::{
    CONTROLS, misaligned_tables, out_of_sight, overflow, squeezed_text, tables_scrolled, words_cut,
};
use crate::common::pages::every_page;

/// (name, width, height) of the two screens, in CSS pixels.
const SCREENS: [(&str, u32, u32); 2] = [("desktop", 1280, 900), ("phone", 390, 844)];

/// Every layout assertion on the page shown, each problem a line starting with `label`.
async fn check_shown(browser: &Client, desktop: bool, label: &str, problems: &mut Vec<String>) {
    if let Some(dir) = std::env::var_os("LAYOUT_SHOTS") {
        save_whole_page(browser, std::path::Path::new(&dir), label).await;
    }
    let (over, widest) = overflow(browser).await;
    if over > 0 {
        problems.push(format!("{label}: {over} px wider than the screen ({widest})"));
    }
    let found = [
        if desktop { tables_scrolled(browser).await } else { Vec::new() },
        out_of_sight(browser, CONTROLS, false).await,
        misaligned_tables(browser, desktop).await,
        words_cut(browser).await,
        squeezed_text(browser).await,
    ];
    problems.extend(found.into_iter().flatten().map(|line| format!("{label}: {line}")));
}

/// The page shown, whole (the window made as tall as the page, up to 6 000 px, then put back),
/// as `dir/{label}.png`, the label made a file name.
async fn save_whole_page(browser: &Client, dir: &std::path::Path, label: &str) {
    let (width, height) = browser.get_window_size().await.expect("window size");
    let (width, height) = (u32::try_from(width).expect("a width"), u32::try_from(height).expect("a height"));
    let tall =
        browser.execute("return document.documentElement.scrollHeight;", vec![]).await.expect("height");
    let tall = u32::try_from(tall.as_u64().unwrap_or(0)).unwrap_or(u32::MAX).clamp(height, 6_000);
    browser.set_window_size(width, tall).await.expect("tall window");
    let png = browser.screenshot().await.expect("screenshot");
    browser.set_window_size(width, height).await.expect("window size back");
    let name: String = label.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    std::fs::create_dir_all(dir).expect("the screenshots' directory");
    std::fs::write(dir.join(format!("{name}.png")), png).expect("a screenshot");
}

/// The product conflict screen as carol meets it: her editor open on `product`, someone else
/// saves it (a new name, a new version), she saves her own name, and the screen comparing the
/// two replaces her editor.
async fn conflict_screen(app: &TestApp, browser: &Client, base: &str, product: i64, round: usize) {
    browser.goto(&format!("{base}/products/{product}/edit")).await.expect("the editor");
    use haita::schema::products;
    diesel::update(products::table.find(product))
        .set((
            products::name.eq(format!("Tokoname kyusu, red clay, round {round}")),
            products::version.eq(products::version + 1),
        ))
        .execute(&mut app.db.raw_connection())
        .expect("someone else saves");
    let name = browser.find(fantoccini::Locator::Css("input[name=name]")).await.expect("the name field");
    name.clear().await.expect("clear");
    name.send_keys(&format!("Kyusu with a side handle, round {round}")).await.expect("type");
    click(browser, "main form button[type=submit]").await;
    text_when_shown(browser, "form.conflict input[name=choose_name]").await;
}

#[actix_web::test]
async fn every_page_for_every_role_lines_up_and_fits_at_both_widths_in_both_languages() {
    let app = TestApp::spawn().await;
    let pages = every_page(&app).await;
    let product: i64 = pages
        .iter()
        .flat_map(|(_, paths)| paths)
        .find_map(|p| p.strip_prefix("/products/")?.strip_suffix("/edit")?.parse().ok())
        .expect("the tour opens a product's editor");
    let base = app.address().to_string();
    let mut driver = Chromedriver::start();
    let mut problems = Vec::new();
    let mut round = 0;
    for (who, paths) in &pages {
        for lang in ["en", "ja"] {
            for screen in SCREENS {
                let browser = open(&mut driver, &base, who, lang, screen).await;
                let desktop = screen.0 == "desktop";
                for path in paths {
                    browser.goto(&format!("{base}{path}")).await.unwrap_or_else(|e| panic!("{path}: {e}"));
                    check_shown(
                        &browser,
                        desktop,
                        &format!("{who} {path} ({lang}, {})", screen.0),
                        &mut problems,
                    )
                    .await;
                }
                if *who == "carol" {
                    round += 1;
                    conflict_screen(&app, &browser, &base, product, round).await;
                    let label = format!("carol's conflict screen ({lang}, {})", screen.0);
                    check_shown(&browser, desktop, &label, &mut problems).await;
                }
                browser.close().await.expect("close");
            }
        }
    }
    assert!(problems.is_empty(), "{} layout problems:\n{}", problems.len(), problems.join("\n"));
}

/// The demo page with what it exists to show: a race's results, every strategy, and a flash
/// sale's, at both widths and in both languages.
#[cfg(feature = "lab")]
#[actix_web::test]
async fn the_demo_pages_results_line_up_and_fit_at_both_widths_in_both_languages() {
    use haita::auth::Role;

    let app = TestApp::spawn_lab().await;
    let racer = app.client(0);
    racer.login(&app.user("dora", Role::Customer)).await;
    let race = serde_json::json!({"strategy": "all", "clients": 8, "attempts": 32});
    assert_eq!(racer.post_json("/api/v1/demo/races", &race).await.status(), 201);
    crate::demo::flash_sale::flash_sale(&app, &["--buyers", "20", "--stock", "5", "--hold-seconds", "1"])
        .await;
    let base = app.address().to_string();
    let mut driver = Chromedriver::start();
    let mut problems = Vec::new();
    for lang in ["en", "ja"] {
        for screen in SCREENS {
            let browser = open(&mut driver, &base, "dora", lang, screen).await;
            for path in
                ["/demo", "/demo/code/named-lock-pool-pitfall", "/demo/docs/named-lock-check-then-insert.md"]
            {
                browser.goto(&format!("{base}{path}")).await.unwrap_or_else(|e| panic!("{path}: {e}"));
                let label = format!("{path} ({lang}, {})", screen.0);
                check_shown(&browser, screen.0 == "desktop", &label, &mut problems).await;
            }
            browser.close().await.expect("close");
        }
    }
    assert!(problems.is_empty(), "{} layout problems:\n{}", problems.len(), problems.join("\n"));
}

//! Lock metrics an operator can read: per lock family, waits and holds, timeouts, busy answers
//! and pool checkouts, in `/metrics` and drawn on `/admin/metrics`.
//!
//! Each app instance has a registry of its own, so a test's counts are its own instance's; the
//! checks still read a series before and after the event they cause and assert that it grew.

use std::time::Duration;

use haita::auth::Role;

use crate::common::{Client, TestApp, future_day};

/// The value of the sample `name{labels…}` whose labels include every one of `labels`.
async fn sample(client: &Client, name: &str, labels: &[&str]) -> f64 {
    let text = client.metrics().await;
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The series the test below moves: waits and holds of the named booking lock and of the
/// orders' row locks, busy answers for a named lock, pool checkouts.
async fn readings(client: &Client) -> Vec<f64> {
    let series: [(&str, &[&str]); 6] = [
        ("haita_lock_wait_seconds_count", &["family=\"named\"", "scope=\"book\""]),
        ("haita_lock_hold_seconds_count", &["family=\"named\"", "scope=\"book\""]),
        ("haita_lock_hold_seconds_count", &["family=\"row\"", "scope=\"stock\""]),
        ("haita_lock_wait_seconds_count", &["family=\"row\"", "scope=\"stock\""]),
        ("haita_unavailable_answers_total", &["answer=\"busy\"", "cause=\"named_lock\""]),
        ("haita_pool_checkout_seconds_count", &[]),
    ];
    let mut values = Vec::new();
    for (name, labels) in series {
        values.push(sample(client, name, labels).await);
    }
    values
}

#[actix_web::test]
async fn waits_holds_busy_answers_and_checkouts_are_counted_per_lock_family() {
    let app = TestApp::spawn_instances(1, |c| c.lock_wait = Duration::from_secs(1)).await;
    let resource = app.resource("Measured room", 2);
    let product = app.product("MEASURED-1", 300, 10);
    let client = app.client(0);
    client.login(&app.user("measured", Role::Customer)).await;
    let before = readings(&client).await;

    // A booking (a named lock waited for and held), an order (row locks), and a day whose
    // lock another session holds (a wait that runs out: 503 busy).
    let day = future_day();
    let next_day = day.succ_opt().expect("day");
    assert_eq!(client.book(resource, day).await.status(), 201);
    assert_eq!(client.order(&[(product, 1)]).await.status(), 201);
    let _stuck = app.db.session_holding(&app.db.pool.names().booking(resource, next_day));
    assert_eq!(client.book(resource, next_day).await.status(), 503);

    let after = readings(&client).await;
    assert!(
        after[0] >= before[0] + 2.0,
        "two GET_LOCK waits (one granted, one timed out): {before:?} → {after:?}"
    );
    assert!(after[1] > before[1], "the granted one was held, then released: {after:?}");
    assert!(after[2] > before[2] && after[3] > before[3], "the order's row locks: {after:?}");
    assert!(after[4] > before[4], "the busy answer, with its cause: {after:?}");
    assert!(after[5] >= before[5] + 2.0, "pool checkouts: {after:?}");

    // The admin sees the same, drawn.
    let admin = app.client(0);
    admin.login(&app.user("operator", Role::Admin)).await;
    let page = admin.get("/admin/metrics").await;
    assert_eq!(page.status(), 200);
    let page = page.text().await.expect("page");
    for expected in ["<svg", "named · book", "row · stock", "pool checkout", "answered 503: busy, named_lock"]
    {
        assert!(page.contains(expected), "{expected:?} missing from the metrics page");
    }
}

/// Two instances in one process keep apart: bookings through the first move its pool and lock
/// series, and the second, which served nothing but its own `/metrics` (and its housekeeping),
/// shows none of it.
#[actix_web::test]
async fn each_instance_counts_only_what_it_served() {
    let app = TestApp::spawn_instances(2, |_| {}).await;
    let (busy, quiet) = (app.client(0), app.client(1));
    let resource = app.resource("apart", 5);
    for i in 0..3 {
        busy.login(&app.user(&format!("apart{i}"), Role::Customer)).await;
        assert_eq!(busy.book(resource, future_day()).await.status(), 201);
    }
    let served =
        sample(&busy, "haita_lock_hold_seconds_count", &["family=\"named\"", "scope=\"book\""]).await;
    assert!(served >= 3.0, "the first instance held the day's lock for each booking: {served}");
    let elsewhere =
        sample(&quiet, "haita_lock_hold_seconds_count", &["family=\"named\"", "scope=\"book\""]).await;
    assert_eq!(elsewhere, 0.0, "the second instance booked nothing");
    // Checkouts are not a request's alone: each instance's housekeeping (its heartbeat) checks
    // connections out of its own pool every few seconds, and counts them in its own metrics.
    let (busy_checkouts, quiet_checkouts) = (
        sample(&busy, "haita_pool_checkout_seconds_count", &[]).await,
        sample(&quiet, "haita_pool_checkout_seconds_count", &[]).await,
    );
    assert!(
        busy_checkouts >= quiet_checkouts + 3.0,
        "the first instance checked out a connection for each booking, which the second did not: \
         {busy_checkouts} and {quiet_checkouts}"
    );
}

/// Work sent through an instance's door to the blocking threads (`db::OffExecutor`) counts in
/// that instance's metrics, even when a thread working for another instance sends it, and leaves
/// that thread's registry as it was: no call can count in the wrong instance.
#[actix_web::test]
async fn blocking_work_counts_in_the_metrics_of_the_door_it_went_through() {
    use std::sync::Arc;

    use haita::db::OffExecutor;
    use haita::metrics::{self, Metrics};

    let db = crate::common::TestDb::new();
    let (ours, theirs) = (Metrics::new(), Metrics::new());
    metrics::use_on_this_thread(Arc::clone(&theirs));
    let door = OffExecutor::new(db.pool.clone(), Arc::clone(&ours));
    let checks = |m: &Metrics| m.session_check_batch_size.get_sample_count();
    door.with_conn(|_conn| {
        metrics::record(|m| m.session_check_batch_size.observe(1.0));
        Ok::<_, anyhow::Error>(())
    })
    .await
    .expect("ran");
    assert_eq!((checks(&ours), checks(&theirs)), (1, 0), "counted in the door's instance");
    metrics::record(|m| m.session_check_batch_size.observe(1.0));
    assert_eq!((checks(&ours), checks(&theirs)), (1, 1), "this thread still counts in its own");
}

/// The histograms' axis, in Chromium at a desktop's and a phone's width, in English and
/// Japanese: no two bucket labels overlap (their boxes, measured), each is drawn at a readable
/// size (at least 11 CSS pixels once the chart is scaled to the screen), and a bound in
/// milliseconds says "ms" ("10 ms", never "10m", which reads as minutes); the summary beside
/// each chart reads in the page's language.
#[actix_web::test]
async fn the_histograms_axis_labels_are_apart_readable_and_say_ms() {
    use crate::common::browser::{Chromedriver, log_in, pick_language, text_when_shown};

    let app = TestApp::spawn().await;
    let resource = app.resource("Measured room", 2);
    let client = app.client(0);
    client.login(&app.user("measured", Role::Customer)).await;
    assert_eq!(client.book(resource, future_day()).await.status(), 201);
    app.user("operator", Role::Admin);
    let base = app.address().to_string();
    let mut driver = Chromedriver::start();
    let mut wrong = Vec::new();
    for lang in ["en", "ja"] {
        for (width, height) in [(1280, 900), (390, 844)] {
            let browser = driver.browser().await;
            browser.set_window_size(width, height).await.expect("window size");
            log_in(&browser, &base, "operator").await;
            pick_language(&browser, &base, lang).await;
            browser.goto(&format!("{base}/admin/metrics")).await.expect("metrics page");
            // The summary beside each chart is in the page's language too.
            let caption = text_when_shown(&browser, "figure.histogram figcaption").await;
            let counted = if lang == "en" { " observed · mean " } else { "観測 " };
            if !caption.contains(counted) {
                wrong.push(format!("{lang}: the summary {caption:?} lacks {counted:?}"));
            }
            let found = browser
                .execute(
                    "const out = [];
                     const charts = [...document.querySelectorAll('figure.histogram svg')];
                     if (charts.length === 0) return ['no histogram on the page'];
                     const labels = charts.map(svg => [...svg.querySelectorAll('text.axis')]);
                     // Each label's lines, read one after the other: the number, then its unit.
                     const said = labels.flat().map(t => [...t.children].map(line => line.textContent).join(' ').trim());
                     if (!said.includes('1 ms') || !said.includes('10 ms')) out.push('no \"1 ms\" or \"10 ms\" among ' + said.join(' | '));
                     for (const s of said) if (/\\dm$/.test(s)) out.push('\"' + s + '\" reads as minutes');
                     charts.forEach((svg, i) => {
                       const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
                       const boxes = labels[i].map(t => t.getBoundingClientRect());
                       labels[i].forEach((t, j) => {
                         const size = parseFloat(getComputedStyle(t).fontSize) * scale;
                         if (size < 11) out.push('\"' + said[j] + '\" drawn at ' + size.toFixed(1) + ' px');
                       });
                       for (let a = 0; a < boxes.length; a++) for (let b = a + 1; b < boxes.length; b++) {
                         const [p, q] = [boxes[a], boxes[b]];
                         if (p.left < q.right - 0.5 && q.left < p.right - 0.5 && p.top < q.bottom - 0.5 && q.top < p.bottom - 0.5)
                           out.push('\"' + labels[i][a].textContent + '\" overlaps \"' + labels[i][b].textContent + '\"');
                       }
                     });
                     return [...new Set(out)];",
                    vec![],
                )
                .await
                .expect("measure the axis");
            for line in found.as_array().into_iter().flatten().filter_map(|v| v.as_str()) {
                wrong.push(format!("{lang} at {width} px: {line}"));
            }
            browser.close().await.expect("close");
        }
    }
    assert!(wrong.is_empty(), "the histograms' axis:\n{}", wrong.join("\n"));
}

/// Issue 34, item 9: on the Japanese metrics page the counts' labels and the bars' hover titles
/// are Japanese too (they were English: "answered 503", "pool connections open", "3 at most
/// 10.0 ms").
#[actix_web::test]
async fn the_metrics_pages_counts_and_bar_titles_speak_the_readers_language() {
    let app = TestApp::spawn().await;
    let resource = app.resource("counted", 5);
    let customer = app.client(0);
    customer.login(&app.user("counted", Role::Customer)).await;
    assert_eq!(customer.book(resource, future_day()).await.status(), 201);
    let admin = app.client(0);
    admin.login(&app.user("operator", Role::Admin)).await;
    for (lang, theirs, others) in [
        ("en", ["pool connections open", " at most "], ["プールの接続", "以下"]),
        ("ja", ["プールの接続", "以下"], ["pool connections open", " at most "]),
    ] {
        admin.speak(lang).await;
        let page = admin.get("/admin/metrics").await.text().await.expect("page");
        let counts = page.split("id=\"counts\"").nth(1).expect("the counts");
        let titles: Vec<&str> =
            page.split("class=\"ok\"><title>").skip(1).filter_map(|t| t.split("</title>").next()).collect();
        assert!(!titles.is_empty(), "{lang}: bars with titles");
        assert!(
            counts.contains(theirs[0]) && titles.iter().all(|t| t.contains(theirs[1])),
            "{lang}: {counts} {titles:?}"
        );
        assert!(
            !counts.contains(others[0]) && !titles.iter().any(|t| t.contains(others[1])),
            "{lang}: {counts} {titles:?}"
        );
        if lang == "ja" {
            for english in ["answered 503", "transactions retried", "pool connections", "pool checkout"] {
                assert!(!page.contains(english), "{lang}: {english:?} still English");
            }
        }
    }
}

/// One instance's row of `/admin/metrics`'s list of instances: its name (with "this instance"
/// when it serves the page), its state and its key numbers; or the row of their totals.
#[derive(Debug)]
struct Row {
    name: String,
    this: bool,
    state: String,
    numbers: Vec<(String, f64)>,
}

impl Row {
    fn number(&self, name: &str) -> f64 {
        self.numbers.iter().find(|(n, _)| n == name).map_or(f64::NAN, |(_, v)| *v)
    }
}

fn between(text: &str, start: &str, end: &str) -> Option<String> {
    Some(text.split_once(start)?.1.split_once(end)?.0.to_string())
}

/// The key numbers in `cells`, by their `data-metric` names.
fn numbers_in(cells: &str) -> Vec<(String, f64)> {
    cells
        .split("data-metric=\"")
        .skip(1)
        .filter_map(|cell| {
            let (name, rest) = cell.split_once("\">")?;
            Some((name.to_string(), rest.split_once("</td>")?.0.trim().parse().ok()?))
        })
        .collect()
}

/// The instances `/admin/metrics` lists, read from the page, and the row of their totals.
async fn instances_on(admin: &Client) -> (Vec<Row>, Row) {
    let page = admin.get("/admin/metrics").await;
    assert_eq!(page.status(), 200);
    let page = page.text().await.expect("page");
    let table = between(&page, "id=\"instances\"", "</table>").expect("the list of instances");
    let rows = table
        .split("<tr")
        .filter(|row| row.contains("data-instance="))
        .map(|row| {
            let title = between(row, "<td class=\"title\">", "</td>").expect("title");
            Row {
                name: title.split(" <strong").next().unwrap_or_default().trim().to_string(),
                this: title.contains("class=\"this\""),
                state: between(row, "class=\"state\">", "</td>").expect("state").trim().to_string(),
                numbers: numbers_in(row),
            }
        })
        .collect();
    let totals = between(&table, "id=\"cluster-totals\">", "</tr>").expect("the totals");
    let title = between(&totals, "<td class=\"title\">", "</td>").expect("the totals' title");
    (rows, Row { name: title, this: false, state: String::new(), numbers: numbers_in(&totals) })
}

fn row<'a>(rows: &'a [Row], name: &str) -> Option<&'a Row> {
    rows.iter().find(|r| r.name == name)
}

crate::common::on_both_engines!(
    the_metrics_page_names_its_instance_and_lists_the_others_with_their_numbers,
    the_metrics_page_names_its_instance_and_lists_the_others_with_their_numbers_on_postgres => instances_listed
);

/// The named lock acquisitions a row shows.
const LOCKS: &str = "named_lock_acquisitions_total";

/// Two instances in this process (named by `INSTANCE_NAME`'s setting) and two `haita serve`
/// processes on one database. `/admin/metrics` on the first names it as the page's instance and
/// lists the others with the numbers each wrote (the bookings served by the second and by a
/// process, counted there), their totals over the live ones; the process stopped with SIGTERM
/// is listed as stopped at once, the one killed with SIGKILL as gone once its last beat is a
/// minute old (moved back by the database's clock, as the holds' tests expire a hold), and the
/// totals leave both out.
async fn instances_listed(db: crate::common::TestDb) {
    use diesel::RunQueryDsl;

    use crate::common::app_process::AppProcess;
    use crate::common::poll;
    let named = std::sync::atomic::AtomicUsize::new(0);
    let app = TestApp::spawn_on(db, 2, |c| {
        c.instance_name = Some(format!("web-{}", named.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    })
    .await;
    let mut leaving = AppProcess::start(&app.db.url, &[("INSTANCE_NAME", "leaving")]);
    let mut doomed = AppProcess::start(&app.db.url, &[("INSTANCE_NAME", "doomed")]);
    let resource = app.resource("counted across", 5);
    let on_b = app.client(1);
    on_b.login(&app.user("books-on-b", Role::Customer)).await;
    for _ in 0..3 {
        assert_eq!(on_b.book(resource, future_day()).await.status(), 201);
    }
    let on_doomed = Client::new(&doomed.address);
    on_doomed.login(&app.user("books-on-doomed", Role::Customer)).await;
    for _ in 0..2 {
        assert_eq!(on_doomed.book(resource, future_day()).await.status(), 201);
    }
    let admin = app.client(0);
    admin.login(&app.user("operator", Role::Admin)).await;

    let mut seen = (Vec::new(), instances_on(&admin).await.1);
    poll::until_async_every(
        "every instance listed, with the bookings each served",
        Duration::from_secs(60),
        Duration::from_millis(250),
        async || {
            seen = instances_on(&admin).await;
            let rows = &seen.0;
            ["web-0", "web-1", "leaving", "doomed"]
                .iter()
                .all(|n| row(rows, n).is_some_and(|r| r.state == "live"))
                && row(rows, "web-1").is_some_and(|b| b.number(LOCKS) >= 3.0)
                && row(rows, "doomed").is_some_and(|d| d.number(LOCKS) >= 2.0)
        },
    )
    .await;
    let (rows, totals) = &seen;
    let this: Vec<&str> = rows.iter().filter(|r| r.this).map(|r| r.name.as_str()).collect();
    assert_eq!(this, ["web-0"], "the page names its own instance, and only it: {rows:?}");
    let page = admin.get("/admin/metrics").await.text().await.expect("page");
    assert!(page.contains("served by the instance web-0"), "the page says which instance it shows");
    assert_eq!(row(rows, "web-0").expect("A").number(LOCKS), 0.0, "A booked nothing");
    assert!(totals.name.contains("(4)"), "four live instances: {totals:?}");
    let sum: f64 = rows.iter().map(|r| r.number(LOCKS)).sum();
    assert_eq!(totals.number(LOCKS), sum, "the totals add up the live instances: {rows:?} {totals:?}");

    leaving.terminate();
    poll::until_async_every(
        "the stopped instance to say so",
        Duration::from_secs(30),
        Duration::from_millis(250),
        async || {
            seen = instances_on(&admin).await;
            row(&seen.0, "leaving").is_some_and(|r| r.state == "stopped")
        },
    )
    .await;

    doomed.kill();
    // Killed, it cannot say so: it is live until its last beat is a minute old.
    let (rows, _) = instances_on(&admin).await;
    assert_eq!(row(&rows, "doomed").map(|r| r.state.as_str()), Some("live"));
    haita::db::cached_sql::<()>(
        "UPDATE app_instances SET last_seen = {now} - {? microseconds} WHERE name = 'doomed'",
    )
    .bind::<diesel::sql_types::BigInt, _>(61_000_000_i64)
    .execute(&mut app.db.conn())
    .expect("age the killed instance's beat");
    let (rows, totals) = instances_on(&admin).await;
    assert_eq!(row(&rows, "doomed").map(|r| r.state.as_str()), Some("gone"), "{rows:?}");
    assert!(totals.name.contains("(2)"), "two live instances left: {totals:?}");
    let live: Vec<&str> = rows.iter().take(2).map(|r| r.name.as_str()).collect();
    assert_eq!(live, ["web-0", "web-1"], "the live ones first: {rows:?}");
    let live_sum: f64 = rows.iter().take(2).map(|r| r.number(LOCKS)).sum();
    assert_eq!(totals.number(LOCKS), live_sum, "the gone and the stopped are left out: {rows:?} {totals:?}");
}

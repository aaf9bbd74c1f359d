//! Headless Chromium driven over WebDriver (chromedriver + the fantoccini crate), for tests that
//! need what only a browser does: run the page's script, follow forms and redirects, keep cookies.
//!
//! Needs Debian's `chromium` and `chromium-driver` (`scripts/dev test` installs them). When they
//! are missing the test FAILS saying so: a browser test that silently skips proves nothing.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::free_port;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use rand::Rng;
use serde_json::json;

/// A chromedriver process on a free local port, ended when dropped, and the fresh browser
/// profiles it started.
pub struct Chromedriver {
    child: Child,
    url: String,
    chromium: PathBuf,
    profiles: Vec<PathBuf>,
}

fn find_on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.push(PathBuf::from("/usr/lib/chromium"));
    names.iter().flat_map(|name| dirs.iter().map(move |dir| dir.join(name))).find(|p| p.is_file())
}

impl Chromedriver {
    pub fn start() -> Self {
        Self::start_in_time_zone(None)
    }

    /// A chromedriver whose browsers live in the time zone `tz` (`TZ`, e.g. `Asia/Tokyo`), or in
    /// this process's when `None`.
    pub fn start_in_time_zone(tz: Option<&str>) -> Self {
        let driver = find_on_path(&["chromedriver"]).unwrap_or_else(|| {
            panic!("chromedriver not found on PATH: install Debian's chromium-driver (scripts/dev test does)")
        });
        let chromium =
            find_on_path(&["chromium", "chromium-browser", "google-chrome"]).unwrap_or_else(|| {
                panic!("Chromium not found on PATH: install Debian's chromium (scripts/dev test does)")
            });
        let port = free_port();
        let mut command = Command::new(&driver);
        if let Some(tz) = tz {
            command.env("TZ", tz);
        }
        let child = command
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", driver.display()));
        let address = format!("127.0.0.1:{port}");
        let ready = (0..200).any(|_| {
            let up = TcpStream::connect(&address).is_ok();
            if !up {
                std::thread::sleep(Duration::from_millis(50));
            }
            up
        });
        let driver = Self { child, url: format!("http://{address}"), chromium, profiles: Vec::new() };
        assert!(ready, "chromedriver did not listen on {address} within 10 s");
        driver
    }

    /// A new browser with a profile of its own: its own cookies, so its own session.
    pub async fn browser(&mut self) -> Client {
        let profile =
            std::env::temp_dir().join(format!("haita-chromium-{:016x}", rand::rng().random::<u64>()));
        std::fs::create_dir_all(&profile).expect("profile directory");
        self.profiles.push(profile.clone());
        let capabilities = json!({
            "goog:chromeOptions": {
                "binary": self.chromium,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--no-first-run", format!("--user-data-dir={}", profile.display()),
                ],
            }
        });
        let serde_json::Value::Object(capabilities) = capabilities else { unreachable!("an object") };
        ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&self.url)
            .await
            .unwrap_or_else(|e| panic!("Chromium did not start through chromedriver: {e}"))
    }
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for profile in &self.profiles {
            let _ = std::fs::remove_dir_all(Path::new(profile));
        }
    }
}

/// Opens the login page and types `username` and `password` into its form, not sending it.
pub async fn fill_login(browser: &Client, base: &str, username: &str, password: &str) {
    browser.goto(&format!("{base}/login")).await.expect("login page");
    for (field, text) in [("input[name=username]", username), ("input[name=password]", password)] {
        browser.find(Locator::Css(field)).await.expect("field").send_keys(text).await.expect("type");
    }
}

/// Logs in through the login form, as a person would.
pub async fn log_in(browser: &Client, base: &str, username: &str) {
    fill_login(browser, base, username, super::PASSWORD).await;
    click(browser, "main form button[type=submit]").await;
    browser
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("span.who"))
        .await
        .expect("logged in");
}

/// Clicks the element matching `css`, failing with the selector when there is none.
pub async fn click(browser: &Client, css: &str) {
    browser
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .expect("click");
}

/// A new browser whose window is `screen` (name, width, height in CSS pixels), logged in as
/// `who` through the login form (unless "anonymous"), reading `lang`.
pub async fn open(
    driver: &mut Chromedriver,
    base: &str,
    who: &str,
    lang: &str,
    screen: (&str, u32, u32),
) -> Client {
    let browser = driver.browser().await;
    browser.set_window_size(screen.1, screen.2).await.expect("window size");
    if who != "anonymous" {
        log_in(&browser, base, who).await;
    }
    pick_language(&browser, base, lang).await;
    browser
}

/// Picks the page language `code` with the header's switch, as a person would (English is what
/// Chromium asks for by itself, so "en" needs no click).
pub async fn pick_language(browser: &Client, base: &str, code: &str) {
    if code == "en" {
        return;
    }
    browser.goto(&format!("{base}/")).await.expect("home");
    click(browser, &format!("#language-{code}")).await;
    let marked = format!("html[lang=\"{code}\"]");
    browser
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css(&marked))
        .await
        .expect("the page in that language");
}

/// Waits (bounded) until the element matching `css` says `needle`, and returns its text: for an
/// element the page before a click has too (a heading), which must not be read before the answer
/// has replaced that page.
pub async fn text_when_it_says(browser: &Client, css: &str, needle: &str) -> String {
    let mut last = String::new();
    for _ in 0..200 {
        if let Ok(element) = browser.find(Locator::Css(css)).await
            && let Ok(text) = element.text().await
        {
            if text.contains(needle) {
                return text;
            }
            last = text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{css} did not say {needle:?} within 20 s; it says {last:?}");
}

/// Waits (bounded) until the element matching `css` is displayed, and returns its text. An
/// element that goes stale between finding and reading it (the page was replaced meanwhile, a
/// form having been submitted) is looked for again on the page that replaced it.
pub async fn text_when_shown(browser: &Client, css: &str) -> String {
    for _ in 0..200 {
        if let Ok(element) = browser.find(Locator::Css(css)).await
            && element.is_displayed().await.unwrap_or(false)
            && let Ok(text) = element.text().await
        {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{css} was not shown within 20 s; page: {}", browser.source().await.unwrap_or_default());
}

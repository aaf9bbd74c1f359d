//! The harness: a fresh database per test, the real app on a random port, HTTP clients with
//! their own cookie jars, and the invariant checks of `docs/README.md`.

pub mod accounts;
pub mod app_process;
pub mod browser;
pub mod invariants;
pub mod layout;
pub mod own_server;
pub mod pages;
pub mod poll;
pub mod server;

use std::sync::OnceLock;
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use haita::auth::Role;
use haita::config::Config;
use haita::db::{self, DbConn, DbPool, ScratchDatabase};
use rand::Rng;
use serde_json::Value;

/// The server the tests use: `DATABASE_URL` (set by `scripts/dev test`), else the local default.
pub fn base_database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/haita".into())
}

/// The PostgreSQL server of the tests that run on both engines: `POSTGRES_URL`, else the local
/// default (PostgreSQL's own `postgres` user, trust authentication, no TLS on the loopback: see
/// `ensure_postgres` in `scripts/dev`).
pub fn postgres_database_url() -> String {
    std::env::var("POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/haita?sslmode=disable".into())
}

/// Declares one test twice: `$mysql` on the tests' usual server (`DATABASE_URL`) and `$postgres`
/// on PostgreSQL ([`postgres_database_url`]), each handing a fresh [`TestDb`] to the async
/// function `$body`.
macro_rules! on_both_engines {
    ($mysql:ident, $postgres:ident => $body:ident) => {
        #[actix_web::test]
        async fn $mysql() {
            $body($crate::common::TestDb::new()).await;
        }

        #[actix_web::test]
        async fn $postgres() {
            $body($crate::common::TestDb::postgres()).await;
        }
    };
}
pub(crate) use on_both_engines;

/// A database of its own, migrated, dropped when the value is dropped.
pub struct TestDb {
    pub url: String,
    pub name: String,
    pub pool: DbPool,
    /// Declared after the pool, so the pool's connections close before the database is dropped.
    _scratch: ScratchDatabase,
}

impl TestDb {
    pub fn new() -> Self {
        Self::on_server(&base_database_url())
    }

    /// A database of its own on the PostgreSQL server.
    pub fn postgres() -> Self {
        Self::on_server(&postgres_database_url())
    }

    /// A database of its own on the server of `base_url` (another server than the tests' usual).
    pub fn on_server(base_url: &str) -> Self {
        let scratch = ScratchDatabase::create(base_url, "haita_t_").expect("create test database");
        let pool = db::build_pool(&test_config(&scratch.url)).expect("pool");
        haita::run_migrations(&pool).expect("migrations");
        install_lock_introspection(base_url, &mut pool.get().expect("connection"));
        Self { url: scratch.url.clone(), name: scratch.name.clone(), pool, _scratch: scratch }
    }

    pub fn conn(&self) -> db::PooledConn {
        self.pool.get().expect("test connection")
    }

    /// A connection outside any pool: a second, independent session.
    pub fn raw_connection(&self) -> DbConn {
        DbConn::open(&self.url).expect("raw connection")
    }

    /// Another session (say a stuck batch job) that holds the named lock `name` until it is
    /// dropped.
    pub fn session_holding(&self, name: &haita::locking::LockName) -> DbConn {
        let mut session = self.raw_connection();
        assert!(server::try_lock(&mut session, name), "{name} was free");
        session
    }
}

/// Lets tests list which sessions hold named locks (MariaDB's METADATA_LOCK_INFO plugin; MySQL 8
/// has performance_schema.metadata_locks built in).
fn install_lock_introspection(server_url: &str, conn: &mut DbConn) {
    static DONE: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut done = DONE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !done.iter().any(|s| s == server_url) {
        let _ = conn.batch_execute("INSTALL SONAME 'metadata_lock_info'");
        done.push(server_url.to_string());
    }
}

/// A port nobody listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

/// The `haita` binary as a test runs it: on `database_url`, logging warnings only.
pub fn haita(database_url: &str) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_haita"));
    command.env("DATABASE_URL", database_url).env("RUST_LOG", "warn");
    command
}

pub fn test_config(database_url: &str) -> Config {
    Config {
        bind: "127.0.0.1:0".into(),
        pool_size: 16,
        workers: Some(2),
        // Shared by all instances of one test, so a session cookie works on every instance.
        session_key: Some("test-session-key-test-session-key-test-session-key-test-session-key!".into()),
        // Every test client logs in from 127.0.0.1, some with wrong passwords on purpose; the
        // throttle has tests of its own (`login_throttle`).
        login_failures: std::num::NonZeroU32::MAX,
        login_failures_per_client: std::num::NonZeroU32::MAX,
        // `/metrics` answers only with it outside DEMO_MODE: see `Client::metrics`.
        metrics_token: Some(METRICS_TOKEN.into()),
        ..Config::for_database(database_url)
    }
}

/// Hold limits no test of something else runs into: still counted, never refused.
pub const NO_HOLD_LIMITS: haita::config::HoldLimits = haita::config::HoldLimits {
    units: u32::MAX,
    products: u32::MAX,
    per_minute: u32::MAX,
    cooldown: std::time::Duration::ZERO,
    history: std::time::Duration::from_secs(30 * 86_400),
};

/// A lab app: `DEMO_MODE`, behind a proxy on the loopback (so a test's clients can each come
/// from an address of their own: the race demo cools down per client address).
#[cfg(feature = "lab")]
fn lab_config(c: &mut Config) {
    c.demo_mode = true;
    c.trusted_proxies = vec!["127.0.0.1/32".parse().expect("CIDR")];
}

/// The tests' `METRICS_TOKEN`.
pub const METRICS_TOKEN: &str = "test-metrics-token-0123456789";

/// One or more instances of the real app on one test database.
pub struct TestApp {
    pub db: TestDb,
    pub addresses: Vec<String>,
}

impl TestApp {
    pub async fn spawn() -> Self {
        Self::spawn_instances(1, |_| {}).await
    }

    /// `n` independent app instances (each its own pool) sharing one database, as behind a
    /// load balancer.
    pub async fn spawn_instances(n: usize, tweak: impl Fn(&mut Config)) -> Self {
        Self::spawn_on(TestDb::new(), n, tweak).await
    }

    /// One instance in `DEMO_MODE`, on a database that also has the lab's demo tables (its own
    /// migrations).
    #[cfg(feature = "lab")]
    pub async fn spawn_lab() -> Self {
        let db = TestDb::new();
        haita::lab::prepare(&db.pool).expect("lab migrations");
        Self::spawn_on(db, 1, lab_config).await
    }

    /// `n` instances in `DEMO_MODE` on one database that has the lab's tables too, as behind a
    /// load balancer (for the demo's cluster-wide race).
    #[cfg(feature = "lab")]
    pub async fn spawn_lab_on(db: TestDb, n: usize) -> Self {
        haita::lab::prepare(&db.pool).expect("lab migrations");
        Self::spawn_on(db, n, lab_config).await
    }

    /// `n` instances on the database `db` (for a server the test controls itself).
    pub async fn spawn_on(db: TestDb, n: usize, tweak: impl Fn(&mut Config)) -> Self {
        let mut addresses = Vec::new();
        for _ in 0..n {
            let mut config = test_config(&db.url);
            tweak(&mut config);
            let pool = db::build_pool(&config).expect("pool");
            let app = haita::Application::build(config, pool).expect("app");
            addresses.push(format!("http://127.0.0.1:{}", app.port()));
            actix_web::rt::spawn(app.run_until_stopped());
        }
        Self { db, addresses }
    }

    pub fn address(&self) -> &str {
        &self.addresses[0]
    }

    /// A fresh client (own cookie jar) talking to instance `i % n`.
    pub fn client(&self, i: usize) -> Client {
        Client::new(&self.addresses[i % self.addresses.len()])
    }

    pub fn user(&self, username: &str, role: Role) -> TestUser {
        create_user(&self.db, username, role)
    }

    /// A new user with `role`, and a client of instance `instance` logged in as them.
    pub async fn logged_in(&self, instance: usize, username: &str, role: Role) -> (TestUser, Client) {
        let user = self.user(username, role);
        let client = self.client(instance);
        client.login(&user).await;
        (user, client)
    }

    pub fn resource(&self, name: &str, capacity: i32) -> i64 {
        create_resource(&self.db, name, capacity)
    }

    pub fn product(&self, sku: &str, price_cents: i64, stock: u32) -> i64 {
        create_product(&self.db, sku, price_cents, stock)
    }
}

pub const PASSWORD: &str = "test-password";

#[derive(Clone, Debug)]
pub struct TestUser {
    pub id: i64,
    pub username: String,
}

/// Inserts a user directly. All test users share one hash of [`PASSWORD`] (each PHC string
/// carries its own salt, so this is still a valid hash): hashing once keeps 64-user tests fast.
pub fn create_user(db: &TestDb, username: &str, role: Role) -> TestUser {
    static HASH: OnceLock<String> = OnceLock::new();
    let hash = HASH.get_or_init(|| haita::auth::password::hash(PASSWORD).expect("hash"));
    use haita::schema::users;
    let mut conn = db.conn();
    diesel::insert_into(users::table)
        .values((
            users::username.eq(username),
            users::display_name.eq(username),
            users::password_hash.eq(hash),
            users::role.eq(role.as_str()),
        ))
        .execute(&mut conn)
        .expect("insert user");
    let id = users::table
        .filter(users::username.eq(username))
        .select(users::id)
        .first(&mut conn)
        .expect("user id");
    TestUser { id, username: username.into() }
}

/// Opens a session for `user_id`, as logging in does, and returns the ticket its cookie would
/// carry: what the booking service checks.
pub fn log_in_directly(db: &TestDb, user_id: i64) -> haita::auth::session::Ticket {
    let session_id = haita::auth::session::open(&mut db.conn(), user_id).expect("open session");
    haita::auth::session::Ticket::new(user_id, session_id)
}

pub fn create_resource(db: &TestDb, name: &str, capacity: i32) -> i64 {
    use haita::schema::resources;
    let mut conn = db.conn();
    diesel::insert_into(resources::table)
        .values((resources::name.eq(name), resources::description.eq(""), resources::capacity.eq(capacity)))
        .execute(&mut conn)
        .expect("insert resource");
    resources::table
        .filter(resources::name.eq(name))
        .select(resources::id)
        .first(&mut conn)
        .expect("resource id")
}

/// A product, with `stock` units received through the real receipt path (ledger included)
/// unless `stock` is 0, in which case it has no stock row at all.
pub fn create_product(db: &TestDb, sku: &str, price_cents: i64, stock: u32) -> i64 {
    use haita::schema::{products, users};
    let mut conn = db.conn();
    diesel::insert_into(products::table)
        .values((
            products::sku.eq(sku),
            products::name.eq(format!("Product {sku}")),
            products::description.eq(""),
            products::price_cents.eq(price_cents),
        ))
        .execute(&mut conn)
        .expect("insert product");
    let id = products::table
        .filter(products::sku.eq(sku))
        .select(products::id)
        .first(&mut conn)
        .expect("product id");
    if stock > 0 {
        let receiver = match users::table
            .filter(users::username.eq("stock-keeper"))
            .select(users::id)
            .first(&mut conn)
        {
            Ok(id) => id,
            Err(_) => create_user(db, "stock-keeper", Role::Staff).id,
        };
        let quantity = haita::inventory::model::Quantity::parse(i64::from(stock), 100_000).expect("quantity");
        haita::inventory::service::receive(
            &db.pool,
            haita::locking::Turn::unqueued(db.pool.names().stock(id), Duration::from_secs(5)),
            receiver,
            id,
            quantity,
        )
        .expect("receive");
    }
    id
}

/// Moves every live hold of `product` into the past, as the database's clock reads it: the
/// holds expire now, without the test waiting their ten minutes. Honest, because expiry is
/// nothing but `expires_at` compared with that same clock.
pub fn expire_holds_of(db: &TestDb, product: i64) -> usize {
    haita::db::cached_sql::<()>(
        "UPDATE stock_holds SET created_at = {now} - {? microseconds}, expires_at = {now} - {? microseconds} \
         WHERE product_id = ? AND ended IS NULL",
    )
    .bind::<diesel::sql_types::BigInt, _>(3_600_000_000_i64)
    .bind::<diesel::sql_types::BigInt, _>(1_000_000_i64)
    .bind::<diesel::sql_types::BigInt, _>(product)
    .execute(&mut db.conn())
    .expect("expire the holds")
}

/// A day a few weeks ahead, different per call, so tests running at the same time on one server
/// rarely share a lock name (named locks are server-wide, not per database).
pub fn future_day() -> chrono::NaiveDate {
    haita::bookings::service::today() + chrono::Days::new(rand::rng().random_range(2..300))
}

/// An HTTP client with its own cookie jar (its own session), no automatic redirects.
pub struct Client {
    pub http: reqwest::Client,
    pub base: String,
}

impl Client {
    pub fn new(base: &str) -> Self {
        Self::with_headers(base, reqwest::header::HeaderMap::new())
    }

    /// A client behind a proxy that says it came from `address` (`X-Forwarded-For`), as a
    /// TLS-terminating proxy in front of the app does for every client.
    pub fn forwarded_for(base: &str, address: &str) -> Self {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("x-forwarded-for", address.parse().expect("header value"));
        Self::with_headers(base, headers)
    }

    fn with_headers(base: &str, headers: reqwest::header::HeaderMap) -> Self {
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .cookie_store(true)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(60))
            // The app closes a connection idle for `KEEP_ALIVE`. A client that waited about that
            // long (dozens of others logging in first, on a loaded machine) could send on a
            // connection the server was closing: IncompleteMessage. Let go long before.
            .pool_idle_timeout(Duration::from_secs(2))
            .build()
            .expect("http client");
        Self { http, base: base.to_string() }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.http.get(self.url(path)).send().await.expect("GET")
    }

    /// This instance's `/metrics` page, scraped as Prometheus does (with the bearer token).
    pub async fn metrics(&self) -> String {
        let response = self
            .http
            .get(self.url("/metrics"))
            .bearer_auth(METRICS_TOKEN)
            .send()
            .await
            .expect("GET /metrics");
        assert_eq!(response.status(), 200, "/metrics with the token");
        response.text().await.expect("metrics")
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> reqwest::Response {
        self.http.post(self.url(path)).json(body).send().await.expect("POST")
    }

    /// A body-less API request (DELETE, a POST that needs no body), marked JSON as the API asks of
    /// every request that changes something.
    pub async fn send(&self, method: reqwest::Method, path: &str) -> reqwest::Response {
        self.http
            .request(method, self.url(path))
            .header("content-type", "application/json")
            .send()
            .await
            .expect("request")
    }

    pub async fn post_form(&self, path: &str, form: &[(&str, &str)]) -> reqwest::Response {
        self.http.post(self.url(path)).form(form).send().await.expect("POST form")
    }

    /// Logs in, as a client would: a 503 busy (every hashing slot taken while dozens of test
    /// users log in at once on a loaded machine) is retried after its Retry-After, twice at most.
    pub async fn login(&self, user: &TestUser) {
        let body = serde_json::json!({"username": user.username, "password": PASSWORD});
        let mut response = self.post_json("/api/v1/session", &body).await;
        for _ in 0..2 {
            if response.status() != 503 {
                break;
            }
            // Not synchronisation: a client honouring the 503's Retry-After (1 s) between the
            // attempts of a bounded retry; the next attempt itself is the check.
            actix_web::rt::time::sleep(Duration::from_secs(1)).await;
            response = self.post_json("/api/v1/session", &body).await;
        }
        assert_eq!(response.status(), 200, "login of {} failed", user.username);
    }

    /// The CSRF token rendered into the page at `path`, as a browser would submit it.
    /// Opens a resource's editor as a browser does: the edit page's start form (which its script
    /// submits as the page loads) takes the edit lock, then the editor it redirects to. The
    /// last answer: the editor (200), or the page of someone else's lock (423), or a refusal.
    pub async fn open_editor(&self, resource: i64) -> reqwest::Response {
        let path = format!("/resources/{resource}/edit");
        let token = self.csrf_token("/").await;
        let started = self.post_form(&format!("{path}/start"), &[("csrf_token", &token)]).await;
        if started.status() != 303 {
            return started;
        }
        self.get(&path).await
    }

    /// The edit-lock epoch the editor of `resource` would post now, as a browser reads it from
    /// the page (its hidden `lock_epoch` field); "0" when the page is not the editor.
    pub async fn editor_epoch(&self, resource: i64) -> String {
        let page = self.get(&format!("/resources/{resource}/edit")).await.text().await.expect("page");
        lock_epoch_in(&page).unwrap_or_else(|| "0".into())
    }

    /// The admin listing's entry for the live named lock `name` (this client is an admin).
    pub async fn listed_named_lock(&self, name: &str) -> Value {
        let listing: Value = self.get("/api/v1/admin/locks").await.json().await.expect("json");
        listing["named_locks"]["locks"]
            .as_array()
            .expect("locks")
            .iter()
            .find(|l| l["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} is listed: {listing}"))
    }

    pub async fn csrf_token(&self, path: &str) -> String {
        let page = self.get(path).await.text().await.expect("page");
        let marker = "name=\"csrf_token\" value=\"";
        let start = page.find(marker).expect("page has a CSRF field") + marker.len();
        page[start..].split('"').next().expect("token").to_string()
    }

    /// `POST /api/v1/orders` with `(product_id, quantity)` lines.
    pub async fn order(&self, lines: &[(i64, i64)]) -> reqwest::Response {
        let lines: Vec<Value> =
            lines.iter().map(|(p, q)| serde_json::json!({"product_id": p, "quantity": q})).collect();
        self.post_json("/api/v1/orders", &serde_json::json!({ "lines": lines })).await
    }

    /// Switches this client's language (`en`, `ja`) with the header's form, as a person would.
    pub async fn speak(&self, lang: &str) {
        let token = self.csrf_token("/").await;
        let switched =
            self.post_form("/language", &[("csrf_token", &token), ("lang", lang), ("next", "/")]).await;
        assert_eq!(switched.status(), 303, "language switched to {lang}");
    }

    /// Books `resource_id` on `day` with the resource page's form (its CSRF token read from the
    /// page that shows `day`); the answer is the page the browser would get.
    pub async fn book_with_form(&self, resource_id: i64, day: chrono::NaiveDate) -> reqwest::Response {
        let token = self.csrf_token(&format!("/resources/{resource_id}?from={day}")).await;
        self.post_form(
            &format!("/resources/{resource_id}/bookings"),
            &[("csrf_token", &token), ("date", &day.to_string())],
        )
        .await
    }

    pub async fn book(&self, resource_id: i64, day: chrono::NaiveDate) -> reqwest::Response {
        self.post_json(
            "/api/v1/reservations",
            &serde_json::json!({"resource_id": resource_id, "date": day.to_string()}),
        )
        .await
    }
}

/// The value of the editor's hidden `lock_epoch` field in `page`, if it has one.
pub fn lock_epoch_in(page: &str) -> Option<String> {
    let (_, after) = page.split_once("name=\"lock_epoch\" value=\"")?;
    after.split_once('"').map(|(value, _)| value.to_string())
}

/// Reads a JSON error body and returns its `error` code.
pub async fn error_code(response: reqwest::Response) -> String {
    let body: Value = response.json().await.expect("JSON error body");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "error without message: {body}");
    body["error"].as_str().expect("error code").to_string()
}

/// Books `resource` on `day` through the JSON API with an `Idempotency-Key`.
pub async fn book_with_key(
    client: &Client,
    key: &str,
    resource: i64,
    day: chrono::NaiveDate,
) -> reqwest::Response {
    client
        .http
        .post(client.url("/api/v1/reservations"))
        .header("Idempotency-Key", key)
        .json(&serde_json::json!({"resource_id": resource, "date": day.to_string()}))
        .send()
        .await
        .expect("POST")
}

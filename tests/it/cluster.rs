//! Three `haita serve` processes behind a real HAProxy, configured by `docker/haproxy.cfg` (the
//! file `scripts/dev cluster` and the compose profile `cluster` run), and 64 logged-in customers
//! booking and ordering through it while one instance is stopped with SIGTERM, another is killed
//! with `kill -9`, and the third is replaced by a new build. What each costs the customers is
//! counted per phase; the database is checked afterwards (docs/cluster.md).

use std::collections::{BTreeMap, HashMap};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diesel::prelude::*;
use haita::auth::Role;
use rand::Rng;
use serde_json::{Value, json};

use crate::common::{
    Client, TestDb, TestUser, create_product, create_resource, create_user, free_port, invariants, poll,
};

/// Every instance's `SESSION_KEY`: a cookie one instance set is read by the others, so a
/// customer moved to another instance stays logged in.
const SESSION_KEY: &str = "cluster-test-session-key-shared-by-every-instance-behind-the-balancer";

/// How long the customers keep booking and ordering, at least: the three events below happen
/// inside it, one after another, each set off by what the test sees (an exit, a check, answers).
const LOAD_FOR: Duration = Duration::from_secs(30);

/// Answers the load must have had since the last event before the next one comes.
const ANSWERS_BETWEEN: usize = 150;

/// Generous bounds on waiting for something to happen (a start, an exit, a check) on a loaded
/// two-core machine running the rest of the suite: never an assertion about how long it took.
const PATIENCE: Duration = Duration::from_secs(120);

/// The phases the answers are counted in: from each event to the next.
const PHASES: [&str; 5] = ["before", "app1 SIGTERM", "app2 kill -9", "app3 new build", "after"];
const SIGTERM: usize = 1;
const KILLED: usize = 2;
const NEW_BUILD: usize = 3;
const AFTER: usize = 4;

/// HAProxy from Debian's package: the test runs the real balancer, so it fails without one.
fn haproxy_binary() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join("haproxy"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "haproxy is not installed, and this test runs the real load balancer: \
                 `apt-get install haproxy` (scripts/dev test installs it)"
            )
        })
}

/// The copy of the binary that plays the new build.
const NEW_BUILD_FILE: &str = "haita-new-build";

/// Where the processes' logs go; kept when the test fails, so its message can point there.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("haita-cluster-{:08x}", rand::rng().random::<u32>()));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The logs, not the copy of the binary.
            let _ = std::fs::remove_file(self.0.join(NEW_BUILD_FILE));
            eprintln!("the cluster's logs are in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// One `haita serve` process on a port of its own, started again on the same port when asked.
struct Instance {
    name: &'static str,
    port: u16,
    database_url: String,
    log: PathBuf,
    child: Option<Child>,
}

impl Instance {
    fn new(name: &'static str, database_url: &str, scratch: &Scratch) -> Self {
        Self {
            name,
            port: free_port(),
            database_url: database_url.into(),
            log: scratch.0.join(format!("{name}.log")),
            child: None,
        }
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts `binary` as this instance: production settings but plain HTTP, the cluster's
    /// shared key, the balancer trusted for `X-Forwarded-For`, quotas far above what 64 busy
    /// customers reach in a minute. Anything else comes from the test's environment
    /// (`DRAIN_SECS=0`, say, to see what the drain is for).
    fn start(&mut self, binary: &Path) {
        let log = OpenOptions::new().create(true).append(true).open(&self.log).expect("instance log");
        let child = Command::new(binary)
            .arg("serve")
            .env_remove("DEMO_MODE")
            .env("DATABASE_URL", &self.database_url)
            .env("BIND", self.address())
            .env("SESSION_KEY", SESSION_KEY)
            .env("COOKIE_SECURE", "0")
            .env("TRUSTED_PROXIES", "127.0.0.1/32")
            .env("LOGIN_FAILURES_PER_ADDRESS", "100000")
            .env("MAX_ORDERS_PER_MINUTE_PER_USER", "100000")
            .env("MAX_FUTURE_BOOKINGS_PER_USER", "100000")
            // About a dozen days are booked at once across the cluster, so an instance may wait
            // at the server for that many keys held by the others: a budget that lets it, so that
            // no 503 busy comes from the load itself (the default, a quarter of the pool, is
            // for one hot or stuck key).
            .env("LOCK_WAITERS_MAX", "12")
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("haita serve");
        self.child = Some(child);
    }

    /// Sends `signal` (`TERM`, `KILL`) with kill(1): the crate forbids `unsafe`, which
    /// `libc::kill` is.
    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("a running instance").id();
        let sent = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -{signal} {pid} ({})", self.name);
    }

    /// The exit status, once the process has exited.
    fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().expect("try_wait");
        if status.is_some() {
            self.child = None;
        }
        status
    }

    /// Waits (bounded) for the process to exit after a signal.
    async fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            assert!(Instant::now() < deadline, "{} did not exit within {PATIENCE:?}", self.name);
            actix_web::rt::time::sleep(poll::INTERVAL).await;
        }
    }

    /// Waits (bounded) until the instance itself answers `/ready` with 200.
    async fn wait_ready(&mut self, http: &reqwest::Client) {
        let url = format!("http://{}/ready", self.address());
        let deadline = Instant::now() + PATIENCE;
        loop {
            if http.get(&url).send().await.is_ok_and(|r| r.status() == 200) {
                return;
            }
            if let Some(status) = self.exited() {
                panic!("{} exited ({status}) before it was ready; see {}", self.name, self.log.display());
            }
            assert!(Instant::now() < deadline, "{} not ready within {PATIENCE:?}", self.name);
            actix_web::rt::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// HAProxy with the repository's configuration, told the instances' addresses and its own
/// ports through the environment, as `scripts/dev cluster` tells it.
struct Balancer {
    child: Child,
    port: u16,
    stats_port: u16,
}

impl Balancer {
    fn start(instances: &[Instance], scratch: &Scratch) -> Self {
        let (port, stats_port) = (free_port(), free_port());
        let log = scratch.0.join("haproxy.log");
        let out = OpenOptions::new().create(true).append(true).open(&log).expect("haproxy log");
        let mut command = Command::new(haproxy_binary());
        command
            .args(["-db", "-f", concat!(env!("CARGO_MANIFEST_DIR"), "/docker/haproxy.cfg")])
            .env("HAITA_LB_BIND", format!("127.0.0.1:{port}"))
            .env("HAITA_LB_STATS_BIND", format!("127.0.0.1:{stats_port}"))
            .env_remove("HAITA_LB_DNS")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out);
        for i in 1..=9 {
            command.env_remove(format!("HAITA_APP{i}"));
        }
        for (i, instance) in instances.iter().enumerate() {
            command.env(format!("HAITA_APP{}", i + 1), instance.address());
        }
        let child = command.spawn().expect("haproxy");
        Self { child, port, stats_port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The stats page as CSV: one map of column → value per server of the backend, and one for
    /// the backend itself (`BACKEND`). Empty while HAProxy is not answering yet.
    async fn servers(&self, http: &reqwest::Client) -> BTreeMap<String, HashMap<String, String>> {
        let url = format!("http://127.0.0.1:{}/;csv", self.stats_port);
        let Ok(response) = http.get(&url).send().await else { return BTreeMap::new() };
        let text = response.text().await.unwrap_or_default();
        let mut lines = text.lines();
        let header: Vec<String> =
            lines.next().unwrap_or_default().trim_start_matches("# ").split(',').map(String::from).collect();
        lines
            .map(|line| {
                header.iter().cloned().zip(line.split(',').map(String::from)).collect::<HashMap<_, _>>()
            })
            .filter(|row| row.get("pxname").is_some_and(|p| p == "instances"))
            .filter_map(|row| Some((row.get("svname")?.clone(), row)))
            .collect()
    }

    /// The balancer's view of one server: `UP`, `DOWN`, `UP 1/2` (rising) and so on.
    async fn status(&self, http: &reqwest::Client, server: &str) -> String {
        self.servers(http).await.get(server).and_then(|row| row.get("status").cloned()).unwrap_or_default()
    }

    /// Waits (bounded) until the balancer's checks have `server` in the state `want`.
    async fn wait_status(&self, http: &reqwest::Client, server: &str, want: &str) {
        poll::until_async_every(
            &format!("the balancer to mark {server} {want}"),
            PATIENCE,
            Duration::from_millis(100),
            async || self.status(http, server).await == want,
        )
        .await;
    }

    /// A counter of one server's row, or of the backend's (`BACKEND`): `wretr` retries,
    /// `wredis` redispatches, `eresp` responses that failed (the server closed the connection
    /// before answering), `econ` connections that could not be made.
    async fn counter(&self, http: &reqwest::Client, server: &str, column: &str) -> u64 {
        self.servers(http).await.get(server).and_then(|row| row.get(column)?.parse().ok()).unwrap_or_default()
    }

    /// The requests the balancer gave `server` that it got no answer from and sent nowhere else,
    /// by its own counts: those it gave it (`stot`) less those answered with any status
    /// (`hrsp_*`) and those it redispatched to another instance (`wredis`). This includes
    /// what no error counter does: a request sent on a reused connection that the server closed
    /// before answering is not retried, not logged and not counted in `eresp`; HAProxy closes
    /// the client's connection instead, as the server would have without a balancer (the
    /// client's first request always has a connection of its own, so only a request a client
    /// could send again is treated so; `http-reuse safe`).
    async fn unanswered(&self, http: &reqwest::Client, server: &str) -> u64 {
        let servers = self.servers(http).await;
        let row = servers.get(server);
        let count =
            |column: &str| row.and_then(|row| row.get(column)?.parse::<u64>().ok()).unwrap_or_default();
        let answered: u64 = ["hrsp_1xx", "hrsp_2xx", "hrsp_3xx", "hrsp_4xx", "hrsp_5xx", "hrsp_other"]
            .map(count)
            .iter()
            .sum();
        count("stot").saturating_sub(answered + count("wredis"))
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request of the load and what came back.
#[derive(Debug)]
struct Answer {
    client: usize,
    keyed: bool,
    order: bool,
    /// The phase the answer (or the failure) came in.
    phase: usize,
    /// `None`: no HTTP answer at all (the connection closed under the request).
    status: Option<u16>,
    /// The error code of a refusal, or what went wrong without an answer.
    code: String,
    /// `X-Served-By`: the instance that answered, `<NOSRV>` when HAProxy answered itself.
    served_by: String,
    /// From sending the request to its answer (or failure), for the report.
    took: Duration,
}

impl Answer {
    fn failed(&self) -> bool {
        !matches!(self.status, Some(201 | 409))
    }

    fn label(&self) -> String {
        match self.status {
            Some(201) => "201".into(),
            Some(409) => format!("409 {}", self.code),
            Some(status) => format!("{status} {} ({})", self.code, self.served_by),
            None => format!("no answer: {}", self.code),
        }
    }
}

/// What the load shares with the test: the phase now, the answers, how many requests are out.
#[derive(Default)]
struct Load {
    phase: AtomicUsize,
    stop: AtomicBool,
    outstanding: AtomicUsize,
    answered: AtomicUsize,
    answers: Mutex<Vec<Answer>>,
}

impl Load {
    /// Waits (bounded) until the load has had `more` answers since now.
    async fn more_answers(&self, more: usize) {
        let target = self.answered.load(Ordering::Relaxed) + more;
        poll::until_async(&format!("the load to reach {target} answers"), PATIENCE, async || {
            self.answered.load(Ordering::Relaxed) >= target
        })
        .await;
    }
}

/// What the customers book and order.
#[derive(Clone, Copy)]
struct Goods {
    resource: i64,
    first_day: chrono::NaiveDate,
    plenty: i64,
    scarce: i64,
}

/// One customer: books and orders in turn until told to stop, a request every 20 ms or so.
/// Even-numbered customers send every request with an `Idempotency-Key`, the others without.
async fn customer(i: usize, client: Client, goods: Goods, load: Arc<Load>) {
    let keyed = i.is_multiple_of(2);
    let mut n = 0usize;
    while !load.stop.load(Ordering::Relaxed) {
        n += 1;
        let order = n.is_multiple_of(2);
        let body = if order {
            let product = if n.is_multiple_of(8) { goods.scarce } else { goods.plenty };
            json!({"lines": [{"product_id": product, "quantity": 1}]})
        } else {
            // Everyone walks the same 150 days from a different start: days fill up, and each
            // customer's second visit to a day is refused as already booked. Every fourth
            // booking is for one hot day, the same for everyone, whose requests each instance
            // serves in batches (`bookings::coalesce`).
            let day = if (n / 2).is_multiple_of(4) {
                goods.first_day + chrono::Days::new(150)
            } else {
                goods.first_day + chrono::Days::new(((n / 2 + i) % 150) as u64)
            };
            json!({"resource_id": goods.resource, "date": day.to_string()})
        };
        let path = if order { "/api/v1/orders" } else { "/api/v1/reservations" };
        let mut request = client.http.post(client.url(path)).json(&body);
        if keyed {
            request = request.header("Idempotency-Key", format!("c{i}-{n}"));
        }
        load.outstanding.fetch_add(1, Ordering::SeqCst);
        let sending = Instant::now();
        let sent = request.send().await;
        let (status, code, served_by) = match sent {
            Ok(response) => {
                let status = response.status().as_u16();
                let served_by = response
                    .headers()
                    .get("x-served-by")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("none")
                    .to_string();
                match response.bytes().await {
                    Ok(_) if status == 201 => (Some(status), String::new(), served_by),
                    Ok(body) => {
                        let code = serde_json::from_slice::<Value>(&body)
                            .ok()
                            .and_then(|v| v["error"].as_str().map(String::from))
                            .unwrap_or_else(|| String::from_utf8_lossy(&body).chars().take(80).collect());
                        (Some(status), code, served_by)
                    }
                    Err(e) => (None, format!("body cut off: {e}"), served_by),
                }
            }
            Err(e) => (None, innermost(&e), "none".into()),
        };
        load.outstanding.fetch_sub(1, Ordering::SeqCst);
        let phase = load.phase.load(Ordering::SeqCst);
        load.answers.lock().expect("answers").push(Answer {
            client: i,
            keyed,
            order,
            phase,
            status,
            code,
            served_by,
            took: sending.elapsed(),
        });
        load.answered.fetch_add(1, Ordering::Relaxed);
        // Not synchronisation: the pace of the load.
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What went wrong under a request that got no answer, in its own words ("connection closed
/// before message completed").
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

/// How long each event took, as the test saw it: reported, never asserted.
#[derive(Default, Debug)]
struct Timeline {
    sigterm_to_out_of_rotation: Option<Duration>,
    sigterm_to_exit: Option<Duration>,
    kill_to_out_of_rotation: Option<Duration>,
    restart_to_ready: Vec<Duration>,
    /// Requests out (to any instance) as the kill was sent: reported, not a bound (requests sent
    /// to app2 after the kill, before the balancer saw it down, fail too).
    outstanding_at_kill: usize,
    /// Requests HAProxy gave app2 that it got no answer for, by HAProxy's own count: the exact
    /// bound of what the kill can cost.
    cut_off_by_kill: u64,
}

/// SIGTERM: waits for the instance to exit, noting when the balancer took it out of rotation
/// and when it exited, both from the signal.
async fn stop_and_watch(
    instance: &mut Instance,
    server: &str,
    balancer: &Balancer,
    http: &reqwest::Client,
) -> (Option<Duration>, Duration, ExitStatus) {
    let signalled = Instant::now();
    instance.signal("TERM");
    let mut out_of_rotation = None;
    let deadline = signalled + PATIENCE;
    loop {
        if out_of_rotation.is_none() && balancer.status(http, server).await.starts_with("DOWN") {
            out_of_rotation = Some(signalled.elapsed());
        }
        if let Some(status) = instance.exited() {
            return (out_of_rotation, signalled.elapsed(), status);
        }
        assert!(Instant::now() < deadline, "{server} did not exit within {PATIENCE:?} of SIGTERM");
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts `binary` as `instance` again and waits until it is ready and back in rotation.
async fn bring_back(
    instance: &mut Instance,
    binary: &Path,
    server: &str,
    balancer: &Balancer,
    http: &reqwest::Client,
) -> Duration {
    let started = Instant::now();
    instance.start(binary);
    instance.wait_ready(http).await;
    balancer.wait_status(http, server, "UP").await;
    started.elapsed()
}

/// Confirmed reservations and orders per user, as the database has them.
fn effects_per_user(db: &TestDb) -> HashMap<i64, (i64, i64)> {
    use haita::schema::{orders::dsl as o, reservations::dsl as r};
    let mut conn = db.raw_connection();
    let bookings: Vec<i64> = r::reservations
        .filter(r::status.eq("confirmed"))
        .select(r::user_id)
        .load(&mut conn)
        .expect("reservations");
    let orders: Vec<i64> = o::orders.select(o::user_id).load(&mut conn).expect("orders");
    let mut per_user: HashMap<i64, (i64, i64)> = HashMap::new();
    for user in bookings {
        per_user.entry(user).or_default().0 += 1;
    }
    for user in orders {
        per_user.entry(user).or_default().1 += 1;
    }
    per_user
}

/// The test of docs/cluster.md. With the drain of `haita serve` (SIGTERM: unready at once, keep
/// serving for DRAIN_SECS while the balancer's checks take the instance out, then finish what
/// is in flight and exit 0) and the balancer's retries, the SIGTERM and the new build cost the
/// customers nothing: every answer in their phases is 201 or 409. `kill -9` costs at most the
/// requests the killed instance had in flight, and only those the balancer may not send twice
/// (a POST without an `Idempotency-Key`); a keyed one is sent again to another instance and
/// answered once. Nothing is done twice: per customer, the database holds no more bookings and
/// orders than the 201s they saw plus the requests that got no answer. The invariants hold and
/// no named lock is left held once the killed instance's sessions are gone.
#[actix_web::test]
async fn three_instances_behind_haproxy_survive_a_drain_a_kill_and_a_new_build_under_load() {
    let haproxy = haproxy_binary();
    let scratch = Scratch::new();
    let db = TestDb::new();
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_haita"));
    // The "new build": another file, started on the same port as the instance it replaces.
    let new_build = scratch.0.join(NEW_BUILD_FILE);
    std::fs::copy(&binary, &new_build).expect("copy the binary");

    let goods = Goods {
        resource: create_resource(&db, "Cluster room", 4),
        first_day: haita::bookings::service::today() + chrono::Days::new(rand::rng().random_range(2..200)),
        plenty: create_product(&db, "CLUSTER-PLENTY", 100, 50_000),
        scarce: create_product(&db, "CLUSTER-SCARCE", 100, 300),
    };
    let users: Vec<TestUser> =
        (0..64).map(|i| create_user(&db, &format!("c{i:02}"), Role::Customer)).collect();

    let mut instances: Vec<Instance> =
        ["app1", "app2", "app3"].into_iter().map(|name| Instance::new(name, &db.url, &scratch)).collect();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("client");
    for instance in &mut instances {
        instance.start(&binary);
    }
    for instance in &mut instances {
        instance.wait_ready(&http).await;
    }
    let balancer = Balancer::start(&instances, &scratch);
    for server in ["app1", "app2", "app3"] {
        balancer.wait_status(&http, server, "UP").await;
    }
    println!(
        "haproxy {} in front of {:?}",
        haproxy.display(),
        instances.iter().map(Instance::address).collect::<Vec<_>>()
    );

    let clients: Vec<Client> = (0..users.len()).map(|_| Client::new(&balancer.url())).collect();
    for (chunk, users) in clients.chunks(8).zip(users.chunks(8)) {
        futures::future::join_all(chunk.iter().zip(users).map(|(c, u)| c.login(u))).await;
    }

    let load = Arc::new(Load::default());
    let started = Instant::now();
    let customers: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, client)| actix_web::rt::spawn(customer(i, client, goods, load.clone())))
        .collect();

    let mut timeline = Timeline::default();
    load.more_answers(ANSWERS_BETWEEN).await;

    // 1. SIGTERM to app1: it drains and exits 0; then it comes back (same build).
    load.phase.store(SIGTERM, Ordering::SeqCst);
    let (out, exited_after, status) = stop_and_watch(&mut instances[0], "app1", &balancer, &http).await;
    assert!(status.success(), "app1 exits 0 after SIGTERM, not {status}; see {}", instances[0].log.display());
    (timeline.sigterm_to_out_of_rotation, timeline.sigterm_to_exit) = (out, Some(exited_after));
    load.more_answers(ANSWERS_BETWEEN).await;
    timeline.restart_to_ready.push(bring_back(&mut instances[0], &binary, "app1", &balancer, &http).await);
    load.more_answers(ANSWERS_BETWEEN).await;

    // 2. kill -9 to app2, mid-load; it comes back once the balancer has taken it out.
    load.phase.store(KILLED, Ordering::SeqCst);
    timeline.outstanding_at_kill = load.outstanding.load(Ordering::SeqCst);
    let killed = Instant::now();
    instances[1].signal("KILL");
    instances[1].wait_exit().await;
    balancer.wait_status(&http, "app2", "DOWN").await;
    timeline.kill_to_out_of_rotation = Some(killed.elapsed());
    load.more_answers(ANSWERS_BETWEEN).await;
    timeline.restart_to_ready.push(bring_back(&mut instances[1], &binary, "app2", &balancer, &http).await);
    load.more_answers(ANSWERS_BETWEEN).await;

    // 3. app3 replaced by the new build: SIGTERM, exit, the copy started on the same port.
    load.phase.store(NEW_BUILD, Ordering::SeqCst);
    let (_, _, status) = stop_and_watch(&mut instances[2], "app3", &balancer, &http).await;
    assert!(status.success(), "app3 exits 0 after SIGTERM, not {status}; see {}", instances[2].log.display());
    timeline.restart_to_ready.push(bring_back(&mut instances[2], &new_build, "app3", &balancer, &http).await);
    load.more_answers(ANSWERS_BETWEEN).await;

    // The load runs its course (at least LOAD_FOR), with every instance back.
    load.phase.store(AFTER, Ordering::SeqCst);
    load.more_answers(ANSWERS_BETWEEN).await;
    poll::until_async("the load to have run its course", PATIENCE + LOAD_FOR, async || {
        started.elapsed() >= LOAD_FOR
    })
    .await;
    load.stop.store(true, Ordering::Relaxed);
    for customer in futures::future::join_all(customers).await {
        customer.expect("customer task");
    }
    let ran_for = started.elapsed();
    // Read once the load is over, when nothing is in flight: every request app2 was given and
    // did not answer, from the start (the other phases are checked below to have lost nothing).
    timeline.cut_off_by_kill = balancer.unanswered(&http, "app2").await;
    let (retries, redispatches) = (
        balancer.counter(&http, "BACKEND", "wretr").await,
        balancer.counter(&http, "BACKEND", "wredis").await,
    );

    let answers = std::mem::take(&mut *load.answers.lock().expect("answers"));
    let mut per_phase: BTreeMap<(usize, String), usize> = BTreeMap::new();
    for answer in &answers {
        *per_phase.entry((answer.phase, answer.label())).or_default() += 1;
    }
    println!(
        "{} requests in {ran_for:?}, {retries} retries and {redispatches} redispatches by the balancer",
        answers.len()
    );
    for ((phase, label), n) in &per_phase {
        println!("  {:<15} {label}: {n}", PHASES[*phase]);
    }
    for (kind, is_order) in [("bookings", false), ("orders", true)] {
        let slowest = answers.iter().filter(|a| a.order == is_order).map(|a| a.took).max();
        println!("  slowest of the {kind}: {slowest:?}");
    }
    println!("{timeline:?}");
    println!("the balancer counted {} requests to app2 cut off by its death", timeline.cut_off_by_kill);
    let row = balancer.servers(&http).await.remove("app2").unwrap_or_default();
    let counters =
        ["stot", "hrsp_2xx", "hrsp_4xx", "hrsp_5xx", "eresp", "econ", "srv_abrt", "wretr", "wredis"];
    println!("app2's counters: {:?}", counters.map(|c| (c, row.get(c).cloned().unwrap_or_default())));

    // The SIGTERM and the new build cost nothing; neither did the quiet phases.
    let failed: Vec<&Answer> = answers.iter().filter(|a| a.failed()).collect();
    let outside_the_kill: Vec<_> = failed.iter().filter(|a| a.phase != KILLED).collect();
    assert!(
        outside_the_kill.is_empty(),
        "answers other than 201/409 outside the kill -9: {outside_the_kill:#?}"
    );
    // The kill -9 costs at most the requests the balancer could not get app2 to answer (by its
    // own count: those in flight, and those sent before it saw app2 down), and nothing that
    // carried a key.
    let killed_cost: Vec<_> = failed.iter().filter(|a| a.phase == KILLED).collect();
    assert!(
        killed_cost.len() as u64 <= timeline.cut_off_by_kill,
        "kill -9 cost {} requests, more than the {} the balancer counted cut off: {killed_cost:#?}",
        killed_cost.len(),
        timeline.cut_off_by_kill
    );
    // A keyed request is sent again when its instance dies under it: it always gets an answer
    // that says what happened (at worst 503 busy, which means "not done, try again").
    assert!(
        killed_cost.iter().all(|a| !a.keyed || a.status == Some(503)),
        "a request with an Idempotency-Key is sent again, not left without an answer: {killed_cost:#?}"
    );
    // No request took effect twice: per customer, at least the 201s they saw and at most those
    // plus the requests that ended without a definite answer.
    let effects = effects_per_user(&db);
    for (i, user) in users.iter().enumerate() {
        let theirs = || answers.iter().filter(move |a| a.client == i);
        let (booked, ordered) = effects.get(&user.id).copied().unwrap_or_default();
        for (kind, is_order, in_db) in [("bookings", false, booked), ("orders", true, ordered)] {
            let seen = theirs().filter(|a| a.order == is_order && a.status == Some(201)).count() as i64;
            let unknown = theirs().filter(|a| a.order == is_order && a.failed()).count() as i64;
            assert!(
                (seen..=seen + unknown).contains(&in_db),
                "customer {i}: {in_db} {kind} in the database, {seen} answered 201 and {unknown} unknown"
            );
        }
    }

    invariants::no_day_over_capacity(&db);
    invariants::no_user_booked_twice(&db);
    invariants::stock_matches_ledger(&db);
    invariants::orders_match_ledger(&db);
    // The killed instance's sessions end when the server notices their sockets closed; with
    // them, any lock they held.
    poll::until("no named lock left held", PATIENCE, || invariants::named_locks_held(&db).is_empty());
    invariants::no_named_lock_left_held(&db);
}

//! The app under measurement, as a process of its own: the same binary, `haita serve`, on the
//! bench's scratch database. The load generator then runs in the bench's process, so its CPU
//! is its own and not charged to the app, and the app's CPU is read from the server process.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::config::Config;

/// A running `haita serve`, stopped when dropped.
pub struct ServerProcess {
    child: Child,
    port: u16,
    /// Its `METRICS_TOKEN`, fresh per run: the bench scrapes `/metrics` with it, whatever the
    /// environment it was started from says.
    metrics_token: String,
    /// Its `SESSION_KEY` (hex digits), fresh per run: the bench seals its users' cookies with it
    /// (`cookies.rs`).
    session_key: String,
}

impl ServerProcess {
    /// Starts the server on `config`'s database and pool size, on a free local port, in
    /// `DEMO_MODE` (the demo strategies' endpoint), with login throttles off (every bench
    /// client logs in from 127.0.0.1 at once) and a fresh session key; returns once it answers.
    /// `lift_quotas` for a few users who book and order thousands of times; else the quotas of
    /// `config`.
    pub fn start(config: &Config, lift_quotas: bool) -> anyhow::Result<Self> {
        let port = free_port()?;
        let log = std::env::temp_dir().join(format!("haita-bench-server-{}.log", std::process::id()));
        // A few bench users who book and order thousands of times get the per-user quotas at
        // their highest, as the raw side lifts them (u32::MAX), so both sides do the same work
        // (the user-row lock and the count included) instead of the app answering refusals.
        let quota = |configured: u32| if lift_quotas { "100000".to_string() } else { configured.to_string() };
        let session_key: String = (0..64).map(|_| format!("{:02x}", rand::random::<u8>())).collect();
        let metrics_token: String = (0..32).map(|_| format!("{:02x}", rand::random::<u8>())).collect();
        let mut command = Command::new(std::env::current_exe().context("locating the haita binary")?);
        command
            .arg("serve")
            .env("DATABASE_URL", &config.database_url)
            .env("BIND", format!("127.0.0.1:{port}"))
            .env("DEMO_MODE", "1")
            .env("DEMO_LOCK_DIR", lock_dir())
            .env("SESSION_KEY", &session_key)
            .env("METRICS_TOKEN", &metrics_token)
            .env("POOL_SIZE", config.pool_size.to_string())
            .env("POOL_TIMEOUT_SECS", config.pool_timeout.as_secs().to_string())
            .env("LOCK_WAIT_SECS", config.lock_wait.as_secs().to_string())
            .env("LOGIN_FAILURES_PER_ADDRESS", u32::MAX.to_string())
            .env("MAX_FUTURE_BOOKINGS_PER_USER", quota(config.max_future_bookings))
            .env("MAX_ORDERS_PER_MINUTE_PER_USER", quota(config.max_orders_per_minute))
            // One access-log line per request would be part of what is measured.
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // Its warnings (a busy answer logs one) would interleave with the table.
            .stderr(std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?);
        if let Some(workers) = config.workers {
            command.env("WORKERS", workers.to_string());
        }
        let child = command.spawn().context("starting `haita serve`")?;
        let mut server = Self { child, port, metrics_token, session_key };
        server
            .wait_until_healthy(Duration::from_secs(60))
            .with_context(|| format!("the server's log is {}", log.display()))?;
        eprintln!("the server's log: {}", log.display());
        Ok(server)
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Its session key, to seal cookies the server accepts
    /// (the variable's bytes, as `config` reads them).
    pub fn session_key(&self) -> anyhow::Result<actix_web::cookie::Key> {
        Ok(actix_web::cookie::Key::try_from(self.session_key.as_bytes())?)
    }

    /// The bearer token its `/metrics` asks for.
    pub fn metrics_token(&self) -> &str {
        &self.metrics_token
    }

    /// CPU time (user + system) the server process has used so far, all its threads included.
    pub fn cpu(&self) -> Duration {
        super::process_cpu(&format!("/proc/{}/stat", self.child.id()))
    }

    fn wait_until_healthy(&mut self, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait()? {
                anyhow::bail!("`haita serve` exited before it answered: {status}");
            }
            if health(self.port).unwrap_or(false) {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "`haita serve` did not answer /health within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The `file-lock` strategy's files, one per day booked: nobody can be using them now.
        let _ = std::fs::remove_dir_all(lock_dir());
    }
}

/// The lock files of this bench (its server's and its raw path's), deleted when the server
/// stops.
pub fn lock_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("haita-bench-locks-{}", std::process::id()))
}

/// A port nobody listens on right now (the server binds it a moment later).
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Whether `GET /health` answers 200: plain HTTP/1.0 over a socket, no client library needed
/// outside the async runtime.
fn health(port: u16) -> std::io::Result<bool> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"))
}

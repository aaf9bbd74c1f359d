//! A `haita serve` process of its own on a test's database: an instance the test may stop with
//! SIGTERM, as a deployment does, or kill with SIGKILL, as a crash does, which an instance in the
//! test's own process cannot be.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::poll;

pub struct AppProcess {
    child: Child,
    pub address: String,
}

impl AppProcess {
    /// `haita serve` on `database_url` and a free port, with the tests' session key, plain
    /// HTTP, and `env` on top; returns once it listens.
    pub fn start(database_url: &str, env: &[(&str, &str)]) -> Self {
        let port = crate::common::free_port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_haita"));
        command
            .arg("serve")
            .env("DATABASE_URL", database_url)
            .env("BIND", format!("127.0.0.1:{port}"))
            .env("SESSION_KEY", "test-session-key-test-session-key-test-session-key-test-session-key!")
            .env("COOKIE_SECURE", "0")
            .env("LOGIN_FAILURES_PER_ADDRESS", "100000")
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (name, value) in env {
            command.env(name, value);
        }
        let child = command.spawn().expect("haita serve");
        poll::until("haita serve to listen on its port", Duration::from_secs(60), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        Self { child, address: format!("http://127.0.0.1:{port}") }
    }

    /// SIGKILL, and reaped: the process is gone, with no chance to say so.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, as a deployment stops an instance, and waits (bounded) for it to exit.
    pub fn terminate(&mut self) {
        let sent = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("kill");
        assert!(sent.success(), "SIGTERM sent");
        let child = &mut self.child;
        poll::until("the process to exit after SIGTERM", Duration::from_secs(60), || {
            child.try_wait().expect("wait").is_some()
        });
    }
}

impl Drop for AppProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

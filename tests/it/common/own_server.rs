//! A MariaDB server of the test's own, which the test may kill (`kill -9`) and start again.
//!
//! Uses the `mariadbd` and `mariadb-install-db` of Debian's `mariadb-server` package (installed by
//! `scripts/dev` whenever it has to run a server of its own; present wherever a local MariaDB
//! runs). The data directory lives in a temporary folder removed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::Rng;

pub struct OwnServer {
    dir: PathBuf,
    pub port: u16,
    child: Option<Child>,
}

fn binary(name: &str) -> String {
    for dir in ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"] {
        let path = format!("{dir}/{name}");
        if std::path::Path::new(&path).exists() {
            return path;
        }
    }
    panic!("{name} not found: install Debian's mariadb-server (scripts/dev does)");
}

impl OwnServer {
    /// Initialises a data directory, starts the server on a free port and creates an account
    /// `haita`/`haita` for TCP logins.
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("haita-own-db-{:016x}", rand::rng().random::<u64>()));
        // A temporary directory of its own: two servers set up at once (tests run in parallel)
        // in the shared /tmp have been seen to delete each other's temporary tables.
        std::fs::create_dir_all(dir.join("tmp")).expect("data dir");
        let user = if is_root() { "root" } else { "" };
        let mut install = Command::new(binary("mariadb-install-db"));
        install.args(["--no-defaults", "--skip-test-db", "--auth-root-authentication-method=socket"]);
        install.arg(format!("--datadir={}", dir.join("data").display()));
        install.arg(format!("--tmpdir={}", dir.join("tmp").display()));
        if !user.is_empty() {
            install.arg(format!("--user={user}"));
        }
        // One set-up at a time: they are short, and a failure of one should not be another's.
        static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let installing = INSTALLING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let out = install.stdout(Stdio::null()).stderr(Stdio::piped()).output().expect("mariadb-install-db");
        drop(installing);
        assert!(out.status.success(), "mariadb-install-db: {}", String::from_utf8_lossy(&out.stderr));
        let port = free_port();
        let mut server = Self { dir, port, child: None };
        server.run();
        let socket = server.socket();
        let sql = "CREATE USER 'haita'@'127.0.0.1' IDENTIFIED BY 'haita'; \
                   GRANT ALL PRIVILEGES ON *.* TO 'haita'@'127.0.0.1';";
        let out = Command::new(binary("mariadb"))
            .args([format!("--socket={socket}"), "-uroot".into(), "-e".into(), sql.into()])
            .output()
            .expect("mariadb client");
        assert!(out.status.success(), "creating the test account: {}", String::from_utf8_lossy(&out.stderr));
        server
    }

    pub fn url(&self) -> String {
        format!("mysql://haita:haita@127.0.0.1:{}/haita", self.port)
    }

    fn socket(&self) -> String {
        self.dir.join("mysqld.sock").display().to_string()
    }

    /// Starts `mariadbd` on the existing data directory and waits until it accepts connections.
    pub fn run(&mut self) {
        let mut command = Command::new(binary("mariadbd"));
        command.args(["--no-defaults", "--bind-address=127.0.0.1", "--skip-name-resolve"]);
        command.arg(format!("--datadir={}", self.dir.join("data").display()));
        command.arg(format!("--tmpdir={}", self.dir.join("tmp").display()));
        command.arg(format!("--socket={}", self.socket()));
        command.arg(format!("--port={}", self.port));
        command.arg(format!("--pid-file={}", self.dir.join("mysqld.pid").display()));
        command.arg(format!("--log-error={}", self.dir.join("mysqld.err").display()));
        command.args(["--innodb-buffer-pool-size=64M", "--max-connections=500"]);
        if is_root() {
            command.arg("--user=root");
        }
        let child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("mariadbd");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "mariadbd did not start; see {}", self.dir.display());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `kill -9`: the server vanishes mid-statement, as in a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

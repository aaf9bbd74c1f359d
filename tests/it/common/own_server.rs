//! A database server of the test's own, which the test may kill (`kill -9`) and start again:
//! MariaDB, or PostgreSQL when the suite runs on PostgreSQL (`DATABASE_URL`).
//!
//! Uses the `mariadbd` and `mariadb-install-db` of Debian's `mariadb-server` package (installed by
//! `scripts/dev` whenever it has to run a server of its own; present wherever a local MariaDB
//! runs), or the `initdb` and `postgres` of Debian's `postgresql` package. The data directory
//! lives in a temporary folder removed on drop.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::free_port;
use rand::Rng;

pub struct OwnServer {
    dir: PathBuf,
    pub port: u16,
    child: Option<Child>,
    engine: haita::db::Engine,
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
    /// A server of the engine the suite runs on.
    pub fn start() -> Self {
        match haita::db::Engine::of_url(&super::base_database_url()) {
            Ok(haita::db::Engine::Postgres) => Self::start_postgres(),
            _ => Self::start_mariadb(),
        }
    }

    /// Initialises a data directory, starts the server on a free port and creates an account
    /// `haita`/`haita` for TCP logins.
    fn start_mariadb() -> Self {
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
        let mut server = Self { dir, port: free_port(), child: None, engine: haita::db::Engine::Mysql };
        // A free port can be taken before mariadbd binds it (by another test's server or app
        // starting at the same moment); mariadbd then exits, and a fresh port is tried.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !server.try_run_mariadb() {
            assert!(Instant::now() < deadline, "mariadbd did not start; see {}", server.dir.display());
            server.port = free_port();
        }
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

    /// `initdb` with trust authentication on localhost (the server listens there only), as
    /// the `postgres` account when the tests run as root: PostgreSQL refuses to run as root.
    fn start_postgres() -> Self {
        let dir = std::env::temp_dir().join(format!("haita-own-pg-{:016x}", rand::rng().random::<u64>()));
        std::fs::create_dir_all(&dir).expect("data dir");
        let owner = postgres_account();
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("data dir for postgres");
        }
        let mut initdb = Command::new(postgres_binary("initdb"));
        initdb.args(["--auth=trust", "--username=postgres", "--encoding=UTF8", "--locale=C.UTF-8"]);
        initdb.arg(format!("--pgdata={}", dir.join("data").display()));
        if let Some((uid, gid)) = owner {
            initdb.uid(uid).gid(gid);
        }
        let out = initdb.stdout(Stdio::null()).stderr(Stdio::piped()).output().expect("initdb");
        assert!(out.status.success(), "initdb: {}", String::from_utf8_lossy(&out.stderr));
        let mut server = Self { dir, port: free_port(), child: None, engine: haita::db::Engine::Postgres };
        server.run();
        server
    }

    pub fn url(&self) -> String {
        match self.engine {
            haita::db::Engine::Mysql => format!("mysql://haita:haita@127.0.0.1:{}/haita", self.port),
            haita::db::Engine::Postgres => format!("postgres://postgres@127.0.0.1:{}/haita", self.port),
        }
    }

    fn socket(&self) -> String {
        self.dir.join("mysqld.sock").display().to_string()
    }

    /// Starts the server on the existing data directory and waits until it accepts connections.
    pub fn run(&mut self) {
        match self.engine {
            haita::db::Engine::Mysql => self.run_mariadb(),
            haita::db::Engine::Postgres => self.run_postgres(),
        }
    }

    /// After a `kill -9` the killed postmaster's backends take a moment to notice and exit; until
    /// they have, a new postmaster refuses the data directory. So it is started again until it
    /// stays up.
    fn run_postgres(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut command = Command::new(postgres_binary("postgres"));
            command.arg("-D").arg(self.dir.join("data"));
            command.args(["-c", "listen_addresses=127.0.0.1", "-c", "max_connections=500"]);
            command.args(["-c", "fsync=off", "-c", "shared_buffers=64MB"]);
            command.arg("-c").arg(format!("unix_socket_directories={}", self.dir.display()));
            command.arg("-p").arg(self.port.to_string());
            if let Some((uid, gid)) = postgres_account() {
                command.uid(uid).gid(gid);
            }
            // A process group of its own, so that `kill` takes the backends down with it.
            command.process_group(0);
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.dir.join("postgres.log"))
                .expect("server log");
            let mut child = command.stdout(Stdio::null()).stderr(log).spawn().expect("postgres");
            // Ready once it lets a session in: the port opens while it still says "starting up".
            let ready = format!("postgres://postgres@127.0.0.1:{}/postgres", self.port);
            while haita::db::DbConn::open(&ready).is_err() {
                if child.try_wait().ok().flatten().is_some() {
                    break;
                }
                assert!(Instant::now() < deadline, "postgres did not start; see {}", self.dir.display());
                std::thread::sleep(Duration::from_millis(50));
            }
            if child.try_wait().ok().flatten().is_none() {
                self.child = Some(child);
                return;
            }
            assert!(Instant::now() < deadline, "postgres did not start; see {}", self.dir.display());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Starts `mariadbd` on the existing data directory and waits until it accepts connections.
    fn run_mariadb(&mut self) {
        assert!(self.try_run_mariadb(), "mariadbd exited at start; see {}", self.dir.display());
    }

    /// Starts `mariadbd` and waits until its own socket accepts connections (the TCP port alone
    /// could be another server's); false when it exited instead (its port was taken).
    fn try_run_mariadb(&mut self) -> bool {
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
        let mut child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("mariadbd");
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::os::unix::net::UnixStream::connect(self.socket()).is_err() {
            if child.try_wait().ok().flatten().is_some() {
                return false;
            }
            assert!(Instant::now() < deadline, "mariadbd did not start; see {}", self.dir.display());
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child = Some(child);
        true
    }

    /// `kill -9`: the server vanishes mid-statement, as in a crash. For PostgreSQL that is the
    /// postmaster's whole process group: killed alone, its backends would finish what they are
    /// doing first.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            if self.engine == haita::db::Engine::Postgres {
                let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).status();
            }
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

/// The `postgres` account's uid and gid, when the tests run as root (PostgreSQL refuses root).
fn postgres_account() -> Option<(u32, u32)> {
    if !is_root() {
        return None;
    }
    let id = |flag: &str| -> u32 {
        let out = Command::new("id").args([flag, "postgres"]).output().expect("id postgres");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("the postgres account (Debian's postgresql)")
    };
    Some((id("-u"), id("-g")))
}

/// PostgreSQL's server programs, from the newest of Debian's versioned directories.
fn postgres_binary(name: &str) -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|version| version.path().join("bin").join(name))
        .filter(|path| path.exists())
        .collect();
    found.sort_by_key(|path| {
        path.components().nth(4).and_then(|v| v.as_os_str().to_str()?.parse::<u32>().ok()).unwrap_or(0)
    });
    found.pop().unwrap_or_else(|| panic!("{name} not found: install Debian's postgresql (scripts/dev does)"))
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0"))
}

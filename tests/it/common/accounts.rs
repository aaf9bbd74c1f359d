//! Database accounts of their own for one test (another person's CLI session, the app's account
//! with exactly the init script's grants): each with a unique name and a password, dropped
//! afterwards even when the test fails.

use diesel::connection::SimpleConnection;
use haita::db::{DbConn, Engine};
use rand::Rng;
use reqwest::Url;

/// One account on the server of `root_url`, dropped with the value. Drop its sessions first: a
/// PostgreSQL database with a session still in it cannot be dropped after the test.
pub struct Account {
    pub user: String,
    pub password: String,
    engine: Engine,
    root_url: String,
}

impl Account {
    /// Creates `{prefix}{random}` with a password and no grant at all, connected as `root`.
    pub fn create(root: &mut DbConn, root_url: &str, prefix: &str) -> Self {
        let user = format!("{prefix}{:08x}", rand::rng().random::<u32>());
        let password = format!("pw-{:016x}", rand::rng().random::<u64>());
        let engine = root.engine();
        let account = Self { user, password, engine, root_url: root_url.to_string() };
        let create = match engine {
            Engine::Mysql => format!("CREATE USER {} IDENTIFIED BY '{}'", account.name(), account.password),
            Engine::Postgres => {
                format!("CREATE ROLE {} LOGIN PASSWORD '{}'", account.name(), account.password)
            }
        };
        root.batch_execute(&create).unwrap_or_else(|e| panic!("{create}: {e}"));
        account
    }

    /// The account as GRANT and DROP spell it.
    pub fn name(&self) -> String {
        match self.engine {
            Engine::Mysql => format!("'{}'@'%'", self.user),
            Engine::Postgres => self.user.clone(),
        }
    }

    /// `url` with this account's name and password, on `database` (empty: none).
    pub fn url(&self, url: &str, database: &str) -> String {
        url_as(url, &self.user, &self.password, database)
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        // A PostgreSQL role goes only once nothing of it is left (tables its migrations made,
        // its grants).
        let drop = match self.engine {
            Engine::Mysql => format!("DROP USER IF EXISTS {}", self.name()),
            Engine::Postgres => format!("DROP OWNED BY {0}; DROP ROLE IF EXISTS {0}", self.name()),
        };
        if let Ok(mut root) = DbConn::open(&self.root_url) {
            let _ = root.batch_execute(&drop);
        }
    }
}

/// `url` with another user, password and database.
pub fn url_as(url: &str, user: &str, password: &str, database: &str) -> String {
    let mut url = Url::parse(url).expect("database URL");
    url.set_username(user).expect("user");
    url.set_password(Some(password)).expect("password");
    url.set_path(database);
    url.to_string()
}

/// `url` as it is, but connected to no database.
pub fn url_without_database(url: &str) -> String {
    let mut url = Url::parse(url).expect("database URL");
    url.set_path("");
    url.to_string()
}

//! The app runs with only the grants of `docker/mysql-init.sql` (`docker/postgres-init.sql` on
//! PostgreSQL): an account created with exactly those (and nothing else) migrates an empty
//! database, books, lists a named lock held by another account's session and says whose it is
//! (without ending it), and ends a leaked session of its own from the admin screen; it can touch
//! nothing else.

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use haita::auth::Role;
use haita::auth::service::{UserSpec, create_user};
use haita::db::{DbConn, Engine, ScratchDatabase};
use rand::Rng;
use reqwest::Url;
use serde_json::json;

use crate::common::{Client, base_database_url, future_day, server, test_config};

/// The server the test runs on, and its way of making accounts with an init script's grants.
enum Server {
    Mysql,
    Postgres,
}

impl Server {
    fn of(root: &mut DbConn) -> Self {
        match root.engine() {
            Engine::Mysql => Self::Mysql,
            Engine::Postgres => Self::Postgres,
        }
    }

    fn account(&self, user: &str) -> String {
        match self {
            Self::Mysql => format!("'{user}'@'%'"),
            Self::Postgres => user.to_string(),
        }
    }

    fn create(&self, account: &str, password: &str) -> String {
        match self {
            Self::Mysql => format!("CREATE USER {account} IDENTIFIED BY '{password}'"),
            Self::Postgres => format!("CREATE ROLE {account} LOGIN PASSWORD '{password}'"),
        }
    }

    /// The init script's GRANT statements, for `account` on `database` instead of the script's
    /// `haita` on `haita`.
    fn grants(&self, account: &str, database: &str) -> Vec<String> {
        let script = match self {
            Self::Mysql => include_str!("../../docker/mysql-init.sql"),
            Self::Postgres => include_str!("../../docker/postgres-init.sql"),
        };
        script
            .split(';')
            .map(|statement| {
                statement.lines().filter(|l| !l.trim_start().starts_with("--")).collect::<Vec<_>>().join(" ")
            })
            .filter(|statement| statement.trim_start().starts_with("GRANT"))
            .map(|statement| match self {
                Self::Mysql => {
                    statement.replace("'haita'@'%'", account).replace("`haita`.*", &format!("`{database}`.*"))
                }
                Self::Postgres => statement
                    .replace("TO haita", &format!("TO {account}"))
                    .replace("DATABASE haita", &format!("DATABASE {database}")),
            })
            .collect()
    }

    /// Statements the app's account must be refused: outside its database, or server-wide.
    fn forbidden(&self) -> [&'static str; 2] {
        match self {
            Self::Mysql => ["SELECT COUNT(*) FROM mysql.user", "CREATE DATABASE haita_g_forbidden"],
            Self::Postgres => ["SELECT COUNT(*) FROM pg_authid", "CREATE DATABASE haita_g_forbidden"],
        }
    }

    /// Drops `account`. A PostgreSQL role goes only once nothing of it is left in the database
    /// (the tables its migrations made, its grants).
    fn drop(&self, account: &str) -> String {
        match self {
            Self::Mysql => format!("DROP USER IF EXISTS {account}"),
            Self::Postgres => format!("DROP OWNED BY {account}; DROP ROLE IF EXISTS {account}"),
        }
    }
}

/// Accounts made for one test, dropped afterwards even when it fails.
struct Accounts {
    server: Server,
    accounts: Vec<String>,
    root_url: String,
}

impl Drop for Accounts {
    fn drop(&mut self) {
        if let Ok(mut root) = DbConn::open(&self.root_url) {
            for account in &self.accounts {
                let _ = root.batch_execute(&self.server.drop(account));
            }
        }
    }
}

fn url_as(url: &str, user: &str, password: &str, database: &str) -> String {
    let mut url = Url::parse(url).expect("database URL");
    url.set_username(user).expect("user");
    url.set_password(Some(password)).expect("password");
    url.set_path(database);
    url.to_string()
}

#[actix_web::test]
async fn the_app_needs_no_more_than_the_grants_of_the_init_script() {
    let base = base_database_url();
    let scratch = ScratchDatabase::create(&base, "haita_g_").expect("empty database");
    let mut root = DbConn::open(&scratch.url).expect("root connection");
    let server = Server::of(&mut root);
    let _ = root.batch_execute("INSTALL SONAME 'metadata_lock_info'");
    let suffix = format!("{:08x}", rand::rng().random::<u32>());
    let (app_user, holder_user) = (format!("haita_g_{suffix}"), format!("haita_h_{suffix}"));
    let app_account = server.account(&app_user);
    let holder_account = server.account(&holder_user);
    let create =
        [server.create(&app_account, "app-password"), server.create(&holder_account, "holder-password")];
    // Dropped from here on, even if an assertion below fails.
    let accounts = Accounts {
        server,
        accounts: vec![app_account.clone(), holder_account.clone()],
        root_url: scratch.url.clone(),
    };
    for create in create {
        root.batch_execute(&create).unwrap_or_else(|e| panic!("{create}: {e}"));
    }
    let server = &accounts.server;
    let statements = server.grants(&app_account, &scratch.name);
    let expected = match server {
        Server::Mysql => 3,
        Server::Postgres => 2,
    };
    assert_eq!(statements.len(), expected, "the script's grants: {statements:?}");
    for grant in &statements {
        root.batch_execute(grant).unwrap_or_else(|e| panic!("{grant}: {e}"));
    }
    let forbidden = server.forbidden();

    // The app starts on the empty database with that account: creates nothing it may not,
    // applies every migration, passes its server check.
    let mut config = test_config(&url_as(&scratch.url, &app_user, "app-password", &scratch.name));
    config.pool_size = 4;
    let pool =
        haita::prepare_database(&config).expect("the app prepares its database with the script's grants");
    let mut conn = pool.get().expect("connection");
    for (username, role) in [("grant-admin", Role::Admin), ("grant-customer", Role::Customer)] {
        let spec =
            UserSpec { username, display_name: username, password: "grant-password", role, is_demo: false };
        create_user(&mut conn, &spec).expect("user");
    }
    conn.batch_execute("INSERT INTO resources (name, description, capacity) VALUES ('Room', '', 1)")
        .expect("resource");
    let resource = haita::db::last_insert_id(&mut conn).expect("resource id");
    // …and nothing beyond its own database and the admin screen's needs.
    for forbidden in forbidden {
        assert!(conn.batch_execute(forbidden).is_err(), "{forbidden} must be refused");
    }
    let name = pool.names().name("test", &suffix);
    let engine = pool.engine();
    drop(conn);
    let app = haita::Application::build(config, pool).expect("app");
    let address = format!("http://127.0.0.1:{}", app.port());
    actix_web::rt::spawn(app.run_until_stopped());

    let customer = Client::new(&address);
    let login = json!({"username": "grant-customer", "password": "grant-password"});
    assert_eq!(customer.post_json("/api/v1/session", &login).await.status(), 200);
    let booking = json!({"resource_id": resource, "date": future_day().to_string()});
    assert_eq!(customer.post_json("/api/v1/reservations", &booking).await.status(), 201, "a booking");

    // A session of another account holds one of this deployment's named locks. (On MySQL named
    // locks are server-wide, so it connects to no database; PostgreSQL's advisory locks belong
    // to a database, and the admin lists those of its own.)
    let holder_database = if engine == Engine::Postgres { scratch.name.as_str() } else { "" };
    let holder_url = url_as(&scratch.url, &holder_user, "holder-password", holder_database);
    let mut holder = DbConn::open(&holder_url).expect("holder connection");
    assert!(server::try_lock(&mut holder, &name));
    let holder_id = server::connection_id(&mut holder).expect("id");

    let admin = Client::new(&address);
    let login = json!({"username": "grant-admin", "password": "grant-password"});
    assert_eq!(admin.post_json("/api/v1/session", &login).await.status(), 200);
    let listed_as = match engine {
        Engine::Mysql => name.to_string(),
        Engine::Postgres => {
            format!("{}{}", haita::db::dialect::postgres::ADVISORY_LABEL, name.advisory_key())
        }
    };
    let listed = admin.listed_named_lock(&listed_as).await;
    assert_eq!(listed["connection_id"].as_i64(), Some(holder_id));
    assert_eq!(
        listed["db_user"].as_str(),
        Some(holder_user.as_str()),
        "PROCESS (pg_read_all_stats) shows whose session it is"
    );

    // It is not the app's to end: refused, saying whose it is, and the lock stays held.
    let release = format!("/api/v1/admin/named-locks/{name}?reason=grants%20test&connection_id={holder_id}");
    let refused = admin.send(reqwest::Method::DELETE, &release).await;
    assert_eq!(refused.status(), 409, "another account's session is not killed");
    let body: serde_json::Value = refused.json().await.expect("json");
    assert_eq!(body["error"], "not_our_session");
    assert!(body["message"].as_str().is_some_and(|m| m.contains(&holder_user)), "whose session: {body}");
    assert!(
        haita::db::cached_sql::<diesel::sql_types::Untyped>("SELECT 1").execute(&mut holder).is_ok(),
        "the holder's session lives on"
    );
    assert!(server::release(&mut holder, &name));
    drop(holder);

    // A leaked session of the app's own account, in its database: ended with no privilege to
    // end anyone else's (no CONNECTION_ADMIN, no pg_signal_backend).
    let mut leaked =
        DbConn::open(&url_as(&scratch.url, &app_user, "app-password", &scratch.name)).expect("app session");
    assert!(server::try_lock(&mut leaked, &name));
    let leaked_id = server::connection_id(&mut leaked).expect("id");
    let release = format!("/api/v1/admin/named-locks/{name}?reason=grants%20test&connection_id={leaked_id}");
    let released = admin.send(reqwest::Method::DELETE, &release).await;
    assert_eq!(released.status(), 200, "KILL (pg_terminate_backend) of the app's own leaked session");
    assert!(
        haita::db::cached_sql::<diesel::sql_types::Untyped>("SELECT 1").execute(&mut leaked).is_err(),
        "the leaked session was ended"
    );
}

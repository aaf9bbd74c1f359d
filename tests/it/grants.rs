//! The app runs with only the grants of `docker/mysql-init.sql`: an account created with exactly
//! those (and nothing else) migrates an empty database, books, lists a named lock held by another
//! account's session and ends that session from the admin screen; it can touch nothing else.

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::BigInt;
use haita::auth::Role;
use haita::auth::service::{UserSpec, create_user};
use haita::db::{DbConn, ScratchDatabase};
use rand::Rng;
use reqwest::Url;
use serde_json::json;

use crate::common::{Client, base_database_url, future_day, test_config};

const INIT_SCRIPT: &str = include_str!("../../docker/mysql-init.sql");

/// The script's GRANT statements, for `account` on `database` instead of `'haita'@'%'` on
/// `haita`. MariaDB spells the privilege to kill other accounts' sessions `CONNECTION ADMIN`.
fn grants(account: &str, database: &str, mariadb: bool) -> Vec<String> {
    INIT_SCRIPT
        .split(';')
        .map(|statement| {
            statement.lines().filter(|l| !l.trim_start().starts_with("--")).collect::<Vec<_>>().join(" ")
        })
        .filter(|statement| statement.trim_start().starts_with("GRANT"))
        .map(|statement| {
            let statement =
                statement.replace("'haita'@'%'", account).replace("`haita`.*", &format!("`{database}`.*"));
            if mariadb { statement.replace("CONNECTION_ADMIN", "CONNECTION ADMIN") } else { statement }
        })
        .collect()
}

/// Accounts made for one test, dropped afterwards even when it fails.
struct Accounts(Vec<String>, String);

impl Drop for Accounts {
    fn drop(&mut self) {
        if let Ok(mut root) = DbConn::open(&self.1) {
            for account in &self.0 {
                let _ = root.batch_execute(&format!("DROP USER IF EXISTS {account}"));
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
    let mariadb = diesel::select(diesel::dsl::sql::<diesel::sql_types::Bool>("VERSION() LIKE '%MariaDB%'"))
        .get_result::<bool>(&mut root)
        .expect("version");
    let _ = root.batch_execute("INSTALL SONAME 'metadata_lock_info'");
    let suffix = format!("{:08x}", rand::rng().random::<u32>());
    let (app_user, holder_user) = (format!("haita_g_{suffix}"), format!("haita_h_{suffix}"));
    let app_account = format!("'{app_user}'@'%'");
    let holder_account = format!("'{holder_user}'@'%'");
    let _accounts = Accounts(vec![app_account.clone(), holder_account.clone()], scratch.url.clone());
    root.batch_execute(&format!("CREATE USER {app_account} IDENTIFIED BY 'app-password'"))
        .expect("app account");
    root.batch_execute(&format!("CREATE USER {holder_account} IDENTIFIED BY 'holder-password'"))
        .expect("holder account");
    let statements = grants(&app_account, &scratch.name, mariadb);
    assert_eq!(statements.len(), 3, "the script's grants: {statements:?}");
    for grant in &statements {
        root.batch_execute(grant).unwrap_or_else(|e| panic!("{grant}: {e}"));
    }

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
    let resource: i64 = diesel::select(diesel::dsl::sql::<BigInt>("CAST(LAST_INSERT_ID() AS SIGNED)"))
        .get_result(&mut conn)
        .expect("resource id");
    // …and nothing beyond its own database and the admin screen's needs.
    for forbidden in ["SELECT COUNT(*) FROM mysql.user", "CREATE DATABASE haita_g_forbidden"] {
        assert!(conn.batch_execute(forbidden).is_err(), "{forbidden} must be refused");
    }
    let name = pool.names().name("test", &suffix);
    drop(conn);
    let app = haita::Application::build(config, pool).expect("app");
    let address = format!("http://127.0.0.1:{}", app.port());
    actix_web::rt::spawn(app.run_until_stopped());

    let customer = Client::new(&address);
    let login = json!({"username": "grant-customer", "password": "grant-password"});
    assert_eq!(customer.post_json("/api/v1/session", &login).await.status(), 200);
    let booking = json!({"resource_id": resource, "date": future_day().to_string()});
    assert_eq!(customer.post_json("/api/v1/reservations", &booking).await.status(), 201, "a booking");

    // A session of another account holds one of this deployment's named locks.
    let holder_url = url_as(&scratch.url, &holder_user, "holder-password", "");
    let mut holder = DbConn::open(&holder_url).expect("holder connection");
    let took: Option<i64> = diesel::select(diesel::dsl::sql::<diesel::sql_types::Nullable<BigInt>>(
        &format!("CAST(GET_LOCK('{}', 0) AS SIGNED)", name.as_str()),
    ))
    .get_result(&mut holder)
    .expect("GET_LOCK");
    assert_eq!(took, Some(1));
    let holder_id: i64 = diesel::select(diesel::dsl::sql::<BigInt>("CAST(CONNECTION_ID() AS SIGNED)"))
        .get_result(&mut holder)
        .expect("id");

    let admin = Client::new(&address);
    let login = json!({"username": "grant-admin", "password": "grant-password"});
    assert_eq!(admin.post_json("/api/v1/session", &login).await.status(), 200);
    let listed = admin.listed_named_lock(name.as_str()).await;
    assert_eq!(listed["connection_id"].as_i64(), Some(holder_id));
    assert_eq!(listed["db_user"].as_str(), Some(holder_user.as_str()), "PROCESS shows whose session it is");

    let release = format!("/api/v1/admin/named-locks/{name}?reason=grants%20test&connection_id={holder_id}");
    let released = admin.send(reqwest::Method::DELETE, &release).await;
    assert_eq!(released.status(), 200, "KILL of another account's session");
    assert!(
        haita::db::cached_sql::<diesel::sql_types::Untyped>("SELECT 1").execute(&mut holder).is_err(),
        "the holder's session was ended"
    );
}

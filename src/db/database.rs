//! The database a URL names: its server and its name, created when missing, and scratch
//! databases that drop themselves (tests, benchmarks). URLs are read and rebuilt with the `url`
//! crate, never split by hand: a password may hold any character, percent-encoded.

use url::Url;

pub use crate::config::redact;

use super::conn::{DbConn, Engine};

/// `url` parsed, with the database name it ends in checked: letters, digits and underscores,
/// so it is safe to write into `CREATE DATABASE`.
fn parse(url: &str) -> anyhow::Result<(Url, String)> {
    let parsed =
        Url::parse(url).map_err(|e| anyhow::anyhow!("DATABASE_URL is not a URL ({e}): {}", redact(url)))?;
    let name = parsed.path().trim_start_matches('/').to_string();
    anyhow::ensure!(!name.is_empty(), "DATABASE_URL has no database name: {}", redact(url));
    anyhow::ensure!(
        name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "database name {name:?} must be letters, digits and underscores"
    );
    Ok((parsed, name))
}

/// `url` naming the database `name` instead (`""`: the server itself, no database).
fn with_database(url: &Url, name: &str) -> String {
    let mut other = url.clone();
    other.set_path(&format!("/{name}"));
    other.to_string()
}

/// Splits `mysql://…/name?opts` into the server URL (no database) and the database name.
pub fn split_database_url(url: &str) -> anyhow::Result<(String, String)> {
    let (parsed, name) = parse(url)?;
    Ok((with_database(&parsed, ""), name))
}

/// Creates the database named in `url` if it does not exist yet, so the run command needs no
/// manual `CREATE DATABASE`.
pub fn ensure_database_exists(url: &str) -> anyhow::Result<()> {
    let (parsed, name) = parse(url)?;
    let dialect = Engine::of_url(url).map_err(anyhow::Error::msg)?.dialect();
    // First the database itself: an app's role may connect to its own database and to no other.
    if DbConn::open(url).is_ok() {
        return Ok(());
    }
    let server = with_database(&parsed, dialect.database_to_create_from());
    let mut conn =
        DbConn::open(&server).map_err(|e| anyhow::anyhow!("cannot connect to {}: {e}", redact(&server)))?;
    dialect.create_database(&mut conn, &name)?;
    Ok(())
}

/// A database of its own on the server of another URL, created with a random name and dropped
/// when the value is dropped: what a test or a benchmark works in, so that it never touches the
/// database it was pointed at. Created empty; the caller migrates it.
pub struct ScratchDatabase {
    /// The scratch database's URL (the base URL's server, user and options).
    pub url: String,
    pub name: String,
    server_url: String,
}

impl ScratchDatabase {
    /// `CREATE DATABASE <prefix><16 hex digits>` next to the one in `base_url`.
    pub fn create(base_url: &str, prefix: &str) -> anyhow::Result<Self> {
        use rand::Rng;
        let (parsed, _) = parse(base_url)?;
        let name = format!("{prefix}{:016x}", rand::rng().random::<u64>());
        let url = with_database(&parsed, &name);
        ensure_database_exists(&url)?;
        Ok(Self { url, name, server_url: with_database(&parsed, "") })
    }
}

impl Drop for ScratchDatabase {
    /// Best effort: a server that is gone by now cannot be told anything.
    fn drop(&mut self) {
        if let Ok(mut conn) = DbConn::open(&self.server_url) {
            let _ = conn.dialect().drop_database(&mut conn, &self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_url_splits_into_server_and_name() {
        let (server, name) =
            split_database_url("mysql://u:p@127.0.0.1:3307/haita?ssl_mode=DISABLED").expect("valid");
        assert_eq!(server, "mysql://u:p@127.0.0.1:3307/?ssl_mode=DISABLED");
        assert_eq!(name, "haita");
        assert!(split_database_url("mysql://u@host:1").is_err());
        assert!(split_database_url("mysql://u@host:1/bad-name").is_err());
        let (parsed, _) = parse("postgres://u:p%40ss@h:5432/haita?sslmode=disable").expect("valid");
        assert_eq!(with_database(&parsed, "postgres"), "postgres://u:p%40ss@h:5432/postgres?sslmode=disable");
    }
}

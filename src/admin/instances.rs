//! Every instance serving this database, for `/admin/metrics`: which one the page shows, and
//! the others with their key numbers.
//!
//! Each instance's metrics live in its own memory (`crate::metrics`), and a load balancer sends
//! the admin to whichever instance it likes. So each instance writes a row of `app_instances`
//! for itself: an id picked at start, a name (`INSTANCE_NAME`, else `hostname:port`), its
//! version, and every [`BEAT_EVERY`] the time by the database's clock with a [`Snapshot`] of its
//! key numbers. The beat is the housekeeping's (`crate::run_until_stopped`): a blocking thread,
//! one pooled connection for two short statements, given back at once; a failed beat is logged
//! and tried again, never fatal. An instance not seen for [`LIVE_WITHIN`] is shown as gone
//! (killed, or cut off from the database), one that stopped cleanly says so on its way out
//! ([`Heartbeat::leave`]), and rows not seen for [`FORGET_AFTER`] are deleted by whichever
//! instance beats next.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text, Timestamp};
use prometheus::proto::MetricFamily;

use crate::db::{DbConn, DbPool, cached_sql};
use crate::metrics::Metrics;

/// How often an instance writes its row.
pub const BEAT_EVERY: Duration = Duration::from_secs(5);
/// An instance whose row is older than this is shown as gone.
pub const LIVE_WITHIN: Duration = Duration::from_secs(60);
/// Rows not written for this long are deleted.
pub const FORGET_AFTER: Duration = Duration::from_secs(24 * 3600);

/// The numbers each instance shares, summed over their labels: the counts an operator compares
/// across instances first. Their words are `admin.metrics.count.{name}` in the texts.
pub const KEY_METRICS: [&str; 6] = [
    "named_lock_acquisitions_total",
    "unavailable_answers_total",
    "transaction_retries_total",
    "pool_checkout_failures_total",
    "pool_connections",
    "lock_waiters",
];

/// This instance, as the others see it.
#[derive(Debug, Clone)]
pub struct Instance {
    /// Picked at start: two instances never share one, even under the same name.
    pub id: String,
    /// `INSTANCE_NAME`, else `hostname:port`.
    pub name: String,
    pub version: &'static str,
}

impl Instance {
    /// This instance, named `name` or else after its host and the `port` it listens on.
    pub fn new(name: Option<&str>, port: u16) -> Self {
        let name = match name.map(str::trim).filter(|n| !n.is_empty()) {
            Some(name) => name.chars().take(255).collect(),
            None => format!("{}:{port}", hostname()),
        };
        Self { id: format!("{:032x}", rand::random::<u128>()), name, version: env!("CARGO_PKG_VERSION") }
    }
}

/// The host's name as the kernel has it (a container's is its id), else `HOSTNAME`.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// An instance's key numbers ([`KEY_METRICS`]), as its row holds them (JSON).
pub type Snapshot = BTreeMap<String, f64>;

/// The key numbers of `families` (an instance's registry, gathered).
pub fn snapshot(families: &[MetricFamily]) -> Snapshot {
    KEY_METRICS
        .iter()
        .map(|&name| {
            let family = families.iter().find(|f| f.name() == format!("haita_{name}"));
            let value = family.map_or(0.0, |f| {
                f.get_metric()
                    .iter()
                    .map(|m| {
                        if name.ends_with("_total") {
                            m.get_counter().get_value()
                        } else {
                            m.get_gauge().get_value()
                        }
                    })
                    .sum()
            });
            (name.to_string(), value)
        })
        .collect()
}

/// What the housekeeping needs to write this instance's row: the instance, its registry and
/// its pool.
#[derive(Clone)]
pub struct Heartbeat {
    pub instance: Arc<Instance>,
    metrics: Arc<Metrics>,
    pool: DbPool,
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

impl Heartbeat {
    pub fn new(instance: Arc<Instance>, metrics: Arc<Metrics>, pool: DbPool) -> Self {
        Self { instance, metrics, pool }
    }

    /// Writes this instance's row now (inserted on the first beat), and deletes the rows of
    /// instances not seen for [`FORGET_AFTER`]. Blocks: call it on a blocking thread.
    pub fn beat(&self) -> anyhow::Result<()> {
        let snapshot = serde_json::to_string(&snapshot(&self.metrics.gather(self.pool.state())))?;
        let conn = &mut *self.pool.get()?;
        let seen = cached_sql::<()>(
            "UPDATE app_instances SET last_seen = {now}, stopped_at = NULL, metrics = ? WHERE id = ?",
        )
        .bind::<Text, _>(&snapshot)
        .bind::<Text, _>(&self.instance.id)
        .execute(conn)?;
        if seen == 0 {
            cached_sql::<()>(
                "INSERT INTO app_instances (id, name, version, started_at, last_seen, metrics) \
                 VALUES (?, ?, ?, {now}, {now}, ?)",
            )
            .bind::<Text, _>(&self.instance.id)
            .bind::<Text, _>(&self.instance.name)
            .bind::<Text, _>(self.instance.version)
            .bind::<Text, _>(&snapshot)
            .execute(conn)?;
        }
        cached_sql::<()>("DELETE FROM app_instances WHERE last_seen < {now} - {? microseconds}")
            .bind::<BigInt, _>(micros(FORGET_AFTER))
            .execute(conn)?;
        Ok(())
    }

    /// Says this instance has stopped, on its way out. Blocks.
    pub fn leave(&self) -> anyhow::Result<()> {
        cached_sql::<()>("UPDATE app_instances SET stopped_at = {now} WHERE id = ?")
            .bind::<Text, _>(&self.instance.id)
            .execute(&mut *self.pool.get()?)?;
        Ok(())
    }
}

/// One instance as `/admin/metrics` lists it.
#[derive(Debug, Clone)]
pub struct Listed {
    pub id: String,
    pub name: String,
    pub version: String,
    pub started_at: NaiveDateTime,
    pub last_seen: NaiveDateTime,
    pub stopped_at: Option<NaiveDateTime>,
    /// Seen within [`LIVE_WITHIN`] and not stopped.
    pub live: bool,
    /// The instance that serves the page.
    pub this: bool,
    pub numbers: Snapshot,
}

impl Listed {
    /// The number `name` of [`KEY_METRICS`], as the page writes it.
    pub fn number(&self, name: &str) -> String {
        shown(self.numbers.get(name).copied().unwrap_or(0.0))
    }
}

/// A count as the page writes it: whole, as every one of [`KEY_METRICS`] is.
pub fn shown(value: f64) -> String {
    format!("{value:.0}")
}

/// Every instance the table knows, live ones first, then by name; `this` marks the one that
/// asks. One read of a table of a few rows.
pub fn list(conn: &mut DbConn, this: &str) -> QueryResult<Vec<Listed>> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = Text)]
        id: String,
        #[diesel(sql_type = Text)]
        name: String,
        #[diesel(sql_type = Text)]
        version: String,
        #[diesel(sql_type = Timestamp)]
        started_at: NaiveDateTime,
        #[diesel(sql_type = Timestamp)]
        last_seen: NaiveDateTime,
        #[diesel(sql_type = Nullable<Timestamp>)]
        stopped_at: Option<NaiveDateTime>,
        #[diesel(sql_type = Text)]
        metrics: String,
        #[diesel(sql_type = Timestamp)]
        now: NaiveDateTime,
    }
    let rows: Vec<Row> = cached_sql::<diesel::sql_types::Untyped>(
        "SELECT id, name, version, started_at, last_seen, stopped_at, metrics, {now} AS now FROM app_instances",
    )
    .load(conn)?;
    let mut listed: Vec<Listed> = rows
        .into_iter()
        .map(|row| {
            let recent = (row.now - row.last_seen).to_std().unwrap_or_default() <= LIVE_WITHIN;
            Listed {
                live: recent && row.stopped_at.is_none(),
                this: row.id == this,
                // A row another version wrote in another shape shows no numbers rather than none
                // of the page.
                numbers: serde_json::from_str(&row.metrics).unwrap_or_default(),
                id: row.id,
                name: row.name,
                version: row.version,
                started_at: row.started_at,
                last_seen: row.last_seen,
                stopped_at: row.stopped_at,
            }
        })
        .collect();
    listed.sort_by(|a, b| (!a.live, &a.name, &a.id).cmp(&(!b.live, &b.name, &b.id)));
    Ok(listed)
}

/// The cluster's totals: each key number summed over the live instances.
pub fn totals(listed: &[Listed]) -> Vec<String> {
    KEY_METRICS
        .iter()
        .map(|name| {
            shown(
                listed.iter().filter(|i| i.live).map(|i| i.numbers.get(*name).copied().unwrap_or(0.0)).sum(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_is_named_by_its_setting_or_its_host_and_port() {
        assert_eq!(Instance::new(Some(" web-2 "), 8080).name, "web-2");
        let unnamed = Instance::new(None, 8081);
        assert!(unnamed.name.ends_with(":8081") && unnamed.name.len() > 5, "{}", unnamed.name);
        assert_ne!(Instance::new(None, 1).id, Instance::new(None, 1).id, "each start its own id");
    }

    #[test]
    fn the_snapshot_sums_each_key_number_over_its_labels() {
        use prometheus::{IntCounterVec, IntGauge, Opts, Registry};
        let registry = Registry::new_custom(Some("haita".into()), None).expect("registry");
        let answers =
            IntCounterVec::new(Opts::new("unavailable_answers_total", "test"), &["answer", "cause"])
                .expect("counter");
        let waiters = IntGauge::new("lock_waiters", "test").expect("gauge");
        registry.register(Box::new(answers.clone())).expect("register");
        registry.register(Box::new(waiters.clone())).expect("register");
        answers.with_label_values(&["busy", "named_lock"]).inc_by(2);
        answers.with_label_values(&["unavailable", "pool"]).inc();
        waiters.set(3);
        let numbers = snapshot(&registry.gather());
        assert_eq!(numbers["unavailable_answers_total"], 3.0);
        assert_eq!(numbers["lock_waiters"], 3.0);
        assert_eq!(numbers["transaction_retries_total"], 0.0, "a family not registered counts 0");
        assert_eq!(numbers.len(), KEY_METRICS.len());
    }
}

//! The price revision: every product's price changed by a percentage, while customers order and
//! staff edit products online.
//!
//! Products are edited online *optimistically* (a version column, `catalog::edit`), so the batch
//! writes through the same versioned update ([`crate::catalog::edit::apply`]): an online save
//! that read a version before the batch changed the row gets the conflict screen, never a lost
//! update. The batch works in short transactions of [`CHUNK`] products, in ascending id (the
//! order every writer locks products in), each locking its rows first:
//!
//! - `wait`: `SELECT … FOR UPDATE`. An online save in flight on one of the rows makes the chunk
//!   wait for it — at most `ROW_LOCK_WAIT_SECS`; past that the run stops with what it did
//!   committed, and a later run of the same revision does the rest. Online saves wait for the
//!   batch's short transactions in turn.
//! - `skip`: `SELECT … FOR UPDATE SKIP LOCKED`. Rows locked right now are left alone and recorded
//!   as skipped; a later run of the same revision picks them up.
//! - `steal` has nothing to take here: an optimistic edit holds no lock between requests. It is
//!   refused with that explanation (it is for jobs over rows under edit locks, `super::closure`).
//!
//! A revision has a name, and each product is revised at most once per name
//! (`price_revision_items`): running it again continues, it never compounds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text, Timestamp};

use super::runs::Because;
use super::{BatchError, Job, LeftFor, Policy, Running, runs};
use crate::catalog::edit::{self, ProductChanges};
use crate::db::conn::on_engine;
use crate::db::{DbConn, Sql, cached_sql};
use crate::schema::products;
use crate::wire::error::Said;

/// Products per transaction: short enough that an online save waits little behind one.
pub const CHUNK: usize = 20;

/// One revision, as the operator asked for it.
#[derive(Clone, Debug)]
pub struct Revision {
    /// 1 to 64 characters of `a-z 0-9 - _ .`: what makes a rerun continue instead of compound.
    pub name: String,
    /// −90 to +1000.
    pub percent: i32,
    pub policy: Policy,
    /// A pause between chunks, so online traffic keeps its share of the database.
    pub throttle: Duration,
    /// Where the CSV report goes (the shared directory); none when `None`.
    pub report_dir: Option<PathBuf>,
}

impl Revision {
    /// The new price: rounded to the cent, half away from zero.
    pub fn revised(&self, cents: i64) -> i64 {
        let scaled = i128::from(cents) * i128::from(100 + self.percent);
        i64::try_from((scaled + 50).div_euclid(100)).unwrap_or(i64::MAX)
    }
}

/// One product's line in the report.
struct Line {
    product_id: i64,
    sku: String,
    old: Option<i64>,
    new: Option<i64>,
    status: &'static str,
}

impl Job for Revision {
    const NAME: &'static str = "price-revision";
    const REPORT_HEADER: &'static str = "product_id,sku,old_price_cents,new_price_cents,status";

    fn policy(&self) -> Policy {
        self.policy
    }

    fn validate(&self) -> Result<(), BatchError> {
        let plain = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b);
        if self.name.is_empty() || self.name.len() > 64 || !self.name.bytes().all(plain) {
            return Err(BatchError::Invalid(Said::new(
                "batch.err.revision_name",
                &[("given", format!("{:?}", self.name))],
            )));
        }
        if !(-90..=1000).contains(&self.percent) {
            return Err(BatchError::Invalid(Said::new(
                "batch.err.percent",
                &[("given", self.percent.to_string())],
            )));
        }
        if self.policy == Policy::Steal {
            return Err(BatchError::Invalid(Said::new("batch.err.revision_steal", &[])));
        }
        Ok(())
    }

    fn params(&self) -> String {
        format!("revision={} percent={}", self.name, self.percent)
    }

    fn form_fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("revision", self.name.clone()),
            ("percent", self.percent.to_string()),
            ("policy", self.policy.label().to_string()),
            ("throttle_ms", self.throttle.as_millis().to_string()),
        ]
    }

    fn report_dir(&self) -> Option<&Path> {
        self.report_dir.as_deref()
    }

    fn report_name(&self, run_id: i64) -> String {
        format!("price-revision-{}-run-{run_id}.csv", self.name)
    }

    fn work(&self, run: &mut Running<'_>) -> Result<usize, BatchError> {
        work(run, self)
    }
}

/// The products this revision has not done yet, in id order; returns how many there were.
fn work(run: &mut Running<'_>, revision: &Revision) -> Result<usize, BatchError> {
    let run_id = run.run_id;
    let targets: Vec<i64> = cached_sql::<BigInt>(
        "SELECT p.id FROM products p WHERE NOT EXISTS (SELECT 1 FROM price_revision_items i \
         WHERE i.revision = ? AND i.product_id = p.id AND i.status = 'done') ORDER BY p.id",
    )
    .bind::<Text, _>(&revision.name)
    .load(run.conn)?;
    runs::set_total(run.conn, run_id, targets.len())?;
    for (i, chunk) in targets.chunks(CHUNK).enumerate() {
        if i > 0 && !revision.throttle.is_zero() {
            std::thread::sleep(revision.throttle);
        }
        run.check_guard()?;
        let lines = crate::db::transaction(run.conn, |conn| revise(conn, run_id, revision, chunk))?;
        for l in lines {
            let cents = |c: Option<i64>| c.map(|c| c.to_string()).unwrap_or_default();
            let (id, old, new) = (l.product_id.to_string(), cents(l.old), cents(l.new));
            let because = match l.status {
                "done" => None,
                "refused" => Some(Because::PriceRefused),
                _ => Some(Because::ProductLocked),
            };
            let left = because.map(|because| LeftFor { because, subject: String::new(), holder: None });
            run.line(&[&id, &l.sku, &old, &new, l.status], left);
        }
    }
    Ok(targets.len())
}

const RECORD: Sql = Sql::per_engine(
    "INSERT INTO price_revision_items \
     (revision, product_id, status, old_price_cents, new_price_cents, run_id, at) VALUES (?, ?, ?, ?, ?, ?, ?) \
     ON DUPLICATE KEY UPDATE status = VALUES(status), old_price_cents = VALUES(old_price_cents), \
     new_price_cents = VALUES(new_price_cents), run_id = VALUES(run_id), at = VALUES(at)",
    "INSERT INTO price_revision_items \
     (revision, product_id, status, old_price_cents, new_price_cents, run_id, at) VALUES (?, ?, ?, ?, ?, ?, ?) \
     ON CONFLICT (revision, product_id) DO UPDATE SET status = EXCLUDED.status, \
     old_price_cents = EXCLUDED.old_price_cents, new_price_cents = EXCLUDED.new_price_cents, \
     run_id = EXCLUDED.run_id, at = EXCLUDED.at",
);

/// One chunk, in the caller's transaction: lock (or skip) the rows, revise, record.
fn revise(
    conn: &mut DbConn,
    run_id: i64,
    revision: &Revision,
    chunk: &[i64],
) -> Result<Vec<Line>, BatchError> {
    type Row = (i64, String, String, String, i64, i32);
    let rows = products::table.filter(products::id.eq_any(chunk)).order(products::id).select((
        products::id,
        products::sku,
        products::name,
        products::description,
        products::price_cents,
        products::version,
    ));
    let rows: Vec<Row> = match revision.policy {
        Policy::Skip => on_engine!(conn, |c| rows.for_update().skip_locked().load(c))?,
        Policy::Wait | Policy::Steal => on_engine!(conn, |c| rows.for_update().load(c))?,
    };
    let mut lines = Vec::with_capacity(chunk.len());
    for &id in chunk {
        let line = match rows.iter().find(|r| r.0 == id) {
            Some((_, sku, name, description, price, version)) => {
                let new = revision.revised(*price);
                match ProductChanges::parse(name, description, new) {
                    Ok(changes) => {
                        // The row is locked and its version read under the lock: this cannot be
                        // stale; an online save that read the old version will be.
                        edit::apply(conn, id, *version, &changes, None).map_err(|e| match e {
                            // A lock conflict, a lost connection: the plumbing's, answered as such.
                            crate::catalog::CatalogError::Infra(e) => BatchError::Infra(e),
                            // Anything else would be a bug here (the row is locked), not bad input.
                            other => BatchError::Failed(format!("product {id}: {other}")),
                        })?;
                        Line {
                            product_id: id,
                            sku: sku.clone(),
                            old: Some(*price),
                            new: Some(new),
                            status: "done",
                        }
                    }
                    Err(_) => Line {
                        product_id: id,
                        sku: sku.clone(),
                        old: Some(*price),
                        new: Some(new),
                        status: "refused",
                    },
                }
            }
            // Locked by someone else right now (skip), or deleted meanwhile.
            None => Line { product_id: id, sku: String::new(), old: None, new: None, status: "skipped" },
        };
        cached_sql::<()>(RECORD)
            .bind::<Text, _>(&revision.name)
            .bind::<BigInt, _>(line.product_id)
            .bind::<Text, _>(line.status)
            .bind::<Nullable<BigInt>, _>(line.old)
            .bind::<Nullable<BigInt>, _>(line.new)
            .bind::<BigInt, _>(run_id)
            .bind::<Timestamp, _>(crate::db::now_micros())
            .execute(conn)?;
        lines.push(line);
    }
    let done = lines.iter().filter(|l| l.status == "done").count();
    runs::progress(conn, run_id, done, lines.len() - done)?;
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn revision(percent: i32) -> Revision {
        Revision {
            name: "r1".into(),
            percent,
            policy: Policy::Wait,
            throttle: Duration::ZERO,
            report_dir: None,
        }
    }

    #[test]
    fn prices_round_half_away_from_zero_to_the_cent() {
        assert_eq!(revision(5).revised(1000), 1050);
        assert_eq!(revision(5).revised(999), 1049); // 1048.95
        assert_eq!(revision(-10).revised(995), 896); // 895.5
        assert_eq!(revision(0).revised(1234), 1234);
    }

    #[test]
    fn names_percentages_and_policies_are_checked() {
        assert!(revision(5).validate().is_ok());
        assert!(revision(-91).validate().is_err());
        assert!(Revision { name: "Spring Sale".into(), ..revision(5) }.validate().is_err());
        assert!(matches!(
            Revision { policy: Policy::Steal, ..revision(5) }.validate(),
            Err(BatchError::Invalid(why)) if why.to_string().contains("optimistically")
        ));
        assert!(Revision { policy: Policy::Skip, ..revision(5) }.validate().is_ok());
    }
}

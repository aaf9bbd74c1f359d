//! The race in progress, for everyone who has `/demo` open while it runs, on any instance.
//!
//! The race is the cluster's, not one instance's: its state is one row of the database,
//! `demo_race_board` (a lab migration), which every instance behind a load balancer reads.
//!
//! - **One race at a time, cluster-wide.** [`RaceBoard::take`] claims the row with one
//!   conditional `UPDATE` (free, or its holder's lease has passed): the instance whose update
//!   changed the row holds the [`RaceTicket`]; every other is refused with the same 409 `busy`.
//!   The claim is a lease by the database's clock ([`LEASE`]), renewed every [`RENEW_EVERY`]
//!   while the race runs, so a racer killed with `kill -9` blocks the next race for at most
//!   [`LEASE`]: the next claim (or reader) finds the lease passed and frees the slot, saying
//!   the race stopped.
//! - **The racer publishes.** The race's reporter (`race.rs`) tells the ticket how far each
//!   strategy has got, in memory; the ticket's publisher thread writes the newest state to the
//!   row at most every [`PUBLISH_EVERY`] (and always the last one), each write counting `seq` up.
//! - **One reader per instance, fanned out.** `GET /demo/races/live` streams each new state as a
//!   server-sent event from this instance's `tokio::sync::watch` channel. The channel is fed by
//!   one reader per instance, started by the first watcher and stopped when the last has gone:
//!   an instance nobody watches sends no query at all. It polls every [`POLL_EVERY`] with one
//!   primary-key read that returns the state only when `seq` has moved, on a blocking thread
//!   (`state.db`), holding no connection between polls. A hundred watchers on one instance
//!   cost what one does.
//!
//! Every state a racer writes stays at least [`PUBLISH_EVERY`] in the row, twice the reader's
//! interval, so a reader that polls on time sees each of them, the last one before the result
//! included. A watcher of a busy instance may still miss one in between (the channel keeps the
//! newest state only): counts never go back, and the result always comes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use actix_web::web;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text, Timestamp};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::DemoError;
use super::race::{self, Progress, RaceReport, RaceSpec, Tally};
use super::strategies::Strategy;
use crate::app::AppState;
use crate::db::{DbConn, DbPool, cached_sql};
use crate::wire::client_address::ClientAddress;

/// How long a race's claim lasts without being renewed: how long a racer that died blocks the
/// next race at most.
pub const LEASE: Duration = Duration::from_secs(10);
/// How often a running race renews its claim when it has no new state to write.
pub const RENEW_EVERY: Duration = Duration::from_secs(2);
/// The least time between two writes of one race's state: watchers see the counts move a few
/// times a second, and the row is written no more often than that, however fast the race goes.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(200);
/// How often an instance's reader asks whether the state has changed, while anyone watches.
pub const POLL_EVERY: Duration = Duration::from_millis(100);

/// What `/demo` shows of the cluster's races right now.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Live {
    /// Counts up with every change (the row's `seq`), so a page can tell a newer state from the
    /// one it shows.
    pub seq: u64,
    /// The race running now on any instance, if any.
    pub race: Option<LiveRace>,
    /// How the last race ended.
    pub finished: Option<Finished>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LiveRace {
    pub started_by: String,
    #[serde(with = "crate::wire::utc")]
    pub started_at: NaiveDateTime,
    pub clients: u32,
    pub attempts: u32,
    pub pause_ms: u32,
    pub strategies: Vec<LiveStrategy>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LiveStrategy {
    pub strategy: Strategy,
    pub stage: Stage,
    #[serde(flatten)]
    pub tally: Tally,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Waiting,
    Running,
    Done,
}

impl Stage {
    /// The stage's text (`src/i18n/texts.yml`).
    pub fn key(self) -> &'static str {
        match self {
            Self::Waiting => "demo.stage.waiting",
            Self::Running => "demo.stage.running",
            Self::Done => "demo.stage.done",
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Finished {
    /// The report is stored: `/demo?race={race_id}`.
    Report { race_id: i64 },
    /// The race stopped without a report, and why (in words for the page).
    Failed { message: String },
}

/// What a race that stopped before its end says: its holder stopped renewing its claim (its
/// instance was killed, or lost the database) and the lease ran out.
const LAPSED: &str = "The race stopped before it finished: its instance stopped answering.";

/// The cluster's one race slot, claimed when it is free or its holder's lease has passed. A
/// lapsed holder's race is said to have stopped (`finished` is assigned first: MySQL assigns left
/// to right, and the `CASE` must see the old holder).
const CLAIM: &str = "UPDATE demo_race_board SET \
       finished = CASE WHEN holder IS NULL THEN finished ELSE ? END, \
       holder = ?, lease_until = {now} + {? microseconds}, race = ?, seq = seq + 1 \
     WHERE id = 1 AND (holder IS NULL OR lease_until < {now})";
/// A new state of the holder's race, which renews its claim too.
const PUBLISH: &str = "UPDATE demo_race_board SET race = ?, seq = seq + 1, \
       lease_until = {now} + {? microseconds} \
     WHERE id = 1 AND holder = ?";
/// The claim renewed, nothing new to show: readers see no change.
const RENEW: &str =
    "UPDATE demo_race_board SET lease_until = {now} + {? microseconds} WHERE id = 1 AND holder = ?";
/// The race is over: how it ended, and the slot freed.
const RELEASE: &str = "UPDATE demo_race_board SET race = NULL, finished = ?, holder = NULL, \
       lease_until = NULL, seq = seq + 1 \
     WHERE id = 1 AND holder = ?";
/// Frees the slot of a race whose holder stopped renewing it.
const FREE_LAPSED: &str = "UPDATE demo_race_board SET race = NULL, finished = ?, holder = NULL, \
       lease_until = NULL, seq = seq + 1 \
     WHERE id = 1 AND holder IS NOT NULL AND lease_until < {now}";
/// The state, by primary key; `race` and `finished` only when `seq` differs from the reader's.
const READ: &str = "SELECT seq, lease_until, {now} AS now, \
       CASE WHEN seq = ? THEN NULL ELSE race END AS race, \
       CASE WHEN seq = ? THEN NULL ELSE finished END AS finished \
     FROM demo_race_board WHERE id = 1";

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn json(value: &impl Serialize) -> Result<String, DemoError> {
    Ok(serde_json::to_string(value).map_err(anyhow::Error::from)?)
}

/// Claims the slot for the race `race` under the token `holder`: true when this claim took it.
fn claim(conn: &mut DbConn, holder: &str, race: &LiveRace) -> Result<bool, DemoError> {
    let stopped = json(&Finished::Failed { message: LAPSED.into() })?;
    let taken = cached_sql::<()>(CLAIM)
        .bind::<Text, _>(stopped)
        .bind::<Text, _>(holder)
        .bind::<BigInt, _>(micros(LEASE))
        .bind::<Text, _>(json(race)?)
        .execute(conn)?;
    Ok(taken == 1)
}

/// The cluster's race board now, as `/demo` and `/api/v1/demo/races/live` show it.
pub fn now(conn: &mut DbConn) -> Result<Live, DemoError> {
    Ok(read(conn, None)?.unwrap_or_default())
}

/// The board's state, or `None` when it is still the state `known` (its `seq`). One read by
/// primary key; a holder whose lease has passed is freed first (once, by whichever instance
/// sees it: the update is conditional), so a race whose instance died is never shown running.
fn read(conn: &mut DbConn, known: Option<u64>) -> Result<Option<Live>, DemoError> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = BigInt)]
        seq: i64,
        #[diesel(sql_type = Nullable<Timestamp>)]
        lease_until: Option<NaiveDateTime>,
        #[diesel(sql_type = Timestamp)]
        now: NaiveDateTime,
        #[diesel(sql_type = Nullable<Text>)]
        race: Option<String>,
        #[diesel(sql_type = Nullable<Text>)]
        finished: Option<String>,
    }
    let known_seq = known.and_then(|seq| i64::try_from(seq).ok()).unwrap_or(-1);
    let ask = |conn: &mut DbConn| {
        cached_sql::<diesel::sql_types::Untyped>(READ)
            .bind::<BigInt, _>(known_seq)
            .bind::<BigInt, _>(known_seq)
            .get_result::<Row>(conn)
    };
    let mut row = ask(conn)?;
    if row.lease_until.is_some_and(|until| until < row.now) {
        let stopped = json(&Finished::Failed { message: LAPSED.into() })?;
        cached_sql::<()>(FREE_LAPSED).bind::<Text, _>(stopped).execute(conn)?;
        row = ask(conn)?;
    }
    let seq = u64::try_from(row.seq).unwrap_or(0);
    if known == Some(seq) {
        return Ok(None);
    }
    let parse = |text: &str| anyhow::anyhow!("demo_race_board holds unreadable JSON: {text}");
    let race = row.race.map(|text| serde_json::from_str(&text).map_err(|_| parse(&text))).transpose()?;
    let finished =
        row.finished.map(|text| serde_json::from_str(&text).map_err(|_| parse(&text))).transpose()?;
    Ok(Some(Live { seq, race, finished }))
}

/// One per instance, shared by its workers (registered in `Application::build`): this
/// instance's watchers of the board, and its client addresses' cooldowns.
pub struct RaceBoard {
    /// The board as this instance's reader last read it; every watcher subscribes to it.
    state: watch::Sender<Live>,
    /// Whether this instance's reader runs: set by the first watcher, cleared by the reader as it
    /// stops for want of watchers. Both under this lock, so there is at most one reader, and no
    /// watcher is ever left without one.
    reader: Mutex<bool>,
    /// When each client address last started a race here, for [`race::Bounds::address_cooldown`].
    /// Entries older than the longest cooldown are dropped as races start, and races start one at
    /// a time, so it holds a handful of addresses.
    addresses: Mutex<HashMap<ClientAddress, Instant>>,
}

impl Default for RaceBoard {
    fn default() -> Self {
        Self {
            state: watch::Sender::new(Live::default()),
            reader: Mutex::new(false),
            addresses: Mutex::default(),
        }
    }
}

impl RaceBoard {
    /// How long a race from `address` must still wait before it may start here, if it waits
    /// `cooldown` after the address's last race.
    pub fn address_cooldown_left(&self, address: ClientAddress, cooldown: Duration) -> Option<Duration> {
        let mut addresses = self.addresses.lock().unwrap_or_else(PoisonError::into_inner);
        addresses.retain(|_, started| started.elapsed() < race::VISITOR_COOLDOWN.max(race::COOLDOWN));
        addresses
            .get(&address)
            .map(|started| cooldown.saturating_sub(started.elapsed()))
            .filter(|l| !l.is_zero())
    }

    /// Starts `address`'s cooldown: a race, or a demo account's flash sale, began from it now.
    pub fn started_from(&self, address: ClientAddress) {
        self.addresses.lock().unwrap_or_else(PoisonError::into_inner).insert(address, Instant::now());
    }

    /// The cluster's race slot, for a race of `spec` started by `started_by`; refused while
    /// another race runs on any instance. The check and the claim are one conditional update
    /// of the board's row. The race starts its client address's cooldown (`address`).
    pub async fn take(
        state: &AppState,
        board: &Self,
        spec: &RaceSpec,
        started_by: &str,
        address: Option<ClientAddress>,
    ) -> Result<RaceTicket, DemoError> {
        let race = LiveRace {
            started_by: started_by.to_string(),
            started_at: chrono::Utc::now().naive_utc(),
            clients: spec.clients,
            attempts: spec.attempts,
            pause_ms: spec.pause_ms,
            strategies: spec
                .strategies
                .iter()
                .map(|&strategy| LiveStrategy { strategy, stage: Stage::Waiting, tally: Tally::default() })
                .collect(),
        };
        let holder = format!("{:032x}", rand::random::<u128>());
        let (claimed_by, claimed) = (holder.clone(), race.clone());
        if !state.off_executor.with_conn(move |conn| claim(conn, &claimed_by, &claimed)).await? {
            return Err(DemoError::RaceRunning);
        }
        if let Some(address) = address {
            board.started_from(address);
        }
        RaceTicket::start(state.pool().clone(), holder, race)
    }

    /// Every state of the board from now on, as this instance's reader reads it; the reader is
    /// started if it was not running.
    pub fn watch(board: &web::Data<Self>, state: &web::Data<AppState>) -> watch::Receiver<Live> {
        let mut running = board.reader.lock().unwrap_or_else(PoisonError::into_inner);
        let states = board.state.subscribe();
        if !*running {
            *running = true;
            actix_web::rt::spawn(read_while_watched(board.clone(), state.clone()));
        }
        states
    }
}

/// This instance's reader: every [`POLL_EVERY`], one read of the board's row on a blocking
/// thread (no connection kept between two), and a new state fanned out to every watcher here.
/// Stops when nobody watches any more.
async fn read_while_watched(board: web::Data<RaceBoard>, state: web::Data<AppState>) {
    let mut every = actix_web::rt::time::interval(POLL_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        every.tick().await;
        {
            let mut running = board.reader.lock().unwrap_or_else(PoisonError::into_inner);
            if board.state.receiver_count() == 0 {
                *running = false;
                return;
            }
        }
        let known = board.state.borrow().seq;
        match state.off_executor.with_conn(move |conn| read(conn, Some(known))).await {
            Ok(changed) => {
                if let Some(live) = changed {
                    board.state.send_replace(live);
                }
                failing = false;
            }
            // The database may be down for a while: the watchers keep the last state, and the
            // next poll tries again. Said once, not ten times a second.
            Err(e) => {
                if !failing {
                    log::warn!("reading the race board failed: {e}");
                }
                failing = true;
            }
        }
    }
}

/// What the race's threads have told its ticket, waiting for the publisher.
struct Pending {
    race: LiveRace,
    /// Changed since it was last written.
    dirty: bool,
    /// The race is over: write what is left, then stop.
    stop: bool,
    /// When this race last wrote the row (the claim included).
    written: Instant,
}

/// Proof that its holder runs the cluster's race. Dropping it frees the slot, also when the race
/// failed or panicked, or the browser that started it has gone away.
pub struct RaceTicket {
    pool: DbPool,
    holder: String,
    pending: Arc<Mutex<Pending>>,
    publisher: Option<std::thread::JoinHandle<()>>,
}

impl RaceTicket {
    /// The ticket of a claimed slot, and its publisher thread.
    fn start(pool: DbPool, holder: String, race: LiveRace) -> Result<Self, DemoError> {
        let pending =
            Arc::new(Mutex::new(Pending { race, dirty: false, stop: false, written: Instant::now() }));
        let (shared, on, token) = (pending.clone(), pool.clone(), holder.clone());
        let publisher = std::thread::Builder::new()
            .name("race-publisher".into())
            .spawn(move || publish_until_stopped(&shared, &on, &token))
            // Unlikely; the claim then lapses after its lease.
            .map_err(anyhow::Error::from)?;
        Ok(Self { pool, holder, pending, publisher: Some(publisher) })
    }

    /// The race's [`super::race::Watch`]: notes each strategy's progress, in memory, for the
    /// publisher to write.
    pub fn progress(&self, progress: Progress<'_>) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let (index, stage, tally) = match progress {
            Progress::Running { index, tally } => (index, Stage::Running, tally),
            Progress::Done { index, result } => (
                index,
                Stage::Done,
                Tally {
                    attempts: result.attempts,
                    confirmed: result.confirmed,
                    double_bookings: result.double_bookings,
                },
            ),
        };
        if let Some(entry) = pending.race.strategies.get_mut(index) {
            (entry.stage, entry.tally) = (stage, tally);
            pending.dirty = true;
        }
    }

    /// Frees the slot and tells the watchers how the race ended. Blocks (for up to two
    /// [`PUBLISH_EVERY`]): call it on the race's thread.
    pub fn end(mut self, outcome: &Result<RaceReport, DemoError>) {
        let finished = match outcome {
            Ok(report) => Finished::Report { race_id: report.id },
            Err(e) => Finished::Failed { message: stopped(e) },
        };
        self.release(&finished);
    }

    /// Stops the publisher once it has written the last state, then writes how the race ended,
    /// at least [`PUBLISH_EVERY`] after that last state, so that every reader sees both.
    fn release(&mut self, finished: &Finished) {
        let Some(publisher) = self.publisher.take() else { return };
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).stop = true;
        if publisher.join().is_err() {
            log::warn!("the race's publisher panicked");
        }
        let written = self.pending.lock().unwrap_or_else(PoisonError::into_inner).written;
        std::thread::sleep(PUBLISH_EVERY.saturating_sub(written.elapsed()));
        let released = json(finished).and_then(|finished| {
            let mut conn = self.pool.get()?;
            Ok(cached_sql::<()>(RELEASE)
                .bind::<Text, _>(finished)
                .bind::<Text, _>(&self.holder)
                .execute(&mut *conn)?)
        });
        match released {
            Ok(1) => {}
            // Lapsed and taken over, or freed by a reader: nothing of ours to free.
            Ok(_) => log::warn!("the race's slot was no longer its own when it ended"),
            // Its lease frees the slot instead.
            Err(e) => log::warn!("freeing the race's slot failed: {e}"),
        }
    }
}

impl Drop for RaceTicket {
    fn drop(&mut self) {
        self.release(&Finished::Failed { message: "The race stopped before it finished.".into() });
    }
}

/// The publisher of one race: at most every [`PUBLISH_EVERY`], the newest state if it changed,
/// else the claim renewed every [`RENEW_EVERY`]; until the race stops, and then what is left.
/// Each write takes a pooled connection and gives it back at once.
fn publish_until_stopped(pending: &Mutex<Pending>, pool: &DbPool, holder: &str) {
    let mut renewed = Instant::now();
    let mut lost = false;
    loop {
        let since = pending.lock().unwrap_or_else(PoisonError::into_inner).written.elapsed();
        std::thread::sleep(PUBLISH_EVERY.saturating_sub(since).max(Duration::from_millis(10)));
        let (state, stop) = {
            let mut pending = pending.lock().unwrap_or_else(PoisonError::into_inner);
            let state = pending.dirty.then(|| pending.race.clone());
            pending.dirty = false;
            (state, pending.stop)
        };
        let wrote = match &state {
            Some(race) => Some(json(race).and_then(|race| {
                Ok(cached_sql::<()>(PUBLISH)
                    .bind::<Text, _>(race)
                    .bind::<BigInt, _>(micros(LEASE))
                    .bind::<Text, _>(holder)
                    .execute(&mut *pool.get()?)?)
            })),
            None if renewed.elapsed() >= RENEW_EVERY => Some((|| {
                Ok::<_, DemoError>(
                    cached_sql::<()>(RENEW)
                        .bind::<BigInt, _>(micros(LEASE))
                        .bind::<Text, _>(holder)
                        .execute(&mut *pool.get()?)?,
                )
            })()),
            None => None,
        };
        match wrote {
            None => {}
            Some(Ok(1)) => {
                if state.is_some() {
                    pending.lock().unwrap_or_else(PoisonError::into_inner).written = Instant::now();
                }
                renewed = Instant::now();
            }
            // The lease passed (the database was out of reach for longer than it) and another
            // instance freed or took the slot: this race runs on, unseen.
            Some(Ok(_)) if !lost => {
                lost = true;
                log::warn!("the race lost its slot on the race board; it runs on without being shown");
            }
            Some(Ok(_)) => {}
            // The next round tries again; if the database stays away, the race fails anyway.
            Some(Err(e)) => log::warn!("publishing the race's progress failed: {e}"),
        }
        if stop {
            return;
        }
    }
}

/// Why a race stopped, for the page: the problem's message, which never carries internals.
fn stopped(e: &DemoError) -> String {
    use crate::wire::error::AsProblem;
    format!("The race stopped: {}", e.problem().message)
}

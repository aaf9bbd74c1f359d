//! The race in progress, for everyone who has `/demo` open while it runs.
//!
//! One race runs at a time per instance: [`RaceBoard::take`] hands out the one [`RaceTicket`].
//! While the race runs, its reporter (`race.rs`) tells the ticket how far each strategy has got,
//! and the ticket publishes that on a `tokio::sync::watch` channel. `GET /demo/races/live`
//! streams each new state to the page as a server-sent event, so every visitor of the page (not
//! only the one who started the race) sees the counts move, the run button held, and the result
//! when it is in.
//!
//! The state lives in this instance's memory: behind a load balancer, a visitor sees the races of
//! the instance that answers them. A watcher costs an open response and nothing else: no thread,
//! no connection, no query.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use actix_web::web;
use chrono::NaiveDateTime;
use serde::Serialize;
use tokio::sync::watch;

use super::DemoError;
use super::race::{self, Progress, RaceReport, RaceSpec, Tally};
use super::strategies::Strategy;
use crate::http::client_address::ClientAddress;

/// What `/demo` shows of this instance's races right now.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Live {
    /// Counts up with every change, so a page can tell a newer state from the one it shows.
    pub seq: u64,
    /// The race running now, if any.
    pub race: Option<LiveRace>,
    /// How the last race this instance ran ended.
    pub finished: Option<Finished>,
}

#[derive(Clone, Debug, Serialize)]
pub struct LiveRace {
    pub started_by: String,
    #[serde(with = "crate::http::utc")]
    pub started_at: NaiveDateTime,
    pub clients: u32,
    pub attempts: u32,
    pub pause_ms: u32,
    pub strategies: Vec<LiveStrategy>,
}

#[derive(Clone, Debug, Serialize)]
pub struct LiveStrategy {
    pub strategy: Strategy,
    pub stage: Stage,
    #[serde(flatten)]
    pub tally: Tally,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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

#[derive(Clone, Debug, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Finished {
    /// The report is stored: `/demo?race={race_id}`.
    Report { race_id: i64 },
    /// The race stopped without a report, and why (in words for the page).
    Failed { message: String },
}

/// One per instance, shared by its workers (registered in `Application::build`).
pub struct RaceBoard {
    state: watch::Sender<Live>,
    /// When each visitor's address last started a race here, for [`race::VISITOR_COOLDOWN`].
    /// Entries older than the cooldown are dropped as races start, and races start one at a time
    /// at most every [`race::COOLDOWN`] for visitors, so it holds a handful of addresses.
    visitors: std::sync::Mutex<HashMap<ClientAddress, Instant>>,
}

impl Default for RaceBoard {
    fn default() -> Self {
        Self { state: watch::Sender::new(Live::default()), visitors: std::sync::Mutex::default() }
    }
}

impl RaceBoard {
    /// How long the visitor at `address` must still wait before starting another race here.
    pub fn visitor_cooldown_left(&self, address: ClientAddress) -> Option<Duration> {
        let mut visitors = self.visitors.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        visitors.retain(|_, started| started.elapsed() < race::VISITOR_COOLDOWN);
        visitors.get(&address).map(|started| race::VISITOR_COOLDOWN.saturating_sub(started.elapsed()))
    }

    /// The instance's race slot, for a race of `spec` started by `started_by`; refused while
    /// another race runs. The check and the claim are one step under the channel's lock.
    /// A visitor's race (`visitor`: their address) starts their cooldown with the race.
    pub fn take(
        board: &web::Data<Self>,
        spec: &RaceSpec,
        started_by: &str,
        visitor: Option<ClientAddress>,
    ) -> Result<RaceTicket, DemoError> {
        let mut taken = false;
        board.state.send_if_modified(|live| {
            if live.race.is_some() {
                return false;
            }
            live.seq += 1;
            live.race = Some(LiveRace {
                started_by: started_by.to_string(),
                started_at: chrono::Utc::now().naive_utc(),
                clients: spec.clients,
                attempts: spec.attempts,
                pause_ms: spec.pause_ms,
                strategies: spec
                    .strategies
                    .iter()
                    .map(|&strategy| LiveStrategy {
                        strategy,
                        stage: Stage::Waiting,
                        tally: Tally::default(),
                    })
                    .collect(),
            });
            taken = true;
            true
        });
        if taken {
            if let Some(address) = visitor {
                let mut visitors = board.visitors.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                visitors.insert(address, Instant::now());
            }
            Ok(RaceTicket { board: board.clone(), ended: false })
        } else {
            Err(DemoError::RaceRunning)
        }
    }

    /// The state now.
    pub fn now(&self) -> Live {
        self.state.borrow().clone()
    }

    /// Every state from now on, starting with this one.
    pub fn subscribe(&self) -> watch::Receiver<Live> {
        self.state.subscribe()
    }
}

/// Proof that its holder runs the instance's race. Dropping it frees the slot, also when the race
/// failed or panicked, or the browser that started it has gone away.
pub struct RaceTicket {
    board: web::Data<RaceBoard>,
    ended: bool,
}

impl RaceTicket {
    /// The race's [`super::race::Watch`]: publishes each strategy's progress.
    pub fn progress(&self, progress: Progress<'_>) {
        self.board.state.send_modify(|live| {
            live.seq += 1;
            let Some(race) = live.race.as_mut() else { return };
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
            if let Some(entry) = race.strategies.get_mut(index) {
                (entry.stage, entry.tally) = (stage, tally);
            }
        });
    }

    /// Frees the slot and tells the watchers how the race ended.
    pub fn end(mut self, outcome: &Result<RaceReport, DemoError>) {
        self.ended = true;
        let finished = match outcome {
            Ok(report) => Finished::Report { race_id: report.id },
            Err(e) => Finished::Failed { message: stopped(e) },
        };
        self.clear(finished);
    }

    fn clear(&self, finished: Finished) {
        self.board.state.send_modify(|live| {
            live.seq += 1;
            live.race = None;
            live.finished = Some(finished);
        });
    }
}

impl Drop for RaceTicket {
    fn drop(&mut self) {
        if !self.ended {
            self.clear(Finished::Failed { message: "The race stopped before it finished.".into() });
        }
    }
}

/// Why a race stopped, for the page: the problem's message, which never carries internals.
fn stopped(e: &DemoError) -> String {
    use crate::http::error::AsProblem;
    format!("The race stopped: {}", e.problem().message)
}

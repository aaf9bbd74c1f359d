//! The crowd: 500 buyers at the click, each a task on the sale's own runtime, doing what a buyer
//! does with the shop's answers (`shop.rs`) — and what each was answered, and when.
//!
//! At the click every buyer orders once: sold, or told the stock is gone. With holds a buyer holds
//! a unit, checks out, and orders from the hold; a seeded share walk away from their hold instead,
//! and another share take longer than the hold over their first checkout. Told there is nothing to
//! hold, or that their hold ran out, a buyer tries again until the sale is over: the last unit sold
//! (as the buyers were answered) or the time cap.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tokio::sync::{Semaphore, watch};

use super::FlashError;
use super::buyers::Buyers;
use super::report::{Variant, VariantResult};
use super::sale::{LOGIN_CAP, SaleSpec};
use super::shop::{Answer, Session, Shop};
use crate::lab::stats::percentile_ms;

/// Logins in flight per instance: about its hashing slots, so that none waits for one.
const LOGINS_AT_ONCE: usize = 8;
/// A buyer told there is nothing left to hold asks again after this, doubling up to
/// [`MAX_BACKOFF`] (each wait drawn between half and all of it): the "try again" of a shop's
/// page, not a stampede.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_millis(2_000);
/// A buyer's checkout, from the hold to the order: drawn between these, in milliseconds.
const CHECKOUT_MS: std::ops::Range<u64> = 50..300;
/// How much longer than the hold a slow buyer's first checkout takes: their order then meets
/// an expired hold. Told so, they are quicker the next time.
const SLOW_BY: Duration = Duration::from_millis(500);

/// Every buyer logged in, buyer `i` on instance `i % n`, a few at a time per instance.
pub(super) async fn log_in(shop: &Shop, buyers: &Buyers) -> Result<Vec<Session>, FlashError> {
    let slots = Semaphore::new(LOGINS_AT_ONCE * shop.instances());
    let deadline = Instant::now() + LOGIN_CAP;
    let logins = buyers.names.iter().enumerate().map(|(i, name)| {
        let slots = &slots;
        async move {
            let _slot = slots.acquire().await.map_err(|e| anyhow::anyhow!("{e}"))?;
            loop {
                match shop.log_in(i % shop.instances(), name, &buyers.password).await {
                    Ok(session) => return Ok(session),
                    Err(Answer::Busy(after)) if Instant::now() + after < deadline => {
                        tokio::time::sleep(after).await;
                    }
                    Err(answer) => {
                        return Err(FlashError::Internal(anyhow::anyhow!(
                            "{name} could not log in: {answer}"
                        )));
                    }
                }
            }
        }
    });
    futures_util::future::join_all(logins).await.into_iter().collect()
}

/// What one buyer does when holds are on, drawn from the sale's seed.
pub(super) struct Plan {
    /// Holds a unit and walks away: the hold runs out.
    abandons: bool,
    /// Their first checkout takes longer than the hold.
    slow: bool,
    /// Their checkout otherwise.
    checkout: Duration,
}

/// Exactly `abandon_percent` of the buyers abandon and `slow_percent` are slow, picked by a
/// shuffle seeded with the sale's seed.
pub(super) fn plans(spec: &SaleSpec) -> Vec<Plan> {
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let n = spec.buyers as usize;
    let share = |percent: u32| (n * percent as usize + 50) / 100;
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut rng);
    let mut plans: Vec<Plan> = (0..n)
        .map(|_| Plan {
            abandons: false,
            slow: false,
            checkout: Duration::from_millis(rng.random_range(CHECKOUT_MS)),
        })
        .collect();
    let (abandon, slow) = (share(spec.abandon_percent), share(spec.slow_percent));
    for &buyer in &order[..abandon] {
        plans[buyer].abandons = true;
    }
    for &buyer in &order[abandon..(abandon + slow).min(n)] {
        plans[buyer].slow = true;
    }
    plans
}

/// One variant's sale, while it runs.
pub(super) struct Sale<'a> {
    shop: &'a Shop,
    sessions: &'a [Session],
    plans: &'a [Plan],
    sale_id: i64,
    variant: Variant,
    product: i64,
    stock: u32,
    hold_seconds: u32,
    seed: u64,
    click: Instant,
    deadline: Instant,
    /// Units sold, as the buyers were answered.
    sold: AtomicU32,
    /// From the click to the answer that sold the last unit.
    sold_out: OnceLock<Duration>,
    /// Flips to true when the last unit is sold: buyers waiting to try again stop waiting.
    over: watch::Sender<bool>,
}

/// What the crowd did in one variant: each buyer's answers, and when the last unit sold.
pub(super) struct Crowd {
    logs: Vec<BuyerLog>,
    sold_out: Option<Duration>,
    elapsed: Duration,
}

impl<'a> Sale<'a> {
    /// `variant` of `spec`'s sale of `product`, to the logged-in buyers `sessions`; the click is
    /// now, and the time cap `time_cap` from now.
    #[expect(clippy::too_many_arguments, reason = "the sale's parts, each named where it is made")]
    pub(super) fn new(
        shop: &'a Shop,
        sessions: &'a [Session],
        plans: &'a [Plan],
        spec: &SaleSpec,
        sale_id: i64,
        variant: Variant,
        product: i64,
        time_cap: Duration,
    ) -> Self {
        let click = Instant::now();
        Self {
            shop,
            sessions,
            plans,
            sale_id,
            variant,
            product,
            stock: spec.stock,
            hold_seconds: spec.hold_seconds,
            seed: spec.seed,
            click,
            deadline: click + time_cap,
            sold: AtomicU32::new(0),
            sold_out: OnceLock::new(),
            over: watch::channel(false).0,
        }
    }

    /// Every buyer at once, until the sale is over.
    pub(super) async fn run(self) -> Crowd {
        let buyers = (0..self.sessions.len()).map(|buyer| {
            let sale = &self;
            async move {
                match sale.variant {
                    Variant::WithoutHolds => sale.buy_at_the_click(buyer).await,
                    Variant::WithHolds => sale.buy_with_a_hold(buyer).await,
                }
            }
        });
        let logs = futures_util::future::join_all(buyers).await;
        Crowd { logs, sold_out: self.sold_out.get().copied(), elapsed: self.click.elapsed() }
    }
}

impl Crowd {
    /// From the click to the answer that sold the last unit; `None` when it was not sold out.
    pub(super) fn sold_out(&self) -> Option<Duration> {
        self.sold_out
    }

    /// From the click to the last buyer's last answer.
    pub(super) fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// Adds what the buyers were answered, and when, to `result`.
    pub(super) fn tally(self, result: &mut VariantResult) {
        let mut first_answers: Vec<Duration> = self.logs.iter().filter_map(|log| log.first_answer).collect();
        let mut orders: Vec<Duration> = self.logs.iter().flat_map(|log| log.orders.iter().copied()).collect();
        first_answers.sort_unstable();
        orders.sort_unstable();
        result.first_answer_p50_ms = percentile_ms(&first_answers, 50.0);
        result.first_answer_p99_ms = percentile_ms(&first_answers, 99.0);
        result.order_p50_ms = percentile_ms(&orders, 50.0);
        result.order_p99_ms = percentile_ms(&orders, 99.0);
        for log in self.logs {
            result.refused += u32::from(log.refused);
            result.abandoned += u32::from(log.abandoned);
            result.refusals += log.refusals;
            result.expired_orders += log.expired_orders;
            result.busy += log.busy;
            result.errors += log.errors;
            result.first_error = result.first_error.take().or(log.first_error);
        }
    }
}

/// What one buyer was answered, and when.
#[derive(Default)]
struct BuyerLog {
    /// From the click to their first answer that was not "busy".
    first_answer: Option<Duration>,
    /// How long each of their orders took to be answered.
    orders: Vec<Duration>,
    bought: bool,
    refused: bool,
    abandoned: bool,
    refusals: u32,
    expired_orders: u32,
    busy: u32,
    errors: u32,
    first_error: Option<String>,
}

impl BuyerLog {
    fn unexpected(&mut self, what: &str, answer: Answer) {
        self.errors += 1;
        self.first_error.get_or_insert_with(|| format!("{what}: {answer}"));
    }
}

impl Sale<'_> {
    /// One order at the click: sold, or told the stock is gone.
    async fn buy_at_the_click(&self, buyer: usize) -> BuyerLog {
        let mut log = BuyerLog::default();
        let key = self.key("order", buyer, 0);
        match self
            .ordered(&mut log, async || self.shop.order(&self.sessions[buyer], self.product, &key).await)
            .await
        {
            Some(Answer::Done(_)) => self.sold_one(&mut log),
            Some(Answer::Refused(code)) if code == "insufficient_stock" => {
                log.refusals += 1;
                log.refused = true;
            }
            Some(other) => log.unexpected("order", other),
            None => log.refused = true,
        }
        log
    }

    /// Hold, check out, order from the hold; or walk away from it. Told there is nothing to hold,
    /// or that the hold ran out, try again until the sale is over.
    async fn buy_with_a_hold(&self, buyer: usize) -> BuyerLog {
        let plan = &self.plans[buyer];
        let session = &self.sessions[buyer];
        let mut rng = StdRng::seed_from_u64(self.seed ^ (buyer as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut over = self.over.subscribe();
        let mut log = BuyerLog::default();
        let mut backoff = FIRST_BACKOFF;
        let mut first_checkout = true;
        for attempt in 1.. {
            if self.is_over() {
                log.refused = true;
                break;
            }
            let key = self.key("hold", buyer, attempt);
            let hold = self.answered(&mut log, async || {
                self.shop.hold(session, self.product, self.hold_seconds, &key).await
            });
            let id = match hold.await {
                Some(Answer::Done(view)) => match view["id"].as_i64() {
                    Some(id) => id,
                    None => {
                        log.unexpected("hold", Answer::Done(view));
                        break;
                    }
                },
                Some(Answer::Refused(code)) if code == "insufficient_stock" => {
                    log.refusals += 1;
                    self.pause(&mut over, backoff.mul_f64(rng.random_range(0.5..1.0))).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
                Some(other) => {
                    log.unexpected("hold", other);
                    break;
                }
                None => {
                    log.refused = true;
                    break;
                }
            };
            backoff = FIRST_BACKOFF;
            if plan.abandons {
                log.abandoned = true;
                break;
            }
            let checkout = if plan.slow && first_checkout {
                Duration::from_secs(self.hold_seconds.into()) + SLOW_BY
            } else {
                plan.checkout
            };
            first_checkout = false;
            self.pause(&mut over, checkout).await;
            if Instant::now() >= self.deadline {
                // Out of time: give the unit back rather than leave it to expire.
                let _ = self.shop.release(session, id).await;
                log.refused = true;
                break;
            }
            let key = self.key("order", buyer, attempt);
            match self.ordered(&mut log, async || self.shop.order_from_hold(session, id, &key).await).await {
                Some(Answer::Done(_)) => {
                    self.sold_one(&mut log);
                    break;
                }
                Some(Answer::Refused(code)) if code == "hold_expired" => log.expired_orders += 1,
                Some(other) => {
                    log.unexpected("order from a hold", other);
                    break;
                }
                None => {
                    log.refused = true;
                    break;
                }
            }
        }
        log
    }

    /// `send`'s answer, sent again (with the same idempotency key) while the answer is "busy"
    /// or none came; `None` when the time cap comes first.
    async fn answered(&self, log: &mut BuyerLog, mut send: impl AsyncFnMut() -> Answer) -> Option<Answer> {
        loop {
            match send().await {
                Answer::Busy(after) => {
                    log.busy += 1;
                    if Instant::now() + after >= self.deadline {
                        return None;
                    }
                    tokio::time::sleep(after).await;
                }
                answer => {
                    log.first_answer.get_or_insert_with(|| self.click.elapsed());
                    return Some(answer);
                }
            }
        }
    }

    /// [`Sale::answered`] for an order, timed from its first sending to its answer.
    async fn ordered(&self, log: &mut BuyerLog, send: impl AsyncFnMut() -> Answer) -> Option<Answer> {
        let began = Instant::now();
        let answer = self.answered(log, send).await;
        if answer.is_some() {
            log.orders.push(began.elapsed());
        }
        answer
    }

    /// Waits `wait`, or less when the sale ends meanwhile.
    async fn pause(&self, over: &mut watch::Receiver<bool>, wait: Duration) {
        let wait = wait.min(self.deadline.saturating_duration_since(Instant::now()));
        let _ = tokio::time::timeout(wait, over.wait_for(|over| *over)).await;
    }

    fn sold_one(&self, log: &mut BuyerLog) {
        log.bought = true;
        if self.sold.fetch_add(1, Ordering::Relaxed) + 1 >= self.stock {
            let _ = self.sold_out.set(self.click.elapsed());
            self.over.send_replace(true);
        }
    }

    fn is_over(&self) -> bool {
        self.sold.load(Ordering::Relaxed) >= self.stock || Instant::now() >= self.deadline
    }

    /// An idempotency key no other request of any sale uses.
    fn key(&self, what: &str, buyer: usize, attempt: u32) -> String {
        let variant = match self.variant {
            Variant::WithoutHolds => "click",
            Variant::WithHolds => "holds",
        };
        format!("flash-{}-{variant}-{what}-{buyer}-{attempt}", self.sale_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::flash::sale::Asked;

    #[test]
    fn the_seed_picks_exact_shares_and_replays_the_same_crowd() {
        let one = ["http://127.0.0.1:8080".to_string()];
        let spec = SaleSpec::parse(&one, &Asked { seed: Some(7), ..Asked::default() }).expect("spec");
        let (first, again) = (plans(&spec), plans(&spec));
        assert_eq!(first.iter().filter(|p| p.abandons).count(), 100);
        assert_eq!(first.iter().filter(|p| p.slow).count(), 50);
        assert!(!first.iter().any(|p| p.abandons && p.slow));
        let picked =
            |plans: &[Plan]| plans.iter().map(|p| (p.abandons, p.slow, p.checkout)).collect::<Vec<_>>();
        assert_eq!(picked(&first), picked(&again));
    }
}

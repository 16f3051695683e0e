//! [`Schedule`]: when each slot of a delivery is due, and what one slot's sequence through the
//! retry layer may do ([`SlotSequence`]).
//!
//! A slot's delay counts from the previous slot's first attempt (slot 0, the first send, is due
//! when the delivery is stored). Each delay is jittered by ±[`jitter`](Schedule::jitter) (20 % by
//! default) from the delivery's own random stream (seeded by its id and slot), so deliveries
//! that failed together do not come back together, and a worker that re-runs a slot after a
//! crash draws the same time. Past the last slot, the delivery goes to the dead-letter queue.
//!
//! ```
//! use std::time::Duration;
//! use tower_http_retry_redelivery::Schedule;
//!
//! let webhooks = Schedule::standard_webhooks();
//! assert_eq!(webhooks.len(), 8);
//! assert_eq!(webhooks.delay(1), Some(Duration::from_secs(5)));
//! assert_eq!(webhooks.total(), Duration::from_secs(27 * 3600 + 35 * 60 + 5));
//! // Hours become seconds: the same schedule for a test or a demo.
//! let fast = webhooks.scaled(1.0 / 3600.0);
//! assert_eq!(fast.delay(4), Some(Duration::from_secs(2)));
//! ```

use std::hash::{Hash, Hasher};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tower_http_retry::pacing::PacingBuilder;
use tower_http_retry::retry::{FailUnsentBuilder, Idempotency};
use tower_http_retry::{InvalidConfig, Pacing, RetryLayer};

use rand::{RngExt, SeedableRng};

/// The delays of a delivery's slots, their jitter, and each slot's sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    delays: Vec<Duration>,
    jitter: f64,
    sequence: SlotSequence,
    attempt_timeout: Duration,
    seed: u64,
}

/// What one slot may do in the retry layer: its attempts and its deadline (which bounds the
/// wait in the pacer's queue too).
///
/// The presets make **one attempt a slot**: a slot is the retry, and a dead endpoint sees one
/// attempt per due delivery per slot, plus the pacer's probes. Once the pacer knows the
/// endpoint is down, a due delivery that would wait past the deadline is handed back unsent
/// and stored again at the pacer's time, so a down endpoint sees probes, not the backlog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotSequence {
    /// Attempts in one slot (1 in the presets).
    pub max_attempts: u32,
    /// How long one slot may take, waits in the pacer's queue included (30 s in the presets).
    pub deadline: Duration,
}

impl SlotSequence {
    const PRESET: SlotSequence = SlotSequence {
        max_attempts: 1,
        deadline: Duration::from_secs(30),
    };
}

const MINUTE: u64 = 60;
const HOUR: u64 = 3600;

impl Schedule {
    const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

    /// The Standard Webhooks schedule, which Svix runs: at once, then 5 s, 5 min, 30 min, 2 h,
    /// 5 h, 10 h and 10 h after the previous attempt (27 h 35 min in all).
    pub fn standard_webhooks() -> Self {
        Self::from_delays(
            [
                0,
                5,
                5 * MINUTE,
                30 * MINUTE,
                2 * HOUR,
                5 * HOUR,
                10 * HOUR,
                10 * HOUR,
            ]
            .map(Duration::from_secs),
        )
        .expect("a valid preset")
    }

    /// Three days, exponential: at once, then 1 min doubling up to 12 h between attempts, until
    /// the delays add up to 72 h (as Stripe retries for three days).
    pub fn three_days() -> Self {
        Self::exponential(
            Duration::from_secs(MINUTE),
            Duration::from_secs(12 * HOUR),
            Duration::from_secs(72 * HOUR),
        )
        .expect("a valid preset")
    }

    /// At once, then `first`, doubling up to `cap` between attempts, until the delays add up to
    /// at least `total`.
    pub fn exponential(
        first: Duration,
        cap: Duration,
        total: Duration,
    ) -> Result<Self, InvalidConfig> {
        InvalidConfig::ensure_positive_duration("first", first)?;
        InvalidConfig::ensure_positive_duration("cap", cap)?;
        let mut delays = vec![Duration::ZERO];
        let (mut next, mut sum) = (first, Duration::ZERO);
        while sum < total {
            let delay = next.min(cap);
            delays.push(delay);
            sum += delay;
            next = next.saturating_mul(2);
            if delays.len() > MAX_SLOTS {
                return Err(InvalidConfig::new("total", "more than 64 slots"));
            }
        }
        Self::from_delays(delays)
    }

    /// A custom list of delays, each counted from the previous slot's first attempt (the first
    /// usually zero: at once).
    pub fn from_delays(delays: impl IntoIterator<Item = Duration>) -> Result<Self, InvalidConfig> {
        let delays: Vec<Duration> = delays.into_iter().collect();
        if delays.is_empty() || delays.len() > MAX_SLOTS {
            return Err(InvalidConfig::new("delays", "between 1 and 64 slots"));
        }
        if delays
            .iter()
            .any(|delay| *delay > InvalidConfig::MAX_DURATION)
        {
            return Err(InvalidConfig::new(
                "delays",
                "a delay above InvalidConfig::MAX_DURATION",
            ));
        }
        Ok(Self {
            delays,
            jitter: 0.2,
            sequence: SlotSequence::PRESET,
            attempt_timeout: Self::ATTEMPT_TIMEOUT,
            seed: 0,
        })
    }

    /// Spreads each delay over `[1 − jitter, 1 + jitter]` of itself (0.2 by default).
    pub fn jitter(mut self, jitter: f64) -> Result<Self, InvalidConfig> {
        InvalidConfig::ensure_in_range("jitter", jitter, 0.0, 1.0)?;
        self.jitter = jitter;
        Ok(self)
    }

    /// Each slot's sequence through the retry layer.
    pub fn sequence(mut self, sequence: SlotSequence) -> Result<Self, InvalidConfig> {
        if sequence.max_attempts == 0 {
            return Err(InvalidConfig::new("max_attempts", "zero"));
        }
        InvalidConfig::ensure_positive_duration("deadline", sequence.deadline)?;
        self.sequence = sequence;
        Ok(self)
    }

    /// How long one attempt may wait for its answer (10 s by default, within the 3–10 s that
    /// webhook senders give a receiver): a receiver that never answers costs its delivery this
    /// long, then the slot has failed and the delivery moves on to its next slot.
    ///
    /// Put it under the retry layer, as tower's `TimeoutLayer`
    /// (`.timeout(schedule.attempt_timeout_duration())`), so that each attempt is cut at it. The
    /// worker bounds each slot too, whatever the stack: a slot's call is cut at its
    /// [deadline](SlotSequence::deadline) (the pacer's queue included) plus one attempt timeout
    /// (at most the deadline), and counts as a failed slot.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Result<Self, InvalidConfig> {
        InvalidConfig::ensure_positive_duration("attempt_timeout", timeout)?;
        self.attempt_timeout = timeout;
        Ok(self)
    }

    /// The per-attempt timeout ([`attempt_timeout`](Self::attempt_timeout)).
    pub fn attempt_timeout_duration(&self) -> Duration {
        self.attempt_timeout
    }

    /// How long the worker lets one slot's call run before it cuts it: the slot's deadline (its
    /// wait in the pacer's queue) plus one attempt timeout, at most the deadline.
    pub fn slot_limit(&self) -> Duration {
        self.sequence
            .deadline
            .saturating_add(self.attempt_timeout.min(self.sequence.deadline))
    }

    /// Mixes `seed` into every delivery's stream: tests and simulations that want other draws.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The same schedule with every delay multiplied by `factor`: hours become seconds for a
    /// test or a demo.
    ///
    /// What does not scale is kept as production has it: the per-attempt timeout (a receiver
    /// answers no faster in a test), and the slot deadline, scaled but never under one second
    /// (nor over itself). The engines keep due times in whole seconds: a deadline under a second
    /// would hand a delivery the pacer holds back to the engine, for a due time the engine rounds
    /// up, again and again (a churn of deferrals).
    pub fn scaled(mut self, factor: f64) -> Self {
        for delay in &mut self.delays {
            *delay = delay.mul_f64(factor);
        }
        let floor = self.sequence.deadline.min(Duration::from_secs(1));
        self.sequence.deadline = self.sequence.deadline.mul_f64(factor).max(floor);
        self
    }

    /// The number of slots.
    pub fn len(&self) -> usize {
        self.delays.len()
    }

    /// Whether the schedule has no slot (never: a schedule is built with at least one).
    pub fn is_empty(&self) -> bool {
        self.delays.is_empty()
    }

    /// Slot `slot`'s delay before jitter, or `None` past the last slot.
    pub fn delay(&self, slot: u32) -> Option<Duration> {
        self.delays.get(slot as usize).copied()
    }

    /// The delays added up: how long a delivery can stay undelivered before its last slot.
    pub fn total(&self) -> Duration {
        self.delays.iter().sum()
    }

    /// When a delivery stored at `stored` has had its schedule's whole span: the delays added
    /// up, each at the top of its jitter. No slot of it is due later (however the pacer delayed
    /// its slots), and a delivery the pacer still holds back then is dead-lettered.
    pub fn end(&self, stored: SystemTime) -> SystemTime {
        stored + self.total().mul_f64(1.0 + self.jitter)
    }

    /// The spread of each delay.
    pub fn jitter_fraction(&self) -> f64 {
        self.jitter
    }

    /// Each slot's sequence.
    pub fn slot_sequence(&self) -> SlotSequence {
        self.sequence
    }

    /// When slot `slot` of delivery `id` is due, the previous slot having started at `previous`:
    /// the delay jittered from the delivery's own stream, or `None` past the last slot.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use tower_http_retry_redelivery::Schedule;
    ///
    /// let schedule = Schedule::standard_webhooks();
    /// let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    /// let due = schedule.due("msg_1", 3, start).unwrap();
    /// let delay = due.duration_since(start).unwrap();
    /// assert!(Duration::from_secs(24 * 60) <= delay && delay <= Duration::from_secs(36 * 60));
    /// assert_eq!(schedule.due("msg_1", 3, start), Some(due)); // the same draw every time
    /// assert_eq!(schedule.due("msg_1", 8, start), None); // past the last slot
    /// ```
    pub fn due(&self, id: &str, slot: u32, previous: SystemTime) -> Option<SystemTime> {
        let delay = self.delay(slot)?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (id, slot, self.seed).hash(&mut hasher);
        let mut stream = rand::rngs::StdRng::seed_from_u64(hasher.finish());
        let spread = 1.0 + self.jitter * (2.0 * stream.random::<f64>() - 1.0);
        Some(previous + delay.mul_f64(spread))
    }

    /// The retry layer a worker sends deliveries through, as this schedule's sequences want it:
    /// [`max_attempts`](SlotSequence::max_attempts), the slot's deadline, every request
    /// repeatable (the delivery id lets the receiver deduplicate), endpoint pacing on
    /// ([`pacing`](Self::pacing)), and new requests the pacer will not let through soon handed
    /// back unsent ([`fail_unsent`](tower_http_retry::retry::RetryLayerBuilder::fail_unsent)).
    /// For a fleet store or other rates, give it
    /// `.pacing(schedule.pacing().store(store).build()?)` before building.
    pub fn retry_layer(&self) -> FailUnsentBuilder {
        let pacing = self.pacing().build().expect("the preset pacing is valid");
        RetryLayer::builder()
            .max_attempts(self.sequence.max_attempts)
            .deadline(self.sequence.deadline)
            .idempotency(Idempotency::Any)
            .pacing(pacing)
            .fail_unsent()
    }

    /// The endpoint pacing of [`retry_layer`](Self::retry_layer): the defaults, and no delivery
    /// kept in an endpoint's queue for longer than [`MAX_QUEUE_WAIT`] (one predicted to wait
    /// longer is stored again at the pacer's time). A worker holds few deliveries at once: one
    /// that waited its slot's deadline in the queue of an endpoint that is down held a worker's
    /// place all that time, and a healthy endpoint's deliveries behind a dead one's backlog
    /// were never reached (none of 200 in 60 s behind 5,000, 4 workers holding 10 each).
    pub fn pacing(&self) -> PacingBuilder {
        Pacing::builder().max_queue_wait(MAX_QUEUE_WAIT)
    }
}

/// The longest a delivery waits in an endpoint's queue in the worker's hands
/// ([`Schedule::pacing`]): about two probe intervals of the pacer's defaults.
pub const MAX_QUEUE_WAIT: Duration = Duration::from_secs(1);

/// The most slots a schedule may have.
const MAX_SLOTS: usize = 64;

/// Unix milliseconds of `time` (0 before the epoch).
pub(crate) fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| {
        since.as_millis().min(u128::from(u64::MAX)) as u64
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_days_adds_up_to_three_days() {
        let schedule = Schedule::three_days();
        assert_eq!(schedule.delay(0), Some(Duration::ZERO));
        assert_eq!(schedule.delay(1), Some(Duration::from_secs(60)));
        assert_eq!(
            schedule.delay(schedule.len() as u32 - 1),
            Some(Duration::from_secs(12 * HOUR))
        );
        let total = schedule.total();
        assert!(
            total >= Duration::from_secs(72 * HOUR) && total < Duration::from_secs(84 * HOUR),
            "{total:?}"
        );
    }

    #[test]
    fn draws_stay_within_the_jitter_and_differ_between_deliveries() {
        let schedule = Schedule::standard_webhooks();
        let start = UNIX_EPOCH + Duration::from_secs(1 << 30);
        let mut delays = Vec::new();
        for n in 0..1000 {
            let due = schedule.due(&format!("msg_{n}"), 6, start).unwrap();
            let delay = due.duration_since(start).unwrap().as_secs_f64() / (10.0 * HOUR as f64);
            assert!((0.8..=1.2).contains(&delay), "{delay}");
            delays.push(delay);
        }
        let mean = delays.iter().sum::<f64>() / 1000.0;
        assert!((0.98..1.02).contains(&mean), "{mean}");
        let below = delays.iter().filter(|d| **d < 0.9).count();
        assert!((200..300).contains(&below), "a quarter below 0.9: {below}");
        let other = Schedule::standard_webhooks().seed(7);
        assert_ne!(
            other.due("msg_0", 6, start),
            schedule.due("msg_0", 6, start)
        );
    }

    #[test]
    fn invalid_schedules_fail_when_built() {
        assert!(Schedule::from_delays([]).is_err());
        assert!(Schedule::standard_webhooks().jitter(1.5).is_err());
        let none = SlotSequence {
            max_attempts: 0,
            deadline: Duration::from_secs(1),
        };
        assert!(Schedule::standard_webhooks().sequence(none).is_err());
        assert!(Schedule::exponential(
            Duration::ZERO,
            Duration::from_secs(1),
            Duration::from_secs(9)
        )
        .is_err());
        assert!(Schedule::exponential(
            Duration::from_millis(1),
            Duration::from_millis(1),
            Duration::from_secs(1)
        )
        .is_err());
        assert!(Schedule::standard_webhooks().retry_layer().build().is_ok());
        assert!(Schedule::standard_webhooks()
            .attempt_timeout(Duration::ZERO)
            .is_err());
    }

    #[test]
    fn a_scaled_schedule_keeps_what_does_not_scale() {
        let fast = Schedule::standard_webhooks().scaled(1.0 / 1800.0);
        assert_eq!(
            fast.delay(1),
            Some(Duration::from_secs(5).mul_f64(1.0 / 1800.0))
        );
        assert_eq!(fast.slot_sequence().deadline, Duration::from_secs(1));
        assert_eq!(fast.attempt_timeout_duration(), Duration::from_secs(10));
        assert_eq!(fast.slot_limit(), Duration::from_secs(2));
        let half = Schedule::standard_webhooks().scaled(0.5);
        assert_eq!(half.slot_sequence().deadline, Duration::from_secs(15));
        assert_eq!(half.slot_limit(), Duration::from_secs(25));
        let short = SlotSequence {
            max_attempts: 1,
            deadline: Duration::from_millis(300),
        };
        let short = Schedule::standard_webhooks().sequence(short).unwrap();
        assert_eq!(
            short.scaled(0.001).slot_sequence().deadline,
            Duration::from_millis(300),
            "never over itself"
        );
    }
}

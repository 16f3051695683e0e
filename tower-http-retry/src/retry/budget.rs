//! The retry budget: a token bucket shared by every clone of a layer (the user-facing text is on
//! the public item below).

use super::stats::Counters;
use crate::error::{in_range, InvalidConfig};
use crate::sync::atomic::{AtomicU64, Ordering};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A policy that decides whether a retry may be made.
///
/// Implementations are shared by every clone of a [`RetryLayer`](crate::RetryLayer) through an
/// `Arc` and called from many tasks at once.
pub trait RetryBudget: Send + Sync + fmt::Debug {
    /// A request succeeded: earn credit for later retries.
    fn deposit(&self);

    /// A retry is about to sleep: spend credit for it, or return `false` to forbid it.
    fn withdraw(&self) -> bool;

    /// A withdrawn retry was abandoned before it was sent (its sleep was aborted or its future
    /// dropped): give the credit back. The default does nothing.
    fn refund(&self) {}
}

impl<T: RetryBudget + ?Sized> RetryBudget for Arc<T> {
    fn deposit(&self) {
        (**self).deposit();
    }
    fn withdraw(&self) -> bool {
        (**self).withdraw()
    }
    fn refund(&self) {
        (**self).refund();
    }
}

/// tower's budget works here too; it cannot give credit back, so `refund` does nothing.
impl RetryBudget for tower::retry::budget::TpsBudget {
    fn deposit(&self) {
        tower::retry::budget::Budget::deposit(self);
    }
    fn withdraw(&self) -> bool {
        tower::retry::budget::Budget::withdraw(self)
    }
}

/// The shortest interval the time-based refill is credited for.
const REFILL_GRANULARITY_NANOS: u64 = 1_000_000;

/// One token, in the fixed-point unit the bucket counts in.
const MICROS_PER_TOKEN: f64 = 1_000_000.0;

/// A lock-free token-bucket [`RetryBudget`].
///
/// Backoff spreads *when* retries arrive; a budget bounds *how many* arrive. Every success
/// deposits a fraction of a token, every retry withdraws a whole one, and a steady refill keeps a
/// floor of retries per second for clients with little traffic. When the bucket is empty the
/// request is not retried: its last response or error is returned at once, without sleeping.
/// During an outage that turns "every request times `max_attempts`" into "every request, plus
/// 20 %", which is the difference between an endpoint that recovers and one that is held down.
///
/// The bucket is lock-free: a deposit and a withdrawal are one compare-and-swap loop each on an
/// `AtomicU64` of micro-tokens, and the time-based refill is claimed by whoever advances a second
/// atomic timestamp.
///
/// ```
/// use tower_http_retry::retry::{RetryBudget, TokenBucket};
///
/// // 2 retries of burst, 0.5 token per success, no time-based refill.
/// let bucket = TokenBucket::builder()
///     .capacity(2.0)
///     .deposit_per_success(0.5)
///     .refill_per_second(0.0)
///     .build()
///     .unwrap();
/// assert!(bucket.withdraw());
/// assert!(bucket.withdraw());
/// assert!(!bucket.withdraw()); // empty: no retry
/// bucket.deposit();
/// bucket.deposit();
/// assert!(bucket.withdraw()); // two successes paid for one retry
/// ```
pub struct TokenBucket {
    /// Micro-tokens available, in `[0, capacity]`.
    tokens: AtomicU64,
    /// Nanoseconds after `origin` up to which the time-based refill has been credited.
    refilled_until: AtomicU64,
    origin: Instant,
    capacity: u64,
    retry_cost: u64,
    deposit: u64,
    refill_per_second: u64,
}

impl TokenBucket {
    /// A builder starting from the defaults: capacity 100, retry cost 1, 0.2 per success,
    /// 10 per second.
    pub fn builder() -> TokenBucketBuilder {
        TokenBucketBuilder::default()
    }

    /// Tokens currently available (after crediting the time-based refill).
    pub fn available(&self) -> f64 {
        self.refill();
        self.tokens.load(Ordering::Acquire) as f64 / MICROS_PER_TOKEN
    }

    /// The most tokens the bucket holds.
    pub fn capacity(&self) -> f64 {
        self.capacity as f64 / MICROS_PER_TOKEN
    }

    fn add(&self, amount: u64) {
        if amount == 0 {
            return;
        }
        let _ = self
            .tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tokens| {
                Some(tokens.saturating_add(amount).min(self.capacity))
            });
    }

    /// Credits the refill earned since the last credit.
    fn refill(&self) {
        if self.refill_per_second == 0 {
            // No clock read when there is nothing to credit.
            return;
        }
        self.refill_at(nanos(self.origin.elapsed()));
    }

    /// Credits the refill earned up to `now`, in nanoseconds after `origin`. Whoever moves
    /// `refilled_until` forward adds exactly the tokens for the interval it claimed, so concurrent
    /// callers never credit the same time twice. Claim and credit are two steps: a withdrawal in
    /// between finds the time claimed but not its tokens, and may be refused although the tokens
    /// arrive a moment later (`loom-model/tests/loom.rs`). Takes `now` so that a model can fix the time.
    fn refill_at(&self, now: u64) {
        let since = self.refilled_until.load(Ordering::Acquire);
        if now.saturating_sub(since) < REFILL_GRANULARITY_NANOS {
            // At most one claim per millisecond: under load every withdrawal would otherwise also
            // write `refilled_until` and `tokens`. The unclaimed time is credited later.
            return;
        }
        let earned = u128::from(now - since) * u128::from(self.refill_per_second) / 1_000_000_000;
        if earned == 0 {
            // Leave the interval unclaimed so that short gaps add up instead of rounding to zero.
            return;
        }
        if self
            .refilled_until
            .compare_exchange(since, now, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.add(u64::try_from(earned).unwrap_or(u64::MAX));
        }
    }

    /// Withdraws one retry's cost if the bucket holds it, without crediting the refill first.
    fn take(&self) -> bool {
        self.tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tokens| {
                tokens.checked_sub(self.retry_cost)
            })
            .is_ok()
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Entry points with the time given rather than read, for the loom model in `loom-model/tests/loom.rs`
/// (built only with `--cfg tower_http_retry_loom` and the `loom` feature): a model replays its
/// threads many times, and each replay must see the same times. Not part of the API.
#[cfg(all(tower_http_retry_loom, feature = "loom"))]
#[doc(hidden)]
impl TokenBucket {
    /// [`RetryBudget::withdraw`] at `elapsed` after the bucket was built.
    pub fn loom_withdraw_at(&self, elapsed: Duration) -> bool {
        self.refill_at(nanos(elapsed));
        self.take()
    }

    /// The time-based refill alone, at `elapsed` after the bucket was built.
    pub fn loom_refill_at(&self, elapsed: Duration) {
        self.refill_at(nanos(elapsed));
    }

    /// Micro-tokens available, without crediting the refill.
    pub fn loom_micro_tokens(&self) -> u64 {
        self.tokens.load(Ordering::Acquire)
    }
}

impl RetryBudget for TokenBucket {
    fn deposit(&self) {
        // The success path of every request: a full bucket (the normal state of healthy
        // traffic) costs one load, no write to the shared cache line, no clock read.
        if self.tokens.load(Ordering::Relaxed) >= self.capacity {
            return;
        }
        self.add(self.deposit);
    }

    fn withdraw(&self) -> bool {
        self.refill();
        self.take()
    }

    fn refund(&self) {
        self.add(self.retry_cost);
    }
}

/// For code written against tower's retry budgets.
impl tower::retry::budget::Budget for TokenBucket {
    fn deposit(&self) {
        RetryBudget::deposit(self);
    }
    fn withdraw(&self) -> bool {
        RetryBudget::withdraw(self)
    }
}

impl Default for TokenBucket {
    fn default() -> Self {
        TokenBucketBuilder::default()
            .build()
            .expect("the default token bucket is valid")
    }
}

impl fmt::Debug for TokenBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBucket")
            .field("available", &self.available())
            .field("capacity", &self.capacity())
            .field("retry_cost", &(self.retry_cost as f64 / MICROS_PER_TOKEN))
            .field("deposit", &(self.deposit as f64 / MICROS_PER_TOKEN))
            .field(
                "refill_per_second",
                &(self.refill_per_second as f64 / MICROS_PER_TOKEN),
            )
            .finish()
    }
}

/// Configures a [`TokenBucket`]; [`build`](TokenBucketBuilder::build) checks the values.
#[derive(Clone, Copy, Debug, PartialEq)]
#[must_use]
pub struct TokenBucketBuilder {
    capacity: f64,
    retry_cost: f64,
    deposit_per_success: f64,
    refill_per_second: f64,
}

impl Default for TokenBucketBuilder {
    /// Capacity 100, retry cost 1, 0.2 per success, 10 per second: retries add at most about
    /// 20 % to the load, plus 10 per second, with a burst of 100. The bucket starts full.
    fn default() -> Self {
        Self {
            capacity: 100.0,
            retry_cost: 1.0,
            deposit_per_success: 0.2,
            refill_per_second: 10.0,
        }
    }
}

impl TokenBucketBuilder {
    /// The most tokens the bucket holds (and starts with): the largest burst of retries.
    pub fn capacity(mut self, tokens: f64) -> Self {
        self.capacity = tokens;
        self
    }

    /// Tokens one retry withdraws.
    pub fn retry_cost(mut self, tokens: f64) -> Self {
        self.retry_cost = tokens;
        self
    }

    /// Tokens one success deposits. With a retry cost of 1, this is the fraction of extra load
    /// retries may add.
    pub fn deposit_per_success(mut self, tokens: f64) -> Self {
        self.deposit_per_success = tokens;
        self
    }

    /// Tokens added per second whatever the traffic: the floor of retries per second for a
    /// client with few successes. 0 turns the refill off.
    pub fn refill_per_second(mut self, tokens: f64) -> Self {
        self.refill_per_second = tokens;
        self
    }

    /// Checks the values and builds the bucket, full.
    ///
    /// Fails when a value is negative, not finite or above 10^9, when the capacity is zero, when
    /// a deposit or refill is positive but below one micro-token (the unit the bucket counts in),
    /// or when a retry costs nothing or more than the capacity (it could never be paid).
    pub fn build(self) -> Result<TokenBucket, InvalidConfig> {
        const MAX: f64 = 1e9;
        in_range("budget.capacity", self.capacity, 0.0, MAX)?;
        in_range("budget.retry_cost", self.retry_cost, 0.0, MAX)?;
        in_range(
            "budget.deposit_per_success",
            self.deposit_per_success,
            0.0,
            MAX,
        )?;
        in_range("budget.refill_per_second", self.refill_per_second, 0.0, MAX)?;
        let micros = |tokens: f64| (tokens * MICROS_PER_TOKEN).round() as u64;
        let capacity = micros(self.capacity);
        let retry_cost = micros(self.retry_cost);
        if capacity == 0 {
            return Err(InvalidConfig::new(
                "budget.capacity",
                "must be greater than zero",
            ));
        }
        // The bucket counts micro-tokens: a rate that would round to nothing is a mistake.
        for (field, tokens) in [
            ("budget.deposit_per_success", self.deposit_per_success),
            ("budget.refill_per_second", self.refill_per_second),
        ] {
            if tokens > 0.0 && micros(tokens) == 0 {
                return Err(InvalidConfig::new(
                    field,
                    format!("must be 0 or at least 0.000001 (one micro-token), got {tokens}"),
                ));
            }
        }
        if retry_cost == 0 || retry_cost > capacity {
            return Err(InvalidConfig::new(
                "budget.retry_cost",
                format!(
                    "must be greater than zero and at most the capacity ({})",
                    self.capacity
                ),
            ));
        }
        Ok(TokenBucket {
            tokens: AtomicU64::new(capacity),
            refilled_until: AtomicU64::new(0),
            origin: Instant::now(),
            capacity,
            retry_cost,
            deposit: micros(self.deposit_per_success),
            refill_per_second: micros(self.refill_per_second),
        })
    }
}

/// A budget token taken for a retry: spent when the retry is sent, refunded when dropped unsent.
pub(crate) struct Withdrawal {
    budget: Arc<dyn RetryBudget>,
    counters: Counters,
    spent: bool,
}

impl Withdrawal {
    /// Takes a token from `budget`, counting the grant or the denial; `None` when it is empty.
    pub(crate) fn take(budget: &Arc<dyn RetryBudget>, counters: &Counters) -> Option<Self> {
        if !budget.withdraw() {
            counters.budget_denied();
            return None;
        }
        counters.budget_granted();
        Some(Self {
            budget: Arc::clone(budget),
            counters: counters.clone(),
            spent: false,
        })
    }

    /// The retry was sent: the token is not refunded.
    pub(crate) fn spend(mut self) {
        self.spent = true;
    }
}

impl Drop for Withdrawal {
    fn drop(&mut self) {
        if !self.spent {
            self.budget.refund();
            self.counters.budget_refunded();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bucket(capacity: f64, deposit: f64, refill: f64) -> TokenBucket {
        TokenBucket::builder()
            .capacity(capacity)
            .deposit_per_success(deposit)
            .refill_per_second(refill)
            .build()
            .unwrap()
    }

    #[test]
    fn starts_full_and_empties() {
        let b = bucket(3.0, 0.0, 0.0);
        assert!(b.withdraw() && b.withdraw() && b.withdraw());
        assert!(!b.withdraw());
        assert_eq!(b.available(), 0.0);
    }

    #[test]
    fn five_successes_pay_for_one_retry_at_twenty_percent() {
        let b = bucket(1.0, 0.2, 0.0);
        assert!(b.withdraw());
        for _ in 0..4 {
            b.deposit();
            assert!(!b.withdraw());
        }
        b.deposit();
        assert!(b.withdraw());
    }

    #[test]
    fn deposits_stop_at_capacity() {
        let b = bucket(2.0, 0.7, 0.0);
        for _ in 0..100 {
            b.deposit();
        }
        assert_eq!(b.available(), 2.0);
    }

    #[test]
    fn refund_returns_the_token() {
        let b = bucket(1.0, 0.0, 0.0);
        assert!(b.withdraw());
        b.refund();
        assert!(b.withdraw());
    }

    #[tokio::test(start_paused = true)]
    async fn refill_keeps_a_floor_per_second() {
        let b = bucket(5.0, 0.0, 2.0);
        while b.withdraw() {}
        tokio::time::advance(Duration::from_millis(499)).await;
        assert!(!b.withdraw());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(b.withdraw(), "half a second at 2/s earns one token");
        assert!(!b.withdraw());
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert_eq!(b.available(), 5.0, "refill stops at capacity");
    }

    #[tokio::test(start_paused = true)]
    async fn short_gaps_add_up() {
        let b = bucket(5.0, 0.0, 1.0);
        while b.withdraw() {}
        // 1000 gaps of 1 ms each: every gap alone earns 1000 micro-tokens, none is lost.
        for _ in 0..1000 {
            tokio::time::advance(Duration::from_millis(1)).await;
            let _ = b.available();
        }
        assert!(b.withdraw());
    }

    #[test]
    fn validation_names_the_field() {
        let field = |builder: TokenBucketBuilder| builder.build().unwrap_err().field();
        assert_eq!(
            field(TokenBucket::builder().capacity(0.0)),
            "budget.capacity"
        );
        assert_eq!(
            field(TokenBucket::builder().capacity(f64::NAN)),
            "budget.capacity"
        );
        assert_eq!(
            field(TokenBucket::builder().retry_cost(0.0)),
            "budget.retry_cost"
        );
        assert_eq!(
            field(TokenBucket::builder().retry_cost(101.0)),
            "budget.retry_cost"
        );
        assert_eq!(
            field(TokenBucket::builder().deposit_per_success(-1.0)),
            "budget.deposit_per_success"
        );
        assert_eq!(
            field(TokenBucket::builder().refill_per_second(f64::INFINITY)),
            "budget.refill_per_second"
        );
        assert_eq!(
            field(TokenBucket::builder().deposit_per_success(1e-9)),
            "budget.deposit_per_success"
        );
        assert_eq!(
            field(TokenBucket::builder().refill_per_second(1e-7)),
            "budget.refill_per_second"
        );
    }

    #[test]
    fn concurrent_withdrawals_never_overspend() {
        let b = Arc::new(bucket(1000.0, 0.0, 0.0));
        let granted: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..1000).filter(|_| b.withdraw()).count()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(granted, 1000);
        assert_eq!(b.available(), 0.0);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Deposit,
        Withdraw,
        Refund,
    }

    proptest! {
        #[test]
        fn tokens_stay_within_zero_and_capacity(
            capacity in 1u64..50,
            deposit_micros in 0u64..3_000_000,
            ops in proptest::collection::vec(
                prop_oneof![Just(Op::Deposit), Just(Op::Withdraw), Just(Op::Refund)], 0..200),
        ) {
            // The model counts micro-tokens exactly, as the bucket does.
            let cap = capacity * 1_000_000;
            let b = bucket(capacity as f64, deposit_micros as f64 / MICROS_PER_TOKEN, 0.0);
            let mut model = cap;
            for op in ops {
                match op {
                    Op::Deposit => { b.deposit(); model = (model + deposit_micros).min(cap); }
                    Op::Refund => { b.refund(); model = (model + 1_000_000).min(cap); }
                    Op::Withdraw => {
                        let granted = b.withdraw();
                        prop_assert_eq!(granted, model >= 1_000_000);
                        if granted { model -= 1_000_000; }
                    }
                }
                let available = b.tokens.load(Ordering::Acquire);
                prop_assert!(available <= cap);
                prop_assert_eq!(available, model);
            }
        }
    }
}

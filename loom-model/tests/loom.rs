//! A model check of the token bucket's atomics with [loom]: interleavings of two or three threads
//! down to single atomic steps, and the values each load may return under the bucket's memory
//! orderings.
//!
//! The core's `tests/reliability/budget.rs` runs every order of whole operations; here each operation is
//! split into its atomic steps (the load and compare-and-swap of every update, the relaxed load
//! before a deposit, the refill claim inside a withdrawal).
//!
//! ```text
//! RUSTFLAGS="--cfg tower_http_retry_loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p loom-model --release --test loom
//! ```
//!
//! The cfg swaps the crate's atomics for loom's and the feature brings loom in; the flags rebuild
//! every dependency, hence the separate target directory.
//!
//! Models of two threads with short programs are exhaustive. The others bound the preemptions
//! per execution (2 or 3, given with each model); unbounded, each of them ran for more than two
//! minutes. `LOOM_MAX_PREEMPTIONS` overrides the bound of every model.
//!
//! Each model collects the outcomes of all its executions and compares the set with the one
//! expected, both ways: an unexpected outcome is a bug in the bucket, a missing one means loom did
//! not reach an interleaving the test is about. Loom's partial-order reduction can skip
//! interleavings when a thread's first access to an atomic is a load (tokio-rs/loom#166, #392),
//! and every operation of the bucket starts with one: a model that deposited on loom's main
//! thread ran a single execution. So every operation runs on a spawned thread, and the
//! comparison shows that the interleavings that matter were reached.
//!
//! Levels are in micro-tokens, the unit the bucket counts in. A level is a `u64`, so a bucket that
//! went below zero would wrap and show up as a level above the capacity.
//!
//! [loom]: https://docs.rs/loom
#![cfg(tower_http_retry_loom)]

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::Mutex;
use std::time::Duration;
use tower_http_retry::retry::RetryBudget;
use tower_http_retry::retry::TokenBucket;

const MICROS: u64 = 1_000_000;
/// A retry costs one token.
const COST: u64 = MICROS;
/// A success deposits half a token.
const DEPOSIT: u64 = MICROS / 2;

fn bucket(capacity: u64, refill_per_second: f64) -> TokenBucket {
    TokenBucket::builder()
        .capacity(capacity as f64)
        .retry_cost(1.0)
        .deposit_per_success(0.5)
        .refill_per_second(refill_per_second)
        .build()
        .unwrap()
}

/// Runs `model` under loom with at most `preemptions` preemptions per execution (`None`: all
/// executions), and returns the set of outcomes its executions returned.
fn outcomes<T>(
    preemptions: Option<usize>,
    model: impl Fn() -> T + Sync + Send + 'static,
) -> BTreeSet<T>
where
    T: Ord + Send + 'static,
{
    let seen = std::sync::Arc::new(Mutex::new(BTreeSet::new()));
    let collected = std::sync::Arc::clone(&seen);
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = preemptions;
    }
    builder.check(move || {
        let outcome = model();
        collected.lock().unwrap().insert(outcome);
    });
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    seen
}

fn set<T: Ord + Clone>(items: &[T]) -> BTreeSet<T> {
    items.iter().cloned().collect()
}

fn assert_outcomes<T: Ord + Debug>(found: BTreeSet<T>, expected: BTreeSet<T>) {
    let unexpected: Vec<_> = found.difference(&expected).collect();
    let missed: Vec<_> = expected.difference(&found).collect();
    assert!(
        unexpected.is_empty() && missed.is_empty(),
        "unexpected outcomes (a bug): {unexpected:?}; outcomes loom did not reach: {missed:?}"
    );
}

// ----- Deposit, withdraw and refund (the refill off): linearizable -----

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Withdraw,
    Deposit,
    /// Refunds the thread's last withdrawal if it was granted, as the retry layer does when a
    /// sleep is aborted.
    GiveBack,
}
use Op::{Deposit, GiveBack, Withdraw};

/// What each thread's withdrawals returned, and the level at the end.
type Outcome = (Vec<Vec<bool>>, u64);

/// A bucket of `capacity` whole tokens holding `level`.
struct Start {
    capacity: u64,
    level: u64,
}

/// Every outcome of every order of whole operations, on a plain integer: the specification.
fn sequential_outcomes(start: &Start, threads: &[&[Op]]) -> BTreeSet<Outcome> {
    fn step(
        start: &Start,
        threads: &[&[Op]],
        next: &mut Vec<usize>,
        results: &mut Vec<Vec<bool>>,
        level: u64,
        out: &mut BTreeSet<Outcome>,
    ) {
        let capacity = start.capacity * MICROS;
        let mut done = true;
        for t in 0..threads.len() {
            let Some(&op) = threads[t].get(next[t]) else {
                continue;
            };
            done = false;
            let after = match op {
                Withdraw => {
                    results[t].push(level >= COST);
                    if level >= COST {
                        level - COST
                    } else {
                        level
                    }
                }
                Deposit => (level + DEPOSIT).min(capacity),
                GiveBack if results[t].last() == Some(&true) => (level + COST).min(capacity),
                GiveBack => level,
            };
            next[t] += 1;
            step(start, threads, next, results, after, out);
            next[t] -= 1;
            if op == Withdraw {
                results[t].pop();
            }
        }
        if done {
            out.insert((results.clone(), level));
        }
    }
    let mut out = BTreeSet::new();
    let (mut next, mut results) = (vec![0; threads.len()], vec![Vec::new(); threads.len()]);
    step(
        start,
        threads,
        &mut next,
        &mut results,
        start.level * MICROS,
        &mut out,
    );
    out
}

/// Runs one thread's program; checks the bounds after every operation.
fn run(bucket: &TokenBucket, program: &[Op], capacity: u64) -> (Vec<bool>, u64, u64) {
    let (mut results, mut granted, mut came_in) = (Vec::new(), 0, 0);
    for op in program {
        match op {
            Withdraw => {
                let ok = bucket.withdraw();
                results.push(ok);
                granted += u64::from(ok);
            }
            Deposit => {
                bucket.deposit();
                came_in += DEPOSIT;
            }
            GiveBack => {
                if results.last() == Some(&true) {
                    bucket.refund();
                    came_in += COST;
                }
            }
        }
        assert!(bucket.loom_micro_tokens() <= capacity);
    }
    (results, granted, came_in)
}

/// The threads' programs on one bucket under loom, every operation on a thread of its own
/// (nothing on the model's main thread, which would run first). Checks that no token is created
/// (and, when nothing can reach the capacity, that none is lost) and returns the outcomes.
fn concurrent_outcomes(
    start: Start,
    threads: &'static [&'static [Op]],
    preemptions: Option<usize>,
) -> BTreeSet<Outcome> {
    outcomes(preemptions, move || {
        let capacity = start.capacity * MICROS;
        let initial = start.level * MICROS;
        let bucket = Arc::new(bucket(start.capacity, 0.0));
        while bucket.loom_micro_tokens() > initial {
            assert!(bucket.withdraw());
        }
        let handles: Vec<_> = threads
            .iter()
            .map(|program| {
                let bucket = Arc::clone(&bucket);
                thread::spawn(move || run(&bucket, program, capacity))
            })
            .collect();
        let (mut results, mut granted, mut came_in) = (Vec::new(), 0, 0);
        for handle in handles {
            let (r, g, c) = handle.join().unwrap();
            results.push(r);
            granted += g;
            came_in += c;
        }
        let level = bucket.loom_micro_tokens();
        assert!(level <= capacity);
        assert!(
            granted * COST + level <= initial + came_in,
            "a token created"
        );
        if initial + came_in <= capacity {
            assert_eq!(granted * COST + level, initial + came_in, "a token lost");
        }
        (results, level)
    })
}

fn check_against_sequential(
    start: Start,
    threads: &'static [&'static [Op]],
    preemptions: Option<usize>,
) {
    let expected = sequential_outcomes(&start, threads);
    assert_outcomes(concurrent_outcomes(start, threads, preemptions), expected);
}

#[test]
fn concurrent_withdrawals_grant_exactly_the_tokens_held() {
    check_against_sequential(
        Start {
            capacity: 3,
            level: 2,
        },
        &[&[Withdraw], &[Withdraw], &[Withdraw]],
        Some(3),
    );
}

#[test]
fn a_refund_restores_exactly_the_token_withdrawn() {
    // Below the capacity nothing is clamped: every micro-token is accounted for.
    check_against_sequential(
        Start {
            capacity: 10,
            level: 1,
        },
        &[&[Withdraw, GiveBack], &[Withdraw, Deposit, Deposit]],
        None,
    );
}

#[test]
fn deposits_and_withdrawals_from_three_threads_match_some_order_of_whole_operations() {
    check_against_sequential(
        Start {
            capacity: 10,
            level: 0,
        },
        &[&[Deposit, Deposit], &[Withdraw], &[Deposit, Withdraw]],
        Some(3),
    );
}

#[test]
fn at_the_capacity_deposits_and_refunds_are_clamped_and_the_level_stays_in_bounds() {
    check_against_sequential(
        Start {
            capacity: 2,
            level: 2,
        },
        &[&[Withdraw, GiveBack], &[Deposit, Withdraw], &[Deposit]],
        Some(3),
    );
}

/// `deposit` skips its compare-and-swap when a relaxed load finds the bucket full: racing a
/// withdrawal, the deposit counts or is clamped away, as if before or after it.
#[test]
fn a_deposit_racing_a_withdrawal_on_a_full_bucket_is_clamped_or_kept() {
    check_against_sequential(
        Start {
            capacity: 2,
            level: 2,
        },
        &[&[Withdraw], &[Deposit]],
        None,
    );
}

/// The shortcut's load is relaxed, yet a deposit made after a withdrawal it knows of (here
/// through a release/acquire flag; in the retry layer through a channel or a task join) sees the
/// withdrawal and is not skipped.
#[test]
fn a_deposit_after_a_known_withdrawal_is_not_lost_to_the_full_bucket_shortcut() {
    let found = outcomes(None, || {
        let bucket = Arc::new(bucket(2, 0.0));
        let withdrawn = Arc::new(AtomicBool::new(false));
        let withdrawer = {
            let (bucket, withdrawn) = (Arc::clone(&bucket), Arc::clone(&withdrawn));
            thread::spawn(move || {
                assert!(bucket.withdraw());
                withdrawn.store(true, Ordering::Release);
            })
        };
        let depositor = {
            let (bucket, withdrawn) = (Arc::clone(&bucket), Arc::clone(&withdrawn));
            thread::spawn(move || {
                let after = withdrawn.load(Ordering::Acquire);
                if after {
                    bucket.deposit();
                    assert_eq!(bucket.loom_micro_tokens(), 2 * MICROS - COST + DEPOSIT);
                }
                after
            })
        };
        withdrawer.join().unwrap();
        depositor.join().unwrap()
    });
    assert_outcomes(found, set(&[false, true]));
}

// ----- The time-based refill -----

/// 1000 tokens per second is one micro-token per nanosecond: every claimed interval earns an exact
/// number of micro-tokens, so however the time is cut into claims, the refill up to `t` adds
/// exactly `t` worth.
const ONE_PER_MS: f64 = 1000.0;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// An empty bucket of 10 tokens refilled at one token per millisecond, its clock at 0.
fn empty_refilling_bucket() -> Arc<TokenBucket> {
    let bucket = Arc::new(bucket(10, ONE_PER_MS));
    while bucket.loom_withdraw_at(Duration::ZERO) {}
    assert_eq!(bucket.loom_micro_tokens(), 0);
    bucket
}

/// Two withdrawals at 3 ms race for the claim of [0, 3 ms]: it is credited once (3 tokens, not
/// 6). The loser of the claim may find the tokens not added yet and be refused, although in any
/// order of whole operations both would be granted: the bucket is not linearizable here. The
/// token is not lost, only available a moment later; and both are never refused.
#[test]
fn an_interval_is_credited_once_and_a_withdrawal_racing_its_claim_may_be_refused() {
    let found = outcomes(None, || {
        let bucket = empty_refilling_bucket();
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let bucket = Arc::clone(&bucket);
                thread::spawn(move || bucket.loom_withdraw_at(ms(3)))
            })
            .collect();
        let granted: Vec<bool> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let total = granted.iter().filter(|g| **g).count() as u64;
        assert_eq!(bucket.loom_micro_tokens() + total * COST, 3 * MICROS);
        granted
    });
    assert_outcomes(
        found,
        set(&[vec![true, true], vec![true, false], vec![false, true]]),
    );
}

/// A refill claim alone racing a withdrawal at the same time: the same window, and the token
/// stays in the bucket when the withdrawal is refused.
#[test]
fn a_withdrawal_racing_a_refill_claim_may_be_refused_but_the_token_stays() {
    let found = outcomes(None, || {
        let bucket = empty_refilling_bucket();
        let refiller = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || bucket.loom_refill_at(ms(1)))
        };
        let withdrawer = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || bucket.loom_withdraw_at(ms(1)))
        };
        refiller.join().unwrap();
        let granted = withdrawer.join().unwrap();
        assert_eq!(
            bucket.loom_micro_tokens() + u64::from(granted) * COST,
            MICROS
        );
        granted
    });
    assert_outcomes(found, set(&[false, true]));
}

/// Withdrawals at 1, 2 and 3 ms race for the refill claims. A claim that loses to a later one
/// leaves its time to that one; a claim that loses to an earlier one leaves the rest unclaimed
/// for the next caller. After a final refill at 4 ms every millisecond has been credited exactly
/// once, and every grant was paid for. The claim's winner is always granted, so at least one is.
#[test]
fn racing_refill_claims_credit_every_interval_exactly_once() {
    let found = outcomes(Some(2), || {
        let bucket = empty_refilling_bucket();
        let handles: Vec<_> = [1, 2, 3]
            .into_iter()
            .map(|at| {
                let bucket = Arc::clone(&bucket);
                thread::spawn(move || {
                    let granted = bucket.loom_withdraw_at(ms(at));
                    assert!(bucket.loom_micro_tokens() <= 10 * MICROS);
                    u64::from(granted)
                })
            })
            .collect();
        let granted: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        bucket.loom_refill_at(ms(4));
        assert_eq!(bucket.loom_micro_tokens() + granted * COST, 4 * MICROS);
        granted
    });
    // 1: the claim at 3 ms won first, and the others found its tokens not added yet.
    assert_outcomes(found, set(&[1, 2, 3]));
}

/// Everything at once: refill claims, withdrawals, deposits and a refund; nothing reaches the
/// capacity, so once the rest of the refill is credited every micro-token is accounted for.
#[test]
fn refill_deposits_withdrawals_and_refunds_together_account_for_every_token() {
    let found = outcomes(Some(3), || {
        let bucket = empty_refilling_bucket();
        let first = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || {
                let granted = bucket.loom_withdraw_at(ms(1));
                if granted {
                    bucket.refund();
                }
                bucket.deposit();
                granted
            })
        };
        let second = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || {
                let granted = bucket.loom_withdraw_at(ms(2));
                bucket.deposit();
                granted
            })
        };
        let refunded = first.join().unwrap();
        let granted = second.join().unwrap();
        bucket.loom_refill_at(ms(3));
        assert_eq!(
            bucket.loom_micro_tokens() + (u64::from(refunded) + u64::from(granted)) * COST,
            3 * MICROS + 2 * DEPOSIT + u64::from(refunded) * COST
        );
        (refunded, granted)
    });
    // Either is refused when it finds the other's claim made but its tokens not added yet (or,
    // for the second, when it lost the claim to the first); never both.
    assert_outcomes(found, set(&[(true, true), (false, true), (true, false)]));
}

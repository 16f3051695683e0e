//! The token bucket under concurrency: every interleaving of a few operations from two or three
//! logical threads, and a stress test on real threads.
//!
//! With the time-based refill off, `withdraw`, `deposit` and `refund` are each a single atomic
//! read-modify-write (one compare-and-swap loop on one `AtomicU64`; `withdraw`'s refill check
//! returns before touching memory). Each operation therefore takes effect at one instant, its
//! successful CAS, and any concurrent run is equivalent to some order of whole operations that
//! keeps each thread's own order. Running every such order on the real bucket, one operation at
//! a time, covers every outcome a concurrent run can have. (With the refill on, `withdraw` is two
//! atomic steps, a refill claim and the withdrawal; the interleavings between them are exercised
//! only by the stress test.)

use std::sync::Arc;
use std::time::Instant;
use tower_http_retry::retry::RetryBudget;
use tower_http_retry::retry::TokenBucket;

const MICROS: u64 = 1_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Withdraw,
    Deposit,
    Refund,
}

const OPS: [Op; 3] = [Op::Withdraw, Op::Deposit, Op::Refund];

/// Capacity 2 tokens, a retry costs 1, a success deposits 0.5: small enough that a few
/// operations reach both ends.
const CAPACITY: u64 = 2 * MICROS;
const COST: u64 = MICROS;
const DEPOSIT: u64 = MICROS / 2;

fn small_bucket() -> TokenBucket {
    TokenBucket::builder()
        .capacity(2.0)
        .retry_cost(1.0)
        .deposit_per_success(0.5)
        .refill_per_second(0.0)
        .build()
        .unwrap()
}

fn micros(bucket: &TokenBucket) -> u64 {
    (bucket.available() * MICROS as f64).round() as u64
}

/// Every program of `len` operations.
fn programs(len: usize) -> Vec<Vec<Op>> {
    (0..len).fold(vec![Vec::new()], |programs, _| {
        programs
            .iter()
            .flat_map(|p| {
                OPS.iter().map(move |op| {
                    let mut longer = p.clone();
                    longer.push(*op);
                    longer
                })
            })
            .collect()
    })
}

/// Every order of the threads' operations that keeps each thread's own order, as the sequence of
/// thread indices to step.
fn interleavings(lengths: &[usize]) -> Vec<Vec<usize>> {
    fn extend(left: &mut Vec<usize>, prefix: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if left.iter().all(|n| *n == 0) {
            out.push(prefix.clone());
            return;
        }
        for thread in 0..left.len() {
            if left[thread] > 0 {
                left[thread] -= 1;
                prefix.push(thread);
                extend(left, prefix, out);
                prefix.pop();
                left[thread] += 1;
            }
        }
    }
    let mut out = Vec::new();
    extend(&mut lengths.to_vec(), &mut Vec::new(), &mut out);
    out
}

/// What the interleaving runs did.
#[derive(Default)]
struct Explored {
    schedules: u64,
    steps: u64,
    denials: u64,
    clamped: u64,
}

/// Runs every interleaving of `threads` on a fresh bucket drained by `drained` withdrawals first,
/// checking the invariants after every step against an exact model.
fn explore(threads: &[Vec<Op>], drained: u64, explored: &mut Explored) {
    let lengths: Vec<usize> = threads.iter().map(Vec::len).collect();
    for schedule in interleavings(&lengths) {
        let bucket = small_bucket();
        for _ in 0..drained {
            assert!(bucket.withdraw());
        }
        let initial = CAPACITY - drained * COST;
        let (mut model, mut next) = (initial, vec![0; threads.len()]);
        let (mut granted, mut deposits, mut refunds) = (0u64, 0u64, 0u64);
        for thread in schedule {
            let op = threads[thread][next[thread]];
            next[thread] += 1;
            match op {
                Op::Withdraw => {
                    let ok = bucket.withdraw();
                    assert_eq!(ok, model >= COST, "{threads:?}");
                    if ok {
                        model -= COST;
                        granted += 1;
                    } else {
                        explored.denials += 1;
                    }
                }
                Op::Deposit => {
                    bucket.deposit();
                    explored.clamped += u64::from(model + DEPOSIT > CAPACITY);
                    model = (model + DEPOSIT).min(CAPACITY);
                    deposits += 1;
                }
                Op::Refund => {
                    bucket.refund();
                    explored.clamped += u64::from(model + COST > CAPACITY);
                    model = (model + COST).min(CAPACITY);
                    refunds += 1;
                }
            }
            let level = micros(&bucket);
            assert!(level <= CAPACITY, "{level} above capacity");
            assert_eq!(level, model);
            // Granted withdrawals are paid for by what was there and what came in.
            assert!(granted * COST + level <= initial + deposits * DEPOSIT + refunds * COST);
            explored.steps += 1;
        }
        explored.schedules += 1;
    }
}

/// Runs every interleaving of every combination of `threads` programs of `ops` operations each,
/// from every start level (full, one token, empty).
fn explore_all(threads: u32, ops: usize) -> Explored {
    let programs = programs(ops);
    // Every choice of one program per thread: the counter `choice` in base `programs.len()`.
    let combinations = programs.len().pow(threads);
    let mut explored = Explored::default();
    for drained in 0..=2 {
        for choice in 0..combinations {
            let mut rest = choice;
            let chosen: Vec<Vec<Op>> = (0..threads)
                .map(|_| {
                    let program = programs[rest % programs.len()].clone();
                    rest /= programs.len();
                    program
                })
                .collect();
            explore(&chosen, drained, &mut explored);
        }
    }
    assert!(
        explored.denials > 0 && explored.clamped > 0,
        "both ends reached"
    );
    explored
}

#[test]
fn every_interleaving_of_two_threads_keeps_the_bucket_consistent() {
    let explored = explore_all(2, 3);
    // 3 start levels x 27^2 programs x C(6, 3) orders, 6 steps each.
    assert_eq!(explored.schedules, 3 * 27 * 27 * 20);
    assert_eq!(explored.steps, explored.schedules * 6);
}

#[test]
fn every_interleaving_of_three_threads_keeps_the_bucket_consistent() {
    let explored = explore_all(3, 2);
    // 3 start levels x 9^3 programs x 6!/(2! 2! 2!) orders, 6 steps each.
    assert_eq!(explored.schedules, 3 * 729 * 90);
    assert_eq!(explored.steps, explored.schedules * 6);
}

/// A small, seedable generator (xorshift64*), one per thread.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

const THREADS: u64 = 4;
const OPS_PER_THREAD: u64 = 100_000;

/// What one stress thread did and saw.
#[derive(Clone, Copy, Default)]
struct Tally {
    granted: u64,
    denied: u64,
    deposits: u64,
    refunds: u64,
    saw_empty: bool,
    saw_full: bool,
}

/// Runs `THREADS` threads of `OPS_PER_THREAD` operations on `bucket`. Each thread withdraws,
/// deposits, or refunds one of its own outstanding withdrawals (as the retry layer does), and
/// checks after every operation that the level is within `[0, capacity]`.
fn stress(bucket: &Arc<TokenBucket>, deposit_weight: u64) -> Tally {
    let capacity = bucket.capacity();
    let tallies: Vec<Tally> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|seed| {
                let bucket = Arc::clone(bucket);
                scope.spawn(move || {
                    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (seed + 1));
                    let (mut tally, mut outstanding) = (Tally::default(), 0u64);
                    for _ in 0..OPS_PER_THREAD {
                        let roll = rng.below(10);
                        if roll < deposit_weight {
                            bucket.deposit();
                            tally.deposits += 1;
                        } else if roll < 7 || outstanding == 0 {
                            if bucket.withdraw() {
                                tally.granted += 1;
                                outstanding += 1;
                            } else {
                                tally.denied += 1;
                            }
                        } else {
                            bucket.refund();
                            tally.refunds += 1;
                            outstanding -= 1;
                        }
                        let level = bucket.available();
                        assert!((0.0..=capacity).contains(&level), "level {level}");
                        tally.saw_empty |= level < 1.0;
                        tally.saw_full |= level == capacity;
                    }
                    tally
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    tallies.iter().fold(Tally::default(), |sum, t| Tally {
        granted: sum.granted + t.granted,
        denied: sum.denied + t.denied,
        deposits: sum.deposits + t.deposits,
        refunds: sum.refunds + t.refunds,
        saw_empty: sum.saw_empty || t.saw_empty,
        saw_full: sum.saw_full || t.saw_full,
    })
}

fn bucket(capacity: f64, deposit: f64, refill: f64) -> Arc<TokenBucket> {
    let bucket = TokenBucket::builder()
        .capacity(capacity)
        .deposit_per_success(deposit)
        .refill_per_second(refill)
        .build()
        .unwrap();
    Arc::new(bucket)
}

#[test]
fn threads_withdrawing_and_refunding_account_for_every_token_exactly() {
    let bucket = bucket(100.0, 0.0, 0.0);
    let tally = stress(&bucket, 0);
    assert_eq!(
        tally.granted + tally.denied + tally.refunds,
        THREADS * OPS_PER_THREAD
    );
    // Refunds only return outstanding withdrawals, so nothing is ever clamped: exact.
    assert_eq!(
        bucket.available(),
        100.0 - (tally.granted - tally.refunds) as f64
    );
    assert!(tally.saw_empty && tally.denied > 0, "the bucket ran dry");
}

#[test]
fn threads_with_deposits_never_withdraw_more_than_came_in() {
    let bucket = bucket(50.0, 0.2, 0.0);
    let tally = stress(&bucket, 3);
    // In micro-tokens: what was granted plus what is left never exceeds the start plus every
    // deposit and refund (deposits lost to the capacity make it an inequality).
    let granted = tally.granted * MICROS + micros(&bucket);
    let came_in = 50 * MICROS + tally.deposits * (MICROS / 5) + tally.refunds * MICROS;
    assert!(granted <= came_in, "{granted} > {came_in}");
    assert!(tally.saw_empty && tally.saw_full, "both ends reached");
}

#[test]
fn threads_with_the_refill_on_stay_within_the_bounds() {
    let started = Instant::now();
    let bucket = bucket(20.0, 0.1, 100_000.0);
    let tally = stress(&bucket, 3);
    let elapsed = started.elapsed().as_secs_f64();
    let granted = tally.granted as f64 + bucket.available();
    let came_in = 20.0 + tally.deposits as f64 * 0.1 + tally.refunds as f64 + 100_000.0 * elapsed;
    assert!(granted <= came_in + 1e-6, "{granted} > {came_in}");
}

//! One shared retry budget under contention: deposit + withdraw from 1, 2 and 8 threads.
//!
//! Compares this crate's lock-free `TokenBucket` with `tower::retry::budget::TpsBudget`, which
//! locks a mutex on every operation. Both are set so that each deposit pays for exactly one
//! withdrawal, so both operations keep writing (a budget that has run dry only reads). The
//! throughput is in deposit + withdraw pairs per second, summed over all threads. On a 2-core
//! machine the 8-thread rows measure contention and preemption, not parallelism.
//!
//! Run: `cargo bench --all-features --bench budget`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};
use tower::retry::budget::TpsBudget;
use tower_http_retry::retry::{RetryBudget, TokenBucket};

const THREADS: [u64; 3] = [1, 2, 8];

/// Each of `threads` threads runs `pairs` deposit + withdraw pairs on `budget`, started together.
fn contend(budget: &dyn RetryBudget, threads: u64, pairs: u64) -> Duration {
    let start_line = Barrier::new(threads as usize + 1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    start_line.wait();
                    let mut granted = 0u64;
                    for _ in 0..pairs {
                        budget.deposit();
                        granted += u64::from(budget.withdraw());
                    }
                    black_box(granted)
                })
            })
            .collect();
        start_line.wait();
        let started = Instant::now();
        for worker in workers {
            worker.join().expect("a bench thread panicked");
        }
        started.elapsed()
    })
}

fn budget(c: &mut Criterion) {
    // One retry per success; the default floor of 10 per second is kept so that `withdraw` reads
    // the clock, as it does in production.
    let ours = TokenBucket::builder()
        .deposit_per_success(1.0)
        .build()
        .expect("a valid bucket");
    let tower = TpsBudget::new(Duration::from_secs(10), 10, 1.0);
    let budgets: [(&str, &dyn RetryBudget); 2] = [("token_bucket", &ours), ("tps_budget", &tower)];

    let mut group = c.benchmark_group("budget");
    for threads in THREADS {
        group.throughput(Throughput::Elements(threads));
        for (name, budget) in budgets {
            group.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, &threads| {
                b.iter_custom(|pairs| contend(budget, threads, pairs));
            });
        }
    }
    group.finish();
}

criterion_group!(benches, budget);
criterion_main!(benches);

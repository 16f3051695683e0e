//! Ours against the server with a knee on the wall clock, run after run: each run the no-load
//! row (no limit, offered half the knee) and ours, 30 s each, and ours' attempt p99 against
//! the no-load p99 (target 1.5×). `cargo run --release -p herd --example knee_live_repeat -- 5`
//! runs 5 (about 5 minutes); `knee_live` gives every row once.

use herd::knee::{quantile, run_knee_live, Knee, Limiter};

fn main() {
    let knee = Knee::harness();
    let runs: usize = std::env::args()
        .nth(1)
        .map_or(5, |n| n.parse().expect("the number of runs"));
    println!(
        "| run | no-load p99 | ours: attempt p99 | × the no-load p99 (target ≤ 1.5×) | share of the knee \
         | attempts over 1.5× | limit once settled: min / median / max |\n\
         |---|---|---|---|---|---|---|"
    );
    let ms = |latency: std::time::Duration| latency.as_secs_f64() * 1e3;
    for run in 1..=runs {
        let no_load = run_knee_live(&knee.no_load(), Limiter::None, 1);
        let ours = run_knee_live(&knee, Limiter::Adaptive, 1);
        let no_load_p99 = quantile(&no_load.attempt_latency, 0.99);
        let p99 = quantile(&ours.attempt_latency, 0.99);
        let ratio = p99.as_secs_f64() / no_load_p99.as_secs_f64();
        let over = ours
            .attempt_latency
            .iter()
            .filter(|latency| latency.as_secs_f64() > 1.5 * no_load_p99.as_secs_f64())
            .count();
        println!(
            "| {run} | {:.1} ms | {:.1} ms | {ratio:.2}×: {} | {:.1} % | {:.2} % | {} |",
            ms(no_load_p99),
            ms(p99),
            if ratio <= 1.5 { "met" } else { "missed" },
            100.0 * ours.delivered_per_second(&knee) / knee.measured_knee(&no_load),
            100.0 * over as f64 / ours.attempt_latency.len() as f64,
            ours.limits_settled(),
        );
    }
}

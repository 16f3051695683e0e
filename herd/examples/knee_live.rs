//! The server with a knee on the wall clock, every row in one run, the bench-only peers
//! (tower-acc, tower-resilience) among them: they time their requests with
//! `std::time::Instant`, so the paused clock of `--example herd` would show them no latency.
//! About 8 minutes (8 rows of 30 s, then 6 of 35 s with the load ramped past the knee and
//! back); prints the sections docs/pacing.md quotes. Wall-clock figures vary with the machine
//! and its load: compare rows of one run only.

use herd::knee::{ramp, report, run_knee_live, Knee, Limiter};

fn main() -> Result<(), std::fmt::Error> {
    let knee = Knee::harness();
    let rows = [
        Limiter::None,
        Limiter::Fixed(knee.workers),
        Limiter::AccGradient2,
        Limiter::AccVegas,
        Limiter::ResilienceVegas,
        Limiter::Adaptive,
    ];
    let mut runs = 0;
    let steady = report(&knee, &rows, run_knee_live, WHY, &mut runs)?;
    print!("{}", steady.markdown);
    let ramp = ramp::Ramp::harness();
    let ramped = ramp::report(
        &knee,
        ramp,
        &rows,
        run_knee_live,
        steady.knee,
        RAMP_WHY,
        &mut runs,
    )?;
    print!("\n{ramped}");
    Ok(())
}

const WHY: &str = "On the wall clock tokio's timers round each 5-ms service up (the no-load \
    row's p50), so the knee is below the nominal 1,600 a second (the load offered stays 2,400 a \
    second) and each share is of the knee so measured: compare rows of one run. A timeout below \
    each limiter is an error it sees (a latency sample for ours), not a dropped future.\n";

/// What the ramped rows show on the wall clock.
const RAMP_WHY: &str = "The same rows on the wall clock, the peers among them: each peer sheds \
    what its limit refuses and the retry layer above retries the shed attempts, as in the steady \
    table.\n";

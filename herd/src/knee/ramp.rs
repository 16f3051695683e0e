//! The load ramping past the knee and back: whether what a limiter learned while the server
//! was overloaded lets the load through again once it is back under the knee.

use super::{Knee, KneeRun, Limiter, BUCKET};
use std::fmt::Write as _;
use std::time::Duration;

/// Load that rises in a straight line from `low` to the model's `offered` over `rise`, holds it
/// for `hold`, falls back to `low` over `fall` and stays there for `tail`.
#[derive(Clone, Copy, Debug)]
pub struct Ramp {
    /// The load at the start and the end, as a multiple of the capacity.
    pub low: f64,
    /// How long the load takes to rise.
    pub rise: Duration,
    /// How long it stays at the top.
    pub hold: Duration,
    /// How long it takes to fall.
    pub fall: Duration,
    /// How long it stays low after the fall.
    pub tail: Duration,
}

/// Of each 100 ms's requests, the share delivered that counts as full throughput.
const FULL: f64 = 0.99;

impl Ramp {
    /// From half the knee to the top in 10 s, 10 s there, back to half in 10 s, 5 s more.
    pub fn harness() -> Self {
        Self {
            low: 0.5,
            rise: Duration::from_secs(10),
            hold: Duration::from_secs(10),
            fall: Duration::from_secs(10),
            tail: Duration::from_secs(5),
        }
    }

    /// The whole run.
    pub fn length(&self) -> Duration {
        self.rise + self.hold + self.fall + self.tail
    }

    /// The load `elapsed` into the run with `top` at the top.
    pub fn offered_at(&self, top: f64, elapsed: Duration) -> f64 {
        let line = |from: f64, to: f64, share: f64| from + (to - from) * share.clamp(0.0, 1.0);
        let t = elapsed.as_secs_f64();
        let (rise, hold) = (self.rise.as_secs_f64(), self.hold.as_secs_f64());
        if t < rise + hold {
            line(self.low, top, t / rise)
        } else {
            line(top, self.low, (t - rise - hold) / self.fall.as_secs_f64())
        }
    }

    /// When the load crosses `knee` (a multiple of the capacity) going up, and going back down.
    pub fn crossings(&self, top: f64, knee: f64) -> (Duration, Duration) {
        let share = ((knee - self.low) / (top - self.low)).clamp(0.0, 1.0);
        let up = self.rise.mul_f64(share);
        (up, self.rise + self.hold + self.fall.mul_f64(1.0 - share))
    }
}

/// How a run went on each side of the knee.
#[derive(Clone, Copy, Debug)]
pub struct Phases {
    /// Of the requests offered before the load crossed the knee, the share delivered.
    pub before: f64,
    /// Requests delivered a second while the load was over the knee.
    pub over: f64,
    /// Of the requests offered once the load was back under the knee, the share delivered.
    pub after: f64,
    /// From the load's fall under the knee to the end of the last 100 ms after it in which
    /// under 99 % of the requests offered were delivered; `None` when that is the run's last.
    pub reopened: Option<Duration>,
}

impl Phases {
    /// The phases of `run`, whose load crossed the knee going `up` and back `down`
    /// ([`Ramp::crossings`]).
    pub fn of(run: &KneeRun, up: Duration, down: Duration) -> Self {
        // Whole buckets on each side: before the knee ends where the bucket that crosses it
        // begins, after it begins where the one that crosses back ends.
        let buckets = &run.buckets;
        let index = |at: Duration| (at.as_nanos() / BUCKET.as_nanos()) as usize;
        let up = index(up).min(buckets.len());
        let down_index =
            (index(down) + usize::from(down.as_nanos() % BUCKET.as_nanos() > 0)).min(buckets.len());
        let share = |buckets: &[super::Bucket]| {
            let offered: u64 = buckets.iter().map(|b| b.offered).sum();
            let delivered: u64 = buckets.iter().map(|b| b.delivered).sum();
            delivered as f64 / offered.max(1) as f64
        };
        let over = &buckets[up..down_index];
        let after = &buckets[down_index..];
        let short = after
            .iter()
            .rposition(|b| (b.delivered as f64) < FULL * b.offered as f64);
        let reopened = match short {
            _ if after.is_empty() => None,
            Some(last) if last + 1 == after.len() => None,
            Some(last) => Some((BUCKET * (down_index + last + 1) as u32).saturating_sub(down)),
            None => Some(Duration::ZERO),
        };
        Self {
            before: share(&buckets[..up]),
            over: over.iter().map(|b| b.delivered).sum::<u64>() as f64
                / (BUCKET * over.len().max(1) as u32).as_secs_f64(),
            after: share(after),
            reopened,
        }
    }
}

/// The markdown section of `rows` run by `run` (seed 1) on `knee` with its load ramped, the knee
/// at `measured_knee` requests a second (as [`super::report`] measured it on the same clock): each
/// row's deliveries on each side of the knee and how soon after the load's fall under it every
/// 100 ms is delivered again; ours against its target when it is a row; and `why`. Counts each
/// run in `runs`.
pub fn report(
    knee: &Knee,
    ramp: Ramp,
    rows: &[Limiter],
    run: fn(&Knee, Limiter, u64) -> KneeRun,
    measured_knee: f64,
    why: &str,
    runs: &mut usize,
) -> Result<String, std::fmt::Error> {
    let knee = knee.ramped(ramp);
    let (up, down) = ramp.crossings(knee.offered, measured_knee / knee.capacity());
    let secs = |d: Duration| d.as_secs_f64();
    let mut out = String::new();
    writeln!(
        out,
        "### The load past the knee and back\n\nThe same server; the load rises from {}× the \
         nominal knee to {}× in {} s (over the knee measured above, {:.0} a second, from {:.1} s), \
         stays there {} s, falls back to {}× in {} s (under the knee again at {:.1} s) and stays \
         there {} s. \"Full throughput again\": \
         from the load's fall under the knee to the end of the last 100 ms after it in which \
         under {:.0} % of the requests offered were delivered. Seed 1.\n",
        ramp.low,
        knee.offered,
        secs(ramp.rise),
        measured_knee,
        secs(up),
        secs(ramp.hold),
        ramp.low,
        secs(ramp.fall),
        secs(down),
        secs(ramp.tail),
        FULL * 100.0,
    )?;
    writeln!(
        out,
        "| policy | delivered before the knee | delivered/s over the knee | delivered once back \
         under it | full throughput again after | timeouts | retries |\n\
         |---|---|---|---|---|---|---|"
    )?;
    let mut ours = None;
    let after = |phases: &Phases| {
        phases.reopened.map_or_else(
            || "not in the run".to_owned(),
            |d| format!("{:.1} s", secs(d)),
        )
    };
    for &limiter in rows {
        let result = run(&knee, limiter, 1);
        *runs += 1;
        let phases = Phases::of(&result, up, down);
        writeln!(
            out,
            "| {} | {:.1} % | {:.0} | {:.1} % | {} | {} | {} |",
            limiter.label(),
            100.0 * phases.before,
            phases.over,
            100.0 * phases.after,
            after(&phases),
            result.timeouts,
            result.retries,
        )?;
        if limiter == Limiter::Adaptive {
            ours = Some(phases);
        }
    }
    if let Some(ours) = ours {
        let met = ours.reopened.is_some_and(|d| d <= Duration::from_secs(2));
        writeln!(
            out,
            "\n| target for ours | measured | verdict |\n|---|---|---|\n\
             | full throughput within 2 s of the load back under the knee | {} | {} |",
            after(&ours),
            if met { "met" } else { "missed" }
        )?;
    }
    writeln!(out, "\n{why}")?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_rises_holds_and_falls_through_the_knee() {
        let ramp = Ramp::harness();
        let at = |secs: f64| ramp.offered_at(1.5, Duration::from_secs_f64(secs));
        assert_eq!(at(0.0), 0.5);
        assert!((at(5.0) - 1.0).abs() < 1e-9);
        assert_eq!(at(15.0), 1.5);
        assert!((at(25.0) - 1.0).abs() < 1e-9);
        assert_eq!(at(32.0), 0.5);
        assert_eq!(
            ramp.crossings(1.5, 1.0),
            (Duration::from_secs(5), Duration::from_secs(25))
        );
        // A knee at 0.75 of the nominal one: crossed at a quarter of the rise, and of the fall.
        let (up, down) = ramp.crossings(1.5, 0.75);
        assert_eq!(
            (up, down),
            (Duration::from_millis(2500), Duration::from_millis(27500))
        );
        assert_eq!(ramp.length(), Duration::from_secs(35));
    }

    #[test]
    fn full_throughput_counts_from_the_fall_to_the_last_short_bucket() {
        let full = super::super::Bucket {
            offered: 100,
            delivered: 100,
        };
        let short = super::super::Bucket {
            offered: 100,
            delivered: 90,
        };
        let mut run = KneeRun {
            buckets: vec![full; 10],
            ..KneeRun::default()
        };
        run.buckets[6] = short;
        let (up, down) = (Duration::from_millis(200), Duration::from_millis(500));
        let phases = Phases::of(&run, up, down);
        assert_eq!(phases.reopened, Some(Duration::from_millis(200)));
        assert!((phases.after - 0.98).abs() < 1e-9);
        assert_eq!(phases.over, 1000.0);
        run.buckets[9] = short;
        assert_eq!(Phases::of(&run, up, down).reopened, None);
    }
}

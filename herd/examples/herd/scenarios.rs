//! The harness's tighter targets' sections: flapping endpoints, and a deadline with a durable
//! redelivery queue, each judged on the mean of the seeds.

use crate::{mean, optional, SEEDS};
use herd::{spread, Check, Flap, FlapMetrics, Params, Redelivery, RedeliveryMetrics, Row};
use std::fmt::Write as _;
use std::time::Duration;

/// One line of `checks`, each judged on the mean of its seeds.
pub(crate) fn checks_on_mean(title: &str, checks: &[Check]) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    if checks.is_empty() {
        return Ok(out);
    }
    writeln!(out, "{title}:\n")?;
    writeln!(out, "| target | verdict |\n|---|---|")?;
    for check in checks {
        writeln!(out, "| {} | {} |", check.name, check.mean_verdict())?;
    }
    writeln!(out)?;
    Ok(out)
}

/// "mean (min–max)" of one figure over the seeds, with a unit.
fn seeds<M>(metrics: &[M], decimals: usize, unit: &str, f: impl Fn(&M) -> f64) -> String {
    format!(
        "{}{unit}",
        spread(&metrics.iter().map(f).collect::<Vec<_>>(), decimals)
    )
}

/// "mean (min–max) s" of a time that may be missing.
fn seconds<M>(metrics: &[M], f: impl Fn(&M) -> Option<Duration>) -> String {
    optional(
        metrics.iter().map(|m| f(m).map(|d| d.as_secs_f64())),
        1,
        " s",
        "never",
    )
}

/// The flapping endpoints: tables and the tighter targets.
pub(crate) fn flapping(p: &Params, runs: &mut usize) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    writeln!(
        out,
        "## Flapping endpoints (model B after each outage)\n\n\
         **A second outage as the first burst is delivered**: the endpoint is down for {:?}, \
         recovers at capacity, and fails again for {:?} from the instant the last delivery of the \
         first burst completes, when a second burst of {} is sent. Failed retries are counted \
         while each outage lasts; each burst's 99 % from the end of its own outage. \
         **{:?} up / {:?} down**: down first, for {:?}, then up; one burst of {} at t = 0.\n",
        p.outage,
        p.outage,
        p.deliveries,
        herd::FLAP_PERIOD,
        herd::FLAP_PERIOD,
        herd::FLAPPING_FOR,
        p.deliveries
    )?;
    for flap in Flap::ALL {
        writeln!(out, "### {}\n", flap.label())?;
        let mut results = Vec::new();
        for &row in flap.rows() {
            let metrics: Vec<FlapMetrics> = SEEDS
                .iter()
                .map(|&seed| {
                    *runs += 1;
                    FlapMetrics::of(&herd::flap(p, flap, row, seed), p)
                })
                .collect();
            results.push((row, metrics));
        }
        match flap {
            Flap::SecondOutage => writeln!(
                out,
                "| policy | failed retries, first outage | failed retries, second outage | \
                 hits while down, first outage | hits while down, second outage | \
                 first burst 99 %, after its recovery | second burst 99 %, after its recovery | \
                 delivered | total attempts |\n\
                 |---|---:|---:|---:|---:|---:|---:|---:|---:|"
            )?,
            Flap::UpDown => writeln!(
                out,
                "| policy | 99 % delivered (from t = 0) | delivered | failed retries | hits while \
                 down | total attempts |\n|---|---:|---:|---:|---:|---:|"
            )?,
        }
        for (row, m) in &results {
            match flap {
                Flap::SecondOutage => writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    row.label(),
                    seeds(m, 0, "", |m| m.failed_in_outages.0 as f64),
                    seeds(m, 0, "", |m| m.failed_in_outages.1 as f64),
                    seeds(m, 0, "", |m| m.hits_in_outages.0 as f64),
                    seeds(m, 0, "", |m| m.hits_in_outages.1 as f64),
                    seconds(m, |m| m.t99.0),
                    seconds(m, |m| m.t99.1),
                    seeds(m, 2, " %", |m| m.delivered * 100.0),
                    seeds(m, 0, "", |m| m.attempts as f64),
                )?,
                Flap::UpDown => writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} |",
                    row.label(),
                    seconds(m, |m| m.t99.0),
                    seeds(m, 2, " %", |m| m.delivered * 100.0),
                    seeds(m, 0, "", |m| m.failed_retries as f64),
                    seeds(m, 0, "", |m| m.hits_while_down as f64),
                    seeds(m, 0, "", |m| m.attempts as f64),
                )?,
            }
        }
        writeln!(out)?;
        let full = results
            .iter()
            .find(|(row, _)| *row == Row::Full)
            .map_or(0.0, |(_, m)| mean(m, |m| m.failed_retries as f64));
        if let Some((_, pacer)) = results.iter().find(|(row, _)| *row == Row::Pacer) {
            out.push_str(&checks_on_mean(
                "The tighter targets for the pacer (mean of the seeds)",
                &herd::flap_targets(p, pacer, full),
            )?);
        }
    }
    Ok(out)
}

/// The deadline with a durable redelivery queue: a table and the tighter targets.
pub(crate) fn redelivery(p: &Params, runs: &mut usize) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    writeln!(
        out,
        "## A deadline and a durable redelivery queue (model B)\n\n\
         The pacer row with a {:?} deadline and `fail_unsent`, and a durable queue that sends every \
         delivery that did not get through and did not stop for a final reason again at its \
         report's `resend_after` (30 s when it has none), through the same layer, at most {} \
         times; the pacer row without a deadline for reference. \"Hits while down\": attempts \
         that reached the endpoint during the outage. \"First round\": the deliveries sent \
         again once, and the spread of their resend times (latest − earliest), against N / the \
         capacity. \"Inside a known pause\": resend times before the end of a pause the layer \
         knew of when the request stopped (with the outage announced by `Retry-After`, its end; \
         without, no pause is known).\n",
        p.redelivery_deadline, p.max_rounds
    )?;
    writeln!(
        out,
        "| row | hits while down | delivered | 99 % delivered, after recovery | last delivery, \
         after recovery | resends | of which unsent | first round | first round's spread | \
         resend times inside the outage | inside a known pause | dead letters |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )?;
    let mut results = Vec::new();
    for kind in Redelivery::ALL {
        let metrics: Vec<RedeliveryMetrics> = SEEDS
            .iter()
            .map(|&seed| {
                *runs += 1;
                RedeliveryMetrics::of(&herd::redeliver(p, kind, seed), p)
            })
            .collect();
        let m = &metrics;
        writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            kind.label(),
            seeds(m, 0, "", |m| m.hits_while_down as f64),
            seeds(m, 2, " %", |m| m.delivered * 100.0),
            seconds(m, |m| m.t99),
            seconds(m, |m| m.last),
            seeds(m, 0, "", |m| m.resends as f64),
            seeds(m, 0, "", |m| m.unsent as f64),
            seeds(m, 0, "", |m| m.first_round as f64),
            seconds(m, |m| m.first_round_spread),
            seeds(m, 0, "", |m| m.into_outage as f64),
            seeds(m, 0, "", |m| m.inside_known_pause as f64),
            seeds(m, 0, "", |m| m.dead_letters as f64),
        )?;
        results.push((kind, metrics));
    }
    writeln!(out)?;
    let reference = results
        .iter()
        .find(|(kind, _)| *kind == Redelivery::NoDeadline)
        .map_or(0.0, |(_, m)| mean(m, |m| m.hits_while_down as f64));
    for (kind, metrics) in &results {
        if *kind == Redelivery::NoDeadline {
            continue;
        }
        out.push_str(&checks_on_mean(
            &format!(
                "The tighter targets for {} (mean of the seeds)",
                kind.label()
            ),
            &herd::redelivery_targets(p, metrics, reference),
        )?);
    }
    Ok(out)
}

/// The section of a server with a knee, on the paused clock (the peers' rows, on the wall
/// clock, are `--example knee_live`'s).
pub(crate) fn knee(runs: &mut usize) -> Result<String, std::fmt::Error> {
    use herd::knee::{ramp, report, run_knee, Knee, Limiter};
    let knee = Knee::harness();
    let rows = [
        Limiter::None,
        Limiter::Fixed(knee.workers),
        Limiter::Adaptive,
    ];
    let steady = report(&knee, &rows, run_knee, WHY, runs)?;
    let ramp = ramp::Ramp::harness();
    let ramped = ramp::report(&knee, ramp, &rows, run_knee, steady.knee, RAMP_WHY, runs)?;
    Ok(format!("{}{ramped}", steady.markdown))
}

/// What the rows of the load ramped past the knee and back show, on the paused clock.
const RAMP_WHY: &str = "No limit: every attempt that timed out over the knee is still work the \
    server does after its client gave up (about 33 s of its 8 workers' time for 53,511 \
    timeouts), so once the load is back under the knee each request still waits behind that \
    work and times out: none offered after the fall is delivered within the run. tower's fixed \
    limit under the retry layer sheds from 0.8× the knee on, as in the steady table (a shed \
    attempt's semaphore acquire stays queued while it sleeps), and again for 4 s after the fall. \
    Ours keeps the limit it learned over the knee, the 8 the load needs at the knee, and \
    delivers every request offered after the fall. (With probes judged on a whole window, a \
    probe to 9 just after the fall left answers that made the next window look queued: the \
    limit was cut to 7 for a pause, and the load, still 0.98× the knee, lost 13 requests in it, \
    full throughput again after 1.1 s.)\n";

/// Why the knee's rows miss, as measured on the paused clock.
const WHY: &str = "The model's service time is fixed and its workers finish together, so an \
    attempt over the knee waits a whole service time (2× the no-load latency, nothing between): \
    a limit must sit at 8, not above. Ours sets each window's mean latency against the no-load \
    mean (by Little's law a limit L over 8 answers in L / 8 times it on average, where a median \
    stays at the no-load latency until half a window waits) and probes for room one request at \
    a time, undoing a probe that finds a queue and waiting twice as long before the next, up to \
    2 s, and ending a probe once its answers show a queue: the limit is 8, and 9 \
    for a probe's few answers now and then. tower's fixed limit under the retry \
    layer: a shed attempt is retried after its backoff on a service whose semaphore acquire \
    stays queued, and tokio's fair semaphore hands a freed permit to that sleeping request, so \
    permits sit unused (the same stack without retries delivers more). The peers' adaptive \
    limiters time on the wall clock: their rows are `cargo run --release -p herd --example \
    knee_live`'s (docs/pacing.md).\n";

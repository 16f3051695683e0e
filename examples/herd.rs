//! The herd simulation: 10,000 webhooks against an endpoint that is down for 20 s, once per
//! retry policy, through the real `RetryLayer` and, as the peer anchor, `tower::retry`; then
//! fleets of independent senders against the same endpoint, issue 10's targets for every row,
//! and issue 19's: the pacer in B and B+RA, flapping endpoints, a deadline with a durable
//! redelivery queue.
//!
//! ```text
//! cargo run --release --all-features --example herd
//! ```
//!
//! Prints markdown tables (and writes them to `docs/herd.md`), then draws requests and accepted
//! requests per second over time into `docs/herd-a.svg` and `docs/herd-b.svg`. Everything runs on
//! tokio's paused clock against an in-process endpoint, so no socket is opened and every run is
//! reproducible. The endpoint, the rows, the metrics and the targets live in the `herd` crate
//! (`herd/src/lib.rs`, a workspace member), shared with the test that checks the qualitative
//! facts (`cargo test --all-features --test herd`).

use herd::{
    accepted_per_second, delivered_per_process, per_second, spread, Check, Flap, FlapMetrics,
    Metrics, Model, Params, Redelivery, RedeliveryMetrics, Row, Run,
};
use plotters::prelude::*;
use std::error::Error;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tower_http_retry::Jitter;

/// The table shows the mean over these seeds, and the min–max when they differ.
const SEEDS: [u64; 3] = [1, 2, 3];

/// Why rows miss the targets (qualitative, so it does not go stale with the figures; a new
/// row's misses need their own line).
const WHY: &str = "\
## Why rows miss the targets

- **Jittered rows without a budget** (equal, full, decorrelated) finish 99 % about 28 s after \
recovery: the delays drawn before recovery are spread up to the 30-s cap, so the last deliveries \
are still asleep long after the endpoint is back. For the same reason they never load the \
recovered endpoint to half its capacity for long (full jitter never ramps; equal and decorrelated \
reach it briefly early in recovery, then their mean accepted rate falls far below 80 %). They \
meet the overload target because spread arrivals rarely exceed one refill per 10 ms.
- **Budget rows** (ours and tower's) meet the failed-retries and overload targets only because \
they stop retrying: from a cold start the budget allows its burst plus 10 retries per second, so \
almost every delivery gives up during the outage and 99 % is never delivered.
- **Plain exponential and tower's backoff alone** send each wave within one millisecond; a \
capacity smooth at 10 ms admits one refill of it and rejects the rest, so they deliver about 1 % \
in model B with tens of thousands of overload 503s (plain about 18 % in B+RA, where the \
`Retry-After` jitter spreads each wave over 100 ms; tower ignores the header). In model A tower \
meets the 3-s target only when a seed's wave happens to land just after recovery.
- **No backoff** spends its 10 attempts in half a second, inside the outage.
- **The pacer in B+RA** meets its targets: every overload 503 carries `Retry-After: 1`, which \
holds that request for its second and cuts the ramp once, while the endpoint keeps taking the \
others (RFC 9110's reading of `Retry-After`); it no longer pauses the whole endpoint.
- **The pacer in B, against issue 19's overload target (1 % of N)**: the ramp doubles every \
100 ms, and with a 50 ms latency the first loss it sees answers releases made up to an interval \
earlier: the overshoot past capacity costs about 220 rejections (2.2 % of N). Seeing it sooner \
would mean cutting from a partly measured interval.
- **The pacer fleet**: ten pacers that share nothing. In B the totals meet the targets, but \
whichever processes' probes succeed first ramp up first and take more of the capacity in the \
first N/C seconds, so the shares stray further from fair than ±25 %; in B+RA each process cuts \
its own ramp on the hints it gets, and the ten do not share what they learn.
- **1 s up / 1 s down, failed retries**: each of the 30 down seconds begins while the pacer is \
releasing at up to the endpoint's rate; it calls the endpoint down only after a whole 100-ms \
interval with no success (a limit that rejects in runs, as model B's token bucket does, is not \
an outage), and about 200 releases fail in that window each time: 6,000 failed retries, a fifth \
of full jitter's, not a tenth.
- **Redelivery, the spread of the first round's resend times**: the endpoint has never been seen \
taking requests when the first round is deferred, so the pacer predicts a slow start with no \
known limit, and 10,000 places fit in about 1.5 s of it (the target asks for N / capacity, \
5 s). The resends that come back early are paced again (queued, or handed back unsent): none \
reaches the endpoint while it is down, as the hits-while-down target shows.
- **First-attempt gating** changes nothing in these tables: every delivery's first attempt is \
sent at t = 0, before the endpoint is known to be down, so the gated and ungated pacer rows are \
the same run. (It is what keeps the second burst of the flapping row off the endpoint: 232 hits \
during the second outage, against 10,039 during the first.)
- **Fleets**: full jitter is fair across processes but misses model B's targets as the single \
row does; with a budget each process has its own, and the few deliveries each makes in the \
window are too few for a stable share.

";

/// Seconds after recovery at which the per-process table counts deliveries so far.
const CHECKPOINTS: [u64; 5] = [1, 2, 5, 10, 30];

fn main() -> Result<(), Box<dyn Error>> {
    let p = Params::harness();
    let started = std::time::Instant::now();
    let mut runs = 0;
    let mut md = String::new();
    writeln!(md, "# Herd simulation\n")?;
    writeln!(
        md,
        "Generated by `cargo run --release --all-features --example herd`. Each cell is the mean \
         over seeds {SEEDS:?}, with the min–max in brackets when the seeds differ. The \
         \"Targets\" tables are issue 10's (a target is met when every seed meets it); issue 19's \
         are judged on the mean of the seeds, as that issue states them.\n"
    )?;
    writeln!(md, "{}\n", p.describe())?;

    let mut charts = Vec::new();
    let mut full_jitter_run = None;
    // Model A comes first: its full-jitter row is what the failed-retries target is relative to.
    let mut reference = None;
    for model in Model::ALL {
        writeln!(md, "## {}\n", model.label())?;
        let mut results = Vec::new();
        let mut charted = Vec::new();
        for row in Row::ALL {
            let mut metrics = Vec::new();
            for seed in SEEDS {
                let run = herd::run(&p, model, row, seed);
                runs += 1;
                metrics.push(Metrics::of(&run, &p));
                if seed == SEEDS[0] {
                    if Row::CHARTED.contains(&row) {
                        charted.push(series(row, &run));
                    }
                    if model == Model::HardOutage && row == Row::Full {
                        full_jitter_run = Some(run);
                    }
                }
            }
            results.push((row, metrics));
        }
        if model == Model::HardOutage {
            reference = results
                .iter()
                .find(|(row, _)| *row == Row::REFERENCE)
                .map(|(_, metrics)| mean(metrics, |m| m.failed_retries as f64));
        }
        md.push_str(&table(&results, false)?);
        md.push_str(&targets_table(&p, &results, reference)?);
        if let Some((_, pacer)) = results.iter().find(|(row, _)| *row == Row::Pacer) {
            md.push_str(&checks_on_mean(
                "Issue 19's targets for the pacer (mean of the seeds)",
                &herd::targets_19(&p, pacer),
            )?);
        }
        charts.push((model, charted));
    }

    writeln!(
        md,
        "## Fleets: {} processes × {} deliveries\n",
        p.fleet,
        p.deliveries / p.fleet
    )?;
    writeln!(
        md,
        "Each process has its own layer, seed and budget; they share only the endpoint. The \
         totals are over the whole fleet.\n"
    )?;
    for model in Model::FLEET {
        writeln!(md, "### {}\n", model.label())?;
        let mut results = Vec::new();
        let mut first_runs = Vec::new();
        for row in Row::FLEET {
            let mut metrics = Vec::new();
            for seed in SEEDS {
                let run = herd::run_fleet(&p, model, row, seed, p.fleet);
                runs += 1;
                metrics.push(Metrics::of(&run, &p));
                if seed == SEEDS[0] {
                    first_runs.push((row, run));
                }
            }
            results.push((row, metrics));
        }
        md.push_str(&table(&results, true)?);
        md.push_str(&targets_table(&p, &results, reference)?);
        for (row, run) in &first_runs {
            md.push_str(&per_process_table(*row, run, &p)?);
        }
    }

    md.push_str(&flapping(&p, &mut runs)?);
    md.push_str(&redelivery(&p, &mut runs)?);
    md.push_str(WHY);
    writeln!(
        md,
        "Requests and accepted (2xx) requests per second over time (seed {}, log scale): \
         ![model A](herd-a.svg) ![model B](herd-b.svg)\n",
        SEEDS[0]
    )?;
    if let Some(run) = &full_jitter_run {
        md.push_str(&delay_histogram(run, &p)?);
    }
    print!("{md}");
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    std::fs::create_dir_all(&docs)?;
    std::fs::write(docs.join("herd.md"), &md)?;
    draw_charts(&docs, &p, &charts)?;
    eprintln!(
        "{runs} runs of {} deliveries in {:.1?} (wall clock)",
        p.deliveries,
        started.elapsed()
    );
    Ok(())
}

fn mean<M>(metrics: &[M], f: impl Fn(&M) -> f64) -> f64 {
    metrics.iter().map(f).sum::<f64>() / metrics.len() as f64
}

/// One line of `checks`, each judged on the mean of its seeds.
fn checks_on_mean(title: &str, checks: &[Check]) -> Result<String, std::fmt::Error> {
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

/// The flapping endpoints: tables and issue 19's targets.
fn flapping(p: &Params, runs: &mut usize) -> Result<String, std::fmt::Error> {
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
                "Issue 19's targets for the pacer (mean of the seeds)",
                &herd::flap_targets(p, pacer, full),
            )?);
        }
    }
    Ok(out)
}

/// The deadline with a durable redelivery queue: a table and issue 19's targets.
fn redelivery(p: &Params, runs: &mut usize) -> Result<String, std::fmt::Error> {
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
                "Issue 19's targets for {} (mean of the seeds)",
                kind.label()
            ),
            &herd::redelivery_targets(p, metrics, reference),
        )?);
    }
    Ok(out)
}

/// A row's per-second requests and accepted requests at the endpoint.
fn series(row: Row, run: &Run) -> (Row, Vec<u64>, Vec<u64>) {
    (
        row,
        per_second(&run.arrivals),
        accepted_per_second(&run.arrivals),
    )
}

/// One table, a line per row; `fleet` adds the share column.
fn table(results: &[(Row, Vec<Metrics>)], fleet: bool) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    write!(
        out,
        "| policy | peak req/s, outage | peak req/s, recovery | 99 % delivered, after recovery \
         | delivered | failed retries | overload 503s | accepted/s once ramped | total attempts \
         | gave up: budget / attempts |"
    )?;
    if fleet {
        write!(out, " process share of fair, min – max |")?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|{}",
        if fleet { "---:|" } else { "" }
    )?;
    for (row, metrics) in results {
        writeln!(out, "{}", table_row(*row, metrics, fleet))?;
    }
    writeln!(out)?;
    Ok(out)
}

/// One table line: every column as "mean (min–max)" over the seeds.
fn table_row(row: Row, metrics: &[Metrics], fleet: bool) -> String {
    let column = |f: &dyn Fn(&Metrics) -> f64, decimals: usize| {
        spread(&metrics.iter().map(f).collect::<Vec<_>>(), decimals)
    };
    let t99 = optional(
        metrics
            .iter()
            .map(|m| m.t99_after_recovery.map(|t| t.as_secs_f64())),
        1,
        " s",
        "never",
    );
    let accepted = match metrics[0].model {
        Model::HardOutage => "—".to_string(),
        Model::Capacity { .. } => optional(
            metrics.iter().map(|m| m.accepted_rate),
            0,
            "",
            &format!(
                "never ramped, peak {}",
                column(&|m| m.peak_accepted as f64, 0)
            ),
        ),
    };
    let mut line = format!(
        "| {} | {} | {} | {} | {} % | {} | {} | {} | {} | {} / {} |",
        row.label(),
        column(&|m| m.peak_outage as f64, 0),
        column(&|m| m.peak_recovery as f64, 0),
        t99,
        column(&|m| m.delivered * 100.0, 2),
        column(&|m| m.failed_retries as f64, 0),
        column(&|m| m.overload as f64, 0),
        accepted,
        column(&|m| m.attempts as f64, 0),
        column(&|m| m.gave_up.budget as f64, 0),
        column(&|m| m.gave_up.attempts as f64, 0),
    );
    if fleet {
        let low = optional(metrics.iter().map(|m| m.shares.map(|s| s.0)), 2, "", "—");
        let high = optional(metrics.iter().map(|m| m.shares.map(|s| s.1)), 2, "", "—");
        line += &format!(" {low} – {high} |");
    }
    line
}

/// "mean (min–max)" of the values that exist, saying in how many seeds they do not.
fn optional(
    values: impl Iterator<Item = Option<f64>>,
    decimals: usize,
    unit: &str,
    missing: &str,
) -> String {
    let values: Vec<Option<f64>> = values.collect();
    let seen: Vec<f64> = values.iter().flatten().copied().collect();
    match seen.len() {
        0 => missing.to_string(),
        n if n == values.len() => format!("{}{unit}", spread(&seen, decimals)),
        n => format!(
            "{}{unit} ({n} of {} seeds; {missing} in the others)",
            spread(&seen, decimals),
            values.len()
        ),
    }
}

/// Issue 10's targets for every row of a table, met or missed and by how much.
fn targets_table(
    p: &Params,
    results: &[(Row, Vec<Metrics>)],
    reference: Option<f64>,
) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    let checks: Vec<_> = results
        .iter()
        .map(|(row, metrics)| (row, herd::targets(p, metrics, reference)))
        .collect();
    let Some((_, first)) = checks.first() else {
        return Ok(out);
    };
    writeln!(out, "Targets:\n")?;
    write!(out, "| policy |")?;
    for check in first {
        write!(out, " {} |", check.name)?;
    }
    writeln!(out)?;
    writeln!(out, "|---|{}", "---|".repeat(first.len()))?;
    for (row, row_checks) in &checks {
        write!(out, "| {} |", row.label())?;
        for check in row_checks {
            write!(out, " {} |", check.verdict())?;
        }
        writeln!(out)?;
    }
    writeln!(out)?;
    Ok(out)
}

/// A fleet run's deliveries per process over time (first seed).
fn per_process_table(row: Row, run: &Run, p: &Params) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    let recovery = p.outage.as_secs();
    writeln!(
        out,
        "{} × {}, seed {}: deliveries per process completed by recovery + k s, and the share of \
         those completed in [recovery, recovery + N/C] relative to the fair share\n",
        run.processes,
        row.label(),
        SEEDS[0]
    )?;
    write!(out, "| process |")?;
    for k in CHECKPOINTS {
        write!(out, " by +{k} s |")?;
    }
    writeln!(out, " total | share of fair |")?;
    writeln!(out, "|---:|{}", "---:|".repeat(CHECKPOINTS.len() + 2))?;
    let shares = herd::shares(run, p);
    for (process, bins) in delivered_per_process(run).iter().enumerate() {
        write!(out, "| {process} |")?;
        for k in CHECKPOINTS {
            let until = ((recovery + k) as usize).min(bins.len());
            write!(out, " {} |", bins[..until].iter().sum::<u64>())?;
        }
        let share = shares
            .as_ref()
            .map_or("—".to_string(), |s| format!("{:.2}", s[process]));
        writeln!(out, " {} | {share} |", bins.iter().sum::<u64>())?;
    }
    writeln!(out)?;
    Ok(out)
}

/// The realised delays of full jitter (model A, first seed), per retry number: the layer's own
/// histogram, then linear bins of tenths of each retry's bound.
fn delay_histogram(run: &Run, p: &Params) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    let backoff = p.backoff(Jitter::Full);
    writeln!(
        out,
        "## Realised delays of full jitter (model A, seed {})\n",
        SEEDS[0]
    )?;
    writeln!(
        out,
        "From `RetryLayer::stats().delays` (bucket upper bounds, inclusive):\n"
    )?;
    if let Some(stats) = run.stats.first() {
        writeln!(out, "```text\n{}```\n", stats.delays)?;
    }
    writeln!(
        out,
        "From the per-request reports, in tenths of each retry's bound `min(cap, base * 2^(n-1))`: \
         full jitter should be roughly uniform, 10 % per column; a pile-up in the last column \
         would mean delays are cut at the cap instead of drawn below it.\n"
    )?;
    write!(out, "| retry | bound | delays |")?;
    for tenth in 1..=10 {
        write!(out, " ≤{tenth}/10 |")?;
    }
    writeln!(out)?;
    writeln!(out, "|---:|---:|---:|{}", "---:|".repeat(10))?;
    for retry in 1..p.max_attempts {
        let bound = backoff.ceiling(retry - 1);
        let mut bins = [0u64; 10];
        let mut total = 0;
        for d in run.delays.iter().filter(|d| d.retry == retry) {
            let tenth = (d.delay.as_secs_f64() / bound.as_secs_f64() * 10.0) as usize;
            bins[tenth.min(9)] += 1;
            total += 1;
        }
        if total == 0 {
            continue;
        }
        write!(out, "| {retry} | {bound:?} | {total} |")?;
        for count in bins {
            write!(out, " {:.1} % |", count as f64 * 100.0 / total as f64)?;
        }
        writeln!(out)?;
    }
    writeln!(out)?;
    Ok(out)
}

/// Colours that stay the same for a row in every chart.
fn colour(row: Row) -> RGBColor {
    match row {
        Row::Plain => RGBColor(214, 39, 40),
        Row::Tower => RGBColor(255, 127, 14),
        Row::TowerBackoffOnly => RGBColor(140, 86, 75),
        Row::Full => RGBColor(31, 119, 180),
        Row::FullBudget => RGBColor(44, 160, 44),
        Row::DecorrelatedBudget => RGBColor(148, 103, 189),
        Row::Pacer => RGBColor(23, 190, 207),
        _ => RGBColor(127, 127, 127),
    }
}

/// Empty bins are drawn on this floor of the logarithmic axis.
const FLOOR: f64 = 0.7;

/// Per charted row: requests/s and accepted/s.
type Series = Vec<(Row, Vec<u64>, Vec<u64>)>;

fn draw_charts(docs: &Path, p: &Params, charts: &[(Model, Series)]) -> Result<(), Box<dyn Error>> {
    let panel = |model: Model| {
        charts
            .iter()
            .find(|(m, _)| *m == model)
            .map(|(_, series)| (model, series))
            .expect("every model was run")
    };
    let subtitle = format!(
        "{} deliveries at t = 0, endpoint down 0–{} s, {:?} latency; base {:?}, cap {:?}, {} attempts; seed {}",
        p.deliveries,
        p.outage.as_secs(),
        p.latency,
        p.base,
        p.cap,
        p.max_attempts,
        SEEDS[0]
    );
    draw(
        docs.join("herd-a.svg"),
        &format!("Model A: hard outage, then every request succeeds\n{subtitle}"),
        &[panel(Model::HardOutage)],
        p,
    )?;
    draw(
        docs.join("herd-b.svg"),
        &format!(
            "Model B: after the outage a token bucket admits {}/s ({} per {:?}), the rest 503\n{subtitle}",
            p.capacity_per_second,
            p.tokens_per_tick(),
            p.capacity_tick
        ),
        &[
            panel(Model::Capacity { retry_after: false }),
            panel(Model::Capacity { retry_after: true }),
        ],
        p,
    )
}

/// A step line: each 1-s bin is a flat segment over its second.
fn steps(bins: &[u64]) -> Vec<(f64, f64)> {
    bins.iter()
        .enumerate()
        .flat_map(|(t, &count)| {
            let y = (count as f64).max(FLOOR);
            [(t as f64, y), (t as f64 + 1.0, y)]
        })
        .collect()
}

fn draw(
    path: PathBuf,
    title: &str,
    panels: &[(Model, &Series)],
    p: &Params,
) -> Result<(), Box<dyn Error>> {
    let height = 80 + 520 * panels.len() as u32;
    let root = SVGBackend::new(&path, (1100, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (head, body) = root.split_vertically(80);
    for (i, line) in title.lines().enumerate() {
        let size = if i == 0 { 24 } else { 16 };
        head.draw_text(
            line,
            &("sans-serif", size).into_font().color(&BLACK),
            (20, 12 + 32 * i as i32),
        )?;
    }
    let outage = p.outage.as_secs_f64();
    for (area, (model, series)) in body.split_evenly((panels.len(), 1)).iter().zip(panels) {
        let x_max = series
            .iter()
            .map(|(_, requests, _)| requests.len())
            .max()
            .unwrap_or(1) as f64
            + 2.0;
        let y_max = series
            .iter()
            .flat_map(|(_, requests, _)| requests.iter().copied())
            .max()
            .unwrap_or(1) as f64
            * 100.0; // two empty decades on top hold the legend
        let mut chart = ChartBuilder::on(area)
            .caption(model.label(), ("sans-serif", 18))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(75)
            .build_cartesian_2d(0f64..x_max, (FLOOR..y_max).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("virtual time since the deliveries started (s)")
            .y_desc("per second at the endpoint (1-s bins, log scale)")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| {
                if *v < 1.0 {
                    "0".to_string()
                } else {
                    format!("{v:.0}")
                }
            })
            .light_line_style(WHITE)
            .draw()?;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(0.0, FLOOR), (outage, y_max)],
                BLACK.mix(0.08).filled(),
            )))?
            .label(format!("outage (0–{} s)", p.outage.as_secs()))
            .legend(|(x, y)| {
                Rectangle::new([(x, y - 6), (x + 20, y + 6)], BLACK.mix(0.15).filled())
            });
        if matches!(model, Model::Capacity { .. }) {
            let capacity = p.capacity_per_second as f64;
            chart
                .draw_series(LineSeries::new(
                    [(outage, capacity), (x_max, capacity)],
                    BLACK.mix(0.4).stroke_width(1),
                ))?
                .label(format!("capacity ({}/s)", p.capacity_per_second))
                .legend(|(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], BLACK.mix(0.4).stroke_width(1))
                });
        }
        for (row, requests, accepted) in series.iter() {
            // Accepted as a shaded area under the requests line: where every request is accepted
            // the two coincide, and a second line would hide under the first.
            let ok = colour(*row).mix(0.3).filled();
            chart
                .draw_series(
                    accepted
                        .iter()
                        .enumerate()
                        .filter(|(_, &n)| n > 0)
                        .map(|(t, &n)| {
                            Rectangle::new([(t as f64, FLOOR), (t as f64 + 1.0, n as f64)], ok)
                        }),
                )?
                .label(format!("{}: accepted (2xx)", row.label()))
                .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 20, y + 6)], ok));
            let sent = colour(*row).stroke_width(2);
            chart
                .draw_series(LineSeries::new(steps(requests), sent))?
                .label(format!("{}: requests", row.label()))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], sent));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK.mix(0.5))
            .label_font(("sans-serif", 14))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

//! The herd simulation: 10,000 webhooks against an endpoint that is down for 20 s, once per
//! retry policy, through the real `RetryLayer` and, as the peer anchor, `tower::retry`; then
//! fleets of independent senders against the same endpoint, the first targets for every row,
//! and the tighter ones: the pacer in B and B+RA, flapping endpoints, a deadline with a durable
//! redelivery queue.
//!
//! ```text
//! cargo run --release -p herd --example herd
//! ```
//!
//! Prints markdown tables (and writes them to `docs/herd.md`), then draws requests and accepted
//! requests per second over time into `docs/herd-a.svg` and `docs/herd-b.svg`. Everything runs on
//! tokio's paused clock against an in-process endpoint, so no socket is opened and every run is
//! reproducible. The endpoint, the rows, the metrics and the targets live in the `herd` crate
//! (`herd/src/`, a workspace member), shared with the test that checks the qualitative facts
//! (`cargo test -p herd --test herd`). This file prints the tables of one outage and the
//! fleets; `scenarios.rs` the flapping and redelivery sections, `charts.rs` the charts.

mod charts;
mod fleets;
mod scenarios;

use herd::{
    accepted_per_second, delivered_per_process, per_second, spread, Metrics, Model, Params, Row,
    Run,
};
use std::error::Error;
use std::fmt::Write as _;
use std::path::Path;
use tower_http_retry::Jitter;

/// The table shows the mean over these seeds, and the min–max when they differ.
pub(crate) const SEEDS: [u64; 3] = [1, 2, 3];

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
- **The pacer in B, against the tighter overload target (1 % of N)**: slow start doubles every \
100 ms and ends at its first loss event, without waiting for the interval to close, but with a \
50 ms latency that event answers releases made 50 ms earlier, already past capacity: 51-59 \
rejections go there. The rest are the cubic curve's probes past the limit (about 20 each, three \
or four times in the run): a loss event cuts as soon as it is seen, but a probe past the limit \
loses under the 5 % threshold for a while before its losses are one.
- **The pacer fleet**: ten pacers that share nothing. In B the totals meet the targets, but \
whichever processes' probes succeed first ramp up first and take more of the capacity in the \
first N/C seconds, so the shares stray further from fair than ±25 %; in B+RA each process cuts \
its own ramp on the hints it gets, and the ten do not share what they learn.
- **1 s up / 1 s down, failed retries**: each of the 30 down seconds begins while the pacer is \
releasing at up to the endpoint's rate; it calls the endpoint down only after a whole 100-ms \
interval with no success (a limit that rejects in runs, as model B's token bucket does, is not \
an outage), and about 130 releases fail in that window each time: 4,000 failed retries, a \
seventh of full jitter's, not a tenth. A 503 does not say whether the endpoint is gone or its \
limit refuses in runs, so a shorter wait must guess from the times of the successes. Two \
guesses were measured and not kept. Down after twice the longest time between two successes \
in the last two intervals: 2,619 failed retries (met; model B unchanged), but a limit whose share \
halves under a steady stream (runs of 5 refusals after successes 1 ms apart) is then called down \
5 ms after its last success, probed and ramped again from the probe rate. Down after twice the longest run of \
refusals that ended in a success (the limit's own runs): 3,338, and runs that grew more than \
twofold were taken for outages in B and B+RA (overload 131 to 152 and 62 to 84; B+RA's \
accepted/s 1,811 to 1,782, under its target).
- **Redelivery, the spread of the first round's resend times**: the endpoint has never been seen \
taking requests when the first round is deferred, so the pacer predicts a slow start with no \
known limit, and 10,000 places fit in about 1.5 s of it (the target asks for N / capacity, \
5 s). The resends that come back early are paced again (queued, or handed back unsent): none \
reaches the endpoint while it is down, as the hits-while-down target shows.
- **First-attempt gating** changes nothing in these tables: every delivery's first attempt is \
sent at t = 0, before the endpoint is known to be down, so the gated and ungated pacer rows are \
the same run. (It is what keeps the second burst of the flapping row off the endpoint: 147 hits \
during the second outage, against 10,039 during the first.)
- **Fleets**: full jitter is fair across processes but misses model B's targets as the single \
row does; with a budget each process has its own, and the few deliveries each makes in the \
window are too few for a stable share.
- **Fleets with a shared store, overload 503s (1 % of N)**: the fleet ramps and cuts as one \
pacer does, so it pays what one pacer pays in B (the slow start's overshoot before the first \
loss is heard of, then the cubic curve probing past the limit at a loss share under the \
threshold), plus the lag of its reports: a process reports with its next ask, within a ramp \
interval once it saw a loss. At 100 processes (20/s each) the lag is longer and there are more \
overshoots.
- **Fleets with a shared store of 100 processes, 99 % and store calls**: the fleet's cuts are \
made from reports that lag, and each is followed by a stretch below the limit; and a process's \
batch of slots ends where the cubic curve moves the spacing by 5 %, so each of 100 processes at \
20/s takes 2-3 slots a call while the rate grows (0.3 calls a request). Batches granted as a \
schedule that follows the curve (each gap shorter than the one before by a constant step) took \
16 slots a call and halved the calls (0.14 in B, 0.18 in B+RA), but a process holds such a batch \
up to 0.8 s ahead and hears of a cut only when it asks again, so the fleet kept the rate before \
each cut for longer: 19 % and 15 % off fair, 389 and 470 overload 503s, 99 % at 9.3 and 11.3 s \
(8 slots a call: 0.16 and 0.19 calls, 14 % and 10 % off fair); not kept. In model A the \
100 × shared row's calls are those of the ramp to an unlimited rate.
- **Pacers alone, fairness**: each process's probe finds the endpoint back at its own time \
(probes 250-750 ms apart), and its slow start doubles from there: one that starts half a \
second later is 32 times behind, and losses cut every process by the same factor, so the gap \
closes slowly. The additive step in the cubic growth after a loss (about 53/s per second, the \
same for every process: CUBIC's TCP-friendly region) brought B's worst share from 44 % to 26.5 % \
off fair (mean of the seeds); the rest is the probes' stagger.
- **Model A, shares**: every process delivers all its deliveries within N/C of recovery, so the \
share column says nothing there.

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
        "Generated by `cargo run --release -p herd --example herd`. Each cell is the mean \
         over seeds {SEEDS:?}, with the min–max in brackets when the seeds differ. The \
         \"Targets\" tables are the first targets (a target is met when every seed meets it); the tighter \
         are judged on the mean of the seeds, as the targets state them.\n"
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
            md.push_str(&scenarios::checks_on_mean(
                "The tighter targets for the pacer (mean of the seeds)",
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

    md.push_str(&fleets::shared_store(&p, &mut runs)?);
    md.push_str(&scenarios::flapping(&p, &mut runs)?);
    md.push_str(&scenarios::redelivery(&p, &mut runs)?);
    md.push_str(&scenarios::knee(&mut runs)?);
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
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    std::fs::create_dir_all(&docs)?;
    std::fs::write(docs.join("herd.md"), &md)?;
    charts::draw_charts(&docs, &p, &charts)?;
    eprintln!(
        "{runs} runs of {} deliveries in {:.1?} (wall clock)",
        p.deliveries,
        started.elapsed()
    );
    Ok(())
}

pub(crate) fn mean<M>(metrics: &[M], f: impl Fn(&M) -> f64) -> f64 {
    metrics.iter().map(f).sum::<f64>() / metrics.len() as f64
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
    let t99 = t99(metrics);
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
        line += &format!(" {} |", shares(metrics));
    }
    line
}

/// "99 % delivered, after recovery" over the seeds.
pub(crate) fn t99(metrics: &[Metrics]) -> String {
    optional(
        metrics
            .iter()
            .map(|m| m.t99_after_recovery.map(|t| t.as_secs_f64())),
        1,
        " s",
        "never",
    )
}

/// A fleet's smallest and largest share of fair over the seeds, "min – max".
pub(crate) fn shares(metrics: &[Metrics]) -> String {
    let low = optional(metrics.iter().map(|m| m.shares.map(|s| s.0)), 2, "", "—");
    let high = optional(metrics.iter().map(|m| m.shares.map(|s| s.1)), 2, "", "—");
    format!("{low} – {high}")
}

/// "mean (min–max)" of the values that exist, saying in how many seeds they do not.
pub(crate) fn optional(
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

/// The first targets for every row of a table, met or missed and by how much.
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

//! The qualitative facts of the herd simulation's model A (the endpoint fails every request for
//! 20 s, then serves every request), and the mechanics of the endpoint model, the fleets and the
//! targets, at small N on tokio's paused clock. The same simulation at full size prints the
//! tables and draws the charts: `cargo run --release -p herd --example herd`.

mod knee;

use herd::{Arrival, Bound, Check, Metrics, Model, Params, Row, Run};
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tower_http_retry::Jitter;

const SEED: u64 = 7;

/// The harness's parameters (base 1 s, cap 30 s, 10 attempts, both crates' default budgets),
/// with a tenth of the deliveries.
fn params() -> Params {
    Params::harness().with_deliveries(1_000)
}

fn run(row: Row) -> Run {
    herd::run(&params(), Model::HardOutage, row, SEED)
}

fn metrics(row: Row) -> Metrics {
    Metrics::of(&run(row), &params())
}

#[test]
fn plain_backoff_recovery_peak_equals_its_outage_peak() {
    let plain = metrics(Row::Plain);
    assert_eq!(plain.peak_recovery, plain.peak_outage, "{plain:?}");
    assert_eq!(
        plain.peak_recovery,
        params().deliveries as u64,
        "the whole herd arrives within one second"
    );
}

#[test]
fn every_jittered_policy_recovers_with_at_most_half_the_peak_of_plain() {
    let plain = metrics(Row::Plain).peak_recovery;
    for row in Row::ALL.into_iter().filter(|row| row.is_jittered()) {
        let jittered = metrics(row);
        assert!(
            jittered.peak_recovery * 2 <= plain,
            "{row:?}: recovery peak {} against plain's {plain}",
            jittered.peak_recovery
        );
    }
}

/// Failed retries (`Metrics::failed_retries`) are what the budget exists to cut. (First attempts
/// are not retries; no budget can save them.)
#[test]
fn budget_cuts_failed_retries_at_least_tenfold() {
    let (free, budgeted) = (metrics(Row::Full), metrics(Row::FullBudget));
    let (without, with) = (free.failed_retries, budgeted.failed_retries);
    assert!(
        with * 10 <= without,
        "failed retries: {with} with the budget, {without} without"
    );
    assert!(budgeted.wasted < free.wasted);
}

/// Shares of realised delays in each quarter of their retry's bound `min(cap, base * 2^(n-1))`.
fn quarter_shares(run: &Run) -> ([f64; 4], usize) {
    let backoff = params().backoff(Jitter::Full);
    let mut counts = [0usize; 4];
    for d in &run.delays {
        let bound = backoff.ceiling(d.retry - 1).as_secs_f64();
        let quarter = (d.delay.as_secs_f64() / bound * 4.0) as usize;
        counts[quarter.min(3)] += 1;
    }
    let total = counts.iter().sum::<usize>();
    (counts.map(|c| c as f64 / total as f64), total)
}

#[test]
fn budget_keeps_the_full_jitter_delay_profile() {
    let (free, free_n) = quarter_shares(&run(Row::Full));
    let (budgeted, budgeted_n) = quarter_shares(&run(Row::FullBudget));
    assert!(budgeted_n >= 50, "too few retries to compare: {budgeted_n}");
    // The budget decides whether a retry happens, after its delay was drawn, so the granted
    // delays are a sample of the same distribution: every quarter holds about 1/4 in both,
    // within 4 standard errors of the smaller sample.
    let tolerance = 4.0 * (0.25f64 * 0.75 / budgeted_n.min(free_n) as f64).sqrt();
    for q in 0..4 {
        assert!(
            (free[q] - budgeted[q]).abs() <= tolerance,
            "quarter {q}: {:.3} without the budget, {:.3} with ({budgeted_n} delays)",
            free[q],
            budgeted[q]
        );
    }
}

/// The distinct arrival instants of attempt `attempt`, and how many arrivals there were.
fn instants(arrivals: &[Arrival], attempt: u32) -> (HashSet<Duration>, usize) {
    let of_attempt: Vec<Duration> = arrivals
        .iter()
        .filter(|a| a.attempt == attempt)
        .map(|a| a.at)
        .collect();
    (of_attempt.iter().copied().collect(), of_attempt.len())
}

#[test]
fn tower_backoff_sends_every_session_s_retry_at_the_same_instant() {
    let n = params().deliveries;
    let tower = run(Row::TowerBackoffOnly);
    for attempt in 2..=3 {
        let (distinct, count) = instants(&tower.arrivals, attempt);
        assert_eq!(count, n, "every session retried");
        assert_eq!(distinct.len(), 1, "attempt {attempt} of tower's sessions");
    }
    let (ours, count) = instants(&run(Row::Full).arrivals, 2);
    assert_eq!(count, n);
    assert!(ours.len() >= n / 4, "{} distinct instants", ours.len());
}

const MODEL_B: Model = Model::Capacity { retry_after: false };

#[test]
fn capacity_never_admits_more_than_one_refill_per_tick() {
    let p = params();
    let tick = p.capacity_tick.as_nanos();
    for row in [Row::Plain, Row::Equal, Row::Full, Row::TowerBackoffOnly] {
        let mut per_tick: HashMap<u128, u64> = HashMap::new();
        for a in herd::run(&p, MODEL_B, row, SEED)
            .arrivals
            .iter()
            .filter(|a| a.ok)
        {
            *per_tick
                .entry((a.at - p.outage).as_nanos() / tick)
                .or_default() += 1;
        }
        let busiest = per_tick.values().copied().max().unwrap_or(0);
        assert!(
            busiest <= p.capacity_burst,
            "{row:?}: {busiest} in one tick"
        );
    }
}

#[test]
fn synchronised_herd_gets_one_refill_of_successes() {
    let p = params();
    let run = herd::run(&p, MODEL_B, Row::Plain, SEED);
    // Plain backoff's first wave after the outage: every delivery at the same instant.
    let first = run
        .arrivals
        .iter()
        .filter(|a| a.at >= p.outage)
        .map(|a| a.at)
        .min()
        .expect("a wave after the outage");
    let wave: Vec<&Arrival> = run.arrivals.iter().filter(|a| a.at == first).collect();
    assert_eq!(wave.len(), p.deliveries);
    let admitted = wave.iter().filter(|a| a.ok).count() as u64;
    assert_eq!(admitted, p.capacity_burst);
}

#[test]
fn every_delivery_completes_one_latency_after_its_last_attempt() {
    let p = params();
    let run = herd::run(&p, Model::HardOutage, Row::Full, SEED);
    let mut last: HashMap<usize, Duration> = HashMap::new();
    for a in &run.arrivals {
        let at = last.entry(a.delivery).or_default();
        *at = (*at).max(a.at);
    }
    for c in &run.completions {
        assert_eq!(
            c.at,
            last[&c.delivery] + p.latency,
            "delivery {}",
            c.delivery
        );
    }
}

#[test]
fn failed_retries_leave_out_first_attempts() {
    let p = params();
    let m = metrics(Row::NoBackoff);
    let n = p.deliveries as u64;
    assert_eq!(m.wasted, n * u64::from(p.max_attempts));
    assert_eq!(m.failed_retries, n * u64::from(p.max_attempts - 1));
}

#[test]
fn each_fleet_process_sends_its_share_through_its_own_layer() {
    let p = params();
    let run = herd::run_fleet(&p, MODEL_B, Row::FullBudget, SEED, p.fleet);
    assert_eq!(run.stats.len(), p.fleet);
    for (process, stats) in run.stats.iter().enumerate() {
        assert_eq!(
            stats.requests as usize,
            p.deliveries / p.fleet,
            "process {process}"
        );
    }
    for c in &run.completions {
        assert_eq!(c.process, c.delivery % p.fleet);
    }
}

#[test]
fn a_missed_target_reports_its_mean_excess() {
    let check = Check {
        name: "99 % delivered ≤ 3.0 s after recovery".to_string(),
        bound: Bound::AtMost(3.0),
        unit: " s",
        decimals: 1,
        figures: vec![Some(5.0), Some(7.0)],
        missing: "never".to_string(),
    };
    assert_eq!(check.met(), 0);
    assert_eq!(check.verdict(), "missed by 3.0 s: 6.0 (5.0–7.0) s");
}

#[test]
fn the_pacer_delivers_everything_soon_after_recovery_with_a_fraction_of_the_failed_retries() {
    let pacer = metrics(Row::Pacer);
    let full = metrics(Row::Full);
    assert_eq!(pacer.delivered, 1.0, "{pacer:?}");
    assert!(
        pacer.failed_retries * 100 <= full.failed_retries,
        "pacer {} failed retries, full jitter {}",
        pacer.failed_retries,
        full.failed_retries
    );
    let after = pacer.t99_after_recovery.expect("99 % delivered");
    assert!(after <= Duration::from_secs(3), "{after:?} after recovery");
}

#[test]
fn the_pacer_lets_no_more_than_the_probe_rate_reach_a_dead_endpoint() {
    let run = run(Row::Pacer);
    let p = params();
    // After the first attempts' second, and before recovery: probes only (about 2/s).
    let while_down = run
        .arrivals
        .iter()
        .filter(|a| a.at >= Duration::from_secs(1) && a.at < p.outage)
        .count();
    let seconds = p.outage.as_secs() - 1;
    assert!(
        while_down as u64 <= 3 * seconds,
        "{while_down} attempts in {seconds} s of outage"
    );
}

#[test]
fn a_second_outage_as_the_first_burst_completes_costs_the_pacer_no_more_than_the_first() {
    let p = params();
    let m = herd::FlapMetrics::of(
        &herd::flap(&p, herd::Flap::SecondOutage, Row::Pacer, SEED),
        &p,
    );
    let (first, second) = m.failed_in_outages;
    assert!(
        second <= 2 * first.max(1),
        "failed retries: {first} then {second}"
    );
    let (first, second) = m.hits_in_outages;
    assert!(second <= first, "hits while down: {first} then {second}");
    assert_eq!(m.delivered, 1.0, "{m:?}");
}

#[test]
fn an_endpoint_up_and_down_every_second_costs_the_pacer_fewer_failed_retries_than_full_jitter() {
    let p = params();
    let of = |row| herd::FlapMetrics::of(&herd::flap(&p, herd::Flap::UpDown, row, SEED), &p);
    let (pacer, full) = (of(Row::Pacer), of(Row::Full));
    assert!(pacer.delivered >= 0.99, "{pacer:?}");
    assert!(
        pacer.failed_retries * 2 <= full.failed_retries,
        "pacer {} failed retries, full jitter {}",
        pacer.failed_retries,
        full.failed_retries
    );
}

#[test]
fn redelivery_with_a_deadline_reaches_the_dead_endpoint_no_more_than_without() {
    let p = params();
    let of = |kind| herd::RedeliveryMetrics::of(&herd::redeliver(&p, kind, SEED), &p);
    let (free, deadline) = (
        of(herd::Redelivery::NoDeadline),
        of(herd::Redelivery::Deadline),
    );
    assert!(
        deadline.hits_while_down <= free.hits_while_down,
        "{} hits while down with a deadline, {} without",
        deadline.hits_while_down,
        free.hits_while_down
    );
    assert!(
        deadline.unsent > 0,
        "new requests were handed back unsent: {deadline:?}"
    );
    assert_eq!(deadline.delivered, 1.0, "{deadline:?}");
    assert_eq!(free.resends, 0, "without a deadline, nothing is sent again");
}

#[test]
fn resend_times_never_fall_inside_an_announced_outage() {
    let p = params();
    let run = herd::redeliver(&p, herd::Redelivery::AnnouncedDeadline, SEED);
    let m = herd::RedeliveryMetrics::of(&run, &p);
    assert!(m.first_round > 0, "{m:?}");
    assert_eq!(m.inside_known_pause, 0, "{m:?}");
    assert!(m.first_round_spread.is_some_and(|s| s > Duration::ZERO));
}

#[test]
fn a_fleet_on_a_shared_store_probes_a_dead_endpoint_as_one_and_costs_no_call_while_open() {
    let p = params();
    let alone = Metrics::of(&herd::FLEET_ROWS[0].run(&p, MODEL_B, SEED), &p);
    let fleet = herd::FLEET_ROWS
        .iter()
        .find(|f| f.processes == 10 && f.sharing != herd::Sharing::Alone)
        .expect("a row of 10 on a store");
    let run = fleet.run(&p, MODEL_B, SEED);
    let shared = Metrics::of(&run, &p);
    let store = herd::StoreMetrics::of(&run, &p).expect("a store's figures");
    assert_eq!(shared.delivered, 1.0, "{shared:?}");
    // One probe stream (about 2/s) for the fleet; ten alone send ten.
    assert!(shared.retries_while_down <= 3.0, "{shared:?}");
    assert!(alone.retries_while_down >= 15.0, "{alone:?}");
    assert_eq!(store.open.calls, 0, "{store:?}");
    assert!(store.calls > 0, "{store:?}");
}

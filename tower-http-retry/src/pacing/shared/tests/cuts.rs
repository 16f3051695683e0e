//! When the ramp is cut, and from what: a process alone, which knows when each of its requests
//! went, against a fleet's store, which hears outcomes in reports.

use super::*;

/// A process alone, ramping since `now`, that took `accepted` requests in its first interval
/// and lost as many: cut when the interval closes, at the time returned.
fn cut_alone(rules: &Rules<'_>, accepted: u32, now: Nanos) -> (SharedState, Nanos) {
    let mut s = SharedState::new();
    assert!(s.down(rules, now, || 0.5));
    s.outcome(rules, Signal::Success, None, now);
    assert_eq!(s.mode_kind(), PacingMode::Ramping);
    for _ in 0..accepted {
        s.outcome(rules, Signal::Success, None, now);
        s.outcome(rules, Signal::Congestion, None, now);
    }
    let cut_at = now + rules.interval();
    s.advance(rules, true, cut_at);
    (s, cut_at)
}

#[test]
fn after_a_loss_a_small_rate_gains_on_a_large_one_by_the_same_additive_step() {
    // Two processes pacing one endpoint alone, cut by the same loss event from 100/s and
    // 1,000/s (what each took): the cubic curve alone would keep them 10 to 1 for ever.
    let config = config();
    let rules = Rules::alone(&config);
    let (mut small, cut_at) = cut_alone(&rules, 10, 0);
    let (mut large, _) = cut_alone(&rules, 100, 0);
    let beta = config.rate.decrease;
    assert!((small.rate(&rules) - 100.0 * beta).abs() < 1e-6);
    assert!((large.rate(&rules) - 1000.0 * beta).abs() < 1e-6);
    // A second of intervals without a loss, requests waiting all along.
    let regained = cut_at + nanos(Duration::from_secs_f64(config.rate.regain_secs));
    let mut now = cut_at;
    while now < regained {
        now += rules.interval();
        small.advance(&rules, true, now);
        large.advance(&rules, true, now);
    }
    // The large one is back at what it took, on its cubic curve; the small one is past what it
    // took, on the additive line: 70/s plus a second of the step.
    let alpha = config.rate.additive;
    assert!(alpha > 50.0, "{alpha}");
    assert!(
        (large.rate(&rules) - 1000.0).abs() < 1e-3,
        "{}",
        large.rate(&rules)
    );
    let line = 100.0 * beta + alpha * config.rate.regain_secs;
    assert!(
        (small.rate(&rules) - line).abs() < 1e-3,
        "{}",
        small.rate(&rules)
    );
    assert!(large.rate(&rules) / small.rate(&rules) < 10.0 * 0.85);
}

#[test]
fn slow_start_ends_at_its_first_loss_event_without_waiting_for_the_interval_to_close() {
    let config = config();
    let rules = Rules::alone(&config);
    let mut s = SharedState::new();
    assert!(s.down(&rules, 0, || 0.5));
    s.outcome(&rules, Signal::Success, None, 0);
    assert_eq!(s.mode_kind(), PacingMode::Ramping);
    for _ in 0..100 {
        s.outcome(&rules, Signal::Success, None, 50 * MS);
    }
    let sent = s.rate(&rules);
    // Five losses beside 100 successes are under the 5 % threshold; the sixth is over it.
    for _ in 0..5 {
        s.timed_outcome(&rules, Signal::Congestion, 60 * MS);
    }
    assert_eq!(s.rate(&rules), sent, "no loss event yet");
    assert!(s.timed_outcome(&rules, Signal::Congestion, 60 * MS));
    let counted: f64 = 100.0 / 0.06;
    let cut = config.rate.decrease * counted.min(sent);
    assert!((s.rate(&rules) - cut).abs() < 1e-6, "{}", s.rate(&rules));
    // The losses still in flight answer releases made before the cut: a process alone counts
    // none of them (it knows when each went), and those of later releases at once.
    assert!(s.released_before_cut(&rules, 60 * MS - 1));
    assert!(!s.released_before_cut(&rules, 60 * MS));
}

#[test]
fn after_a_cut_a_loss_event_alone_cuts_at_once_from_what_the_part_since_the_cut_took() {
    let config = config();
    let rules = Rules::alone(&config);
    let (mut s, cut_at) = cut_alone(&rules, 100, 0);
    let beta = config.rate.decrease;
    let before = s.rate(&rules);
    // Half an interval after the cut: 10 successes (200/s), then losses of requests the rate
    // released after it. The third is a loss event, and the rate is cut then, from the 200/s,
    // not when the interval closes (nor an interval later).
    let settled = cut_at;
    for _ in 0..10 {
        s.timed_outcome(&rules, Signal::Success, settled + 40 * MS);
    }
    for _ in 0..2 {
        s.timed_outcome(&rules, Signal::Congestion, settled + 50 * MS);
    }
    assert_eq!(s.rate(&rules), before, "no loss event yet");
    assert!(s.timed_outcome(&rules, Signal::Congestion, settled + 50 * MS));
    let expected = 200.0 * beta;
    assert!(
        (s.rate(&rules) - expected).abs() < 1e-6,
        "{}",
        s.rate(&rules)
    );
}

#[test]
fn a_loss_event_alone_at_a_steady_rate_counts_the_successes_of_a_whole_interval_back() {
    let config = config();
    let rules = Rules::alone(&config);
    let beta = config.rate.decrease;
    // An interval without a loss that took `last` per second, then 20 ms that took 20
    // (1,000/s, a count too short for a rate) and lost 3; the rate cut then.
    let cut_after = |last: u32| {
        let (mut s, cut_at) = cut_alone(&rules, 100, 0);
        let interval = rules.interval();
        // The cut settles an interval after it; then an interval at `last`.
        for at in [cut_at, cut_at + interval] {
            for _ in 0..last / 10 {
                s.timed_outcome(&rules, Signal::Success, at + 50 * MS);
            }
            s.advance(&rules, true, at + interval);
        }
        let steady = cut_at + 2 * interval;
        for _ in 0..20 {
            s.timed_outcome(&rules, Signal::Success, steady + 20 * MS);
        }
        let sent = s.rate(&rules);
        for _ in 0..3 {
            s.timed_outcome(&rules, Signal::Congestion, steady + 20 * MS);
        }
        (sent, s.rate(&rules))
    };
    // Busy (600/s, more than β of the rate): a whole interval back, the 20 and 80 ms of
    // 600/s.
    let (sent, cut) = cut_after(600);
    let accepted: f64 = (20.0 + 600.0 * 0.08) / 0.1;
    assert!(accepted < sent, "{accepted} {sent}");
    assert!(
        (cut - accepted * beta).abs() < 1e-6,
        "{cut} against {}",
        accepted * beta
    );
    // Little demand (100/s): that interval says nothing of what the endpoint takes, and the
    // 20 ms's 1,000/s is more than was sent.
    let (sent, cut) = cut_after(100);
    assert!(sent < 1000.0, "{sent}");
    assert!(
        (cut - sent * beta).abs() < 1e-6,
        "{cut} against {}",
        sent * beta
    );
}

#[test]
fn a_fleet_after_its_slow_start_cuts_when_the_interval_closes() {
    let config = config();
    let rules = rules(&config);
    let (mut s, cut_at) = cut_alone(&rules, 100, 0);
    let before = s.rate(&rules);
    // Past the cut's settling, a loss event heard of mid-interval: the fleet's reports lag,
    // so the interval's close decides.
    let Mode::Ramping { cut_settles_at, .. } = s.mode else {
        panic!("ramping")
    };
    s.advance(&rules, true, cut_settles_at);
    for _ in 0..10 {
        s.outcome(&rules, Signal::Success, None, cut_settles_at + 50 * MS);
        s.outcome(&rules, Signal::Congestion, None, cut_settles_at + 50 * MS);
    }
    assert!(s.rate(&rules) >= before, "cut before the close");
    s.advance(&rules, true, cut_settles_at + rules.interval());
    assert!(s.rate(&rules) < before * 0.8, "{} {before}", s.rate(&rules));
    assert!(cut_at < cut_settles_at);
}

//! The rules as a fleet's store applies them ([`SharedState::apply`]); `cuts.rs`, when a ramp
//! is cut, alone and in a fleet. The rest of what a process alone applies is tested through
//! `endpoint/`.

mod cuts;

use super::release::PEER_TTL;
use super::*;
use crate::pacing::Pacing;

const MS: Nanos = 1_000_000;
const HOLDER: u64 = 7;

fn config() -> PacingRules {
    Pacing::new().rules().clone()
}

fn rules(config: &PacingRules) -> Rules<'_> {
    Rules::fleet(config, 10_000 * MS)
}

fn release(s: &mut SharedState, rules: &Rules<'_>, want: u32, now: Nanos) -> Grant {
    s.apply(rules, HOLDER, Op::Release { want, jitter: 0.5 }, now)
        .expect("a release answers")
}

fn down(rules: &Rules<'_>, now: Nanos) -> SharedState {
    let mut s = SharedState::new();
    s.apply(rules, HOLDER, Op::Down { jitter: 0.5 }, now);
    assert_eq!(s.mode, Mode::Probing);
    s
}

/// A ramp that started at the time returned (a probe's success).
fn ramping(rules: &Rules<'_>, now: Nanos) -> (SharedState, Nanos) {
    let mut s = down(rules, now);
    let probe_at = s.next_probe;
    let Grant::Probe { lease, .. } = release(&mut s, rules, 1, probe_at) else {
        panic!("a probe is due")
    };
    s.apply(
        rules,
        HOLDER,
        Op::ProbeDone {
            lease,
            success: true,
        },
        probe_at,
    );
    (s, probe_at)
}

#[test]
fn an_open_endpoint_is_unpaced_and_a_down_report_starts_one_probe_stream() {
    let config = config();
    let rules = rules(&config);
    let mut s = SharedState::new();
    assert_eq!(release(&mut s, &rules, 5, 0), Grant::Unpaced);
    let mut s = down(&rules, 1_000 * MS);
    // The first probe is a jittered probe interval away: 500 ms at jitter 0.5.
    assert_eq!(s.next_probe, 1_500 * MS);
    assert_eq!(
        release(&mut s, &rules, 1, 1_000 * MS),
        Grant::At(1_500 * MS)
    );
    // A second down report (another process) does not move the stream.
    s.apply(&rules, 8, Op::Down { jitter: 0.0 }, 1_100 * MS);
    assert_eq!(s.next_probe, 1_500 * MS);
}

#[test]
fn the_probe_stream_is_one_for_the_fleet_whatever_the_number_of_processes() {
    let config = config();
    let rules = rules(&config);
    let mut s = down(&rules, 0);
    let mut probes = 0;
    // Each process's own random stream (here one sequence spread over [0, 1)).
    let mut draws = (0..).map(|n: u64| (n * 7919 % 1000) as f64 / 1000.0);
    // 100 processes ask every 10 ms for 10 s; every probe fails at once.
    for step in 0..1_000u64 {
        let now = step * 10 * MS;
        for holder in 0..100 {
            let op = Op::Release {
                want: 1,
                jitter: draws.next().expect("endless"),
            };
            if let Some(Grant::Probe { lease, .. }) = s.apply(&rules, holder, op, now) {
                probes += 1;
                let done = Op::ProbeDone {
                    lease,
                    success: false,
                };
                s.apply(&rules, holder, done, now);
            }
        }
    }
    let per_second = f64::from(probes) / 10.0;
    assert!((1.4..=3.0).contains(&per_second), "{per_second}/s");
    assert_eq!(s.peers(10_000 * MS), 100);
}

#[test]
fn asking_with_nothing_waiting_takes_no_probe() {
    let config = config();
    let rules = rules(&config);
    let mut s = down(&rules, 0);
    let due = s.next_probe;
    assert_eq!(release(&mut s, &rules, 0, due), Grant::At(due));
    assert_eq!(s.probes, 0);
    assert!(matches!(
        release(&mut s, &rules, 1, due),
        Grant::Probe { .. }
    ));
}

#[test]
fn probe_leases_are_bounded_and_a_dead_holders_lease_expires() {
    let config = config();
    let rules = rules(&config);
    let mut s = down(&rules, 0);
    let mut now = s.next_probe;
    for _ in 0..config.probes_in_flight {
        assert!(matches!(
            release(&mut s, &rules, 1, now),
            Grant::Probe { .. }
        ));
        now = s.next_probe;
    }
    let expires = 500 * MS + rules.lease_ttl.unwrap();
    assert_eq!(
        release(&mut s, &rules, 1, now),
        Grant::Blocked { until: expires }
    );
    // Nobody ends the leases: at their expiry the stream goes on.
    assert!(matches!(
        release(&mut s, &rules, 1, expires),
        Grant::Probe { .. }
    ));
}

#[test]
fn a_successful_probe_starts_a_ramp_whose_first_slot_is_now() {
    let config = config();
    let rules = rules(&config);
    let (mut s, now) = ramping(&rules, 0);
    let Grant::Slots { first, gap, count } = release(&mut s, &rules, 100, now) else {
        panic!("slots")
    };
    assert_eq!(first, now);
    assert_eq!(gap, 500 * MS, "the probe rate");
    // A new stream starts with one slot.
    assert_eq!(count, 1);
    // The next (at the probe rate, 500 ms on) is beyond a ramp interval: in slow start, whose
    // rate the fleet's successes double every interval, the process asks again after one.
    let interval = nanos(config.ramp_interval);
    assert_eq!(release(&mut s, &rules, 100, now), Grant::At(now + interval));
}

#[test]
fn reported_successes_grow_the_rate_and_slots_follow_it() {
    let config = config();
    let rules = rules(&config);
    let (mut s, now) = ramping(&rules, 0);
    let floor = s.rate(&rules);
    s.apply(
        &rules,
        HOLDER,
        Op::Report {
            successes: 3,
            losses: 0,
            over: 0,
        },
        now,
    );
    let expected = floor + 3.0 / config.ramp_interval.as_secs_f64();
    assert!((s.rate(&rules) - expected).abs() < 1e-9);
    let Grant::Slots { gap: g, .. } = release(&mut s, &rules, 1, now) else {
        panic!("slots")
    };
    assert_eq!(g, gap(expected));
}

#[test]
fn a_rate_that_grows_brings_the_next_slot_forward() {
    let config = config();
    let rules = rules(&config);
    let (mut s, now) = ramping(&rules, 0);
    assert!(matches!(release(&mut s, &rules, 1, now), Grant::Slots { first, .. } if first == now));
    let Grant::At(slow) = release(&mut s, &rules, 1, now) else {
        panic!("the probe rate's gap")
    };
    let report = Op::Report {
        successes: 1,
        losses: 0,
        over: 0,
    };
    s.apply(&rules, HOLDER, report, now);
    // 12/s now: the next slot is 83 ms after the first, within the ramp interval's reach.
    let Grant::Slots { first: fast, .. } = release(&mut s, &rules, 1, now) else {
        panic!("a slot at the grown rate")
    };
    assert!(fast < slow, "{fast} not before {slow}");
}

#[test]
fn slot_batches_keep_the_fleet_rate_and_split_it_between_peers() {
    let mut config = config();
    // The cubic curve would probe past its maximum; held at it here.
    config.rate.ceiling = 1000.0;
    let rules = rules(&config);
    let (mut s, start) = ramping(&rules, 0);
    // A cut ramp at 1,000/s (cubic, at its last maximum).
    if let Mode::Ramping { ramp, .. } = &mut s.mode {
        *ramp = Ramp::Cubic {
            last_max: 1000.0,
            since_loss_secs: config.rate.regain_secs,
        };
    }
    let mut granted = [0u64; 10];
    let mut calls = 0;
    // Ten processes, each asking for 1,000 whenever its last slot has passed, for 5 s, in
    // an order that turns every millisecond (who calls first is not always the same).
    let mut next_ask = [start; 10];
    let end = start + 5_000 * MS;
    for step in 0..5_000u64 {
        let now = start + step * MS;
        for turn in 0..10usize {
            let holder = (turn + step as usize) % 10;
            if now < next_ask[holder] {
                continue;
            }
            calls += 1;
            let op = Op::Release {
                want: 1000,
                jitter: 0.5,
            };
            match s.apply(&rules, holder as u64, op, now) {
                Some(Grant::Slots { first, gap, count }) => {
                    // Only the slots inside the 5 s count.
                    let inside = (0..u64::from(count)).filter(|n| first + gap * n < end);
                    granted[holder] += inside.count() as u64;
                    next_ask[holder] = first + gap * u64::from(count.max(1) - 1);
                }
                Some(Grant::At(at)) => next_ask[holder] = at,
                other => panic!("{other:?}"),
            }
        }
    }
    let total: u64 = granted.iter().sum();
    assert!(
        (4_950..=5_010).contains(&total),
        "{total} slots in 5 s at 1,000/s"
    );
    let fair = total as f64 / 10.0;
    for g in granted {
        assert!((g as f64 - fair).abs() <= fair * 0.1, "{granted:?}");
    }
    let per_slot = f64::from(calls) / total as f64;
    assert!(per_slot <= 0.1, "{calls} calls for {total} slots");
}

#[test]
fn losses_above_the_threshold_cut_the_fleet_rate_once_per_loss_event() {
    let config = config();
    let rules = rules(&config);
    let (mut s, start) = ramping(&rules, 0);
    let interval = nanos(config.ramp_interval);
    let report = |successes, losses| Op::Report {
        successes,
        losses,
        over: 0,
    };
    s.apply(&rules, 1, report(10, 10), start);
    s.apply(&rules, 2, report(0, 0), start + interval);
    let accepted = 10.0 / config.ramp_interval.as_secs_f64();
    let cut = (accepted * config.rate.decrease).max(config.rate.floor);
    assert!((s.rate(&rules) - cut).abs() < 1e-6, "{}", s.rate(&rules));
    // The next interval's losses answer releases made before the cut.
    s.apply(&rules, 1, report(10, 10), start + interval);
    s.apply(&rules, 2, report(0, 0), start + 2 * interval);
    assert!(s.rate(&rules) >= cut - 1e-6);
}

#[test]
fn a_pause_holds_every_release_then_ramps_and_the_latest_pause_wins() {
    let config = config();
    let rules = rules(&config);
    let mut s = SharedState::new();
    s.apply(&rules, 1, Op::Pause { until: 2_000 * MS }, 0);
    s.apply(&rules, 2, Op::Pause { until: 1_000 * MS }, 0);
    assert_eq!(release(&mut s, &rules, 1, 10 * MS), Grant::At(2_000 * MS));
    assert!(matches!(
        release(&mut s, &rules, 1, 2_000 * MS),
        Grant::Slots { first, .. } if first == 2_000 * MS
    ));
    assert_eq!(s.rate(&rules), config.rate.floor);
}

#[test]
fn a_pause_during_a_ramp_resumes_from_the_cut_ramp() {
    let config = config();
    let rules = rules(&config);
    let (mut s, start) = ramping(&rules, 0);
    let interval = nanos(config.ramp_interval);
    let report = Op::Report {
        successes: 100,
        losses: 0,
        over: 0,
    };
    s.apply(&rules, 1, report, start);
    s.apply(&rules, 1, Op::Refresh, start + interval);
    let until = start + interval + 1_000 * MS;
    s.apply(&rules, 1, Op::Pause { until }, start + interval);
    release(&mut s, &rules, 1, until);
    let expected = 1000.0 * config.rate.decrease;
    assert!(
        (s.rate(&rules) - expected).abs() < 1e-6,
        "{}",
        s.rate(&rules)
    );
}

#[test]
fn a_ramp_with_no_demand_opens_and_a_pause_read_late_has_ended() {
    let config = config();
    let rules = rules(&config);
    let idle = nanos(config.idle_to_open);
    let (mut s, at) = ramping(&rules, 0);
    s.apply(&rules, 1, Op::Refresh, at);
    assert!(matches!(s.mode, Mode::Ramping { .. }), "idle since now");
    s.apply(&rules, 1, Op::Refresh, at + idle);
    assert_eq!(s.mode, Mode::Open);
    let mut s = SharedState::new();
    s.apply(&rules, 1, Op::Pause { until: 1_000 * MS }, 0);
    s.apply(&rules, 1, Op::Refresh, 3_600_000 * MS);
    assert_eq!(s.mode, Mode::Open, "read an hour later");
}

#[test]
fn peers_are_counted_while_paced_and_forgotten_after_their_ttl() {
    let config = config();
    let rules = rules(&config);
    let mut s = down(&rules, 0);
    for holder in 0..5 {
        release_as(&mut s, &rules, holder, 10 * MS);
    }
    assert_eq!(
        s.peers(10 * MS),
        6,
        "five and the one that reported it down"
    );
    assert_eq!(
        s.peers(10 * MS + PEER_TTL),
        1,
        "none left; the asker counts"
    );
    for holder in 0..(MAX_PEERS as u64 + 10) {
        release_as(&mut s, &rules, holder, 20 * MS);
    }
    assert_eq!(s.peers.len(), MAX_PEERS);
}

fn release_as(s: &mut SharedState, rules: &Rules<'_>, holder: u64, now: Nanos) {
    s.apply(
        rules,
        holder,
        Op::Release {
            want: 1,
            jitter: 0.5,
        },
        now,
    );
}

#[test]
fn the_state_holds_on_until_its_latest_pause_or_lease() {
    let config = config();
    let rules = rules(&config);
    let mut s = SharedState::new();
    s.apply(&rules, 1, Op::Pause { until: 5_000 * MS }, 0);
    assert_eq!(s.holds_until(), 5_000 * MS);
    let mut s = down(&rules, 0);
    let at = s.next_probe;
    release(&mut s, &rules, 1, at);
    assert_eq!(s.holds_until(), at + rules.lease_ttl.unwrap());
}

#[test]
fn while_a_probe_is_in_flight_the_others_ask_again_after_as_long_as_it_has_been_out() {
    let mut config = config();
    config.probes_in_flight = 2;
    config.probe_interval = Duration::from_secs(2);
    let rules = rules(&config);
    let mut s = down(&rules, 0);
    let due = s.next_probe;
    assert!(matches!(
        s.apply(
            &rules,
            1,
            Op::Release {
                want: 5,
                jitter: 0.5
            },
            due
        ),
        Some(Grant::Probe { .. })
    ));
    // Its success would start the ramp: the others hear of it when they ask.
    let interval = nanos(config.ramp_interval);
    let other = s.apply(
        &rules,
        2,
        Op::Release {
            want: 5,
            jitter: 0.5,
        },
        due,
    );
    assert_eq!(other, Some(Grant::At(due + interval)));
    assert!(s.next_probe > due + interval, "not the next probe");
    // A probe out for longer (one that hangs) is asked about after as long again.
    let ask = Op::Release {
        want: 5,
        jitter: 0.5,
    };
    let later = due + 3 * interval;
    assert_eq!(
        s.apply(&rules, 2, ask, later),
        Some(Grant::At(later + 3 * interval))
    );
}

#[test]
fn the_wait_for_a_probe_grows_with_its_time_out_from_a_ramp_interval_to_a_probe_interval() {
    let mut config = config();
    let (ramp, probe) = (config.ramp_interval, config.probe_interval);
    assert_eq!(config.wait_for_probe(Duration::ZERO), ramp);
    assert_eq!(config.wait_for_probe(ramp * 3), ramp * 3);
    assert_eq!(config.wait_for_probe(probe * 20), probe);
    // A ramp interval longer than a probe interval: the ramp interval.
    config.ramp_interval = probe * 2;
    assert_eq!(config.wait_for_probe(probe * 20), probe * 2);
}

#[test]
fn a_fleet_cuts_from_the_share_its_interval_took_not_from_the_few_successes_heard_of() {
    let config = config();
    let rules = rules(&config);
    let (mut s, start) = ramping(&rules, 0);
    // Slow start at 3,000/s; the interval's losses are heard of at once, most of its
    // successes later: 20 successes and 5 losses heard of in it.
    if let Mode::Ramping { ramp, .. } = &mut s.mode {
        *ramp = Ramp::SlowStart { rate: 3000.0 };
    }
    let report = Op::Report {
        successes: 20,
        losses: 5,
        over: 0,
    };
    s.apply(&rules, HOLDER, report, start);
    s.apply(
        &rules,
        HOLDER,
        Op::Refresh,
        start + nanos(config.ramp_interval),
    );
    // The endpoint took 80 % of the 3,000/s the interval began with (not the 200/s heard of).
    let expected = 3000.0 * 0.8 * config.rate.decrease;
    assert!(
        (s.rate(&rules) - expected).abs() < 1e-6,
        "{}",
        s.rate(&rules)
    );
}

/// A fleet at a held 2,000/s cubic rate, each of `processes` asking for 1,000 whenever its
/// last slot has passed, from `start` for `millis`: every slot granted, in order.
fn fleet_slots(
    rules: &Rules<'_>,
    s: &mut SharedState,
    processes: usize,
    start: Nanos,
    millis: u64,
) -> Vec<Nanos> {
    let mut slots = Vec::new();
    let mut next_ask = vec![start; processes];
    for step in 0..millis {
        let now = start + step * MS;
        for (holder, next_ask) in next_ask.iter_mut().enumerate() {
            if now < *next_ask {
                continue;
            }
            let op = Op::Release {
                want: 1000,
                jitter: 0.5,
            };
            match s.apply(rules, holder as u64, op, now) {
                Some(Grant::Slots { first, gap, count }) => {
                    slots.extend((0..u64::from(count)).map(|n| first + gap * n));
                    *next_ask = first + gap * u64::from(count - 1) + MS;
                }
                Some(Grant::At(at)) => *next_ask = at,
                other => panic!("{other:?}"),
            }
        }
    }
    slots.sort_unstable();
    slots
}

fn held_at(config: &mut PacingRules, rate: f64) {
    config.rate.ceiling = rate;
}

fn cubic_at(s: &mut SharedState, config: &PacingRules, rate: f64) {
    if let Mode::Ramping { ramp, .. } = &mut s.mode {
        *ramp = Ramp::Cubic {
            last_max: rate,
            since_loss_secs: config.rate.regain_secs,
        };
    }
}

#[test]
fn the_slots_of_100_peers_interleave_evenly_through_each_cycle() {
    let mut config = config();
    held_at(&mut config, 2000.0);
    let rules = rules(&config);
    let (mut s, start) = ramping(&rules, 0);
    cubic_at(&mut s, &config, 2000.0);
    let slots = fleet_slots(&rules, &mut s, 100, start, 3_000);
    // 20 slots in each 10 ms at 2,000/s, once every stream is placed: a limit of 20 per 10 ms
    // (a token bucket refilled every 10 ms) takes them all. Phases placed each in the middle
    // of the widest gap put two peers where one belongs in the first 56 % of each cycle of
    // 100 (after the 64th, the rest halve the gaps from the start): 26 and 13 in turn.
    let mut windows = [0u32; 200];
    for &at in slots
        .iter()
        .filter(|&&at| at >= start + 1_000 * MS && at < start + 3_000 * MS)
    {
        windows[((at - start - 1_000 * MS) / (10 * MS)) as usize] += 1;
    }
    let (least, most) = (windows.iter().min().unwrap(), windows.iter().max().unwrap());
    assert!(
        *least >= 17 && *most <= 23,
        "slots per 10 ms from {least} to {most}"
    );
}

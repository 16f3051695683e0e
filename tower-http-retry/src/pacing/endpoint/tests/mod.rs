//! The endpoint's rules as a process pacing alone applies them, and what only it holds (its
//! queue, its congestion run, the places of requests it turned away).

use super::*;
use crate::pacing::Pacing;
use rand::SeedableRng;

mod release;

const MS: Duration = Duration::from_millis(1);

fn config() -> PacingRules {
    Pacing::new().rules().clone()
}

/// A probe's pass (its lease is not checked: the endpoint takes its outcome as a probe's).
fn probe() -> Pass {
    Pass::Probe(Lease {
        id: 0,
        expires: Instant::now(),
        local: false,
    })
}

/// A paced pass released at `now`, as an outcome at `now` answers it (no round trip).
fn paced(s: &EndpointState, now: Instant) -> Pass {
    Pass::Paced {
        released: s.at(now),
    }
}

fn state(now: Instant) -> EndpointState {
    EndpointState::new(now, SmallRng::seed_from_u64(1), None, Default::default())
}

fn down(config: &PacingRules, now: Instant) -> EndpointState {
    let mut s = state(now);
    for _ in 0..config.outage_after {
        s.record(config, None, Signal::Congestion, now);
    }
    assert_eq!(s.mode(), PacingMode::Probing);
    s
}

#[test]
fn congestion_in_a_row_turns_an_open_endpoint_to_probing() {
    let config = config();
    let now = Instant::now();
    let mut s = state(now);
    for _ in 1..config.outage_after {
        s.record(&config, None, Signal::Congestion, now);
    }
    s.record(&config, None, Signal::Success, now);
    s.record(&config, None, Signal::Congestion, now);
    assert_eq!(s.mode(), PacingMode::Open, "a success resets the run");
    let _ = down(&config, now);
}

#[test]
fn probing_lets_a_bounded_number_through_at_the_probe_rate() {
    let config = config();
    let start = Instant::now();
    let mut s = down(&config, start);
    let mut now = start;
    let mut probes = Vec::new();
    for _ in 0..100 {
        match s.try_release(&config, now) {
            Release::Now(pass) => {
                assert!(matches!(pass, Pass::Probe(_)), "{pass:?}");
                probes.push(now);
                // The probe fails at once.
                s.record(&config, Some(pass), Signal::Congestion, now);
            }
            Release::At(at) => now = at,
            Release::Blocked | Release::Asked => panic!("no probe is in flight"),
        }
        if now > start + 10 * 1000 * MS {
            break;
        }
    }
    let per_second = probes.len() as f64 / 10.0;
    let nominal = 1.0 / config.probe_interval.as_secs_f64();
    assert!(
        per_second > nominal * 0.6 && per_second < nominal * 1.5,
        "{per_second}/s"
    );
}

#[test]
fn probes_in_flight_are_bounded() {
    let config = config();
    let now = Instant::now();
    let mut s = down(&config, now);
    let later = now + 60 * 1000 * MS;
    let mut passes = 0;
    loop {
        match s.try_release(&config, later + passes * 1000 * MS) {
            Release::Now(_) => passes += 1,
            Release::Blocked => break,
            Release::At(_) | Release::Asked => panic!("time was given"),
        }
    }
    assert_eq!(
        passes,
        u32::from(config.probes_in_flight > 0) * config.probes_in_flight
    );
}

#[test]
fn a_successful_probe_starts_a_ramp_that_doubles_per_interval() {
    let config = config();
    let now = Instant::now();
    let mut s = down(&config, now);
    s.record(&config, Some(probe()), Signal::Success, now);
    assert_eq!(s.mode(), PacingMode::Ramping);
    s.queue.push_back(Waiter { id: 0, waker: None });
    // Each success of a released request adds `1 / interval`: a rate whose releases all
    // succeed doubles every interval (rate.rs checks the doubling itself).
    let floor = s.rate(&config);
    for n in 1..=3 {
        s.record(&config, Some(paced(&s, now)), Signal::Success, now);
        let expected = floor + f64::from(n) / config.ramp_interval.as_secs_f64();
        assert!(
            (s.rate(&config) - expected).abs() < 1e-9,
            "{}",
            s.rate(&config)
        );
    }
}

#[test]
fn losses_above_the_threshold_cut_the_rate_to_a_fraction_of_what_was_accepted() {
    let config = config();
    let now = Instant::now();
    let mut s = down(&config, now);
    s.record(&config, Some(probe()), Signal::Success, now);
    s.queue.push_back(Waiter { id: 0, waker: None });
    for _ in 0..10 {
        s.record(&config, Some(paced(&s, now)), Signal::Success, now);
    }
    for _ in 0..10 {
        s.record(&config, Some(paced(&s, now)), Signal::Congestion, now);
    }
    s.tick(&config, now + config.ramp_interval);
    let accepted = 10.0 / config.ramp_interval.as_secs_f64();
    let expected = (accepted * config.rate.decrease).max(config.rate.floor);
    assert!(
        (s.rate(&config) - expected).abs() < 1e-6,
        "{}",
        s.rate(&config)
    );
}

#[test]
fn a_pause_holds_every_release_then_ramps_from_the_probe_rate() {
    let config = config();
    let now = Instant::now();
    let mut s = state(now);
    let until = now + 5000 * MS;
    s.pause_until(&config, until, now);
    assert_eq!(s.try_release(&config, now), Release::At(until));
    s.queue.push_back(Waiter { id: 0, waker: None });
    assert_eq!(
        s.try_release(&config, until),
        Release::Now(paced(&s, until))
    );
    assert_eq!(s.mode(), PacingMode::Ramping);
    assert_eq!(s.rate(&config), config.rate.floor);
}

#[test]
fn a_pause_read_long_after_it_ended_has_ended_and_with_no_demand_opened() {
    let config = config();
    let now = Instant::now();
    let mut s = state(now);
    let until = now + 1000 * MS;
    s.pause_until(&config, until, now);
    s.advance(&config, until + 10 * MS);
    assert_eq!(s.mode(), PacingMode::Ramping, "the pause is over");
    s.advance(&config, until + config.idle_to_open);
    assert_eq!(s.mode(), PacingMode::Open, "no demand since it ended");
    let mut s = state(now);
    s.pause_until(&config, until, now);
    s.advance(&config, until + 3600 * 1000 * MS);
    assert_eq!(s.mode(), PacingMode::Open, "read an hour later");
}

#[test]
fn an_idle_ramp_opens_the_endpoint() {
    let config = config();
    let now = Instant::now();
    let mut s = down(&config, now);
    s.record(&config, Some(probe()), Signal::Success, now);
    s.tick(&config, now);
    s.tick(&config, now + config.idle_to_open);
    assert_eq!(s.mode(), PacingMode::Open);
}

#[test]
fn a_full_queue_refuses_to_enqueue() {
    let mut config = config();
    config.max_waiters = 2;
    let now = Instant::now();
    let mut s = state(now);
    assert!(s.enqueue(&config, now).is_some());
    assert!(s.enqueue(&config, now).is_some());
    assert!(s.enqueue(&config, now).is_none());
    assert_eq!(s.deferred, 1);
}

#[test]
fn one_loss_event_cuts_once_a_round_trip_and_the_losses_of_later_releases_cut_again_at_once() {
    let config = config();
    let now = Instant::now();
    let mut s = down(&config, now);
    s.record(&config, Some(probe()), Signal::Success, now);
    s.queue.push_back(Waiter { id: 0, waker: None });
    let interval = config.ramp_interval;
    let rtt = 10 * MS;
    // Half of each batch lost, every request answered a round trip after it went. The first
    // batch ends the slow start as it is answered, at 40 ms.
    let batch = |s: &mut EndpointState, went: Duration| {
        let pass = paced(s, now + went);
        for _ in 0..10 {
            s.record(&config, Some(pass), Signal::Success, now + went + rtt);
            s.record(&config, Some(pass), Signal::Congestion, now + went + rtt);
        }
        s.rate(&config)
    };
    let cut_at = 40 * MS;
    let first = batch(&mut s, cut_at - rtt);
    // Released half a round trip after the cut: they met the load released before it, and
    // their losses are not counted, in the interval or when it closes.
    let hidden = batch(&mut s, cut_at + rtt / 2);
    s.tick(&config, now + cut_at + interval);
    assert!(
        hidden >= first && s.rate(&config) >= first,
        "cut twice for one loss event: {first} {hidden} {}",
        s.rate(&config)
    );
    // Released well after it: their third loss cuts, before the interval closes.
    let before = s.rate(&config);
    let again = batch(&mut s, cut_at + interval + 2 * rtt);
    assert!(again < before * 0.8, "not cut again: {again} {before}");
}

#[test]
fn a_pause_during_a_ramp_resumes_from_the_ramp_cut_not_from_the_probe_rate() {
    let config = config();
    let now = Instant::now();
    let mut s = down(&config, now);
    s.record(&config, Some(probe()), Signal::Success, now);
    s.queue.push_back(Waiter { id: 0, waker: None });
    for _ in 0..100 {
        s.record(&config, Some(paced(&s, now)), Signal::Success, now);
    }
    let at = now + config.ramp_interval;
    s.tick(&config, at); // 100 successes in the interval: 1,000/s accepted
    let until = at + 1000 * MS;
    s.pause_until(&config, until, at);
    assert_eq!(s.mode(), PacingMode::Paused);
    assert_eq!(
        s.try_release(&config, until),
        Release::Now(paced(&s, until))
    );
    let expected = 1000.0 * config.rate.decrease;
    assert!(
        (s.rate(&config) - expected).abs() < 1e-6,
        "{}",
        s.rate(&config)
    );
}

/// Ramping after a probe's success, with 100 successes in the interval that just closed
/// (1,000/s taken) and one more just now; a waiter keeps it from opening.
fn ramping_at_1000(config: &PacingRules, now: Instant) -> (EndpointState, Instant) {
    let mut s = down(config, now);
    s.record(config, Some(probe()), Signal::Success, now);
    s.queue.push_back(Waiter { id: 0, waker: None });
    for _ in 0..100 {
        s.record(config, Some(paced(&s, now)), Signal::Success, now);
    }
    let at = now + config.ramp_interval;
    s.record(config, Some(paced(&s, at)), Signal::Success, at);
    assert_eq!(s.mode(), PacingMode::Ramping);
    (s, at)
}

#[test]
fn a_hint_while_the_endpoint_takes_requests_cuts_the_ramp_once_and_pauses_nothing() {
    let config = config();
    let (mut s, at) = ramping_at_1000(&config, Instant::now());
    assert!(
        !s.hinted(&config, at + 1000 * MS, at),
        "a rate signal, not a pause"
    );
    assert_eq!(s.mode(), PacingMode::Ramping);
    // More hints in the same interval, and 150 more successes (1,510/s taken in all).
    for _ in 0..20 {
        assert!(!s.hinted(&config, at + 1000 * MS, at + MS));
    }
    for _ in 0..150 {
        s.record(
            &config,
            Some(paced(&s, at + 2 * MS)),
            Signal::Success,
            at + 2 * MS,
        );
    }
    let before = s.rate(&config);
    // One cut, when the interval closes, from what the endpoint took in it.
    s.tick(&config, at + config.ramp_interval);
    let cut = s.rate(&config);
    assert!(cut < before, "{cut} not below {before}");
    assert!((cut - 1510.0 * config.rate.decrease).abs() < 1.0, "{cut}");
    assert!(
        s.shared.capacity.is_some_and(|c| (c - 1510.0).abs() < 1.0),
        "{:?}",
        s.shared.capacity
    );
    s.tick(&config, at + config.ramp_interval * 2);
    assert!(s.rate(&config) >= cut, "cut once");
}

#[test]
fn a_hint_when_nothing_gets_through_pauses_the_whole_endpoint() {
    let config = config();
    let now = Instant::now();
    // Down: probing.
    let mut s = down(&config, now);
    assert!(s.hinted(&config, now + 1000 * MS, now));
    assert_eq!(
        s.try_release(&config, now + 999 * MS),
        Release::At(now + 1000 * MS)
    );
    // Ramping, but nothing taken for a whole interval.
    let (mut s, at) = ramping_at_1000(&config, now);
    let later = at + config.ramp_interval;
    assert!(s.hinted(&config, later + 1000 * MS, later));
    assert_eq!(s.mode(), PacingMode::Paused);
}

#[test]
fn a_hint_to_an_open_endpoint_pauses_nothing() {
    let config = config();
    let now = Instant::now();
    // Taking requests, or not known yet: the outage rule, not one hint, says it is down.
    let mut s = state(now);
    s.record(&config, None, Signal::Success, now);
    s.record(&config, None, Signal::Congestion, now + MS);
    assert!(!s.hinted(&config, now + 1000 * MS, now + MS));
    assert_eq!(s.mode(), PacingMode::Open);
    let mut fresh = state(now);
    assert!(!fresh.hinted(&config, now + 1000 * MS, now));
    assert_eq!(fresh.mode(), PacingMode::Open);
}

#[test]
fn congestion_in_a_row_while_ramping_with_nothing_taken_for_an_interval_is_an_outage() {
    let config = config();
    let (mut s, at) = ramping_at_1000(&config, Instant::now());
    let after = at + config.ramp_interval;
    for i in 1..config.outage_after {
        s.record(&config, Some(paced(&s, after)), Signal::Congestion, after);
        assert_eq!(s.mode(), PacingMode::Ramping, "{i} in a row");
    }
    s.record(&config, Some(paced(&s, after)), Signal::Congestion, after);
    assert_eq!(
        s.mode(),
        PacingMode::Probing,
        "down again, probed as in a fresh start"
    );
    // The next outage's ramp is predicted to reach what this one took at its loss.
    assert!(
        s.shared.capacity.is_some_and(|c| c > config.rate.floor),
        "{:?}",
        s.shared.capacity
    );
}

#[test]
fn runs_of_congestion_between_successes_while_ramping_are_a_rate_to_find_not_an_outage() {
    let config = config();
    let (mut s, mut at) = ramping_at_1000(&config, Instant::now());
    // A limit that admits in steps: 20 rejections in a row, then successes, every 10 ms.
    for _ in 0..50 {
        for _ in 0..20 {
            s.record(&config, Some(paced(&s, at)), Signal::Congestion, at);
        }
        s.record(&config, Some(paced(&s, at)), Signal::Success, at);
        at += 10 * MS;
    }
    assert_eq!(s.mode(), PacingMode::Ramping);
}

#[test]
fn a_down_endpoint_predicts_slow_start_from_the_next_probe_up_to_its_last_known_rate() {
    let config = config();
    let now = Instant::now();
    let s = down(&config, now);
    let first = s.predicted_wait(&config, 0, now);
    assert!(first <= config.probe_interval * 3 / 2, "{first:?}");
    // 2/s doubling every 100 ms: 295 places in about a second after the first release.
    let ramp = s.predicted_wait(&config, 295, now) - first;
    assert!((900 * MS..=1100 * MS).contains(&ramp), "{ramp:?}");
    // With a known rate of 1,000/s, the places past the slow start go at it.
    let mut known = down(&config, now);
    known.shared.capacity = Some(1000.0);
    let tail =
        known.predicted_wait(&config, 10_000, now) - known.predicted_wait(&config, 9_000, now);
    assert!((990 * MS..=1010 * MS).contains(&tail), "{tail:?}");
}

#[test]
fn requests_turned_away_together_are_spread_over_the_predicted_releases() {
    let mut config = config();
    config.max_waiters = 1;
    let now = Instant::now();
    let mut s = down(&config, now);
    s.shared.capacity = Some(100.0);
    assert!(s.enqueue(&config, now).is_some());
    let resends: Vec<Resend> = (0..500).map(|_| s.turn_away(&config, now)).collect();
    let first = resends[0].after;
    let last = resends[499].after;
    // 500 places behind the queue at up to 100/s: about 5 s, less the slow start's head.
    assert!(
        last - first >= Duration::from_secs(4),
        "{first:?} to {last:?}"
    );
    assert!(resends.windows(2).all(|w| w[1].after >= w[0].after));
    assert!(resends.iter().all(|r| r.spread > Duration::ZERO));
    // Once the last of them is due, the places are free again.
    let later = now + last + MS;
    assert!(s.turn_away(&config, later).after <= s.predicted_wait(&config, 1, later));
}

#[test]
fn a_resend_time_never_falls_inside_a_known_pause() {
    let mut config = config();
    config.max_waiters = 1;
    let now = Instant::now();
    let mut s = state(now);
    let until = now + 5000 * MS;
    s.pause_until(&config, until, now);
    assert!(s.enqueue(&config, now).is_some());
    for _ in 0..100 {
        let resend = s.turn_away(&config, now);
        assert!(now + resend.after >= until, "{resend:?}");
    }
    assert!(now + s.resend_from(&config, 0, now).after >= until);
}

/// A ramp fed `before` then `after`, one outcome a millisecond, each for a second or until the
/// endpoint is called down: how long after the last success it was, if it was.
fn called_down(before: &[Signal], after: &[Signal]) -> Option<Duration> {
    let config = config();
    let start = Instant::now();
    let mut s = down(&config, start);
    s.record(&config, Some(probe()), Signal::Success, start);
    // Requests keep waiting: the ramp does not open for want of demand.
    for id in 0..2 {
        s.queue.push_back(Waiter { id, waker: None });
    }
    let (mut now, mut taken) = (start, start);
    for pattern in [before, after] {
        for n in 0..1000 {
            now += MS;
            let signal = pattern[n % pattern.len()];
            s.record(&config, Some(paced(&s, now)), signal, now);
            if signal == Signal::Success {
                taken = now;
            }
            if s.mode() == PacingMode::Probing {
                return Some(now - taken);
            }
        }
    }
    assert_eq!(s.mode(), PacingMode::Ramping);
    None
}

/// `taken` successes, then refusals, `of` outcomes in all.
fn limit(taken: usize, of: usize) -> Vec<Signal> {
    let mut pattern = vec![Signal::Congestion; of];
    pattern[..taken].fill(Signal::Success);
    pattern
}

#[test]
fn a_limit_that_refuses_in_runs_is_never_an_outage_but_nothing_taken_for_an_interval_is() {
    // A limit refilled every 10 ms that takes half what is sent, whether it refused before or
    // its share of a quota just fell under a steady stream; and one whose runs grow eightfold
    // (refilled every 50 ms, a fifth taken). Guessing an outage from the successes' spacing
    // (twice the longest time between two, or twice the longest run of refusals) called these
    // down.
    assert_eq!(called_down(&limit(5, 10), &limit(5, 10)), None);
    assert_eq!(called_down(&[Signal::Success], &limit(5, 10)), None);
    assert_eq!(called_down(&limit(5, 10), &limit(10, 50)), None);
    // Nothing taken: down an interval after the last success, whatever came before.
    let gone = [Signal::Congestion];
    let interval = config().ramp_interval;
    assert_eq!(called_down(&limit(5, 10), &gone), Some(interval));
    assert_eq!(called_down(&[Signal::Success], &gone), Some(interval));
}

#[tokio::test(start_paused = true)]
async fn a_request_over_the_limit_is_told_its_turn_not_now() {
    use crate::pacing::limit::Limit;
    use crate::pacing::AdaptiveConcurrency;
    let config = config();
    let start = Instant::now();
    let mut s = state(start);
    let mut limit = Limit::new(AdaptiveConcurrency::new(), start);
    // The first window measures 20 ms at the floor (2 in flight).
    for i in 1..=8 {
        limit.sent();
        limit.finished(Some(20 * MS), true, start + 100 * MS + i * MS);
    }
    s.limit = Some(limit);
    let now = start + 200 * MS;
    while matches!(s.try_release(&config, now), Release::Now(_)) {}
    assert_eq!(
        s.try_release(&config, now),
        Release::Blocked,
        "10 in flight"
    );
    // Five wait; the next is turned away: its turn comes with the next round, 20 ms away.
    for _ in 0..5 {
        s.enqueue(&config, now);
    }
    let resend = s.turn_away(&config, now);
    assert_eq!(resend.after, 20 * MS);
    assert_eq!(resend.spread, 20 * MS);
}

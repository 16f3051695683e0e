//! Releases while ramping: their spacing, what a late or idle queue is owed.

use super::*;

#[test]
fn a_rate_that_grows_brings_the_next_release_forward() {
    let config = config();
    let now = Instant::now();
    let mut s = down(&config, now);
    s.record(&config, Some(probe()), Signal::Success, now);
    s.queue.push_back(Waiter { id: 0, waker: None });
    assert_eq!(
        s.try_release(&config, now),
        Release::Now(paced(&s, now)),
        "at once"
    );
    let Release::At(slow) = s.try_release(&config, now) else {
        panic!("the floor rate's gap")
    };
    s.record(&config, Some(paced(&s, now)), Signal::Success, now);
    let Release::At(fast) = s.try_release(&config, now) else {
        panic!("a gap at the grown rate")
    };
    assert!(fast < slow, "{fast:?} not before {slow:?}");
}

/// Releases `s` lets go at once at `now`.
fn at_once(s: &mut EndpointState, config: &PacingRules, now: Instant) -> usize {
    (0..100)
        .take_while(|_| matches!(s.try_release(config, now), Release::Now(_)))
        .count()
}

/// Ramping at about 1,000/s with a waiter that took every slot owed: the state, and when its
/// next slot is due.
fn waiting_for_the_next_slot(config: &PacingRules) -> (EndpointState, Instant) {
    let (mut s, at) = ramping_at_1000(config, Instant::now());
    at_once(&mut s, config, at);
    let Release::At(next) = s.try_release(config, at) else {
        panic!("the next slot is a gap away")
    };
    (s, next)
}

#[test]
fn only_the_slots_that_passed_while_requests_waited_go_at_once() {
    let config = config();
    let (mut s, at) = ramping_at_1000(&config, Instant::now());
    // The head has waited since before `at`: a wake 50 ms late lets the window's slots go at
    // once (10 ms at about 1,000/s), not 50 ms of them.
    let late = at + 50 * MS;
    let owed = at_once(&mut s, &config, late);
    assert!((8..=14).contains(&owed), "{owed}");
    // Nobody waits for 50 ms, then a worker's batch of 10 arrives: one goes now, the next a
    // gap later.
    s.queue.clear();
    let idle = late + 50 * MS;
    for _ in 0..10 {
        s.enqueue(&config, idle);
    }
    assert_eq!(at_once(&mut s, &config, idle), 1);
    let Release::At(next) = s.try_release(&config, idle) else {
        panic!("the next slot is a gap away")
    };
    assert!(
        (idle + MS / 2..=idle + 2 * MS).contains(&next),
        "{:?}",
        next - idle
    );
    // Woken 3 ms late, 1 ms past the slack: the requests that waited take the slots of the
    // slack, not the one before it (they took 4 when every late slot up to 10 ms was owed).
    let woken = next + 3 * MS;
    assert!((2..=3).contains(&at_once(&mut s, &config, woken)));
}

#[test]
fn a_spell_the_process_did_not_run_is_not_sent_at_once() {
    let config = config();
    let (mut s, next) = waiting_for_the_next_slot(&config);
    // The timer fires 14 ms late (the process's threads did not run): the head and the slots
    // of the slack go, not the 14 ms of slots the spell passed (11 went before), which a
    // receiver's own limit would refuse as a burst.
    let woken = next + 14 * MS;
    let owed = at_once(&mut s, &config, woken);
    assert!((2..=3).contains(&owed), "{owed}");
    // The rate goes on from there: the next slot is within a gap.
    let Release::At(after) = s.try_release(&config, woken) else {
        panic!("the next slot is a gap away")
    };
    assert!(after <= woken + MS, "{:?}", after - woken);
    // Woken within the slack, the head takes the slots it waited for: the one due, and the
    // next, due by then.
    assert_eq!(at_once(&mut s, &config, after + MS), 2);
}

#[test]
fn a_next_head_that_asks_late_after_a_release_owes_only_the_slack() {
    let config = config();
    let (mut s, next) = waiting_for_the_next_slot(&config);
    s.queue.push_back(Waiter { id: 1, waker: None });
    assert!(matches!(s.try_release(&config, next), Release::Now(_)));
    // The next head is woken at once, but the process does not run for 14 ms.
    let late = next + 14 * MS;
    assert!((2..=3).contains(&at_once(&mut s, &config, late)));
}

#[test]
fn a_wake_told_before_a_pause_never_holds_a_request_after_it() {
    let config = config();
    let (mut s, at) = ramping_at_1000(&config, Instant::now());
    at_once(&mut s, &config, at);
    assert!(matches!(s.try_release(&config, at), Release::At(_)));
    // The head leaves (cancelled), the endpoint asks for a pause of 5 s, and a request comes
    // just after it: it goes at once, whatever the head was told before.
    s.queue.clear();
    let until = at + 5000 * MS;
    s.pause_until(&config, until, at);
    let after = until + 100 * MS;
    s.enqueue(&config, after);
    assert!(matches!(s.try_release(&config, after), Release::Now(_)));
}

//! What a process of a fleet does with the store's answers.

use super::super::link::{Link, Slots};
use super::super::EndpointState;
use crate::pacing::rules::PacingRules;
use crate::pacing::store::{Applied, Event, InProcessStore, PacingStore, Release};
use crate::pacing::Pacing;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::time::Duration;
use tokio::time::Instant;

const KEY: &str = "endpoint";

fn apply(store: &InProcessStore, config: &PacingRules, events: &[Event], now: Instant) -> Applied {
    match store.apply(config, KEY, events, now).into_ready() {
        Ok(applied) => applied,
        Err(_) => panic!("an in-process store answers at once"),
    }
}

/// The fleet's endpoint, ramping from a probe another process sent at the time returned.
fn ramping(store: &InProcessStore, config: &PacingRules, now: Instant) -> Instant {
    let other = store.peer();
    apply(&other, config, &[Event::Down { jitter: 0.5 }], now);
    let at = now + config.probe_interval;
    let ask = Event::Release {
        want: 1,
        jitter: 0.5,
    };
    let Some(Release::Probe(lease)) = apply(&other, config, &[ask], at).release() else {
        panic!("a probe is due")
    };
    let done = Event::ProbeDone {
        lease,
        success: true,
    };
    apply(&other, config, &[done], at);
    at
}

#[test]
fn slots_in_hand_go_back_when_the_fleet_cut_its_rate_and_are_kept_otherwise() {
    let config = Pacing::new().rules().clone();
    let store = InProcessStore::new();
    let start = ramping(&store, &config, Instant::now());
    let mut s = EndpointState::new(
        start,
        SmallRng::seed_from_u64(1),
        Some(Link::default()),
        Default::default(),
    );
    let refresh = |now| apply(&store, &config, &[Event::Refresh], now);
    let held = |s: &EndpointState| {
        s.link
            .as_ref()
            .and_then(|link| link.slots)
            .map(|slots| slots.left)
    };
    let applied = refresh(start);
    let mark = applied.state.cut_mark();
    assert!(mark.is_some(), "ramping");
    let slots = Slots {
        next: start + Duration::from_millis(50),
        gap: Duration::from_millis(50),
        left: 10,
        cut_mark: mark,
    };
    s.link.as_mut().expect("linked").slots = Some(slots);
    s.adopt(&config, Some(applied), start, start);
    assert_eq!(
        held(&s),
        Some(10),
        "the same ramp, uncut: the slots are kept"
    );
    // Another process reports a loss event: the fleet's rate is cut (at once, in slow start).
    let now = start + Duration::from_millis(60);
    let report = Event::Report {
        successes: 10,
        losses: 10,
        over: Duration::from_millis(60),
    };
    let cut = apply(&store.peer(), &config, &[report], now);
    assert_ne!(cut.state.cut_mark(), mark, "the rate was cut");
    s.adopt(&config, Some(refresh(now)), now, now);
    assert_eq!(held(&s), None, "granted at the rate before the cut");
}

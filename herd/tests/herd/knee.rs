//! The server with a knee, its load ramped past the knee and back, at a fifth of the harness's
//! length: the limit learned over the knee lets the load through as soon as it falls under it.

use herd::knee::ramp::{Phases, Ramp};
use herd::knee::{run_knee, Knee, Limiter};
use std::time::Duration;

fn ramped(limiter: Limiter) -> Phases {
    let ramp = Ramp {
        low: 0.5,
        rise: Duration::from_secs(2),
        hold: Duration::from_secs(2),
        fall: Duration::from_secs(2),
        tail: Duration::from_secs(1),
    };
    let knee = Knee::harness().ramped(ramp);
    let (up, down) = ramp.crossings(knee.offered, 1.0);
    Phases::of(&run_knee(&knee, limiter, 1), up, down)
}

#[test]
fn the_adaptive_limit_lets_the_load_through_once_it_is_back_under_the_knee() {
    let ours = ramped(Limiter::Adaptive);
    assert!(
        ours.reopened
            .is_some_and(|after| after <= Duration::from_secs(2)),
        "{ours:?}"
    );
    assert!(ours.after >= 0.99, "{ours:?}");
    // Without a limit, the work of the attempts that timed out over the knee is still queued
    // at the server when the load falls.
    let none = ramped(Limiter::None);
    assert!(none.after < ours.after, "{none:?}");
}

//! The pool's state: its upstreams, which of them asked to be left alone until when, and whose
//! turn is next. Pure decisions, `now` passed in.

use http::uri::Authority;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// The upstreams of a pool and their holds.
#[derive(Debug)]
pub(super) struct Upstreams {
    list: Box<[Upstream]>,
    /// Where the next round-robin turn starts.
    next: AtomicUsize,
}

#[derive(Debug)]
struct Upstream {
    authority: Authority,
    /// Until when its last hint asked to be left alone.
    held_until: Mutex<Option<Instant>>,
}

impl Upstreams {
    /// A pool of `authorities`, none held (at least one: checked by the layer's constructor).
    pub(super) fn new(authorities: Vec<Authority>) -> Self {
        let list = authorities
            .into_iter()
            .map(|authority| Upstream {
                authority,
                held_until: Mutex::new(None),
            })
            .collect();
        Self {
            list,
            next: AtomicUsize::new(0),
        }
    }

    /// The upstream the next attempt goes to at `now`: the next in turn that is not held; when
    /// every one is, `Err` with when the first hold ends.
    pub(super) fn choose(&self, now: Instant) -> Result<usize, Instant> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut first_free = None::<Instant>;
        for step in 0..self.list.len() {
            let index = (start + step) % self.list.len();
            match self.list[index].held_until(now) {
                None => return Ok(index),
                Some(until) => {
                    first_free = Some(first_free.map_or(until, |first| first.min(until)))
                }
            }
        }
        Err(first_free.expect("a pool has at least one upstream"))
    }

    /// Whether an upstream other than `index` is free at `now` (the turn does not move).
    pub(super) fn another_free(&self, index: usize, now: Instant) -> bool {
        (0..self.list.len())
            .any(|other| other != index && self.list[other].held_until(now).is_none())
    }

    /// The authority of upstream `index`.
    pub(super) fn authority(&self, index: usize) -> &Authority {
        &self.list[index].authority
    }

    /// Upstream `index` asked at `now` to be left alone for `after` (at most `max_hold`).
    pub(super) fn hold(&self, index: usize, now: Instant, after: Duration, max_hold: Duration) {
        // A huge hint with no cap holds it as long as an instant can say.
        let hold = after.min(max_hold);
        let until = now
            .checked_add(hold)
            .unwrap_or_else(|| now + Duration::from_secs(u32::MAX.into()));
        let mut held = lock(&self.list[index].held_until);
        // A later hint replaces an earlier one, even a shorter one: the server's latest word.
        *held = Some(until);
    }
}

impl Upstream {
    /// Until when the upstream is held, if it still is at `now`.
    fn held_until(&self, now: Instant) -> Option<Instant> {
        lock(&self.held_until).filter(|until| *until > now)
    }
}

/// The lock, whatever a panicking holder left in it: an instant is always whole.
fn lock(held: &Mutex<Option<Instant>>) -> std::sync::MutexGuard<'_, Option<Instant>> {
    held.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: usize) -> Upstreams {
        Upstreams::new(
            (0..n)
                .map(|i| Authority::try_from(format!("10.0.0.{i}:80")).unwrap())
                .collect(),
        )
    }

    #[test]
    fn turns_go_round_and_skip_a_held_upstream_until_its_hold_ends() {
        let now = Instant::now();
        let upstreams = pool(3);
        let turns: Vec<_> = (0..3).map(|_| upstreams.choose(now).unwrap()).collect();
        assert_eq!(turns, [0, 1, 2]);

        upstreams.hold(1, now, Duration::from_secs(7), Duration::from_secs(60));
        let turns: Vec<_> = (0..4).map(|_| upstreams.choose(now).unwrap()).collect();
        assert_eq!(
            turns,
            [0, 2, 2, 0],
            "1 is skipped, its turn taken by the next"
        );

        let later = now + Duration::from_secs(7);
        assert_eq!(upstreams.choose(later), Ok(1), "the hold is over");
    }

    #[test]
    fn when_every_upstream_is_held_the_first_end_of_a_hold_is_returned() {
        let now = Instant::now();
        let upstreams = pool(2);
        upstreams.hold(0, now, Duration::from_secs(7), Duration::from_secs(60));
        upstreams.hold(1, now, Duration::from_secs(3), Duration::from_secs(60));
        assert_eq!(upstreams.choose(now), Err(now + Duration::from_secs(3)));
        upstreams.hold(0, now, Duration::from_secs(3_600), Duration::from_secs(60));
        upstreams.hold(1, now, Duration::from_secs(3_600), Duration::from_secs(60));
        assert_eq!(
            upstreams.choose(now),
            Err(now + Duration::from_secs(60)),
            "a hint is clamped to the longest hold"
        );
        assert!(!upstreams.another_free(0, now));
        // No cap and a hint of u64::MAX seconds: held, not a panic.
        upstreams.hold(0, now, Duration::MAX, Duration::MAX);
        assert!(!upstreams.another_free(1, now + Duration::from_secs(3_600)));
    }
}

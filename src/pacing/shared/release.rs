//! Releases: the endpoint's one probe stream while it is down (leases, each ended by its
//! probe's outcome or taken back when it expires), and while it ramps the release slots at its
//! rate (GCRA: the next slot is one gap at the rate now after the last), one at a time for a
//! process pacing alone, or in batches for the processes of a fleet, split between its peers.

use super::{gap, probe_gap, LeaseEntry, Mode, Peer, Rules, SharedState, MAX_PEERS};
use crate::pacing::clock::Nanos;
use crate::pacing::rate::Ramp;

/// How far behind its schedule a ramp may release at once: a timer wakes the queue at most once
/// a millisecond, so a rate above 1,000/s needs a few releases per wake; an idle moment does not
/// save up a burst beyond that.
const BURST_WINDOW: Nanos = 10_000_000;
/// A fleet's release batch aims at this many slots, so that a process takes slots about once per
/// this many releases.
pub(crate) const SLOTS_PER_CALL: u64 = 24;
/// Slots are never granted further ahead than this: a rate learned now is used within it. A
/// fleet of 100 at 2,000/s (20/s each) needs about this much to take 24 at a time.
const MAX_AHEAD: Nanos = 2_000_000_000;
/// A process that has not asked for this long is no longer counted among the peers.
pub(crate) const PEER_TTL: Nanos = 10_000_000_000;

/// How many releases one ask may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Batch {
    /// The head of the queue of a process pacing alone: one, now or not yet.
    One,
    /// A process of a fleet with `want` requests waiting: up to its fair share of a window of
    /// slots ahead, granted whole.
    Fleet { want: u32 },
}

/// What an ask for a release is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Grant {
    /// The endpoint is open: requests are not paced.
    Unpaced,
    /// One probe: one waiter goes now; its outcome ends the lease.
    Probe { lease: u64, expires: Nanos },
    /// `count` waiters go, at `first`, `first + gap`, …
    Slots {
        first: Nanos,
        gap: Nanos,
        count: u32,
    },
    /// Nothing before then (the next probe, the end of a pause, the next slot in reach).
    At(Nanos),
    /// Every probe lease is held; the first expires then (`Nanos::MAX`: never; a probe's end
    /// frees one sooner).
    Blocked { until: Nanos },
}

impl SharedState {
    /// Whether `holder`'s waiting requests may go at `now`, and how many; taking a release moves
    /// the schedule on. `jitter`, a uniform draw in `[0, 1)`, places the next probe; it is
    /// drawn only if a probe is let through.
    pub(crate) fn release(
        &mut self,
        rules: &Rules<'_>,
        holder: u64,
        batch: Batch,
        now: Nanos,
        jitter: impl FnOnce() -> f64,
    ) -> Grant {
        let want = match batch {
            Batch::One => 1,
            Batch::Fleet { want } => want,
        };
        match self.mode {
            Mode::Open => Grant::Unpaced,
            Mode::Paused { until, .. } => Grant::At(until),
            Mode::Probing => {
                self.leases.retain(|lease| lease.expires > now);
                let limit = rules.pacing.probes_in_flight as usize;
                if self.leases.len() >= limit {
                    let until = self.leases.iter().map(|l| l.expires).min();
                    return Grant::Blocked {
                        until: until.unwrap_or(now),
                    };
                }
                if now < self.next_probe || want == 0 {
                    return Grant::At(self.next_probe.max(now));
                }
                let expires = rules
                    .lease_ttl
                    .map_or(Nanos::MAX, |ttl| now.saturating_add(ttl));
                let lease = LeaseEntry {
                    id: self.next_lease,
                    holder,
                    expires,
                };
                self.next_lease += 1;
                self.leases.push(lease);
                self.probes += 1;
                // Jittered, so that a fleet that lost the endpoint together does not probe in
                // step.
                self.next_probe = now.saturating_add(probe_gap(rules, jitter()));
                Grant::Probe {
                    lease: lease.id,
                    expires,
                }
            }
            Mode::Ramping { ramp, .. } => {
                let gap = gap(ramp.rate(&rules.pacing.rate));
                match batch {
                    Batch::One => self.release_one(gap, now),
                    Batch::Fleet { want } => self.release_batch(rules, &ramp, gap, want, now),
                }
            }
        }
    }

    /// The next slot, if it is due: the slots due since the last release go now, up to
    /// [`BURST_WINDOW`]'s worth.
    fn release_one(&mut self, gap: Nanos, now: Nanos) -> Grant {
        let due = self.last_slot.saturating_add(gap);
        if now < due {
            return Grant::At(due);
        }
        self.last_slot = due.max(now.saturating_sub(BURST_WINDOW));
        Grant::Slots {
            first: now,
            gap,
            count: 1,
        }
    }

    /// Up to `want` slots, a whole batch of them or none yet: a process told to come back when
    /// its batch fits is not handed one slot at a time as the window frees. The window holds
    /// two batches per peer (the one in use and the next), so the fleet's rate is split between
    /// the processes that ask. A process with more waiting than it takes (or told to come back)
    /// is demand until its last slot: the ramp does not open meanwhile.
    fn release_batch(
        &mut self,
        rules: &Rules<'_>,
        ramp: &Ramp,
        gap: Nanos,
        want: u32,
        now: Nanos,
    ) -> Grant {
        let next = self.last_slot.saturating_add(gap);
        if want == 0 {
            return Grant::At(next.max(now));
        }
        let ahead = self.ahead(rules, ramp, gap, now);
        let first = next.max(now.saturating_sub(BURST_WINDOW));
        let reach = now.saturating_add(ahead);
        let window = ahead / gap;
        let fair = (window / (2 * u64::from(self.peers(now)))).max(1);
        let count = u64::from(want).min(fair);
        let last = first.saturating_add((count - 1) * gap);
        if last > reach {
            let at = last - ahead;
            if want > 1 {
                self.demand_until = self.demand_until.max(at);
            }
            return Grant::At(at);
        }
        self.last_slot = last;
        if u64::from(want) > count || count > 1 {
            self.demand_until = self.demand_until.max(last);
        }
        Grant::Slots {
            first,
            gap,
            count: u32::try_from(count).unwrap_or(u32::MAX),
        }
    }

    /// How far ahead of `now` slots may be granted (a batch is granted whole, or not yet): two
    /// batches of [`SLOTS_PER_CALL`] slots per peer, at least a ramp interval, at most
    /// [`MAX_AHEAD`] — and a ramp interval in slow start, whose rate doubles every interval
    /// (slots granted further ahead would hold it back).
    fn ahead(&self, rules: &Rules<'_>, ramp: &Ramp, gap: Nanos, now: Nanos) -> Nanos {
        let interval = rules.interval();
        if let Ramp::SlowStart { .. } = ramp {
            return interval;
        }
        let wanted = gap
            .saturating_mul(2 * SLOTS_PER_CALL)
            .saturating_mul(u64::from(self.peers(now)));
        wanted.clamp(interval, MAX_AHEAD.max(interval))
    }

    /// `holder` asked at `now`: it counts among the peers for [`PEER_TTL`].
    pub(crate) fn seen(&mut self, holder: u64, now: Nanos) {
        if let Some(peer) = self.peers.iter_mut().find(|peer| peer.holder == holder) {
            peer.seen = peer.seen.max(now);
            return;
        }
        let peer = Peer { holder, seen: now };
        if self.peers.len() < MAX_PEERS {
            self.peers.push(peer);
        } else if let Some(oldest) = self.peers.iter_mut().min_by_key(|peer| peer.seen) {
            *oldest = peer;
        }
    }

    /// Processes seen in the last [`PEER_TTL`] (at least 1: the one asking).
    pub(crate) fn peers(&self, now: Nanos) -> u32 {
        let live = self
            .peers
            .iter()
            .filter(|peer| now.saturating_sub(peer.seen) < PEER_TTL)
            .count();
        u32::try_from(live).unwrap_or(u32::MAX).max(1)
    }

    /// The latest time the state holds on to (a pause's end, a lease's expiry, a slot granted):
    /// a record may expire that long after it, and no sooner.
    pub(crate) fn holds_until(&self) -> Nanos {
        let pause = match self.mode {
            Mode::Paused { until, .. } => until,
            _ => 0,
        };
        self.leases
            .iter()
            .map(|lease| lease.expires)
            .filter(|&expires| expires != Nanos::MAX)
            .fold(
                pause
                    .max(self.last_slot)
                    .max(self.next_probe)
                    .max(self.demand_until),
                Nanos::max,
            )
    }
}


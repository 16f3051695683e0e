//! Releases: the endpoint's one probe stream while it is down (leases, each ended by its
//! probe's outcome or taken back when it expires), and while it ramps the release slots at its
//! rate (GCRA: the next slot is one gap at the rate now after the last), one at a time for a
//! process pacing alone, or in batches for the processes of a fleet, split between its peers.

use super::{gap, probe_gap, LeaseEntry, Mode, Peer, Rules, SharedState, MAX_PEERS};
use crate::pacing::clock::{nanos, Nanos};
use crate::pacing::rate::Ramp;
use std::time::Duration;

/// How far behind its schedule a ramp may release at once: a timer wakes the queue at most once
/// a millisecond, so a rate above 1,000/s needs a few releases per wake. Only slots that passed
/// while requests waited are owed: an idle moment saves up no burst at all (and a process alone
/// owes none of a spell it did not run: `EndpointState::release`).
const BURST_WINDOW: Nanos = 10_000_000;
/// A fleet's release batch aims at this many slots, so that a process calls the store about
/// once per this many releases.
pub(crate) const SLOTS_PER_CALL: u64 = 16;
/// Slots are never granted further ahead than this: a rate learned now is used within it. A
/// fleet of 100 at 2,000/s (20/s each) needs about this much to take 16 at a time.
const MAX_AHEAD: Nanos = 1_000_000_000;
/// A batch's slots are granted evenly spaced: it ends where the predicted spacing moves by
/// more than this share of its first.
const SPACING_DRIFT: f64 = 0.05;
/// A peer that has not asked for this long has no requests waiting that count for the shares
/// (a peer with work asks at least once per batch, at most [`MAX_AHEAD`] apart).
const ACTIVE_TTL: Nanos = 2 * MAX_AHEAD + 500_000_000;
/// A process that has not asked for this long is no longer counted among the peers.
pub(crate) const PEER_TTL: Nanos = 10_000_000_000;

/// How many releases one ask may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Batch {
    /// The head of the queue of a process pacing alone: one, now or not yet. Requests have
    /// waited since `waiting_since` (now, for one that finds nobody waiting): no slot before
    /// it is owed to them.
    One { waiting_since: Nanos },
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
            Batch::One { .. } => 1,
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
                    let mut at = self.next_probe.max(now);
                    if want > 0 {
                        // A probe is out: the process asks again before the next probe if
                        // the probe may have ended by then.
                        let newest = self.leases.iter().map(|lease| lease.expires).max();
                        if let (Some(ttl), Some(expires)) = (rules.lease_ttl, newest) {
                            let out = now.saturating_sub(expires.saturating_sub(ttl));
                            let wait = rules.pacing.wait_for_probe(Duration::from_nanos(out));
                            at = at.min(now.saturating_add(nanos(wait)));
                        }
                    }
                    return Grant::At(at);
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
                    Batch::One { waiting_since } => self.release_one(gap, waiting_since, now),
                    Batch::Fleet { want } => {
                        self.release_batch(rules, holder, &ramp, gap, want, now)
                    }
                }
            }
        }
    }

    /// The next slot, if it is due: the slots due since the last release and while requests
    /// waited (since `waiting_since`) go now, up to [`BURST_WINDOW`]'s worth. A request that
    /// finds the queue empty takes the slot now, and the next is a gap later: a burst that
    /// arrives after an idle moment (a worker's batch fetched at once) is spread at the rate,
    /// not let through at once up to the window, beyond what a receiver's own limit may hold.
    fn release_one(&mut self, gap: Nanos, waiting_since: Nanos, now: Nanos) -> Grant {
        let due = self.last_slot.saturating_add(gap);
        if now < due {
            return Grant::At(due);
        }
        let owed_from = now.saturating_sub(BURST_WINDOW).max(waiting_since);
        self.last_slot = due.max(owed_from.min(now));
        Grant::Slots {
            first: now,
            gap,
            count: 1,
        }
    }

    /// Slots of `holder`'s share of the rate, for about [`SLOTS_PER_CALL`] releases. The
    /// fleet's rate is split between the peers that have requests waiting: on the fleet's slot
    /// clock (`slots.rs`), cut into cycles of as many slots as there are such peers, each peer
    /// has one slot per cycle, at its rank among them (`rank`), so that the slots of the fleet
    /// interleave as one process's would and every process with work gets the same rate. A
    /// peer's slots follow on from its last batch's; a new stream starts with one slot (its
    /// share is set once the processes asking with it are known). A batch covers an interval
    /// in slow start (the rate doubles every interval: slots granted further ahead would hold
    /// it back), else up to [`MAX_AHEAD`], and is cut where the predicted rate moves by more
    /// than [`SPACING_DRIFT`] (its slots are granted evenly spaced). A process told to come
    /// back, or given more than one slot, is demand until its last: the ramp does not open
    /// meanwhile. `want == 0`: the process has nothing waiting, and no longer counts.
    fn release_batch(
        &mut self,
        rules: &Rules<'_>,
        holder: u64,
        ramp: &Ramp,
        gap: Nanos,
        want: u32,
        now: Nanos,
    ) -> Grant {
        let Some(index) = self.peers.iter().position(|peer| peer.holder == holder) else {
            // Not among the peers (a state without them): the fleet's next slot.
            // Whether its requests waited is not known here: owed up to the window.
            return self.release_one(gap, 0, now);
        };
        if want == 0 {
            self.peers[index].idle = true;
            return Grant::At(now);
        }
        let peers = f64::from(self.active_peers(now));
        let share = gap.saturating_mul(peers as u64).max(1);
        let period = match ramp {
            Ramp::SlowStart { .. } => rules.interval(),
            Ramp::Cubic { .. } => share
                .saturating_mul(SLOTS_PER_CALL)
                .clamp(rules.interval(), MAX_AHEAD.max(rules.interval())),
        };
        let reach = now.saturating_add(period);
        // The clock a burst window ago: a slot due since then still goes (none from before the
        // ramp began).
        let rate = ramp.rate(&rules.pacing.rate);
        let floor = (self.slots - BURST_WINDOW as f64 / 1e9 * rate).max(0.0);
        let peer = self.peers[index];
        // A stream that starts (or starts again after a lapse) takes a phase.
        let lapsed = peer.last_at.saturating_add(2 * share + rules.interval()) < now;
        let fresh = !peer.placed || peer.idle || lapsed;
        if !peer.placed || peer.idle {
            let phase = self.widest_phase(index, now);
            let peer = &mut self.peers[index];
            (peer.phase, peer.placed, peer.idle) = (phase, true, false);
        }
        // `peers` was counted before an idle asker was placed again: a rank past it would fall
        // on rank 0's slots.
        let phase = f64::from(self.rank(index, now).min(peers as u32 - 1));
        let lower = if fresh {
            floor
        } else {
            floor.max(peer.last + peers / 2.0)
        };
        let first_slot = ((lower - phase) / peers).ceil() * peers + phase;
        let Some(first_offset) = self.slot_offset(rules, first_slot, reach) else {
            let at = self.ask_again(rules, ramp, first_slot, period, now);
            if want > 1 {
                self.demand_until = self.demand_until.max(at);
            }
            return Grant::At(at);
        };
        // A fresh stream takes one slot (its share is set once its peers are known).
        let wanted = if fresh { 1 } else { want };
        let (last, count) =
            self.evenly_spaced(rules, (first_slot, first_offset), peers, reach, wanted);
        let first = self.at_offset(first_offset);
        let last_at = self.at_offset(last.1);
        (self.peers[index].last, self.peers[index].last_at) = (last.0, last_at);
        if want > count || count > 1 {
            self.demand_until = self.demand_until.max(last_at);
        }
        let gap = if count > 1 {
            ((last.1 - first_offset) / f64::from(count - 1)) as Nanos
        } else {
            share
        };
        Grant::Slots {
            first: first.max(now.saturating_sub(BURST_WINDOW)),
            gap,
            count,
        }
    }

    /// Up to `want` slots of one peer (`peers` apart on the slot clock) from `first` (a slot and
    /// its offset from the clock's reading, so that the gap is exact), within `reach` and as long
    /// as they stay evenly spaced (within [`SPACING_DRIFT`]): the last one, and how many.
    fn evenly_spaced(
        &self,
        rules: &Rules<'_>,
        first: (f64, f64),
        peers: f64,
        reach: Nanos,
        want: u32,
    ) -> ((f64, f64), u32) {
        let mut last = first;
        let mut count = 1u32;
        let mut spacing = None;
        while count < want {
            let slot = last.0 + peers;
            let Some(at) = self.slot_offset(rules, slot, reach) else {
                break;
            };
            let step = at - last.1;
            let spaced = *spacing.get_or_insert(step);
            if (step - spaced).abs() > spaced * SPACING_DRIFT {
                break;
            }
            last = (slot, at);
            count += 1;
        }
        (last, count)
    }

    /// When to ask again for a batch of `period` whose first slot, `slot`, is beyond its reach:
    /// a period before that slot's time (now at the earliest); in slow start, whose rate doubles
    /// every interval, at the end of the period.
    fn ask_again(
        &self,
        rules: &Rules<'_>,
        ramp: &Ramp,
        slot: f64,
        period: Nanos,
        now: Nanos,
    ) -> Nanos {
        let reach = now.saturating_add(period);
        match ramp {
            Ramp::SlowStart { .. } => reach,
            Ramp::Cubic { .. } => self
                .slot_time(rules, slot, now.saturating_add(MAX_AHEAD * 4))
                .map_or(reach, |at| at.saturating_sub(period).max(now)),
        }
    }

    /// The middle of the widest gap between the phases of the other peers with a stream (peer
    /// `index` excluded), as a fraction of a cycle in 32 bits; 0 when there are none.
    fn widest_phase(&self, index: usize, now: Nanos) -> u32 {
        let mut phases: Vec<u64> = self
            .peers
            .iter()
            .enumerate()
            .filter(|&(i, peer)| i != index && peer.placed && peer.is_active(now))
            .map(|(_, peer)| u64::from(peer.phase))
            .collect();
        if phases.is_empty() {
            return 0;
        }
        phases.sort_unstable();
        // The gap after each phase, to the next one (the last wraps round to the first).
        let (mut best, mut widest) = (0, 0);
        for (i, &phase) in phases.iter().enumerate() {
            let to = phases.get(i + 1).copied().unwrap_or(phases[0] + (1 << 32));
            if to - phase > widest {
                (best, widest) = (phase, to - phase);
            }
        }
        ((best + widest / 2) % (1 << 32)) as u32
    }

    /// Where peer `index`'s slots fall in each cycle of the fleet's slots: its place among the
    /// peers with a stream, in the order of their phases. Each of `n` peers has one slot of
    /// every `n` in turn, however many joined or left (phases alone, each new one in the middle
    /// of the widest gap, are dense where the last halving left off: with 100 peers, twice as
    /// many fall in the first 56 % of a cycle as in the rest).
    fn rank(&self, index: usize, now: Nanos) -> u32 {
        let own = &self.peers[index];
        let before = self
            .peers
            .iter()
            .enumerate()
            .filter(|&(i, peer)| {
                i != index
                    && peer.placed
                    && peer.is_active(now)
                    && (peer.phase, peer.holder) < (own.phase, own.holder)
            })
            .count();
        u32::try_from(before).unwrap_or(u32::MAX)
    }

    /// `holder` asked at `now`: it counts among the peers for [`PEER_TTL`].
    pub(crate) fn seen(&mut self, holder: u64, now: Nanos) {
        if let Some(peer) = self.peers.iter_mut().find(|peer| peer.holder == holder) {
            peer.seen = peer.seen.max(now);
            return;
        }
        let peer = Peer::new(holder, now);
        if self.peers.len() < MAX_PEERS {
            self.peers.push(peer);
        } else if let Some(oldest) = self.peers.iter_mut().min_by_key(|peer| peer.seen) {
            *oldest = peer;
        }
    }

    /// Processes that asked in the last [`ACTIVE_TTL`] with requests waiting (at least 1):
    /// the fleet's rate is split between them.
    pub(crate) fn active_peers(&self, now: Nanos) -> u32 {
        self.waiting_peers(now).max(1)
    }

    /// Processes that asked in the last [`ACTIVE_TTL`] with requests waiting (0 in a record
    /// nobody paces, or one heard of long ago).
    pub(crate) fn waiting_peers(&self, now: Nanos) -> u32 {
        let live = self.peers.iter().filter(|peer| peer.is_active(now)).count();
        u32::try_from(live).unwrap_or(u32::MAX)
    }

    /// What the peers that reported lately say the endpoint takes, per second: the sum of
    /// their success rates over their last reports (`None` without any: a process alone).
    pub(crate) fn reported_accepted(&self, now: Nanos) -> Option<f64> {
        let mut reported = self
            .peers
            .iter()
            .filter(|peer| peer.reported != 0 && now.saturating_sub(peer.reported) < ACTIVE_TTL)
            .peekable();
        reported.peek()?;
        Some(reported.map(|peer| f64::from(peer.accepted)).sum())
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

impl Peer {
    /// Whether it counts for the shares: it asked with requests waiting lately.
    fn is_active(&self, now: Nanos) -> bool {
        !self.idle && now.saturating_sub(self.seen) < ACTIVE_TTL
    }
}

//! The fleet-shared state of one endpoint, a plain value with one transition function,
//! [`SharedState::apply`]. Every store runs this function and nothing else: the in-process
//! store on the value under its lock, the Redis store on the value it read (and then writes
//! back with a compare-and-set). Times are microseconds of the store's clock ([`Micros`]), so
//! the state machine is unit-tested without a runtime and without a clock.
//!
//! ```text
//!   Open ── Down (a process saw an outage) ──> Probing: one probe stream for the fleet,
//!    ^                                          │       leases that expire
//!    │ no demand for idle_to_open               │ a success
//!    │                                          v
//!    └──────────────────────────────────────── Ramping: release slots (GCRA) at the learned
//!                                                        rate, slow start then cubic
//!   any mode ── Pause until T ──> Paused ──> Ramping from the probe rate (or the cut ramp)
//! ```
//!
//! The rules of the rate (when an interval cuts it, how a pause resumes) are today's
//! `endpoint.rs`'s, on fleet-wide counts: phase 2 of issue 21 makes this the one copy of them.

use crate::pacing::config::PacingConfig;
use crate::pacing::rate::Ramp;

/// Microseconds on the store's clock (Redis `TIME`; an in-process store's own epoch).
pub(crate) type Micros = u64;

/// Losses in one interval below this do not cut the rate (as in `endpoint.rs`).
const MIN_LOSSES_TO_CUT: u32 = 3;
/// How far behind its schedule a ramp may release at once (as in `endpoint.rs`).
const BURST_WINDOW: Micros = 10_000;
/// A release batch aims at this many slots, so that a process takes slots about once per this
/// many releases: at most two round trips each (one more when another process wrote first),
/// within the issue's 0.1 calls per request.
pub(crate) const SLOTS_PER_CALL: u64 = 24;
/// Slots are never granted further ahead than this: a rate learned now is used within it. A
/// fleet of 100 at 2,000/s (20/s each) needs about this much to take 24 at a time.
const MAX_AHEAD: Micros = 2_000_000;
/// A process that has not called for this long is no longer counted among the peers.
pub(crate) const PEER_TTL: Micros = 10_000_000;
/// The most peers remembered; past it the one seen longest ago is replaced.
pub(crate) const MAX_PEERS: usize = 256;

/// The fleet's timing that is not in [`PacingConfig`]: set on the store, the same for every
/// process of a fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Leasing {
    /// A probe lease not ended by then is taken back (its holder may be dead).
    pub(crate) lease_ttl: Micros,
}

/// The rules one transition reads.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rules<'a> {
    pub(crate) pacing: &'a PacingConfig,
    pub(crate) leasing: Leasing,
}

impl Rules<'_> {
    fn probe_interval(&self) -> Micros {
        micros(self.pacing.probe_interval)
    }

    fn ramp_interval(&self) -> Micros {
        micros(self.pacing.ramp_interval).max(1)
    }
}

pub(crate) fn micros(d: std::time::Duration) -> Micros {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The mode and what each mode needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Mode {
    Open,
    Probing,
    Ramping {
        ramp: Ramp,
        /// The current measuring interval: when it started, the fleet's successes and losses
        /// reported in it.
        interval_start: Micros,
        successes: u32,
        losses: u32,
        /// Losses before this do not cut the rate again (one loss event, one cut).
        cut_settles_at: Micros,
        /// Successes per second in the last interval that closed.
        last_accepted: f64,
    },
    Paused {
        until: Micros,
        /// The ramp to resume with (the running one, cut as for a loss), if one ran.
        resume: Option<Ramp>,
    },
}

/// A probe in flight: let through by the fleet's one probe stream, taken back at `expires`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeaseEntry {
    pub(crate) id: u64,
    pub(crate) holder: u64,
    pub(crate) expires: Micros,
}

/// A process that called recently (the fleet's size, for fair shares and the fallback).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Peer {
    pub(crate) holder: u64,
    pub(crate) seen: Micros,
}

/// One endpoint's fleet-shared pacing state.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SharedState {
    pub(crate) mode: Mode,
    /// Probing: the earliest next probe.
    pub(crate) next_probe: Micros,
    pub(crate) leases: Vec<LeaseEntry>,
    pub(crate) next_lease: u64,
    /// Ramping: the last slot granted. The next is one gap later at the rate *now* (GCRA with
    /// the rate read at each grant), so a rate that grows brings the next slot forward.
    pub(crate) last_slot: Micros,
    /// The last time a process had requests waiting (or saw a loss).
    pub(crate) last_demand: Micros,
    pub(crate) peers: Vec<Peer>,
    /// Probes let through, fleet-wide, since the record was made.
    pub(crate) probes: u64,
}

/// What a process asks of the shared state, in store time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Op {
    /// The process saw the endpoint fail (its own congestion outcomes in a row, or an empty
    /// budget); `jitter` in `[0, 1)` places the first probe.
    Down { jitter: f64 },
    /// The endpoint asked for a pause until then.
    Pause { until: Micros },
    /// The process has `want` requests waiting: may some go? `jitter` places the next probe.
    Release { want: u32, jitter: f64 },
    /// A probe ended; `success`: the endpoint took it.
    ProbeDone { lease: u64, success: bool },
    /// Outcomes of released requests since the process last reported.
    Report { successes: u32, losses: u32 },
    /// Nothing: read the state as it is now.
    Refresh,
}

/// What the shared state answers a [`Op::Release`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Grant {
    /// The endpoint is open: requests are not paced.
    Unpaced,
    /// One probe: one waiter goes now; its outcome ends the lease.
    Probe { lease: u64, expires: Micros },
    /// `count` waiters go, at `first`, `first + gap`, …
    Slots {
        first: Micros,
        gap: Micros,
        count: u32,
    },
    /// Nothing before then (the next probe, the end of a pause, the next slot in reach).
    At(Micros),
    /// Every probe lease is held; the first expires then (a probe's end frees one sooner).
    Blocked { until: Micros },
}

impl SharedState {
    /// The state of an endpoint nobody has seen fail: open.
    pub(crate) fn new() -> Self {
        Self {
            mode: Mode::Open,
            next_probe: 0,
            leases: Vec::new(),
            next_lease: 0,
            last_slot: 0,
            last_demand: 0,
            peers: Vec::new(),
            probes: 0,
        }
    }

    /// The release rate now, per second (0 while open).
    pub(crate) fn rate(&self, rules: &Rules<'_>) -> f64 {
        match &self.mode {
            Mode::Open => 0.0,
            Mode::Probing | Mode::Paused { .. } => rules.pacing.rate.floor,
            Mode::Ramping { ramp, .. } => ramp.rate(&rules.pacing.rate),
        }
    }

    /// Processes seen in the last [`PEER_TTL`] (at least 1: the one asking).
    pub(crate) fn peers(&self, now: Micros) -> u32 {
        let live = self
            .peers
            .iter()
            .filter(|peer| now.saturating_sub(peer.seen) < PEER_TTL)
            .count();
        u32::try_from(live).unwrap_or(u32::MAX).max(1)
    }

    /// The latest time the state holds on to (a pause's end, a lease's expiry): a record may
    /// expire that long after it, and no sooner.
    pub(crate) fn holds_until(&self) -> Micros {
        let pause = match self.mode {
            Mode::Paused { until, .. } => until,
            _ => 0,
        };
        self.leases
            .iter()
            .map(|lease| lease.expires)
            .fold(pause.max(self.last_slot).max(self.next_probe), Micros::max)
    }

    /// Applies one operation by `holder` at `now`. The answer is `Some` for a release.
    pub(crate) fn apply(
        &mut self,
        rules: &Rules<'_>,
        holder: u64,
        op: Op,
        now: Micros,
    ) -> Option<Grant> {
        self.advance(rules, now);
        if !matches!(op, Op::Refresh) && !matches!(self.mode, Mode::Open) {
            self.seen(holder, now);
        }
        match op {
            Op::Down { jitter } => {
                if let Mode::Open = self.mode {
                    self.enter_probing(rules, jitter, now);
                    self.seen(holder, now);
                }
                None
            }
            Op::Pause { until } => {
                self.pause_until(rules, until, now);
                None
            }
            Op::Release { want, jitter } => Some(self.release(rules, holder, want, jitter, now)),
            Op::ProbeDone { lease, success } => {
                self.leases.retain(|entry| entry.id != lease);
                if success && matches!(self.mode, Mode::Probing) {
                    self.enter_ramping(rules, now);
                }
                None
            }
            Op::Report { successes, losses } => {
                self.report(rules, successes, losses, now);
                None
            }
            Op::Refresh => None,
        }
    }

    fn seen(&mut self, holder: u64, now: Micros) {
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

    fn release(
        &mut self,
        rules: &Rules<'_>,
        holder: u64,
        want: u32,
        jitter: f64,
        now: Micros,
    ) -> Grant {
        if want > 0 && !matches!(self.mode, Mode::Open) {
            self.last_demand = self.last_demand.max(now);
        }
        match self.mode {
            Mode::Open => Grant::Unpaced,
            Mode::Paused { until, .. } => Grant::At(until),
            Mode::Probing => {
                self.leases.retain(|lease| lease.expires > now);
                let limit = rules.pacing.probes_in_flight as usize;
                if self.leases.len() >= limit {
                    let until = self.leases.iter().map(|l| l.expires).min().unwrap_or(now);
                    return Grant::Blocked { until };
                }
                if now < self.next_probe || want == 0 {
                    return Grant::At(self.next_probe.max(now));
                }
                let lease = LeaseEntry {
                    id: self.next_lease,
                    holder,
                    expires: now.saturating_add(rules.leasing.lease_ttl),
                };
                self.next_lease += 1;
                self.leases.push(lease);
                self.probes += 1;
                self.next_probe = now.saturating_add(probe_gap(rules, jitter));
                Grant::Probe {
                    lease: lease.id,
                    expires: lease.expires,
                }
            }
            Mode::Ramping { ramp, .. } => {
                if want == 0 {
                    let next = self
                        .last_slot
                        .saturating_add(gap(ramp.rate(&rules.pacing.rate)));
                    return Grant::At(next.max(now));
                }
                let gap = gap(ramp.rate(&rules.pacing.rate));
                let ahead = self.ahead(rules, &ramp, gap, now);
                let first = self
                    .last_slot
                    .saturating_add(gap)
                    .max(now.saturating_sub(BURST_WINDOW));
                let reach = now.saturating_add(ahead);
                // The window holds two batches per peer: the one in use and the next.
                let window = ahead / gap;
                let fair = (window / (2 * u64::from(self.peers(now)))).max(1);
                // A whole batch or nothing: a process told to come back when its batch fits
                // is not handed one slot at a time as the window frees.
                let count = u64::from(want).min(fair);
                let last = first.saturating_add((count - 1) * gap);
                if last > reach {
                    return Grant::At(last - ahead);
                }
                self.last_slot = last;
                Grant::Slots {
                    first,
                    gap,
                    count: u32::try_from(count).unwrap_or(u32::MAX),
                }
            }
        }
    }

    /// How far ahead of `now` slots may be granted (a batch is granted whole, or not yet): two
    /// batches of [`SLOTS_PER_CALL`] slots per peer, at least a ramp interval, at most
    /// [`MAX_AHEAD`] — and a ramp interval in slow start, whose rate doubles every interval
    /// (slots granted further ahead would hold it back).
    fn ahead(&self, rules: &Rules<'_>, ramp: &Ramp, gap: Micros, now: Micros) -> Micros {
        let interval = rules.ramp_interval();
        if let Ramp::SlowStart { .. } = ramp {
            return interval;
        }
        let wanted = gap
            .saturating_mul(2 * SLOTS_PER_CALL)
            .saturating_mul(u64::from(self.peers(now)));
        wanted.clamp(interval, MAX_AHEAD.max(interval))
    }

    fn report(&mut self, rules: &Rules<'_>, ok: u32, lost: u32, now: Micros) {
        if lost > 0 {
            self.last_demand = self.last_demand.max(now);
        }
        match &mut self.mode {
            Mode::Probing if ok > 0 => self.enter_ramping(rules, now),
            Mode::Ramping {
                ramp,
                successes,
                losses,
                ..
            } => {
                let interval = rules.pacing.ramp_interval.as_secs_f64();
                for _ in 0..ok.min(1 << 20) {
                    ramp.on_success(&rules.pacing.rate, interval);
                }
                *successes = successes.saturating_add(ok);
                *losses = losses.saturating_add(lost);
            }
            _ => {}
        }
    }

    /// As `endpoint.rs`'s `pause_until`: the latest pause wins; a running ramp resumes cut.
    fn pause_until(&mut self, rules: &Rules<'_>, until: Micros, now: Micros) {
        if until <= now {
            return;
        }
        self.mode = match self.mode {
            Mode::Paused {
                until: current,
                resume,
            } => Mode::Paused {
                until: current.max(until),
                resume,
            },
            Mode::Ramping {
                mut ramp,
                last_accepted,
                ..
            } => {
                ramp.lose(&rules.pacing.rate, last_accepted);
                Mode::Paused {
                    until,
                    resume: Some(ramp),
                }
            }
            _ => Mode::Paused {
                until,
                resume: None,
            },
        };
    }

    /// Moves the mode on with time: a pause that ended, intervals that closed, a ramp with no
    /// demand left.
    fn advance(&mut self, rules: &Rules<'_>, now: Micros) {
        if let Mode::Paused { until, resume } = self.mode {
            if now < until {
                return;
            }
            // Read late, the pause ended at `until`: the ramp starts then.
            self.enter_ramping(rules, until);
            if let (
                Some(cut),
                Mode::Ramping {
                    ramp,
                    last_accepted,
                    ..
                },
            ) = (resume, &mut self.mode)
            {
                *ramp = cut;
                *last_accepted = cut.rate(&rules.pacing.rate);
            }
            self.last_demand = self.last_demand.max(until);
        }
        let interval = rules.ramp_interval();
        let Mode::Ramping {
            ramp,
            interval_start,
            successes,
            losses,
            cut_settles_at,
            last_accepted,
        } = &mut self.mode
        else {
            return;
        };
        let secs = rules.pacing.ramp_interval.as_secs_f64();
        while now >= interval_start.saturating_add(interval) {
            let total = *successes + *losses;
            *last_accepted = f64::from(*successes) / secs;
            let loss = if total == 0 {
                0.0
            } else {
                f64::from(*losses) / f64::from(total)
            };
            if loss > rules.pacing.loss_threshold && *losses >= MIN_LOSSES_TO_CUT {
                if *interval_start >= *cut_settles_at {
                    ramp.lose(&rules.pacing.rate, *last_accepted);
                    *cut_settles_at = *interval_start + interval * 2;
                }
            } else {
                ramp.interval_passed(secs);
            }
            *successes = 0;
            *losses = 0;
            *interval_start += interval;
            if now >= interval_start.saturating_add(interval * 8) {
                *interval_start = now;
            }
        }
        let idle = micros(rules.pacing.idle_to_open);
        if now.saturating_sub(self.last_demand) >= idle && *losses == 0 {
            self.mode = Mode::Open;
        }
    }

    fn enter_probing(&mut self, rules: &Rules<'_>, jitter: f64, now: Micros) {
        self.mode = Mode::Probing;
        self.next_probe = now.saturating_add(probe_gap(rules, jitter));
        self.last_demand = now;
    }

    fn enter_ramping(&mut self, rules: &Rules<'_>, now: Micros) {
        self.mode = Mode::Ramping {
            ramp: Ramp::start(&rules.pacing.rate),
            interval_start: now,
            successes: 0,
            losses: 0,
            cut_settles_at: now,
            last_accepted: 0.0,
        };
        // The next waiter may go at once: the endpoint just answered.
        self.last_slot = now.saturating_sub(gap(rules.pacing.rate.floor));
        self.last_demand = self.last_demand.max(now);
    }
}

impl Default for SharedState {
    fn default() -> Self {
        Self::new()
    }
}

/// A jittered probe gap: `U(interval / 2, 3 * interval / 2)` for `jitter` in `[0, 1)`.
fn probe_gap(rules: &Rules<'_>, jitter: f64) -> Micros {
    let interval = rules.probe_interval();
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.5
    };
    interval / 2 + (interval as f64 * jitter) as Micros
}

/// The time between two slots at `rate` per second (at least 1 µs).
fn gap(rate: f64) -> Micros {
    ((1e6 / rate).round() as Micros).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pacing::Pacing;

    const MS: Micros = 1_000;
    const HOLDER: u64 = 7;

    fn config() -> PacingConfig {
        Pacing::new().config().clone()
    }

    fn rules(config: &PacingConfig) -> Rules<'_> {
        Rules {
            pacing: config,
            leasing: Leasing {
                lease_ttl: 10_000 * MS,
            },
        }
    }

    fn release(s: &mut SharedState, rules: &Rules<'_>, want: u32, now: Micros) -> Grant {
        s.apply(rules, HOLDER, Op::Release { want, jitter: 0.5 }, now)
            .expect("a release answers")
    }

    fn down(rules: &Rules<'_>, now: Micros) -> SharedState {
        let mut s = SharedState::new();
        s.apply(rules, HOLDER, Op::Down { jitter: 0.5 }, now);
        assert_eq!(s.mode, Mode::Probing);
        s
    }

    /// A ramp that started at the time returned (a probe's success).
    fn ramping(rules: &Rules<'_>, now: Micros) -> (SharedState, Micros) {
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
        let expires = 500 * MS + rules.leasing.lease_ttl;
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
        // Slow start: one ramp interval ahead at most.
        assert_eq!(count, 1);
        assert_eq!(release(&mut s, &rules, 100, now), Grant::At(now + 400 * MS));
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
        assert!(
            matches!(release(&mut s, &rules, 1, now), Grant::Slots { first, .. } if first == now)
        );
        let Grant::At(slow) = release(&mut s, &rules, 1, now) else {
            panic!("the probe rate's gap")
        };
        let report = Op::Report {
            successes: 1,
            losses: 0,
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
        let interval = micros(config.ramp_interval);
        let report = |successes, losses| Op::Report { successes, losses };
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
        let interval = micros(config.ramp_interval);
        let report = Op::Report {
            successes: 100,
            losses: 0,
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
        let idle = micros(config.idle_to_open);
        let (mut s, at) = ramping(&rules, 0);
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

    fn release_as(s: &mut SharedState, rules: &Rules<'_>, holder: u64, now: Micros) {
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
        assert_eq!(s.holds_until(), at + rules.leasing.lease_ttl);
    }
}

//! With a [store](crate::pacing::store): what a process holds of an endpoint the fleet paces,
//! beyond its replica ([`Link`]; the endpoint's side of it is `fleet.rs`). Its
//! [`EndpointState`](super::EndpointState) keeps a replica of the fleet's state (the last one a call returned, with
//! this process's events since applied to it), which answers everything that needs no call: is
//! the endpoint paced, what is the predicted wait, did a hint pause it. What this module adds:
//!
//! * **Releases from the fleet**: the head of the queue asks the store for a release only when
//!   the replica is paced, not paused, and the process holds no unused slot and no probe; the
//!   store answers with a probe of the fleet's one stream, a batch of slots (consumed here, one
//!   per release, at their times), or when to ask again.
//! * **Events**: what the process learns (its own outage run, a pause, a hint, a probe's end,
//!   the outcomes of its releases) goes into an outbox, sent with the next call. A down report,
//!   a pause, a hint that paused, and a probe's end are sent at once; outcomes with the next
//!   ask, or once [`REPORT_EVERY`] are pending, or within a ramp interval when some were
//!   losses, or within [`REPORT_WITHIN`](crate::pacing::shared::REPORT_WITHIN) in any case.
//! * **One call at a time** per endpoint, made outside the endpoint's lock: answered at once by
//!   an in-process store, or awaited on a task of its own.
//!
//! A local burst of losses (enough of them to cut a rate, at more than the loss threshold)
//! drops the unused slots: they were granted at a rate the endpoint no longer takes.

use crate::pacing::mode::PacingMode;
use crate::pacing::rules::PacingRules;
use crate::pacing::shared::Signal;
use crate::pacing::store::{self, Event, Lease};
use std::time::Duration;
use tokio::time::Instant;

/// Outcomes pending past this many are reported without waiting for the next ask.
pub(crate) const REPORT_EVERY: u32 = 32;
/// How far behind its time an unused slot may still be used (as a process alone catches up).
pub(super) const SLOT_GRACE: Duration = Duration::from_millis(10);
/// Losses in the outbox below this are not a burst, whatever their share.
const BURST_LOSSES: u32 = 3;

/// What a process holds of an endpoint its fleet paces, beyond its replica.
#[derive(Debug, Default)]
pub(crate) struct Link {
    pub(super) slots: Option<Slots>,
    /// A probe of the fleet's stream granted to this process, for the head of its queue.
    pub(super) ticket: Option<Lease>,
    /// Since when every ask made while requests waited was answered that the fleet's probe
    /// leases are all held (cleared by any other answer, and once the endpoint is not probing).
    pub(super) blocked_since: Option<Instant>,
    /// The store said not to ask again before then, in this mode and at this rate: a new mode
    /// is a new answer (a ramp that starts has its first slot now, not at the next probe), and
    /// so is a rate grown by [`STALE_GROWTH`] (the next slot came forward).
    pub(super) not_before: Option<NotBefore>,
    pub(super) outbox: Outbox,
    /// A call is in flight.
    pub(super) calling: bool,
    /// The head asked for a release that nothing in hand answers.
    pub(super) wanted: bool,
    /// The last ask said requests were waiting: when none are left, the fleet is told (the
    /// process no longer counts for the shares).
    pub(super) asked: bool,
    /// A timer is armed to send the outbox then.
    pub(super) timer: Option<Instant>,
    /// When the outcomes were last reported (the next report's span starts there).
    pub(super) reported_at: Option<Instant>,
    /// When the replica was last heard from the store: a cached view no newer than this says
    /// nothing the replica does not know.
    pub(super) heard_at: Option<Instant>,
}

/// Slots granted and not used yet: the next at `next`, then one `gap` apart, granted while
/// the fleet's rate was `rate`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Slots {
    pub(super) next: Instant,
    pub(super) gap: Duration,
    pub(super) left: u32,
    pub(super) rate: f64,
}

/// What the process has to tell the fleet.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    pub(super) down: Option<f64>,
    pub(super) pause: Option<Instant>,
    pub(super) hint: Option<Instant>,
    pub(super) done: Vec<(Lease, bool)>,
    pub(super) successes: u32,
    pub(super) losses: u32,
    /// When the oldest outcome counted came.
    pub(super) oldest: Option<Instant>,
    /// Something to send at once.
    pub(super) urgent: bool,
}

/// A store's "not before then".
#[derive(Clone, Copy, Debug)]
pub(super) struct NotBefore {
    pub(super) at: Instant,
    pub(super) mode: PacingMode,
    pub(super) rate: f64,
}

/// A rate grown by this factor since the store said when to ask again makes the answer stale.
pub(super) const STALE_GROWTH: f64 = 1.5;

/// What the endpoint's store should do next.
pub(crate) enum StoreNext {
    /// Nothing to send.
    Nothing,
    /// Send these events (the call is marked in flight).
    Call(Vec<Event>),
    /// Send the outcomes pending then, if nothing sends them first.
    Timer(Instant),
}

/// What a process was when the store's release reached it: whether requests wait, the mode it
/// adopted, its rate.
pub(super) struct Granted {
    pub(super) waiting: bool,
    pub(super) mode: PacingMode,
    pub(super) rate: f64,
}

impl Link {
    /// Takes the outbox as the events of the next call: the down report, the pause, the hint, the
    /// probes ended, and the outcomes counted since the last report (which is then now).
    pub(super) fn drain_outbox(&mut self, config: &PacingRules, now: Instant) -> Vec<Event> {
        let outbox = std::mem::take(&mut self.outbox);
        let counted = outbox.successes + outbox.losses;
        let mut events = Vec::with_capacity(4 + outbox.done.len());
        if let Some(jitter) = outbox.down {
            events.push(Event::Down { jitter });
        }
        if let Some(until) = outbox.pause {
            events.push(Event::Pause { until });
        }
        if let Some(until) = outbox.hint {
            events.push(Event::Hint { until });
        }
        for (lease, success) in outbox.done {
            events.push(Event::ProbeDone { lease, success });
        }
        if counted > 0 {
            // Since the last report, unless the outcomes began well after it.
            let since = match (self.reported_at, outbox.oldest) {
                (Some(reported), Some(oldest)) if oldest <= reported + config.ramp_interval => {
                    reported
                }
                (_, Some(oldest)) => oldest,
                (reported, None) => reported.unwrap_or(now),
            };
            events.push(Event::Report {
                successes: outbox.successes,
                losses: outbox.losses,
                over: now
                    .saturating_duration_since(since)
                    .max(config.ramp_interval),
            });
            self.reported_at = Some(now);
        }
        events
    }

    /// The store answered a call made at `now` (at `answered`) with `release`: kept for the
    /// head (a probe, slots), or when to ask again.
    pub(super) fn granted(
        &mut self,
        config: &PacingRules,
        release: store::Release,
        granted: Granted,
        now: Instant,
        answered: Instant,
    ) {
        let Granted {
            waiting,
            mode,
            rate,
        } = granted;
        self.wanted = false;
        self.not_before = None;
        let blocked_since = self.blocked_since.take();
        match release {
            store::Release::Probe(lease) if waiting => self.ticket = Some(lease),
            store::Release::Probe(lease) => {
                // Nobody to send it: the lease goes back.
                self.outbox.done.push((lease, false));
                self.outbox.urgent = true;
            }
            store::Release::Slots { first, gap, count } => {
                // The first slot was due when the store granted it: the round trip does not
                // make it too late to use (else a fresh stream, whose first slot is a burst
                // window back, would drop every grant on arrival and ask again forever).
                let due = answered.checked_sub(SLOT_GRACE).unwrap_or(first);
                self.slots = Some(Slots {
                    next: first.max(due),
                    gap,
                    left: count,
                    rate,
                });
            }
            store::Release::At(at) => self.not_before = Some(NotBefore { at, mode, rate }),
            store::Release::Blocked { until } => {
                // A probe's success starts the fleet's ramp, which this process hears of
                // only when it asks (or its cached view is read again). The longer every
                // lease has been held, the less likely a probe ends within a round trip
                // (an endpoint that swallows requests): it asks again after as long again,
                // up to a probe interval.
                let since = blocked_since.unwrap_or(now);
                if waiting {
                    self.blocked_since = Some(since);
                }
                let wait = config.wait_for_probe(now.saturating_duration_since(since));
                let at = until.min(now + wait);
                self.not_before = Some(NotBefore { at, mode, rate });
            }
            store::Release::Unpaced => {}
        }
    }

    /// An outcome was recorded: `lease` if it was a probe's, `paced`: whether the endpoint was
    /// paced (an open endpoint's outcomes are nobody's business), `down`: the jitter of a down
    /// report, if the process's run reached the outage rule.
    pub(crate) fn recorded(
        &mut self,
        config: &PacingRules,
        lease: Option<Lease>,
        signal: Signal,
        paced: bool,
        down: Option<f64>,
        now: Instant,
    ) {
        let outbox = &mut self.outbox;
        if let Some(lease) = lease {
            outbox.done.push((lease, signal == Signal::Success));
            outbox.urgent = true;
        } else if paced && signal != Signal::Neutral {
            match signal {
                Signal::Success => outbox.successes = outbox.successes.saturating_add(1),
                _ => outbox.losses = outbox.losses.saturating_add(1),
            }
            outbox.oldest.get_or_insert(now);
        }
        if let Some(jitter) = down {
            self.down(jitter);
        }
        let outbox = &self.outbox;
        let total = outbox.successes + outbox.losses;
        if outbox.losses >= BURST_LOSSES
            && f64::from(outbox.losses) > config.loss_threshold * f64::from(total)
        {
            // A burst of losses: the fleet hears of it at once, and the slots in hand, granted
            // at a rate the endpoint no longer takes, go back.
            self.slots = None;
            self.outbox.urgent = true;
        }
    }

    /// A hint asked one request to wait until `until`; `paused`: the replica paused for it.
    pub(crate) fn hinted(&mut self, until: Instant, paused: bool) {
        self.outbox.hint = Some(self.outbox.hint.map_or(until, |h| h.max(until)));
        self.outbox.urgent |= paused;
    }

    /// The process's run reached the outage rule (or its budget is empty).
    pub(crate) fn down(&mut self, jitter: f64) {
        self.outbox.down = Some(jitter);
        self.outbox.urgent = true;
    }

    /// The endpoint (or a breaker) asked for a pause until `until`.
    pub(crate) fn pause(&mut self, until: Instant) {
        self.outbox.pause = Some(self.outbox.pause.map_or(until, |p| p.max(until)));
        self.outbox.urgent = true;
    }

    /// The next unused slot: `Ok` if it is due now (and taken), `Err` with its time if not yet,
    /// `None` when none is left. Slots whose time has long passed are dropped.
    pub(super) fn take_slot(&mut self, now: Instant) -> Option<Result<(), Instant>> {
        let slots = self.slots.as_mut()?;
        while slots.left > 0 && slots.next + SLOT_GRACE < now {
            slots.next += slots.gap;
            slots.left -= 1;
        }
        if slots.left == 0 {
            self.slots = None;
            return None;
        }
        if slots.next > now {
            return Some(Err(slots.next));
        }
        slots.next += slots.gap;
        slots.left -= 1;
        Some(Ok(()))
    }
}

//! The fleet side of an endpoint: what [`EndpointState`] does with its [`Link`] when a store
//! keeps the fleet's state (releases from the fleet, the calls to make, the answers adopted).

use super::link::{Granted, Link, NotBefore, StoreNext, REPORT_EVERY, STALE_GROWTH};
use super::EndpointState;
use crate::pacing::mode::{trace, PacingMode};
use crate::pacing::pass::{Pass, Release};
use crate::pacing::rate::Ramp;
use crate::pacing::rules::PacingRules;
use crate::pacing::shared::{Mode, Signal, REPORT_WITHIN};
use crate::pacing::store::{self, Applied, Event};
use rand::RngExt;
use tokio::time::Instant;

impl EndpointState {
    /// Whether `view` (what the store's cache says) is news to this process: heard after the
    /// replica was.
    pub(crate) fn is_news(&self, view: &store::View) -> bool {
        self.link
            .as_ref()
            .and_then(|link| link.heard_at)
            .map_or(true, |heard| view.heard_at > heard)
    }

    /// Whether the head's last ask was answered (no call for it in flight).
    pub(crate) fn answered(&self) -> bool {
        self.link
            .as_ref()
            .is_some_and(|link| !link.wanted && !link.calling)
    }

    fn link(&mut self) -> &mut Link {
        self.link.as_mut().expect("a store's endpoint")
    }

    /// The timer armed to send the outbox fired.
    pub(crate) fn report_timer_fired(&mut self) {
        self.link().timer = None;
    }

    /// [`try_release`](Self::try_release) with a store: from the probe or slots in hand, or
    /// the replica's pause, or else the store is asked.
    pub(crate) fn release_linked(&mut self, config: &PacingRules, now: Instant) -> Release {
        let rules = self.rules(config);
        let at = self.clock.to_shared(now);
        self.shared.advance(&rules, self.queue.len() > 1, at);
        self.settle();
        match self.shared.mode {
            Mode::Open => return Release::Now(Pass::Paced { released: at }),
            Mode::Paused { until, .. } => return Release::At(self.clock.to_local(until)),
            _ => {}
        }
        let link = self.link();
        if let Some(lease) = link.ticket.take() {
            self.probes += 1;
            return Release::Now(Pass::Probe(lease));
        }
        match link.take_slot(now) {
            Some(Ok(())) => return Release::Now(Pass::Paced { released: at }),
            Some(Err(at)) => return Release::At(at),
            None => {}
        }
        let mode = self.shared.mode_kind();
        let rate = self.rate(config);
        let link = self.link();
        if let Some(NotBefore { at, .. }) = link
            .not_before
            .filter(|told| told.at > now && told.mode == mode && rate < told.rate * STALE_GROWTH)
        {
            return Release::At(at);
        }
        link.wanted = true;
        Release::Asked
    }

    /// What to send the store now, if anything (a call is then in flight).
    pub(crate) fn next_call(&mut self, config: &PacingRules, now: Instant) -> StoreNext {
        let waiting = self.queue.len();
        let open = self.shared.is_open();
        // In slow start every success grows the rate: the fleet hears of them within an
        // interval, as of losses always.
        let slow_start = matches!(
            self.shared.mode,
            Mode::Ramping {
                ramp: Ramp::SlowStart { .. },
                ..
            }
        );
        let EndpointState { link, rng, .. } = self;
        let link = link.as_mut().expect("a store's endpoint");
        if link.calling {
            return StoreNext::Nothing;
        }
        // A probe that ended freed a lease while every lease was held: the next probe may be
        // due, and requests here wait for it (the head, told to ask again later, is not
        // asking). The others, backed off, are most likely later: the probes stay with the
        // processes that had them.
        let freed = link.blocked_since.is_some() && !link.outbox.done.is_empty();
        let ask = (link.wanted || freed) && waiting > 0 && !open;
        // Nothing waits any more: the fleet hears it (within an interval), and splits its rate
        // between the others.
        let done = link.asked && waiting == 0 && !open;
        let outbox = &link.outbox;
        let counted = outbox.successes + outbox.losses;
        let report_by = outbox.oldest.map(|oldest| {
            // A loss or two is not a burst (sent at once), but it is news within an interval:
            // later, the fleet's cut would be settled already and the loss would cut again
            // (a fleet of 100 at 20/s each took a second to report 32 outcomes). The report
            // carries the successes pending beside it, and the fleet cuts from the share that
            // succeeded, which the lag of the other processes' successes does not bias much.
            let within = if slow_start || outbox.losses > 0 {
                config.ramp_interval
            } else {
                REPORT_WITHIN
            };
            oldest + within
        });
        let report = counted >= REPORT_EVERY || report_by.is_some_and(|by| by <= now);
        // Told with the outcomes pending if there are any, else at once.
        let done_now = done && counted == 0;
        if !(ask || outbox.urgent || report || done_now) {
            return match report_by {
                Some(by) if link.timer.map_or(true, |t| t > by) => {
                    link.timer = Some(by);
                    StoreNext::Timer(by)
                }
                _ => StoreNext::Nothing,
            };
        }
        let mut events = link.drain_outbox(config, now);
        if ask || done {
            let want = u32::try_from(waiting).unwrap_or(u32::MAX);
            let jitter: f64 = rng.random();
            events.push(Event::Release { want, jitter });
            link.asked = want > 0;
        }
        link.calling = true;
        StoreNext::Call(events)
    }

    /// A call made at `now` was answered at `answered` (or could not be made: `None`). The
    /// replica becomes the fleet's state, with the events recorded since the call applied to it
    /// again; a release answered is kept for the head, which is woken.
    pub(crate) fn adopt(
        &mut self,
        config: &PacingRules,
        applied: Option<Applied>,
        now: Instant,
        answered: Instant,
    ) {
        let mode = self.shared.mode_kind();
        let rate = self.rate(config);
        let link = self.link();
        link.calling = false;
        link.timer = None;
        let Some(applied) = applied else {
            link.wanted = false;
            let at = now + config.probe_interval;
            link.not_before = Some(NotBefore { at, mode, rate });
            self.wake_head();
            return;
        };
        link.heard_at = Some(applied.view.heard_at);
        let before = self.shared.mode_kind();
        self.shared = applied.state.clone();
        self.clock = applied.clock;
        self.replay(config, now);
        self.shared.take_entered();
        let after = self.shared.mode_kind();
        if after != before {
            trace(&self.labels, after);
            self.run = 0;
        }
        // Against what it counts, not `before`: an endpoint made from a cached view that the
        // store confirms is counted now.
        self.gauge_mode();
        let waiting = !self.queue.is_empty();
        let rate = self.rate(config);
        let link = self.link.as_mut().expect("a store's endpoint");
        if after != PacingMode::Probing {
            // Held leases are a probing endpoint's: a later outage starts afresh.
            link.blocked_since = None;
        }
        if let Some(release) = applied.release() {
            let granted = Granted {
                waiting,
                mode: after,
                rate,
            };
            link.granted(config, release, granted, now, answered);
        } else if link
            .slots
            .is_some_and(|slots| rate * STALE_GROWTH < slots.rate)
        {
            // The fleet cut its rate: slots granted at the old one go back unused.
            link.slots = None;
        }
        self.wake_head();
    }

    /// Applies the events not sent yet to the replica: it is the fleet's state as this process
    /// will have made it.
    fn replay(&mut self, config: &PacingRules, now: Instant) {
        let rules = self.rules(config);
        let clock = self.clock;
        let link = self.link.as_ref().expect("a store's endpoint");
        let outbox = &link.outbox;
        let now = clock.to_shared(now);
        let (down, pause, hint) = (outbox.down, outbox.pause, outbox.hint);
        let (successes, losses) = (outbox.successes, outbox.losses);
        if let Some(jitter) = down {
            self.shared.down(&rules, now, || jitter);
        }
        if let Some(until) = pause {
            self.shared.pause_until(&rules, clock.to_shared(until), now);
        }
        if let Some(until) = hint {
            self.shared.hinted(&rules, clock.to_shared(until), now);
        }
        for _ in 0..successes.min(REPORT_EVERY * 4) {
            self.shared.outcome(&rules, Signal::Success, None, now);
        }
        for _ in 0..losses.min(REPORT_EVERY * 4) {
            self.shared.outcome(&rules, Signal::Congestion, None, now);
        }
    }
}

//! With a [store](super::store): how a process paces an endpoint the fleet shares. Its
//! [`EndpointState`] keeps a replica of the fleet's state (the last one a call returned, with
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
//!   losses, or within [`REPORT_WITHIN`] in any case.
//! * **One call at a time** per endpoint, made outside the endpoint's lock: answered at once by
//!   an in-process store, or awaited on a task of its own.
//!
//! A local burst of losses (enough of them to cut a rate, at more than the loss threshold)
//! drops the unused slots: they were granted at a rate the endpoint no longer takes.

use super::config::PacingConfig;
use super::endpoint::{trace, EndpointState, PacingMode, Pass, Release};
use super::endpoints::Endpoint;
use super::rate::Ramp;
use super::shared::{Mode, Signal};
use super::store::{Applied, Event, Lease};
use rand::RngExt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;
use tokio::time::Instant;

/// Outcomes pending past this many are reported without waiting for the next ask.
pub(crate) const REPORT_EVERY: u32 = 32;
/// Outcomes are reported within this, whatever else happens.
pub(crate) const REPORT_WITHIN: Duration = Duration::from_secs(1);
/// How far behind its time an unused slot may still be used (as a process alone catches up).
const SLOT_GRACE: Duration = Duration::from_millis(10);
/// Losses in the outbox below this are not a burst, whatever their share.
const BURST_LOSSES: u32 = 3;

/// What a process holds of an endpoint its fleet paces, beyond its replica.
#[derive(Debug, Default)]
pub(crate) struct Link {
    slots: Option<Slots>,
    /// A probe of the fleet's stream granted to this process, for the head of its queue.
    ticket: Option<Lease>,
    /// The store said not to ask again before then, in this mode and at this rate: a new mode
    /// is a new answer (a ramp that starts has its first slot now, not at the next probe), and
    /// so is a rate grown by [`STALE_GROWTH`] (the next slot came forward).
    not_before: Option<NotBefore>,
    outbox: Outbox,
    /// A call is in flight.
    calling: bool,
    /// The head asked for a release that nothing in hand answers.
    wanted: bool,
    /// The last ask said requests were waiting: when none are left, the fleet is told (the
    /// process no longer counts for the shares).
    asked: bool,
    /// A timer is armed to send the outbox then.
    timer: Option<Instant>,
    /// When the outcomes were last reported (the next report's span starts there).
    reported_at: Option<Instant>,
    /// When the replica was last heard from the store: a cached view no newer than this says
    /// nothing the replica does not know.
    heard_at: Option<Instant>,
}

/// Slots granted and not used yet: the next at `next`, then one `gap` apart, granted while
/// the fleet's rate was `rate`.
#[derive(Clone, Copy, Debug)]
struct Slots {
    next: Instant,
    gap: Duration,
    left: u32,
    rate: f64,
}

/// What the process has to tell the fleet.
#[derive(Debug, Default)]
struct Outbox {
    down: Option<f64>,
    pause: Option<Instant>,
    hint: Option<Instant>,
    done: Vec<(Lease, bool)>,
    successes: u32,
    losses: u32,
    /// When the oldest outcome counted came.
    oldest: Option<Instant>,
    /// Something to send at once.
    urgent: bool,
}

/// A store's "not before then".
#[derive(Clone, Copy, Debug)]
struct NotBefore {
    at: Instant,
    mode: PacingMode,
    rate: f64,
}

/// A rate grown by this factor since the store said when to ask again makes the answer stale.
const STALE_GROWTH: f64 = 1.5;

/// What the endpoint's store should do next.
pub(crate) enum Next {
    /// Nothing to send.
    Nothing,
    /// Send these events (the call is marked in flight).
    Call(Vec<Event>),
    /// Send the outcomes pending then, if nothing sends them first.
    Timer(Instant),
}

impl Link {
    /// An outcome was recorded: `lease` if it was a probe's, `paced`: whether the endpoint was
    /// paced (an open endpoint's outcomes are nobody's business), `down`: the jitter of a down
    /// report, if the process's run reached the outage rule.
    pub(crate) fn recorded(
        &mut self,
        config: &PacingConfig,
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
    fn take_slot(&mut self, now: Instant) -> Option<Result<(), Instant>> {
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

impl EndpointState {
    /// Whether `view` (what the store's cache says) is news to this process: heard after the
    /// replica was.
    pub(crate) fn is_news(&self, view: &super::store::View) -> bool {
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

    /// [`try_release`](Self::try_release) with a store: from the probe or slots in hand, or
    /// the replica's pause, or else the store is asked.
    pub(crate) fn release_linked(&mut self, config: &PacingConfig, now: Instant) -> Release {
        let rules = self.rules(config);
        let at = self.clock.to_shared(now);
        self.shared.advance(&rules, self.queue.len() > 1, at);
        self.settle();
        match self.shared.mode {
            Mode::Open => return Release::Now(Pass::Paced),
            Mode::Paused { until, .. } => return Release::At(self.clock.to_local(until)),
            _ => {}
        }
        let link = self.link();
        if let Some(lease) = link.ticket.take() {
            self.probes += 1;
            return Release::Now(Pass::Probe(lease));
        }
        match link.take_slot(now) {
            Some(Ok(())) => return Release::Now(Pass::Paced),
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
    pub(crate) fn next_call(&mut self, config: &PacingConfig, now: Instant) -> Next {
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
            return Next::Nothing;
        }
        let ask = link.wanted && waiting > 0 && !open;
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
                    Next::Timer(by)
                }
                _ => Next::Nothing,
            };
        }
        let outbox = std::mem::take(&mut link.outbox);
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
            let since = match (link.reported_at, outbox.oldest) {
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
            link.reported_at = Some(now);
        }
        if ask || done {
            let want = u32::try_from(waiting).unwrap_or(u32::MAX);
            let jitter: f64 = rng.random();
            events.push(Event::Release { want, jitter });
            link.asked = want > 0;
        }
        link.calling = true;
        Next::Call(events)
    }

    /// A call made at `now` was answered at `answered` (or could not be made: `None`). The
    /// replica becomes the fleet's state, with the events recorded since the call applied to it
    /// again; a release answered is kept for the head, which is woken.
    pub(crate) fn adopt(
        &mut self,
        config: &PacingConfig,
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
            trace(after);
            self.run = 0;
        }
        let waiting = !self.queue.is_empty();
        let rate = self.rate(config);
        let link = self.link.as_mut().expect("a store's endpoint");
        if let Some(release) = applied.release() {
            link.wanted = false;
            link.not_before = None;
            match release {
                super::store::Release::Probe(lease) if waiting => link.ticket = Some(lease),
                super::store::Release::Probe(lease) => {
                    // Nobody to send it: the lease goes back.
                    link.outbox.done.push((lease, false));
                    link.outbox.urgent = true;
                }
                super::store::Release::Slots { first, gap, count } => {
                    // The first slot was due when the store granted it: the round trip does not
                    // make it too late to use (else a fresh stream, whose first slot is a burst
                    // window back, would drop every grant on arrival and ask again forever).
                    let due = answered.checked_sub(SLOT_GRACE).unwrap_or(first);
                    link.slots = Some(Slots {
                        next: first.max(due),
                        gap,
                        left: count,
                        rate,
                    });
                }
                super::store::Release::At(at) => {
                    link.not_before = Some(NotBefore {
                        at,
                        mode: after,
                        rate,
                    });
                }
                super::store::Release::Blocked { until } => {
                    // The probe in flight ends within a round trip to the endpoint, most
                    // likely: a success starts the fleet's ramp, which this process hears of
                    // only when it asks (or its cached view is read again), so it asks again
                    // within a ramp interval, not a probe interval.
                    let at = until.min(now + config.ramp_interval);
                    link.not_before = Some(NotBefore {
                        at,
                        mode: after,
                        rate,
                    });
                }
                super::store::Release::Unpaced => {}
            }
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
    fn replay(&mut self, config: &PacingConfig, now: Instant) {
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

/// Sends what `endpoint` has to send its store, until nothing is left: an answer ready at once
/// (an in-process store) is taken in place; a pending one on a task of its own, which goes on
/// from there when it is answered.
pub(crate) fn pump(endpoint: &Arc<Endpoint>) {
    let Some(store) = endpoint.config.config().store.clone() else {
        return;
    };
    loop {
        let now = Instant::now();
        let next = endpoint.lock().next_call(endpoint.config.config(), now);
        let events = match next {
            Next::Nothing => return,
            Next::Timer(at) => {
                let endpoint = Arc::clone(endpoint);
                spawn(async move {
                    tokio::time::sleep_until(at).await;
                    endpoint.lock().link().timer = None;
                    pump(&endpoint);
                });
                return;
            }
            Next::Call(events) => events,
        };
        let pacing = endpoint.config.clone();
        let key = Arc::clone(&endpoint.key);
        let store = Arc::clone(&store);
        let mut call = Box::pin(async move { store.apply(&pacing, &key, &events, now).await });
        match poll_once(call.as_mut()) {
            Some(applied) => endpoint.adopted(Some(applied), now, now),
            None => {
                let later = Arc::clone(endpoint);
                let spawned = spawn(async move {
                    let applied = call.await;
                    later.adopted(Some(applied), now, Instant::now());
                    pump(&later);
                });
                if !spawned {
                    endpoint.adopted(None, now, now);
                }
                return;
            }
        }
    }
}

impl Endpoint {
    fn adopted(&self, applied: Option<Applied>, now: Instant, answered: Instant) {
        self.lock()
            .adopt(self.config.config(), applied, now, answered);
    }
}

/// Runs `task` on the current tokio runtime; `false` outside one.
fn spawn(task: impl Future<Output = ()> + Send + 'static) -> bool {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(task);
            true
        }
        Err(_) => false,
    }
}

/// Polls `future` once, with a waker that does nothing: its answer if it has one already.
fn poll_once<F: Future + ?Sized>(future: Pin<&mut F>) -> Option<F::Output> {
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    let waker = Waker::from(Arc::new(Noop));
    match future.poll(&mut Context::from_waker(&waker)) {
        Poll::Ready(output) => Some(output),
        Poll::Pending => None,
    }
}

//! [`HedgeFuture`]: the copies of one request in flight, and the choice of the answer.
//!
//! The first copy is polled in place (a request that is never hedged allocates nothing more);
//! what a hedged request needs besides (its timer, the kept copy, the hedges in flight, a
//! transient answer held back) is one boxed [`Race`]. The choice of the answer is
//! [`Race::settle`], apart from the polling.

use super::config::{Admission, Config};
use super::sketch::SharedSketch;
use super::stats::Event;
use crate::classify::{Classify, Outcome};
use crate::message::{RetryRequest, RetryResponse};
use crate::report::HedgeReport;
use http::uri::Authority;
use http::Method;
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};
use tower_service::Service;

pin_project! {
    /// The response future of [`Hedge`](super::Hedge): the first classified success (or
    /// permanent answer) of the copies sent, or, when every copy failed transiently, the first of
    /// those failures. Dropping it cancels every copy in flight.
    pub struct HedgeFuture<S, Req, C>
    where
        S: Service<Req>,
    {
        // `None` once it answered (or lost).
        #[pin]
        first: Option<S::Future>,
        // `None` for a request that is not hedged.
        race: Option<Box<Race<S, Req>>>,
        endpoint: Option<Arc<SharedSketch>>,
        config: Arc<Config<C>>,
        sent_at: Instant,
    }
}

/// What a hedged request holds besides its first copy.
pub(crate) struct Race<S, Req>
where
    S: Service<Req>,
{
    /// A clone of the service that took the first copy, polled ready before each hedge.
    service: S,
    /// The request kept for the next hedge; `None` once the last one took it.
    copy: Option<Req>,
    method: Method,
    authority: Option<Authority>,
    delay: Duration,
    /// When the next hedge is due.
    due: Instant,
    /// Made at the first poll that finds the first copy unanswered: most requests answer before
    /// their delay, and never pay for a timer.
    timer: Option<Pin<Box<Sleep>>>,
    phase: Phase,
    hedges: Vec<Flight<S::Future>>,
    /// A transient failure kept while other copies may still do better, and its copy's index.
    held: Option<Answer<S, Req>>,
    /// Copies sent, the first included.
    copies: u32,
}

/// A copy's result and its index (0 for the first copy).
type Answer<S, Req> = (
    Result<<S as Service<Req>>::Response, <S as Service<Req>>::Error>,
    u32,
);

/// The answer of the request, and whether it won the race (a success or a permanent answer)
/// rather than being the transient failure held back once every copy failed.
type Settled<S, Req> = (Answer<S, Req>, bool);

/// Where the sending of the next hedge stands.
enum Phase {
    /// Waiting for the delay.
    Timing,
    /// Paid for; waiting for the service to be ready.
    Readying(Admission),
    /// No more hedges: the last one went out, one was refused, or a copy failed.
    Stopped,
}

/// A hedge in flight.
struct Flight<F> {
    future: Pin<Box<F>>,
    sent_at: Instant,
    index: u32,
}

impl<S, Req> Race<S, Req>
where
    S: Service<Req>,
{
    pub(crate) fn new(
        service: S,
        copy: Req,
        method: Method,
        authority: Option<Authority>,
        delay: Duration,
        now: Instant,
    ) -> Self {
        Self {
            service,
            copy: Some(copy),
            method,
            authority,
            delay,
            due: now + delay,
            timer: None,
            phase: Phase::Timing,
            hedges: Vec::new(),
            held: None,
            copies: 1,
        }
    }

    /// Copy `index` finished with `result`, classified as `outcome`: the answer of the request,
    /// or `None` while copies in flight (`first_in_flight`, the hedges) may still do better. A
    /// success or a permanent answer wins at once; a transient failure is held back (the first
    /// one held is kept) and, once nothing else is in flight, returned as no win.
    fn settle(
        &mut self,
        result: Result<S::Response, S::Error>,
        outcome: Outcome,
        index: u32,
        first_in_flight: bool,
    ) -> Option<Settled<S, Req>> {
        match outcome {
            Outcome::Success | Outcome::Permanent => return Some(((result, index), true)),
            Outcome::Transient | Outcome::NotSent(_) => {
                // A copy failed: the retry layer above decides what follows, not more hedges.
                self.phase = Phase::Stopped;
                if self.held.is_none() {
                    self.held = Some((result, index));
                }
            }
        }
        if first_in_flight || !self.hedges.is_empty() {
            None
        } else {
            self.held.take().map(|held| (held, false))
        }
    }

    /// The next copy of the request: a clone while more hedges may follow, the kept request
    /// for the last one.
    fn next_copy(&mut self, last: bool) -> Option<Req>
    where
        Req: RetryRequest,
    {
        if last {
            self.copy.take()
        } else {
            self.copy.as_ref().and_then(Req::try_clone)
        }
    }
}

impl<S, Req, C> HedgeFuture<S, Req, C>
where
    S: Service<Req>,
{
    /// The future of a request whose first copy is `first`; `race` when it may be hedged.
    pub(crate) fn new(
        first: S::Future,
        race: Option<Box<Race<S, Req>>>,
        endpoint: Option<Arc<SharedSketch>>,
        config: Arc<Config<C>>,
        sent_at: Instant,
    ) -> Self {
        Self {
            first: Some(first),
            race,
            endpoint,
            config,
            sent_at,
        }
    }
}

/// Records a finished copy's latency in the endpoint's sketch.
fn record<C>(endpoint: Option<&Arc<SharedSketch>>, config: &Config<C>, sent_at: Instant) {
    if let Some(endpoint) = endpoint {
        let now = Instant::now();
        endpoint
            .sketch()
            .record(&config.rules, now.saturating_duration_since(sent_at), now);
    }
}

impl<S, Req, C> Future for HedgeFuture<S, Req, C>
where
    S: Service<Req>,
    S::Response: RetryResponse,
    Req: RetryRequest,
    C: Classify<S::Response, S::Error>,
{
    type Output = Result<S::Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let config: &Config<C> = this.config;
        let endpoint = this.endpoint.as_ref();
        let Some(race) = this.race.as_deref_mut() else {
            // Not hedged: the first copy's answer, whatever it is.
            let first = this.first.as_mut().as_pin_mut();
            let result = ready!(first.expect("polled after completion").poll(cx));
            this.first.set(None);
            record(endpoint, config, *this.sent_at);
            return Poll::Ready(result);
        };
        loop {
            let mut answer = None;
            if let Some(first) = this.first.as_mut().as_pin_mut() {
                if let Poll::Ready(result) = first.poll(cx) {
                    this.first.set(None);
                    record(endpoint, config, *this.sent_at);
                    let outcome = config.classifier.classify(&race.method, &result);
                    answer = race.settle(result, outcome, 0, false);
                }
            }
            let mut i = 0;
            while answer.is_none() && i < race.hedges.len() {
                let flight = &mut race.hedges[i];
                match flight.future.as_mut().poll(cx) {
                    Poll::Pending => i += 1,
                    Poll::Ready(result) => {
                        let flight = race.hedges.swap_remove(i);
                        record(endpoint, config, flight.sent_at);
                        let outcome = config.classifier.classify(&race.method, &result);
                        let first_in_flight = this.first.is_some();
                        answer = race.settle(result, outcome, flight.index, first_in_flight);
                    }
                }
            }
            if let Some(((mut result, winner), won)) = answer {
                // The losers are cancelled here rather than when the caller drops this future.
                if this.first.is_some() {
                    // The first copy outlived its delay and a hedge beat it: its latency is at
                    // least its age. Left out, the sketch would lose exactly its slow tail, and
                    // the delay would drift down.
                    record(endpoint, config, *this.sent_at);
                    this.first.set(None);
                }
                race.hedges.clear();
                race.phase = Phase::Stopped;
                if won && winner > 0 {
                    config.counters.count(Event::WonByHedge);
                }
                if race.copies > 1 {
                    if let Ok(response) = &mut result {
                        response
                            .extensions_mut()
                            .insert(HedgeReport::new(race.copies, winner));
                    }
                }
                return Poll::Ready(result);
            }
            if !send_hedge(race, endpoint, config, cx) {
                return Poll::Pending;
            }
            // A hedge went out: poll it once, so that its answer wakes this future.
        }
    }
}

/// The first copy outlived its delay (a tail, or a brownout): the endpoint's sketch hears of
/// it; `true` when hedging to the endpoint is paused, and no hedge goes.
fn first_copy_outlived<C>(endpoint: Option<&Arc<SharedSketch>>, config: &Config<C>) -> bool {
    let Some(endpoint) = endpoint else {
        return false;
    };
    let mut sketch = endpoint.sketch();
    if sketch.outlived(&config.rules, Instant::now()) {
        config.counters.count(Event::Pause);
    }
    sketch.paused()
}

/// Moves the sending of the next hedge on: `true` when one was sent now.
fn send_hedge<S, Req, C>(
    race: &mut Race<S, Req>,
    endpoint: Option<&Arc<SharedSketch>>,
    config: &Config<C>,
    cx: &mut Context<'_>,
) -> bool
where
    S: Service<Req>,
    Req: RetryRequest,
{
    loop {
        match &race.phase {
            Phase::Stopped => return false,
            Phase::Timing => {
                let due = race.due;
                let timer = race
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
                if timer.as_mut().poll(cx).is_pending() {
                    return false;
                }
                if race.copies == 1 && first_copy_outlived(endpoint, config) {
                    race.phase = Phase::Stopped;
                    return false;
                }
                race.phase = match config.admit(race.authority.as_ref()) {
                    Ok(admission) => Phase::Readying(admission),
                    Err(refusal) => {
                        config.counters.count(refusal.event());
                        Phase::Stopped
                    }
                };
            }
            Phase::Readying(_) => {
                match race.service.poll_ready(cx) {
                    Poll::Pending => return false,
                    // The first copy stays in flight; a hedge that cannot be sent is no answer.
                    Poll::Ready(Err(_)) => {
                        race.phase = Phase::Stopped;
                        return false;
                    }
                    Poll::Ready(Ok(())) => {}
                }
                let last = race.copies >= config.max_hedges;
                let Some(copy) = race.next_copy(last) else {
                    race.phase = Phase::Stopped;
                    return false;
                };
                let Phase::Readying(admission) = std::mem::replace(&mut race.phase, Phase::Stopped)
                else {
                    unreachable!("matched above")
                };
                admission.spend();
                config.counters.count(Event::Hedge);
                let now = Instant::now();
                race.hedges.push(Flight {
                    future: Box::pin(race.service.call(copy)),
                    sent_at: now,
                    index: race.copies,
                });
                race.copies += 1;
                if !last {
                    race.due = now + race.delay;
                    if let Some(timer) = &mut race.timer {
                        timer.as_mut().reset(race.due);
                    }
                    race.phase = Phase::Timing;
                }
                return true;
            }
        }
    }
}

impl<S, Req, C> fmt::Debug for HedgeFuture<S, Req, C>
where
    S: Service<Req>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (copies, in_flight) = match &self.race {
            Some(race) => (
                race.copies,
                race.hedges.len() + usize::from(self.first.is_some()),
            ),
            None => (1, usize::from(self.first.is_some())),
        };
        f.debug_struct("HedgeFuture")
            .field("hedged", &self.race.is_some())
            .field("copies", &copies)
            .field("in_flight", &in_flight)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::NotSent;

    type TestService = tower::util::BoxCloneSyncService<(), u16, ()>;

    fn race() -> Race<TestService, ()> {
        let service = TestService::new(tower::service_fn(|()| async { Ok::<u16, ()>(200) }));
        let delay = Duration::from_millis(5);
        Race::new(service, (), Method::GET, None, delay, Instant::now())
    }

    #[tokio::test(start_paused = true)]
    async fn a_transient_failure_waits_for_the_copies_in_flight_and_the_first_held_is_kept() {
        let mut race = race();
        assert!(race.settle(Ok(503), Outcome::Transient, 0, true).is_none());
        assert!(matches!(race.phase, Phase::Stopped));
        let not_sent = Outcome::NotSent(NotSent::Refused);
        let settled = race.settle(Ok(502), not_sent, 1, false);
        assert_eq!(settled, Some(((Ok(503), 0), false)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_or_a_permanent_answer_wins_at_once() {
        let mut race = race();
        assert_eq!(
            race.settle(Ok(404), Outcome::Permanent, 1, true),
            Some(((Ok(404), 1), true))
        );
        assert!(race.settle(Ok(503), Outcome::Transient, 0, true).is_none());
        assert_eq!(
            race.settle(Ok(200), Outcome::Success, 1, false),
            Some(((Ok(200), 1), true))
        );
    }
}

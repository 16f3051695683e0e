//! What the session does when a wait between attempts ends: the [`Wait`](crate::retry::wait)
//! only waits and says how it ended ([`Woke`]); [`Session::after_wait`] decides the next step
//! ([`AfterWait`]) from that and `now`, and the response future does what it says.

use super::pacing::{AfterSleep, FirstQueue};
use super::Session;
use crate::abort::{Forbidden, Listener};
use crate::classify::Classify;
use crate::message::{RetryRequest, RetryResponse};
use crate::pacing::{Lane, PassGuard, QueueWait, Resend};
use crate::report::StopReason;
use std::time::Duration;
use tokio::time::Instant;

/// How a wait between attempts ended.
pub(crate) enum Woke<E> {
    /// The abort signal fired, interrupting what the wait was doing.
    Aborted(Forbidden, Interrupted),
    /// A first attempt to an endpoint that was down when it was made is first polled: its turn
    /// to join the endpoint's queue.
    Joining,
    /// The delay is over.
    Slept,
    /// The pacer let it go.
    Released(PassGuard),
    /// The request's deadline came while it waited in the queue (the wait still holds its place,
    /// passed beside the event).
    QueueExpired,
    /// The service is ready for the next attempt.
    Ready,
    /// The service failed to become ready.
    NotReady(E),
}

/// What a wait was doing when it was cut short.
pub(crate) enum Interrupted {
    /// Sleeping, with this much left.
    Sleep(Duration),
    /// Waiting in the endpoint's queue.
    Queue,
    /// Nothing to account for (joining, or readying the service).
    Nothing,
}

/// The next step after a wait.
pub(crate) enum AfterWait<Res, E> {
    /// Wait in the endpoint's queue until the pacer lets it go or until `deadline`: the pacer,
    /// not the budget, lets it go (a budget token held is refunded). `listener`, if any, ends
    /// the wait early on shutdown.
    Queue {
        queue: QueueWait,
        deadline: Option<Instant>,
        listener: Option<Listener>,
    },
    /// Poll the service to readiness.
    Ready,
    /// Send the next attempt: the budget token held is spent.
    Send,
    /// No attempt follows: finish with the last outcome and this reason (the token refunded).
    Stop(StopReason),
    /// No attempt follows: finish with this outcome and reason.
    StopWith(Result<Res, E>, StopReason),
    /// A first attempt handed back unsent: the request is finished, with this output.
    Done(Result<Res, E>),
}

impl<Req, C> Session<Req, C>
where
    Req: RetryRequest,
{
    /// The step after a wait that ended as `woke` at `now`. `queue` is the place the wait still
    /// holds in its endpoint's queue, if any; `retrying` whether the wait holds a last outcome
    /// (a retry), or none (a first attempt).
    pub(crate) fn after_wait<Res, E>(
        &mut self,
        woke: Woke<E>,
        queue: Option<&QueueWait>,
        retrying: bool,
        now: Instant,
    ) -> AfterWait<Res, E>
    where
        Res: RetryResponse,
        C: Classify<Res, E>,
    {
        match woke {
            Woke::Aborted(forbidden, interrupted) => {
                self.interrupted(interrupted, now);
                if retrying {
                    return AfterWait::Stop(self.stop_for(forbidden, now));
                }
                // Aborted before the first attempt: there is no outcome yet, send now.
                AfterWait::Ready
            }
            Woke::Joining => match self.join_first_queue(now) {
                FirstQueue::Joined(queue, listener) => AfterWait::Queue {
                    queue,
                    deadline: self.deadline(),
                    listener,
                },
                FirstQueue::TurnedAway(lane, resend) => {
                    self.first_turned_away(&lane, resend, now, || lane.turned_away(now))
                }
                FirstQueue::Go => AfterWait::Ready,
            },
            Woke::Slept => self.after_sleep(retrying, now),
            Woke::Released(pass) => {
                self.released(pass, now);
                AfterWait::Ready
            }
            Woke::QueueExpired => {
                let queue = queue.expect("a wait in the queue holds its place");
                self.left_queue(now);
                self.sleep_ended();
                if retrying {
                    // The deadline came before the pacer let it go: handed back, with when to
                    // try again.
                    self.resend_in(queue.defer(now));
                    return AfterWait::Stop(StopReason::Deferred);
                }
                let resend = queue.resend_after(now);
                self.first_turned_away(&queue.lane(), resend, now, || queue.deferred())
            }
            // Ready only after the deadline (another request held the permit): the retry is not
            // sent and its token goes back. A first attempt, which has no outcome to return
            // instead, is sent all the same.
            Woke::Ready if retrying && self.past_deadline(now) => {
                AfterWait::Stop(StopReason::Deadline)
            }
            Woke::Ready => AfterWait::Send,
            Woke::NotReady(error) => AfterWait::StopWith(Err(error), StopReason::NotReady),
        }
    }

    /// The step after a sleep (a retry's backoff, a first attempt's jitter) that ended at `now`.
    fn after_sleep<Res, E>(&mut self, retrying: bool, now: Instant) -> AfterWait<Res, E>
    where
        Res: RetryResponse,
        C: Classify<Res, E>,
    {
        self.sleep_ended();
        match self.queue_after_sleep(now) {
            // Paced meanwhile (or limited): the pacer, not the budget, lets it go.
            AfterSleep::Queue(queue) => AfterWait::Queue {
                queue,
                deadline: self.deadline(),
                listener: None,
            },
            AfterSleep::Deferred(_, deferred) if retrying => {
                // Paced meanwhile and no room in the queue: not sent ahead of the probes, handed
                // back with when to retry.
                self.resend_in(deferred.resend);
                AfterWait::Stop(StopReason::Deferred)
            }
            AfterSleep::Deferred(lane, deferred) => {
                self.first_turned_away(&lane, deferred.resend, now, || lane.turned_away(now))
            }
            AfterSleep::Send => AfterWait::Ready,
        }
    }

    /// A first attempt the pacer turned away (or whose deadline came in the queue) has no
    /// outcome to return: handed back unsent if the classifier can (`count` books it to the
    /// pacer), else sent, counted in flight by a limit.
    fn first_turned_away<Res, E>(
        &mut self,
        lane: &Lane,
        resend: Resend,
        now: Instant,
        count: impl FnOnce(),
    ) -> AfterWait<Res, E>
    where
        Res: RetryResponse,
        C: Classify<Res, E>,
    {
        match self.hand_back(resend, now, count) {
            Some(output) => AfterWait::Done(output),
            None => {
                self.send_turned_away(lane, now);
                AfterWait::Ready
            }
        }
    }

    /// A wait cut short by the abort signal: the time it waited, and its end.
    fn interrupted(&mut self, interrupted: Interrupted, now: Instant) {
        match interrupted {
            Interrupted::Sleep(remaining) => {
                self.cut_last_sleep(remaining);
                self.sleep_ended();
            }
            Interrupted::Queue => {
                self.left_queue(now);
                self.sleep_ended();
            }
            Interrupted::Nothing => {}
        }
    }
}

impl<Req, C> Session<Req, C> {
    /// The response future was dropped before it finished (an outer timeout fired), in a wait
    /// that was doing `interrupted` if it was waiting: the report shows the time waited, and the
    /// counters and the slot say it was cancelled.
    pub(crate) fn dropped(&mut self, interrupted: Option<Interrupted>, now: Instant) {
        match interrupted {
            Some(Interrupted::Sleep(remaining)) => self.cut_last_sleep(remaining),
            Some(Interrupted::Queue) => self.left_queue(now),
            Some(Interrupted::Nothing) | None => {}
        }
        self.cancel();
    }
}

#[cfg(test)]
mod tests {
    //! The wait's decisions fed events and instants: no timer, no queue, no service.
    use super::super::tests::{builder, config, sent, Req, Res, MS};
    use super::*;
    use crate::HttpClassifier;
    use http::Method;
    use std::convert::Infallible;

    type Step = AfterWait<Res, Infallible>;

    fn after(
        session: &mut Session<Req, HttpClassifier>,
        woke: Woke<Infallible>,
        retrying: bool,
        now: Instant,
    ) -> Step {
        session.after_wait(woke, None, retrying, now)
    }

    fn stop(step: Step) -> StopReason {
        match step {
            AfterWait::Stop(reason) | AfterWait::StopWith(_, reason) => reason,
            _ => panic!("expected a stop"),
        }
    }

    #[test]
    fn an_abort_stops_a_retry_and_sends_a_first_attempt() {
        let config = config(builder());
        let mut session = sent(&config, Method::GET);
        let now = Instant::now();
        let step = after(
            &mut session,
            Woke::Aborted(Forbidden::Shutdown, Interrupted::Nothing),
            true,
            now,
        );
        assert_eq!(stop(step), StopReason::Aborted);

        let mut session = sent(&config, Method::GET);
        let held = Woke::Aborted(Forbidden::Held(now + 300 * MS), Interrupted::Sleep(50 * MS));
        assert_eq!(stop(after(&mut session, held, true, now)), StopReason::Held);

        let mut session = sent(&config, Method::GET);
        let first = Woke::Aborted(Forbidden::Shutdown, Interrupted::Nothing);
        assert!(matches!(
            after(&mut session, first, false, now),
            AfterWait::Ready
        ));
    }

    #[test]
    fn a_retry_ready_only_past_the_deadline_stops_and_a_first_attempt_is_sent() {
        let config = config(builder().deadline(Duration::from_secs(1)));
        let mut session = sent(&config, Method::GET);
        let started = session.started().unwrap();
        assert!(matches!(
            after(&mut session, Woke::Ready, true, started + 1000 * MS),
            AfterWait::Send
        ));
        assert_eq!(
            stop(after(&mut session, Woke::Ready, true, started + 1001 * MS)),
            StopReason::Deadline
        );
        assert!(matches!(
            after(&mut session, Woke::Ready, false, started + 1001 * MS),
            AfterWait::Send
        ));
    }

    #[test]
    fn a_service_that_fails_readiness_stops_with_its_error() {
        let config = config(builder());
        let mut session = sent(&config, Method::GET);
        let now = Instant::now();
        let gone = || std::io::Error::other("gone");
        let step: AfterWait<Res, std::io::Error> =
            session.after_wait(Woke::NotReady(gone()), None, true, now);
        match step {
            AfterWait::StopWith(Err(error), reason) => {
                assert_eq!(reason, StopReason::NotReady);
                assert_eq!(error.to_string(), "gone");
            }
            _ => panic!("expected a stop with the service's error"),
        }
    }

    #[test]
    fn without_a_pacer_a_wait_that_ends_goes_to_the_service() {
        let config = config(builder());
        let mut session = sent(&config, Method::GET);
        let now = Instant::now();
        assert!(matches!(
            after(&mut session, Woke::Slept, true, now),
            AfterWait::Ready
        ));
        assert!(matches!(
            after(&mut session, Woke::Joining, false, now),
            AfterWait::Ready
        ));
    }
}

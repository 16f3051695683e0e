//! What the session does when a wait between attempts ends: the [`Wait`](crate::retry::wait)
//! only waits and says how it ended ([`Woke`]); [`Session::after_wait`] decides the next step
//! ([`Step`]) from that and `now`, for [`Session::decide`].

use super::pacing::{AfterSleep, FirstQueue};
use super::step::{Interrupted, Step, WaitEnded, Woke};
use super::Session;
use crate::classify::Classify;
use crate::message::{RetryRequest, RetryResponse};
use crate::pacing::{Lane, Resend};
use crate::report::StopReason;
use crate::retry::hand_back::HandBack;
use tokio::time::Instant;

impl<Req, C> Session<Req, C>
where
    Req: RetryRequest,
{
    /// The step after a wait that `ended` at `now`, a stop recorded.
    pub(super) fn after_wait<Res, E>(
        &mut self,
        ended: WaitEnded<'_, E>,
        now: Instant,
    ) -> Step<Res, E>
    where
        Res: RetryResponse,
        C: Classify<Res, E> + HandBack<Res, E>,
    {
        let step = self.wait_step(ended, now);
        if let Step::Stop(reason) | Step::StopWith(_, reason) = &step {
            self.end(*reason);
        }
        step
    }

    /// [`after_wait`](Self::after_wait)'s step, its end not recorded yet.
    fn wait_step<Res, E>(&mut self, ended: WaitEnded<'_, E>, now: Instant) -> Step<Res, E>
    where
        Res: RetryResponse,
        C: Classify<Res, E> + HandBack<Res, E>,
    {
        let WaitEnded {
            woke,
            queue,
            retrying,
        } = ended;
        match woke {
            Woke::Aborted(forbidden, interrupted) => {
                self.interrupted(interrupted, now);
                if retrying {
                    return Step::Stop(self.stop_for(forbidden, now));
                }
                // Aborted before the first attempt: there is no outcome yet, send now.
                Step::Ready
            }
            Woke::Joining => match self.join_first_queue(now) {
                FirstQueue::Joined(queue, listener) => Step::Queue {
                    queue,
                    deadline: self.deadline(),
                    listener,
                },
                FirstQueue::TurnedAway(lane, resend) => {
                    self.first_turned_away(&lane, resend, now, || lane.turned_away(now))
                }
                FirstQueue::Go => Step::Ready,
            },
            Woke::Slept => self.after_sleep(retrying, now),
            Woke::Released(pass) => {
                self.released(pass, now);
                Step::Ready
            }
            Woke::QueueExpired => {
                let queue = queue.expect("a wait in the queue holds its place");
                self.left_queue(now);
                self.sleep_ended();
                if retrying {
                    // The deadline came before the pacer let it go: handed back, with when to
                    // try again.
                    self.resend_in(queue.defer(now));
                    return Step::Stop(StopReason::Deferred);
                }
                let resend = queue.resend_after(now);
                self.first_turned_away(&queue.lane(), resend, now, || queue.deferred())
            }
            // Ready only after the deadline (another request held the permit): the retry is not
            // sent and its token goes back. A first attempt, which has no outcome to return
            // instead, is sent all the same.
            Woke::Ready if retrying && self.past_deadline(now) => Step::Stop(StopReason::Deadline),
            Woke::Ready => Step::Send,
            Woke::NotReady(error) => Step::StopWith(Err(error), StopReason::NotReady),
        }
    }

    /// The step after a sleep (a retry's backoff, a first attempt's jitter) that ended at `now`.
    fn after_sleep<Res, E>(&mut self, retrying: bool, now: Instant) -> Step<Res, E>
    where
        Res: RetryResponse,
        C: Classify<Res, E> + HandBack<Res, E>,
    {
        self.sleep_ended();
        match self.queue_after_sleep(now) {
            // Paced meanwhile (or limited): the pacer, not the budget, lets it go.
            AfterSleep::Queue(queue) => Step::Queue {
                queue,
                deadline: self.deadline(),
                listener: None,
            },
            AfterSleep::Deferred(_, deferred) if retrying => {
                // Paced meanwhile and no room in the queue: not sent ahead of the probes, handed
                // back with when to retry.
                self.resend_in(deferred.resend);
                Step::Stop(StopReason::Deferred)
            }
            AfterSleep::Deferred(lane, deferred) => {
                self.first_turned_away(&lane, deferred.resend, now, || lane.turned_away(now))
            }
            AfterSleep::Send => Step::Ready,
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
    ) -> Step<Res, E>
    where
        Res: RetryResponse,
        C: Classify<Res, E> + HandBack<Res, E>,
    {
        match self.hand_back(resend, now, count) {
            Some(output) => Step::Done(output),
            None => {
                self.send_turned_away(lane, now);
                Step::Ready
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
    use super::super::tests::{builder, config, sent, Layered, Req, Res, MS};
    use super::*;
    use crate::abort::Forbidden;
    use crate::HttpClassifier;
    use http::Method;
    use std::convert::Infallible;
    use std::time::Duration;

    type WaitStep = Step<Res, Infallible>;

    fn after(
        session: &mut Session<Req, Layered<HttpClassifier>>,
        woke: Woke<Infallible>,
        retrying: bool,
        now: Instant,
    ) -> WaitStep {
        let ended = WaitEnded {
            woke,
            queue: None,
            retrying,
        };
        session.after_wait(ended, now)
    }

    fn stop(step: WaitStep) -> StopReason {
        match step {
            Step::Stop(reason) | Step::StopWith(_, reason) => reason,
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
            Step::Ready
        ));
    }

    #[test]
    fn a_retry_ready_only_past_the_deadline_stops_and_a_first_attempt_is_sent() {
        let config = config(builder().deadline(Duration::from_secs(1)));
        let mut session = sent(&config, Method::GET);
        let started = session.started().unwrap();
        assert!(matches!(
            after(&mut session, Woke::Ready, true, started + 1000 * MS),
            Step::Send
        ));
        assert_eq!(
            stop(after(&mut session, Woke::Ready, true, started + 1001 * MS)),
            StopReason::Deadline
        );
        assert!(matches!(
            after(&mut session, Woke::Ready, false, started + 1001 * MS),
            Step::Send
        ));
    }

    #[test]
    fn a_service_that_fails_readiness_stops_with_its_error() {
        let config = config(builder());
        let mut session = sent(&config, Method::GET);
        let now = Instant::now();
        let ended = WaitEnded {
            woke: Woke::NotReady(std::io::Error::other("gone")),
            queue: None,
            retrying: true,
        };
        let step: Step<Res, std::io::Error> = session.after_wait(ended, now);
        match step {
            Step::StopWith(Err(error), reason) => {
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
            Step::Ready
        ));
        assert!(matches!(
            after(&mut session, Woke::Joining, false, now),
            Step::Ready
        ));
    }
}

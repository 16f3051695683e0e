//! [`AbortWatch`]: the part of a waiting request that listens to the abort signal.

use crate::abort::{AbortSignal, Forbidden, Listener};
use http::uri::Authority;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::futures::OwnedNotified;

pin_project! {
    /// Completes when the [`AbortSignal`] ends the wait of a request: shut down, woken for every
    /// sleeper, or a hold for the request's authority. A wake that concerns another authority
    /// (one of the same notifier shard) is not an end: the watch listens again and goes on.
    pub(crate) struct AbortWatch {
        #[pin]
        everyone: OwnedNotified,
        #[pin]
        shard: OwnedNotified,
        // The wake count when the request first listened: a wake for every sleeper since then
        // ends the wait, however many spurious wakes came in between.
        seen_wakes: u64,
        // Whether a hold for the request's authority ends the wait (a sleep), or only a shutdown
        // does (a wait in a paced endpoint's queue, which the hold pauses instead).
        holds: bool,
    }
}

impl AbortWatch {
    /// A watch that a hold ends too (a sleep before a retry).
    pub(crate) fn new(listener: Listener) -> Self {
        Self {
            everyone: listener.everyone,
            shard: listener.shard,
            seen_wakes: listener.seen_wakes,
            holds: true,
        }
    }

    /// A watch that only a shutdown ends (a wait in a paced endpoint's queue).
    pub(crate) fn shutdown_only(listener: Listener) -> Self {
        Self {
            holds: false,
            ..Self::new(listener)
        }
    }

    /// `Ready`, with why, once `abort` ends the wait of a request to `authority`.
    pub(crate) fn poll_abort(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        abort: &AbortSignal,
        authority: Option<&Authority>,
    ) -> Poll<Forbidden> {
        let mut this = self.project();
        loop {
            let everyone = this.everyone.as_mut().poll(cx).is_ready();
            let shard = this.shard.as_mut().poll(cx).is_ready();
            if !everyone && !shard {
                return Poll::Pending;
            }
            // Listen again before checking, so that a wake in between is not lost.
            let fresh = abort.listen(authority);
            if everyone {
                this.everyone.set(fresh.everyone);
            }
            if shard {
                this.shard.set(fresh.shard);
            }
            match abort.forbids(*this.seen_wakes, authority) {
                Some(Forbidden::Held(_)) if !*this.holds => {}
                Some(forbidden) => return Poll::Ready(forbidden),
                None => {}
            }
        }
    }
}

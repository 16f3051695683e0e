//! [`RedeliveryStats`]: what a process's workers did, as counters (and through the `metrics`
//! facade with the `metrics` feature).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters of a [`Redelivery`](crate::Redelivery), shared by its clones.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    stored: AtomicU64,
    due: AtomicU64,
    sent: AtomicU64,
    delivered: AtomicU64,
    stored_again: AtomicU64,
    deferred: AtomicU64,
    deferred_in_bulk: AtomicU64,
    resumed_in_bulk: AtomicU64,
    resumed_for_probes: AtomicU64,
    dead_lettered: AtomicU64,
    endpoints_disabled: AtomicU64,
    handling: AtomicU64,
    handling_peak: AtomicU64,
}

/// A snapshot of the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedeliveryStats {
    /// Deliveries enqueued (first stores).
    pub stored: u64,
    /// Deliveries taken from the queue, due.
    pub due: u64,
    /// Slots that sent the request (one or more attempts).
    pub sent: u64,
    /// Deliveries delivered.
    pub delivered: u64,
    /// Deliveries stored again for their next slot after a failed one.
    pub stored_again: u64,
    /// Deliveries the retry layer handed back unsent, stored again at the pacer's time.
    pub deferred: u64,
    /// Deliveries the engine moved a slot's deadline ahead while their endpoint failed, in bulk
    /// (one write, or slices on Redis), before a worker took them
    /// ([`Outbox::defer_due`](crate::Outbox::defer_due)); a delivery moved several times counts
    /// each time.
    pub deferred_in_bulk: u64,
    /// Deliveries a move in bulk had set aside, made due again in bulk when their
    /// endpoint took a delivery ([`Outbox::resume_deferred`](crate::Outbox::resume_deferred)).
    pub resumed_in_bulk: u64,
    /// Deliveries a move in bulk had set aside, made due one at a time when the pacer's next
    /// probe may go, while their endpoint stays down
    /// ([`Outbox::resume_one`](crate::Outbox::resume_one)): at most one a probe.
    pub resumed_for_probes: u64,
    /// Deliveries moved to the dead-letter queue.
    pub dead_lettered: u64,
    /// Endpoints this process disabled.
    pub endpoints_disabled: u64,
    /// Deliveries being handled now: taken from the queue and not yet delivered, stored again
    /// or dead-lettered (what a `kill -9` would leave to the engine).
    pub handling: u64,
    /// The most deliveries handled at once so far.
    pub handling_peak: u64,
}

/// One counted event.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Event {
    Stored,
    Due,
    Sent,
    Delivered,
    StoredAgain,
    Deferred,
    DeferredInBulk,
    ResumedInBulk,
    ResumedForProbe,
    DeadLettered,
    EndpointDisabled,
}

impl Event {
    #[cfg(feature = "metrics")]
    fn name(self) -> &'static str {
        match self {
            Event::Stored => "redelivery_stored_total",
            Event::Due => "redelivery_due_total",
            Event::Sent => "redelivery_sent_total",
            Event::Delivered => "redelivery_delivered_total",
            Event::StoredAgain => "redelivery_stored_again_total",
            Event::Deferred => "redelivery_deferred_total",
            Event::DeferredInBulk => "redelivery_deferred_in_bulk_total",
            Event::ResumedInBulk => "redelivery_resumed_in_bulk_total",
            Event::ResumedForProbe => "redelivery_resumed_for_probes_total",
            Event::DeadLettered => "redelivery_dead_lettered_total",
            Event::EndpointDisabled => "redelivery_endpoints_disabled_total",
        }
    }
}

impl Counters {
    pub(crate) fn count(&self, event: Event) {
        self.count_n(event, 1);
    }

    /// `n` events at once.
    pub(crate) fn count_n(&self, event: Event, n: u64) {
        let counter = match event {
            Event::Stored => &self.stored,
            Event::Due => &self.due,
            Event::Sent => &self.sent,
            Event::Delivered => &self.delivered,
            Event::StoredAgain => &self.stored_again,
            Event::Deferred => &self.deferred,
            Event::DeferredInBulk => &self.deferred_in_bulk,
            Event::ResumedInBulk => &self.resumed_in_bulk,
            Event::ResumedForProbe => &self.resumed_for_probes,
            Event::DeadLettered => &self.dead_lettered,
            Event::EndpointDisabled => &self.endpoints_disabled,
        };
        counter.fetch_add(n, Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!(event.name()).increment(n);
    }

    /// One more delivery in hand, until the guard is dropped.
    pub(crate) fn handling(&self) -> Handling<'_> {
        let now = self.handling.fetch_add(1, Relaxed) + 1;
        self.handling_peak.fetch_max(now, Relaxed);
        Handling(&self.handling)
    }

    pub(crate) fn snapshot(&self) -> RedeliveryStats {
        RedeliveryStats {
            stored: self.stored.load(Relaxed),
            due: self.due.load(Relaxed),
            sent: self.sent.load(Relaxed),
            delivered: self.delivered.load(Relaxed),
            stored_again: self.stored_again.load(Relaxed),
            deferred: self.deferred.load(Relaxed),
            deferred_in_bulk: self.deferred_in_bulk.load(Relaxed),
            resumed_in_bulk: self.resumed_in_bulk.load(Relaxed),
            resumed_for_probes: self.resumed_for_probes.load(Relaxed),
            dead_lettered: self.dead_lettered.load(Relaxed),
            endpoints_disabled: self.endpoints_disabled.load(Relaxed),
            handling: self.handling.load(Relaxed),
            handling_peak: self.handling_peak.load(Relaxed),
        }
    }
}

/// A delivery in hand: counted in [`RedeliveryStats::handling`] while it lives.
pub(crate) struct Handling<'a>(&'a AtomicU64);

impl Drop for Handling<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use super::*;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use metrics_util::MetricKind;

    #[test]
    fn each_event_counts_in_its_own_field_and_its_own_metric() {
        let events = [
            Event::Stored,
            Event::Due,
            Event::Sent,
            Event::Delivered,
            Event::StoredAgain,
            Event::Deferred,
            Event::DeferredInBulk,
            Event::ResumedInBulk,
            Event::ResumedForProbe,
            Event::DeadLettered,
            Event::EndpointDisabled,
        ];
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let counters = Counters::default();
        metrics::with_local_recorder(&recorder, || {
            for (n, event) in events.iter().enumerate() {
                // The n-th event n + 1 times, so that a name mapped to another's counter shows.
                for _ in 0..=n {
                    counters.count(*event);
                }
            }
        });
        let recorded: std::collections::HashMap<String, u64> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.kind() == MetricKind::Counter)
            .map(|(key, _, _, value)| match value {
                DebugValue::Counter(count) => (key.key().name().to_owned(), count),
                other => panic!("{key:?}: {other:?}"),
            })
            .collect();
        assert_eq!(recorded.len(), events.len(), "{recorded:?}");
        for (n, event) in events.iter().enumerate() {
            assert_eq!(recorded[event.name()], n as u64 + 1, "{}", event.name());
        }
        let stats = counters.snapshot();
        let by_field = [
            stats.stored,
            stats.due,
            stats.sent,
            stats.delivered,
            stats.stored_again,
            stats.deferred,
            stats.deferred_in_bulk,
            stats.resumed_in_bulk,
            stats.resumed_for_probes,
            stats.dead_lettered,
            stats.endpoints_disabled,
        ];
        assert_eq!(by_field, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
    }
}

#[cfg(test)]
mod handling_tests {
    use super::*;

    #[test]
    fn deliveries_in_hand_are_counted_while_handled_with_their_peak() {
        let counters = Counters::default();
        let first = counters.handling();
        let second = counters.handling();
        assert_eq!(
            (
                counters.snapshot().handling,
                counters.snapshot().handling_peak
            ),
            (2, 2)
        );
        drop(first);
        drop(second);
        let _third = counters.handling();
        assert_eq!(
            (
                counters.snapshot().handling,
                counters.snapshot().handling_peak
            ),
            (1, 2)
        );
    }
}

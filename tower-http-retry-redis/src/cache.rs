//! What a process knows of each endpoint between calls ([`Cached`]): the record last heard,
//! its fallback while Redis is away, the probe leases its calls handed out; and the bound on
//! how many endpoints it keeps.

use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;
use tower_http_retry::pacing::store::remote::{Fallback, FleetRules, Record, StoreClock};
use tower_http_retry::pacing::store::{Applied, Event, Lease, Release};

/// What this process last heard of an endpoint.
pub(crate) struct Cached {
    /// 0: the record was absent.
    pub(crate) version: u64,
    pub(crate) record: Record,
    pub(crate) read_at: Instant,
    pub(crate) refreshing: bool,
    /// While the store is away: this process's own pacing of the endpoint.
    pub(crate) fallback: Option<Fallback>,
    /// The probe leases of the fleet's record this process's calls handed to its pacer, not
    /// ended yet.
    pub(crate) handed_out: Vec<u64>,
    /// A call that asked for a release got no answer, though Redis may have applied it (a
    /// timeout, a connection lost): a lease it granted is held by nobody in this process.
    pub(crate) unanswered: bool,
}

impl Cached {
    /// An endpoint heard of at `read_at`, as an absent record.
    pub(crate) fn new(read_at: Instant) -> Self {
        Cached {
            version: 0,
            record: Record::new(),
            read_at,
            refreshing: false,
            fallback: None,
            handed_out: Vec::new(),
            unanswered: false,
        }
    }

    /// An endpoint not read yet: due for a read in the background.
    pub(crate) fn unread(now: Instant, view_ttl: Duration) -> Self {
        Self::new(now.checked_sub(view_ttl).unwrap_or(now))
    }

    /// Ends, as failed probes, the leases of `record` held by this process that no call handed
    /// out, after a call that may have been applied went unanswered.
    pub(crate) fn orphans(
        &self,
        rules: &FleetRules,
        record: &Record,
        clock: StoreClock,
    ) -> Vec<Event> {
        if !self.unanswered {
            return Vec::new();
        }
        rules
            .held_leases(record, clock)
            .into_iter()
            .filter(|lease| !self.handed_out.contains(&lease.id()))
            .map(|lease| Event::ProbeDone {
                lease,
                success: false,
            })
            .collect()
    }

    /// A call's `events` and `applied` answer were written to `record`: the leases handed out
    /// and ended, and nothing is unanswered any more.
    pub(crate) fn settled(
        &mut self,
        rules: &FleetRules,
        events: &[Event],
        applied: &Applied,
        record: &Record,
    ) {
        for event in events {
            if let Event::ProbeDone { lease, .. } = event {
                self.handed_out.retain(|id| *id != lease.id());
            }
        }
        if let Some(Release::Probe(lease)) = applied.release() {
            self.handed_out.push(lease.id());
        }
        // Leases taken back (expired) are nobody's any more (their ids matter here, not when
        // they expire: any clock will do).
        let held: Vec<u64> = rules
            .held_leases(record, StoreClock::unmeasured(Instant::now()))
            .iter()
            .map(Lease::id)
            .collect();
        self.handed_out.retain(|id| held.contains(id));
        self.unanswered = false;
    }
}

/// Bounds the cache to `max` endpoints: forgets those read longest ago among the ones open (an
/// absent record says the same; in the fallback, the process's own pacing is open) with no read
/// in flight, and gives back the room they took. Endpoints paced or read are kept: then the
/// cache may hold more, bounded by what the pacers pace and the reads in flight.
pub(crate) fn bound(cache: &mut HashMap<String, Cached>, max: usize) {
    if cache.len() <= max {
        return;
    }
    let mut open: Vec<(Instant, String)> = cache
        .iter()
        .filter(|(_, entry)| {
            !entry.refreshing
                && match &entry.fallback {
                    Some(fallback) => fallback.is_open(),
                    None => entry.record.is_open(),
                }
        })
        .map(|(endpoint, entry)| (entry.read_at, endpoint.clone()))
        .collect();
    open.sort_unstable();
    let excess = cache.len() - max;
    for (_, endpoint) in open.into_iter().take(excess) {
        cache.remove(&endpoint);
    }
    if cache.capacity() > 4 * cache.len().max(16) {
        cache.shrink_to(2 * cache.len());
    }
}

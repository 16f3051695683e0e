//! What a store outside the process needs to run the crate's one transition on its own records:
//! the shared state as an opaque [`Record`] with its codec, the process's clock mapped onto the
//! store's ([`StoreClock`]), the fleet's rules ([`FleetRules`]) and the process's own pacing
//! while the store is away ([`Fallback`]). A remote store (the `tower-http-retry-redis` crate's
//! `RedisStore` is one) keeps records, orders the writes and tells the time; it never runs a
//! rule of its own.
//!
//! A call of such a store reads the record, applies the events to a copy, writes the copy back
//! only if nobody wrote meanwhile (a compare-and-set on a version the store keeps beside the
//! bytes), and tries again on the record it then finds:
//!
//! ```
//! use tokio::time::Instant;
//! use tower_http_retry::pacing::store::remote::{FleetRules, Record, StoreClock};
//! use tower_http_retry::pacing::store::Event;
//! use tower_http_retry::pacing::{Pacing, PacingMode};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let (pacing, fleet) = (Pacing::new(), FleetRules::default());
//! let now = Instant::now();
//! let clock = StoreClock::unmeasured(now); // measured on each round trip in a real store
//! let found = Record::decode(&Record::new().encode()).unwrap(); // what the store holds
//! let mut record = found.clone();
//! let applied = fleet.apply(pacing.rules(), &mut record, &[Event::Down { jitter: 0.5 }], clock, now);
//! assert_eq!(applied.view.mode, PacingMode::Probing);
//! assert_ne!(record, found, "changed: written back if the version is still the one read");
//! assert!(fleet.expiry(&record, clock, now) >= fleet.record_ttl());
//! # }
//! ```

use super::codec;
use super::fallback;
use super::protocol::{Applied, Event, Lease, StoreError, View};
use super::run::{self, Timing};
use crate::error::InvalidConfig;
use crate::pacing::clock::{nanos, Clock, LOCAL_EPOCH};
use crate::pacing::shared::SharedState;
use crate::pacing::PacingRules;
use std::time::Duration;
use tokio::time::Instant;

/// One endpoint's fleet-shared state, as a remote store keeps it: opaque, with its codec (the
/// crate's own versioned byte format, about 19 KB at most). A store without a record for an
/// endpoint holds [`Record::new`]: an open endpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct Record(SharedState);

impl Record {
    /// The record of an endpoint nobody paces: open.
    pub fn new() -> Self {
        Self(SharedState::new())
    }

    /// The record `bytes` hold; [`StoreError::Malformed`] for bytes of another format or a
    /// damaged record.
    pub fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
        codec::decode(bytes)
            .map(Self)
            .map_err(|codec::Malformed| StoreError::Malformed)
    }

    /// The record as bytes, to store.
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(&self.0)
    }

    /// Whether the record says the endpoint is open (nobody paces it): one a cache may forget,
    /// as an absent record means the same.
    pub fn is_open(&self) -> bool {
        self.0.is_open()
    }
}

impl Default for Record {
    fn default() -> Self {
        Self::new()
    }
}

/// The process's clock (tokio's) mapped onto the store's, so that the processes' clocks never
/// need to agree: measured on every round trip, from the store's time in its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreClock(Clock);

impl StoreClock {
    /// A clock before any round trip (the store out of reach from the start): the process's
    /// own time, on an epoch of its own.
    pub fn unmeasured(now: Instant) -> Self {
        Self(Clock::new(now, LOCAL_EPOCH))
    }

    /// The clock a round trip measured: sent at `sent`, answered at `received`, the store's
    /// time then `server` (since the store's epoch, e.g. Redis's `TIME`). `current` is kept
    /// unless the new sample disagrees with it by more than the sample's uncertainty (half its
    /// round trip) plus a millisecond.
    pub fn measured(
        current: Option<Self>,
        sent: Instant,
        received: Instant,
        server: Duration,
    ) -> Self {
        Self(Clock::measured(
            current.map(|clock| clock.0),
            sent,
            received,
            nanos(server),
        ))
    }
}

/// The fleet's rules as one process applies them to records: the fleet's timing that is not in
/// [`Pacing`](crate::Pacing) (the same for every process) and this process's identity (a random holder id,
/// which its probe leases carry).
#[derive(Clone, Copy, Debug)]
pub struct FleetRules {
    timing: Timing,
    holder: u64,
}

impl FleetRules {
    /// A probe lease not ended by then is taken back, so that a process that dies holding one
    /// blocks the fleet's probes for no longer (10 s).
    pub const DEFAULT_LEASE_TTL: Duration = Timing::DEFAULT.lease_ttl;
    /// A record is kept this long after the last time it holds (a pause's end, a lease's expiry)
    /// and its last change; then it expires, and the endpoint is open (60 s).
    pub const DEFAULT_RECORD_TTL: Duration = Timing::DEFAULT.record_ttl;

    /// The rules with a lease and a record time to live; both must be positive and at most
    /// [`InvalidConfig::MAX_DURATION`].
    pub fn new(lease_ttl: Duration, record_ttl: Duration) -> Result<Self, InvalidConfig> {
        let timing = Timing {
            lease_ttl,
            record_ttl,
        }
        .check()?;
        Ok(Self {
            timing,
            holder: run::holder_id(),
        })
    }

    /// The probe leases' time to live.
    pub fn lease_ttl(&self) -> Duration {
        self.timing.lease_ttl
    }

    /// The records' time to live past the last time they hold.
    pub fn record_ttl(&self) -> Duration {
        self.timing.record_ttl
    }

    /// This process's id in the fleet.
    pub fn holder(&self) -> u64 {
        self.holder
    }

    /// Applies `events`, in order, to `record` at `now` (the process's clock) under `rules`, and
    /// says what the process hears back. A store writes `record` back only if it is
    /// still the version read (and not at all when it did not change).
    pub fn apply(
        &self,
        rules: &PacingRules,
        record: &mut Record,
        events: &[Event],
        clock: StoreClock,
        now: Instant,
    ) -> Applied {
        let rules = self.timing.rules(rules);
        let replies = run::run(
            &mut record.0,
            &rules,
            self.holder,
            events,
            &clock.0,
            now,
            false,
        );
        run::applied(replies, &record.0, &rules, clock.0, clock.0.to_shared(now))
    }

    /// The probe leases of `record` that this process holds. A store that lost the answer to
    /// a call that may have been applied (a timeout) compares them with the leases it handed
    /// out: one it never handed out is held by nobody, and is ended (a failed probe) rather
    /// than left to block the fleet's probe stream until it expires.
    pub fn held_leases(&self, record: &Record, clock: StoreClock) -> Vec<Lease> {
        record
            .0
            .leases
            .iter()
            .filter(|entry| entry.holder == self.holder)
            .map(|entry| Lease {
                id: entry.id,
                expires: clock.0.to_local(entry.expires),
                local: false,
            })
            .collect()
    }

    /// How long the store keeps `record` from `now` (at least a millisecond): past the last
    /// time it holds by [`record_ttl`](Self::record_ttl).
    pub fn expiry(&self, record: &Record, clock: StoreClock, now: Instant) -> Duration {
        Duration::from_millis(self.timing.expiry_ms(&record.0, clock.0.to_shared(now)))
    }

    /// `record`, heard of at `heard_at`, as it stands at `now` without a call (a pause that
    /// ended, a ramp with no demand left): what [`PacingStore::cached`] answers.
    ///
    /// [`PacingStore::cached`]: super::PacingStore::cached
    pub fn view(
        &self,
        rules: &PacingRules,
        record: &Record,
        clock: StoreClock,
        heard_at: Instant,
        now: Instant,
    ) -> View {
        let rules = self.timing.rules(rules);
        run::cached_view(&record.0, &rules, &clock.0, heard_at, now)
    }
}

impl Default for FleetRules {
    /// [`DEFAULT_LEASE_TTL`](Self::DEFAULT_LEASE_TTL) and
    /// [`DEFAULT_RECORD_TTL`](Self::DEFAULT_RECORD_TTL), a new holder id.
    fn default() -> Self {
        Self::new(Self::DEFAULT_LEASE_TTL, Self::DEFAULT_RECORD_TTL)
            .expect("the default timing is valid")
    }
}

/// A process's own pacing of one endpoint while its store cannot be reached: the endpoint's
/// last known record cut down to this process's share of the fleet (rates divided by the peers,
/// a learned rate capped at 1.2 times that share, the probe interval multiplied by the peers:
/// never unlimited), with the same transition. The peers are the processes the record says wait
/// on the endpoint, or, for an endpoint nobody paced (its record open, or heard of too long
/// ago to say), the fleet the store last counted: a store that keeps no count passes 1, and
/// each process of its fleet then probes and ramps the endpoint as if it were alone.
///
/// Its times stay on the clock it was entered with, whatever the store measures meanwhile;
/// [`seed`](Self::seed) moves them onto the store's.
#[derive(Clone, Debug)]
pub struct Fallback(fallback::Fallback);

impl Fallback {
    /// The fallback of this process for an endpoint last known as `last` (heard of on
    /// `clock`), in a fleet the store last counted as `fleet` processes (those that called it
    /// lately).
    pub fn enter(
        last: &Record,
        rules: &PacingRules,
        fleet_rules: &FleetRules,
        clock: StoreClock,
        now: Instant,
        fleet: u32,
    ) -> Self {
        Self(fallback::Fallback::enter(
            &last.0,
            rules,
            fleet_rules.holder,
            clock.0,
            now,
            fleet,
        ))
    }

    /// Applies `events` to this process's own pacing; the answer says that it came from the
    /// fallback, for `error`.
    pub fn apply(
        &mut self,
        rules: &FleetRules,
        events: &[Event],
        now: Instant,
        error: StoreError,
    ) -> Applied {
        let timing = rules.timing.rules(&self.0.config);
        let clock = self.0.clock;
        let replies = run::run(
            &mut self.0.state,
            &timing,
            rules.holder,
            events,
            &clock,
            now,
            true,
        );
        let at = clock.to_shared(now);
        Applied {
            fallback: Some(error),
            ..run::applied(replies, &self.0.state, &timing, clock, at)
        }
    }

    /// This process's own pacing, heard of at `heard_at`, as it stands at `now`.
    pub fn view(&self, rules: &FleetRules, heard_at: Instant, now: Instant) -> View {
        let timing = rules.timing.rules(&self.0.config);
        run::cached_view(&self.0.state, &timing, &self.0.clock, heard_at, now)
    }

    /// Whether this process's own pacing has the endpoint open: nothing learned that a cache
    /// must keep.
    pub fn is_open(&self) -> bool {
        self.0.state.is_open()
    }

    /// The record to start the store's from on rejoining at `now`, when the store lost the
    /// endpoint's record meanwhile (it restarted empty): this process's state, scaled back up
    /// to the fleet, on the store's `clock` as the rejoining call measured it (a fallback
    /// entered before any round trip kept its times on the process's own epoch).
    pub fn seed(&self, clock: StoreClock, now: Instant) -> Record {
        Record(self.0.seed(clock.0, now))
    }
}

//! [`RedisStoreBuilder`]: a [`RedisStore`]'s settings, checked by `build`.

use super::health::Health;
use super::script::Scripts;
use super::telemetry::Keys;
use super::timeout::CallTimeout;
use super::{Counters, Inner, RedisStore};
use redis::aio::ConnectionLike;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower_http_retry::pacing::store::remote::FleetRules;
use tower_http_retry::InvalidConfig;

/// Configures a [`RedisStore`]; [`build`](Self::build) checks every value.
///
/// | setter | default | why |
/// |---|---|---|
/// | [`prefix`](Self::prefix) | `tower-http-retry:pacing` | fleets on one server keep apart |
/// | [`call_timeout`](Self::call_timeout) | measured: 4 × the slowest of the last 64 round trips, 5–250 ms (250 ms until 8 are measured) | a slow Redis costs a request at most this before the fallback answers; a loaded machine's round trips are not taken for a lost Redis |
/// | [`view_ttl`](Self::view_ttl) | 1 s | how stale an open endpoint's mode may be; refreshed off the request path |
/// | [`lease_ttl`](Self::lease_ttl) | 10 s | a dead process's probe is taken back |
/// | [`record_ttl`](Self::record_ttl) | 60 s | records of endpoints nobody paces expire |
#[derive(Clone, Debug)]
#[must_use]
pub struct RedisStoreBuilder<C> {
    connection: C,
    prefix: String,
    call_timeout: Option<Duration>,
    view_ttl: Duration,
    lease_ttl: Duration,
    record_ttl: Duration,
}

impl<C> RedisStoreBuilder<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    pub(super) fn new(connection: C) -> Self {
        Self {
            connection,
            prefix: "tower-http-retry:pacing".to_owned(),
            call_timeout: None,
            view_ttl: Duration::from_secs(1),
            lease_ttl: FleetRules::DEFAULT_LEASE_TTL,
            record_ttl: FleetRules::DEFAULT_RECORD_TTL,
        }
    }

    /// The start of every key, `{prefix}:{endpoint}`: processes with the same prefix on the
    /// same server are one fleet.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The longest wait for one Redis call, fixed; past it, the fallback answers. Unset, it
    /// is measured: four times the slowest of the last 64 round trips, at least 5 ms and at
    /// most 250 ms (250 ms until 8 round trips are measured); a call that timed out counts as
    /// a round trip of its timeout, so that the timeout follows a Redis grown slow.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = Some(timeout);
        self
    }

    /// How old what a process knows of an endpoint may be before it is read again, in the
    /// background ([`PacingStore::cached`](tower_http_retry::pacing::store::PacingStore::cached)).
    pub fn view_ttl(mut self, ttl: Duration) -> Self {
        self.view_ttl = ttl;
        self
    }

    /// How long a probe lease lasts if its holder never ends it.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// How long a record is kept past the last time it holds and its last write.
    pub fn record_ttl(mut self, ttl: Duration) -> Self {
        self.record_ttl = ttl;
        self
    }

    /// Checks every value: fails, naming the field, on a zero or over-long duration.
    pub fn build(self) -> Result<RedisStore<C>, InvalidConfig> {
        if let Some(timeout) = self.call_timeout {
            InvalidConfig::ensure_positive_duration("store.call_timeout", timeout)?;
        }
        InvalidConfig::ensure_positive_duration("store.view_ttl", self.view_ttl)?;
        let rules = FleetRules::new(self.lease_ttl, self.record_ttl)?;
        Ok(RedisStore {
            inner: Arc::new(Inner {
                connection: self.connection,
                fleet_key: format!("{}#fleet", self.prefix),
                metrics: Keys::new(&self.prefix),
                prefix: self.prefix,
                call_timeout: self
                    .call_timeout
                    .map_or_else(CallTimeout::measured, CallTimeout::Fixed),
                view_ttl: self.view_ttl,
                rules,
                scripts: Scripts::new(),
                clock: Mutex::new(None),
                cache: Mutex::new(HashMap::new()),
                refreshes: AtomicUsize::new(0),
                health: Health::default(),
                counters: Counters::default(),
                fleet: AtomicU32::new(1),
            }),
        })
    }
}

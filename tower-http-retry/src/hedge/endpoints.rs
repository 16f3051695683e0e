//! The bounded map of the endpoints' latency sketches.

use super::sketch::{Sketch, SketchRules};
use crate::endpoints::{EndpointMap, Forget};
use crate::pacing::endpoint_key;
use http::uri::Authority;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// One endpoint's sketch, shared by the requests in flight to it.
pub(crate) struct Endpoint {
    sketch: Mutex<Sketch>,
    /// When a request last asked for it, and how long after that it may be forgotten (two
    /// windows: an older sketch has nothing to say).
    used: Mutex<Instant>,
    stale_after: Duration,
}

impl Endpoint {
    /// The sketch, locked. Plain data with no invariant broken half-way: a poisoned lock is
    /// usable.
    pub(crate) fn sketch(&self) -> MutexGuard<'_, Sketch> {
        self.sketch.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn used(&self) -> MutexGuard<'_, Instant> {
        self.used.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Forget for Endpoint {
    fn rank(&self, _held: bool, now: Instant) -> Option<u8> {
        (now.saturating_duration_since(*self.used()) >= self.stale_after).then_some(0)
    }
}

/// The sketches of up to `max` endpoints (requests without an authority share one), keyed as
/// the pacer keys its endpoints; a sketch unused for two windows may be forgotten to make room.
pub(crate) struct Endpoints {
    map: EndpointMap<Endpoint>,
}

impl Endpoints {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            map: EndpointMap::new(max),
        }
    }

    /// The sketch of `authority`, made if needed; `None` when the map is full of endpoints used
    /// in the last two windows (the request is then not hedged).
    pub(crate) fn get(
        &self,
        authority: Option<&Authority>,
        rules: &SketchRules,
        now: Instant,
    ) -> Option<Arc<Endpoint>> {
        let endpoint = self.map.get_or_insert_with(
            &endpoint_key(authority),
            || now,
            || Endpoint {
                sketch: Mutex::new(Sketch::new(now)),
                used: Mutex::new(now),
                stale_after: rules.window * 2,
            },
        )?;
        *endpoint.used() = now;
        Some(endpoint)
    }

    /// Endpoints with a sketch now.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

//! The bounded map of the endpoints' latency sketches.

use super::sketch::{Sketch, SketchRules};
use crate::pacing::endpoint_key;
use http::uri::Authority;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::time::Instant;

/// One endpoint's sketch, shared by the requests in flight to it.
pub(crate) struct Endpoint {
    sketch: Mutex<Sketch>,
}

impl Endpoint {
    /// The sketch, locked. Plain data with no invariant broken half-way: a poisoned lock is
    /// usable.
    pub(crate) fn sketch(&self) -> MutexGuard<'_, Sketch> {
        self.sketch.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// An endpoint, and when a request last used it (for the eviction).
type Entry = (Arc<Endpoint>, Instant);

/// The sketches of up to `max` endpoints (requests without an authority share one), keyed as
/// the pacer keys its endpoints: a lookup borrows the authority and hashes it in one piece.
pub(crate) struct Endpoints {
    map: Mutex<HashMap<Box<str>, Entry>>,
    max: usize,
}

impl Endpoints {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            map: Mutex::default(),
            max,
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
        let key = endpoint_key(authority);
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((endpoint, used)) = map.get_mut(&*key) {
            *used = now;
            return Some(Arc::clone(endpoint));
        }
        if map.len() >= self.max {
            let stale = rules.window * 2;
            map.retain(|_, (_, used)| now.saturating_duration_since(*used) < stale);
            if map.len() >= self.max {
                return None;
            }
        }
        let endpoint = Arc::new(Endpoint {
            sketch: Mutex::new(Sketch::new(now)),
        });
        map.insert(key.into(), (Arc::clone(&endpoint), now));
        Some(endpoint)
    }

    /// Endpoints with a sketch now.
    pub(crate) fn len(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

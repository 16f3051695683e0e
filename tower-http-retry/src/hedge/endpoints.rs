//! Where the endpoints' latency sketches are kept: the layer's own bounded map, or the
//! per-endpoint state of the pacer of the retry layer above it.

use super::sketch::{SharedSketch, SketchRules};
use crate::endpoints::EndpointMap;
use crate::pacing::{endpoint_key, Pacer};
use crate::RetryLayer;
use http::uri::Authority;
use std::sync::Arc;
use tokio::time::Instant;

/// Where a layer keeps its sketches: in its own map, or, as the first hedging layer given a
/// retry layer that paces ([`retry_layer`](super::HedgeLayerBuilder::retry_layer)), in the
/// pacer's endpoints, beside its mode and adaptive limit: one entry, one key and one bound per
/// endpoint, and one place to read what is known of it
/// ([`PacingStats::hedge_delay`](crate::pacing::PacingStats::hedge_delay)).
pub(crate) enum Sketches {
    Own(Endpoints),
    Pacer(Arc<dyn HoldsPacer>),
}

/// A retry layer, as a hedging layer below it reaches its pacer (without its type parameters).
pub(crate) trait HoldsPacer: Send + Sync {
    fn pacer(&self) -> Option<&Pacer>;
}

impl<C: Send + Sync, H: Send + Sync> HoldsPacer for RetryLayer<C, H> {
    fn pacer(&self) -> Option<&Pacer> {
        RetryLayer::pacer(self)
    }
}

impl Sketches {
    /// The sketch of `authority`'s endpoint; `None` when its map is full of endpoints that may
    /// not be forgotten (the request is then not hedged).
    pub(crate) fn get(
        &self,
        authority: Option<&Authority>,
        rules: &SketchRules,
        now: Instant,
    ) -> Option<Arc<SharedSketch>> {
        match self {
            Sketches::Own(endpoints) => endpoints.get(authority, rules, now),
            // The sketch is held, not the pacer's endpoint: a request in flight does not keep
            // the pacer from forgetting an open endpoint to make room for one that fails.
            Sketches::Pacer(retry) => {
                let lane = retry.pacer()?.lane(authority)?;
                Some(lane.0.hedge_sketch(|| SharedSketch::new(rules, now)))
            }
        }
    }

    /// Endpoints with a sketch now.
    pub(crate) fn len(&self) -> usize {
        match self {
            Sketches::Own(endpoints) => endpoints.len(),
            Sketches::Pacer(retry) => retry.pacer().map_or(0, Pacer::hedge_sketches),
        }
    }
}

/// The sketches of up to `max` endpoints (requests without an authority share one), keyed as
/// the pacer keys its endpoints; a sketch unused for two windows may be forgotten to make room.
pub(crate) struct Endpoints {
    map: EndpointMap<SharedSketch>,
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
    ) -> Option<Arc<SharedSketch>> {
        let endpoint = self.map.get_or_insert_with(
            &endpoint_key(authority),
            || now,
            || SharedSketch::new(rules, now),
        )?;
        Some(endpoint)
    }

    /// Endpoints with a sketch now.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_sketch_is_forgotten_only_once_unused_for_two_windows() {
        let rules = SketchRules {
            quantile: 0.95,
            floor: Duration::from_millis(1),
            window: Duration::from_secs(30),
            min_samples: 20,
            pause_share: 0.5,
        };
        let (a, b) = ("a.test".parse().unwrap(), "b.test".parse().unwrap());
        let endpoints = Endpoints::new(1);
        let start = Instant::now();
        let window = rules.window;
        let used = endpoints.get(Some(&a), &rules, start).unwrap();
        // A request moves the sketch's window on, as the service's arming does.
        used.sketch().arm(&rules, start + window + window / 2);
        drop(used);
        let soon = start + window * 3;
        assert!(
            endpoints.get(Some(&b), &rules, soon).is_none(),
            "a used 1.5 windows ago"
        );
        let later = start + window * 4;
        assert!(
            endpoints.get(Some(&b), &rules, later).is_some(),
            "a unused for 2.5 windows"
        );
        assert_eq!(endpoints.len(), 1);
    }
}

//! The breakers of a keyed layer: one per authority, bounded in number, in the crate's one
//! per-endpoint map (`crate::endpoints`): a call looks its authority up under a read lock (one
//! hash, no allocation, no clock), holds the breaker from the look-up on, and counts itself in
//! the breaker's calls in flight (see `Lease`); no breaker held or leased is forgotten.

use super::future::Lease;
use super::template::{Shared, Template};
use crate::endpoints::{EndpointMap, Forget};
use crate::pacing::endpoint_key;
use http::uri::Authority;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::time::Instant;

pub(crate) struct Authorities<C> {
    template: Template<C>,
    max: usize,
    map: EndpointMap<Shared<C>>,
    /// Shared by every request without an authority; not counted in `max`.
    no_authority: Arc<Shared<C>>,
    untracked: AtomicU64,
}

impl<C> Forget for Shared<C> {
    /// Never one with calls in flight (their outcomes would go to a breaker the layer no longer
    /// knows), nor one that refuses calls or is probing (that would drop its protection): the
    /// closed ones first, then the open ones whose open period is over.
    fn rank(&self, held: bool, now: Instant) -> Option<u8> {
        if held {
            return None;
        }
        self.breaker.eviction_rank(now)
    }
}

impl<C> Authorities<C> {
    pub(crate) fn new(template: Template<C>, max: usize) -> Self {
        Self {
            no_authority: template.make(None),
            template,
            max,
            // Grown as authorities come: a large maximum costs nothing until it is reached.
            map: EndpointMap::new(max),
            untracked: AtomicU64::new(0),
        }
    }

    pub(crate) fn template(&self) -> &Template<C> {
        &self.template
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// The breaker for a call to `authority`, made if needed, leased to the call so that it is
    /// not evicted before the call ends. `None` when the map is full and no breaker in it may be
    /// evicted: the call then goes through untracked.
    pub(crate) fn breaker(&self, authority: Option<&Authority>) -> Option<Lease<C>> {
        let Some(authority) = authority else {
            return Some(Lease::uncounted(Arc::clone(&self.no_authority)));
        };
        // Held from the look-up on (the map's eviction sees a breaker held), then leased.
        let shared =
            self.map
                .get_or_insert_with(&endpoint_key(Some(authority)), Instant::now, || {
                    self.template.shared(Some(authority))
                });
        match shared {
            Some(shared) => Some(Lease::counted(shared)),
            None => {
                self.untracked.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// The breaker tracked for `authority` now, without making one or counting a use.
    pub(crate) fn peek(&self, authority: Option<&Authority>) -> Option<Arc<Shared<C>>> {
        match authority {
            None => Some(Arc::clone(&self.no_authority)),
            Some(authority) => self.map.peek(&endpoint_key(Some(authority))),
        }
    }

    /// How many authorities have a breaker now.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn evicted(&self) -> u64 {
        self.map.forgotten()
    }

    pub(crate) fn untracked(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }
}

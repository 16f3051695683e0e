//! The breakers of a keyed layer: one per authority, bounded in number.
//!
//! A call looks its authority up under a read lock: one hash of the authority, no allocation, no
//! clock, and one atomic add to the breaker's count of calls in flight (no breaker is evicted
//! while it has any; see `Lease`). A new authority takes the write lock to insert its breaker,
//! after evicting one when the map is full (a scan of the map: it costs only calls to new
//! authorities once the map is full).
//!
//! Recency is a logical clock: each use stamps the entry with the next tick, and eviction takes
//! the smallest stamp. An entry that already holds the latest tick is the most recently used
//! and is left alone, so a run of calls to one authority only reads the clock; calls that
//! alternate between authorities advance it with one atomic add each.

use super::future::Lease;
use super::template::{Shared, Template};
use http::uri::Authority;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use tokio::time::Instant;

pub(crate) struct Authorities<C> {
    template: Template<C>,
    max: usize,
    map: RwLock<HashMap<Authority, Entry<C>>>,
    /// Shared by every request without an authority; not counted in `max`.
    no_authority: Arc<Shared<C>>,
    /// The latest recency stamp handed out.
    clock: AtomicU64,
    evicted: AtomicU64,
    untracked: AtomicU64,
}

struct Entry<C> {
    shared: Arc<Shared<C>>,
    /// The recency stamp of the last use.
    used: AtomicU64,
}

impl<C> Authorities<C> {
    pub(crate) fn new(template: Template<C>, max: usize) -> Self {
        Self {
            no_authority: template.make(None),
            template,
            max,
            // Grown as authorities come: a large maximum costs nothing until it is reached.
            map: RwLock::default(),
            clock: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            untracked: AtomicU64::new(0),
        }
    }

    pub(crate) fn template(&self) -> &Template<C> {
        &self.template
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    // The map holds no invariant a panicking thread could break half-way, so a poisoned lock is
    // usable.
    fn read(&self) -> RwLockReadGuard<'_, HashMap<Authority, Entry<C>>> {
        self.map.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<Authority, Entry<C>>> {
        self.map.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The breaker for a call to `authority`, made if needed, leased to the call so that it is
    /// not evicted before the call ends. `None` when the map is full and no breaker in it may be
    /// evicted: the call then goes through untracked.
    pub(crate) fn breaker(&self, authority: Option<&Authority>) -> Option<Lease<C>> {
        let Some(authority) = authority else {
            return Some(Lease::uncounted(Arc::clone(&self.no_authority)));
        };
        // Leased under the lock (read or write): eviction, under the write lock, sees the lease.
        if let Some(entry) = self.read().get(authority) {
            return Some(self.touch(entry));
        }
        let mut map = self.write();
        if let Some(entry) = map.get(authority) {
            return Some(self.touch(entry)); // inserted by another call meanwhile
        }
        if map.len() >= self.max && !self.evict(&mut map) {
            self.untracked.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let shared = self.template.make(Some(authority));
        let lease = Lease::counted(Arc::clone(&shared));
        let entry = Entry {
            shared,
            used: AtomicU64::new(self.tick()),
        };
        map.insert(authority.clone(), entry);
        Some(lease)
    }

    /// Stamps `entry` as the most recently used, and leases its breaker.
    fn touch(&self, entry: &Entry<C>) -> Lease<C> {
        if entry.used.load(Ordering::Relaxed) != self.clock.load(Ordering::Relaxed) {
            entry.used.store(self.tick(), Ordering::Relaxed);
        }
        Lease::counted(Arc::clone(&entry.shared))
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Forgets the least recently used closed breaker or, when none is closed, the least recently
    /// used open one whose open period is over. Never one that refuses calls or is probing: that
    /// would drop its protection; nor one with calls in flight: their outcomes would go to a
    /// breaker the layer no longer knows. Returns whether one was forgotten.
    fn evict(&self, map: &mut HashMap<Authority, Entry<C>>) -> bool {
        let now = Instant::now();
        let victim = map
            .iter()
            .filter_map(|(authority, entry)| {
                let rank = entry.shared.breaker.eviction_rank(now)?;
                Some(((rank, entry.used.load(Ordering::Relaxed)), authority))
            })
            .min_by_key(|(order, _)| *order)
            .map(|(_, authority)| authority.clone());
        let Some(victim) = victim else {
            return false;
        };
        map.remove(&victim);
        self.evicted.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// The breaker tracked for `authority` now, without making one or counting a use.
    pub(crate) fn peek(&self, authority: Option<&Authority>) -> Option<Arc<Shared<C>>> {
        match authority {
            None => Some(Arc::clone(&self.no_authority)),
            Some(authority) => self.read().get(authority).map(|e| Arc::clone(&e.shared)),
        }
    }

    /// How many authorities have a breaker now.
    pub(crate) fn len(&self) -> usize {
        self.read().len()
    }

    pub(crate) fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    pub(crate) fn untracked(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }
}

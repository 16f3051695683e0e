//! The one map of per-endpoint state, bounded, with one eviction rule: the pacer's endpoints,
//! the keyed breaker's breakers and the hedger's latency sketches are each an [`EndpointMap`].
//!
//! A lookup takes the read lock: one hash of the endpoint's key, no allocation, no clock, and
//! one atomic store when the entry was not the last one used. A new endpoint takes the write
//! lock to insert its state, after forgetting one when the map is full: the least recently used
//! entry whose value says it may go ([`Forget::rank`]: lower ranks go first), found by a scan of
//! the map (it costs only calls to new endpoints once the map is full). When none may go, the
//! new endpoint gets no state: its request goes without (not paced, not guarded, not hedged).
//!
//! Recency is a logical clock: each use stamps the entry with the next tick. An entry that
//! already holds the latest tick is the most recently used and is left alone, so a run of calls
//! to one endpoint only reads the clock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use tokio::time::Instant;

/// What an endpoint's state says of being forgotten.
pub(crate) trait Forget {
    /// Whether the state may be forgotten at `now`, and how readily (`Some(0)` first); `None`
    /// keeps it. `held`: someone besides the map holds it (a request in flight).
    fn rank(&self, held: bool, now: Instant) -> Option<u8>;
}

/// Per-endpoint state of type `V`, keyed by the endpoint's key, at most `max` entries.
pub(crate) struct EndpointMap<V> {
    map: RwLock<HashMap<Box<str>, Entry<V>>>,
    max: usize,
    /// The latest recency stamp handed out.
    clock: AtomicU64,
    forgotten: AtomicU64,
}

struct Entry<V> {
    value: Arc<V>,
    /// The recency stamp of the last use.
    used: AtomicU64,
}

impl<V> EndpointMap<V> {
    /// An empty map of at most `max` endpoints (grown as they come).
    pub(crate) fn new(max: usize) -> Self {
        Self {
            map: RwLock::default(),
            max,
            clock: AtomicU64::new(0),
            forgotten: AtomicU64::new(0),
        }
    }

    // The map holds no invariant a panicking thread could break half-way, so a poisoned lock is
    // usable.
    fn read(&self) -> RwLockReadGuard<'_, HashMap<Box<str>, Entry<V>>> {
        self.map.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<Box<str>, Entry<V>>> {
        self.map.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state of `key`, counted as a use.
    #[inline]
    pub(crate) fn get(&self, key: &str) -> Option<Arc<V>> {
        self.read().get(key).map(|entry| self.touch(entry))
    }

    /// The state of `key`, not counted as a use.
    pub(crate) fn peek(&self, key: &str) -> Option<Arc<V>> {
        self.read().get(key).map(|entry| Arc::clone(&entry.value))
    }

    /// The state of `key`, made by `make` if the map has none (counted as a use either way);
    /// `None` when the map is full and no entry may be forgotten at `now()`.
    pub(crate) fn get_or_insert_with(
        &self,
        key: &str,
        now: impl FnOnce() -> Instant,
        make: impl FnOnce() -> V,
    ) -> Option<Arc<V>>
    where
        V: Forget,
    {
        if let Some(value) = self.get(key) {
            return Some(value);
        }
        let mut map = self.write();
        if let Some(entry) = map.get(key) {
            return Some(self.touch(entry)); // inserted by another call meanwhile
        }
        if map.len() >= self.max && !self.forget_one(&mut map, now()) {
            return None;
        }
        let value = Arc::new(make());
        let entry = Entry {
            value: Arc::clone(&value),
            used: AtomicU64::new(self.tick()),
        };
        map.insert(Box::from(key), entry);
        Some(value)
    }

    /// Stamps `entry` as the most recently used.
    fn touch(&self, entry: &Entry<V>) -> Arc<V> {
        if entry.used.load(Ordering::Relaxed) != self.clock.load(Ordering::Relaxed) {
            entry.used.store(self.tick(), Ordering::Relaxed);
        }
        Arc::clone(&entry.value)
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Forgets the least recently used entry of the lowest rank that may go; whether one went.
    fn forget_one(&self, map: &mut HashMap<Box<str>, Entry<V>>, now: Instant) -> bool
    where
        V: Forget,
    {
        let victim = map
            .iter()
            .filter_map(|(key, entry)| {
                let held = Arc::strong_count(&entry.value) > 1;
                let rank = entry.value.rank(held, now)?;
                Some(((rank, entry.used.load(Ordering::Relaxed)), key))
            })
            .min_by_key(|(order, _)| *order)
            .map(|(_, key)| key.clone());
        let Some(victim) = victim else {
            return false;
        };
        map.remove(&victim);
        self.forgotten.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Endpoints with state now.
    pub(crate) fn len(&self) -> usize {
        self.read().len()
    }

    /// Endpoints whose state passes `test`.
    pub(crate) fn count(&self, test: impl Fn(&V) -> bool) -> usize {
        self.read()
            .values()
            .filter(|entry| test(&entry.value))
            .count()
    }

    /// Entries forgotten to make room.
    pub(crate) fn forgotten(&self) -> u64 {
        self.forgotten.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// A state that may go unless pinned.
    #[derive(Default)]
    struct State {
        pinned: AtomicBool,
    }

    impl Forget for State {
        fn rank(&self, held: bool, _: Instant) -> Option<u8> {
            (!held && !self.pinned.load(Ordering::Relaxed)).then_some(0)
        }
    }

    #[test]
    fn a_full_map_forgets_the_least_recently_used_entry_that_may_go() {
        let now = Instant::now();
        let map = EndpointMap::<State>::new(2);
        let a = map.get_or_insert_with("a", || now, State::default).unwrap();
        drop(map.get_or_insert_with("b", || now, State::default));
        a.pinned.store(true, Ordering::Relaxed);
        drop(a);
        // "a" is the least recently used but pinned: "b" goes.
        assert!(map
            .get_or_insert_with("c", || now, State::default)
            .is_some());
        assert!(map.peek("a").is_some() && map.peek("b").is_none());
        assert_eq!(map.forgotten(), 1);
        // A state a request holds stays too; with nothing that may go, no room.
        let held = map.get("c").unwrap();
        assert!(map
            .get_or_insert_with("d", || now, State::default)
            .is_none());
        drop(held);
        assert!(map
            .get_or_insert_with("d", || now, State::default)
            .is_some());
        assert_eq!(map.len(), 2);
    }

    #[test]
    fn a_use_makes_an_entry_the_most_recent() {
        let now = Instant::now();
        let map = EndpointMap::<State>::new(2);
        drop(map.get_or_insert_with("a", || now, State::default));
        drop(map.get_or_insert_with("b", || now, State::default));
        drop(map.get("a"));
        drop(map.get_or_insert_with("c", || now, State::default));
        assert!(map.peek("a").is_some(), "used last: kept");
        assert!(map.peek("b").is_none());
    }
}

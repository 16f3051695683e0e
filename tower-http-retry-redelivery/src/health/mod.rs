//! [`EndpointHealth`]: which endpoints are disabled, by continuous failure over a window or at
//! once by a `410 Gone`, and their re-enabling.
//!
//! An endpoint that has failed every attempt for [`HealthRules::disable_after`] (5 days by
//! default, Svix's rule) is disabled, as is one that answered `410 Gone` (the Standard Webhooks
//! rule): its due deliveries go to the dead-letter queue with
//! [`DeadReason::EndpointDisabled`](crate::DeadReason::EndpointDisabled) without being sent,
//! until [`EndpointHealth::enable`]; then [`replay`](crate::replay) sends its dead letters again.
//!
//! The failures must be **continuous**: a failing run counts day by day from its first failure,
//! and goes on into a day only when the failures of the day before spanned at least 12 hours
//! (Svix's rule); a day without a failure, or a day with failures less than 12 hours apart,
//! starts the run again from the next failure. So two failures five days apart never disable an
//! endpoint, however quiet it was between them. A success ends the failing run.
//!
//! [`EndpointHealth::new`] keeps the state in the process's memory: share one value between the
//! workers of a process; a restart forgets it. [`EndpointHealth::shared`] keeps it in the engine
//! too (a [`HealthStore`]: SQLite, Redis and Postgres outboxes are stores), so that a fleet judges
//! as one and a restart keeps it: each change is written there (a compare-and-swap, so that
//! concurrent processes never lose one another's changes), and what a worker reads before it
//! sends is at most [`REFRESH`] old. A success writes only when it ends a failing run, so a
//! healthy endpoint costs no write, and one read a second per process.

mod rules;

pub use rules::{DisableReason, HealthRules};

use crate::schedule::unix_ms;
use rules::{next, Change, State};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// The SQL engines' table of the endpoints' shared health (in SQLite's file, in Postgres's
/// database), one row per endpoint, created when the outbox is opened.
pub const ENDPOINT_HEALTH_TABLE: &str = "tower_http_retry_endpoint_health";

/// How old the state a worker reads from a shared [`HealthStore`] may be before it sends (1 s).
pub const REFRESH: Duration = Duration::from_secs(1);

/// How many times a change is tried against a shared state that other processes keep changing.
const SWAP_TRIES: usize = 8;

/// What a [`HealthStore`] returns: its engine's error, boxed.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send + 'a>>;

/// A store's error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Where a fleet keeps its endpoints' health ([`EndpointHealth::shared`]): one text value per
/// endpoint, changed only by compare-and-swap. The SQLite, Redis and Postgres outboxes are
/// stores (a table or a hash of their engine); a test can keep a map.
pub trait HealthStore: Send + Sync + 'static {
    /// The value stored for `endpoint`, if any.
    fn get<'a>(&'a self, endpoint: &'a str) -> StoreFuture<'a, Option<String>>;

    /// Replaces the value of `endpoint` with `new` (`None` removes it) if it is still
    /// `expected` (`None`: absent); whether it did.
    fn swap<'a>(
        &'a self,
        endpoint: &'a str,
        expected: Option<&'a str>,
        new: Option<&'a str>,
    ) -> StoreFuture<'a, bool>;
}

impl<T: HealthStore + ?Sized> HealthStore for Arc<T> {
    fn get<'a>(&'a self, endpoint: &'a str) -> StoreFuture<'a, Option<String>> {
        (**self).get(endpoint)
    }

    fn swap<'a>(
        &'a self,
        endpoint: &'a str,
        expected: Option<&'a str>,
        new: Option<&'a str>,
    ) -> StoreFuture<'a, bool> {
        (**self).swap(endpoint, expected, new)
    }
}

/// The engine side of a shared health.
struct Shared {
    store: Arc<dyn HealthStore>,
    /// Changes made in the process's view and not yet written to the store, oldest first: the
    /// flusher removes one only once it is written. The view of an endpoint is always what was
    /// last read of it with its pending changes applied on top.
    pending: Mutex<VecDeque<(String, Change)>>,
    /// When each endpoint's state was last read from the store.
    read_at: Mutex<HashMap<String, Instant>>,
    /// Store calls that failed, stored values that could not be read, and changes dropped
    /// past [`MAX_PENDING`].
    errors: AtomicU64,
    /// Held while this view writes to the store: one flush at a time, so that changes are
    /// written in their order.
    flushing: tokio::sync::Mutex<()>,
    /// Flushes that stopped on a store error: one that failed while a caller waited is not
    /// tried again at once by each waiting caller.
    failed_flushes: AtomicU64,
    /// A flush was waited for a whole [`REFRESH`] in vain: until a flush runs again, none is
    /// waited for.
    stalled: AtomicBool,
    /// Changes written so far: a read that began before one was written is not adopted (the
    /// write is newer than what it read, and no longer pending).
    written: AtomicU64,
}

/// The most changes kept for a store that does not answer; past it the oldest are dropped (and
/// counted in [`EndpointHealth::store_errors`]).
const MAX_PENDING: usize = 10_000;

/// The health of each endpoint the process delivers to. Cloning shares it.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use tower_http_retry_redelivery::health::{DisableReason, EndpointHealth, HealthRules};
///
/// let rules = HealthRules::new().disable_after(Duration::from_secs(3600)).unwrap();
/// let health = EndpointHealth::new(rules);
/// let start = SystemTime::now();
/// assert_eq!(health.failed("https://a.example", start), None);
/// assert_eq!(health.failed("https://a.example", start + Duration::from_secs(3599)), None);
/// let late = start + Duration::from_secs(3600);
/// assert_eq!(health.failed("https://a.example", late), Some(DisableReason::FailingFor(Duration::from_secs(3600))));
/// assert!(health.disabled("https://a.example").is_some());
/// health.enable("https://a.example");
/// assert!(health.disabled("https://a.example").is_none());
/// ```
#[derive(Clone, Default)]
pub struct EndpointHealth {
    rules: HealthRules,
    endpoints: Arc<Mutex<HashMap<String, State>>>,
    shared: Option<Arc<Shared>>,
}

impl fmt::Debug for EndpointHealth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointHealth")
            .field("rules", &self.rules)
            .field("endpoints", &*lock(&self.endpoints))
            .field("shared", &self.shared.is_some())
            .finish()
    }
}

impl EndpointHealth {
    /// No endpoint known yet; the state in this process's memory only.
    pub fn new(rules: HealthRules) -> Self {
        Self {
            rules,
            endpoints: Arc::default(),
            shared: None,
        }
    }

    /// The state kept in `store` too, shared by every process that uses the same store and kept
    /// across restarts: give each process's workers `EndpointHealth::shared(rules,
    /// outbox.clone())` ([`Redelivery::with_health`](crate::Redelivery::with_health)), which
    /// [syncs](Self::sync) before each send and [flushes](Self::flush) after.
    pub fn shared(rules: HealthRules, store: impl HealthStore) -> Self {
        Self {
            shared: Some(Arc::new(Shared {
                store: Arc::new(store),
                pending: Mutex::default(),
                read_at: Mutex::default(),
                errors: AtomicU64::new(0),
                flushing: tokio::sync::Mutex::new(()),
                failed_flushes: AtomicU64::new(0),
                stalled: AtomicBool::new(false),
                written: AtomicU64::new(0),
            })),
            ..Self::new(rules)
        }
    }

    /// Why `endpoint` is disabled, if it is (in this process's view).
    pub fn disabled(&self, endpoint: &str) -> Option<DisableReason> {
        match lock(&self.endpoints).get(endpoint) {
            Some(State::Disabled(reason)) => Some(*reason),
            _ => None,
        }
    }

    /// Whether `endpoint` is in a failing run (in this process's view): its last attempt
    /// failed and no success came since.
    pub(crate) fn failing(&self, endpoint: &str) -> bool {
        matches!(lock(&self.endpoints).get(endpoint), Some(State::Failing(_)))
    }

    /// Every disabled endpoint and why (in this process's view: with a shared store, those it
    /// has read or changed).
    pub fn disabled_endpoints(&self) -> Vec<(String, DisableReason)> {
        let mut disabled: Vec<_> = lock(&self.endpoints)
            .iter()
            .filter_map(|(endpoint, state)| match state {
                State::Disabled(reason) => Some((endpoint.clone(), *reason)),
                State::Failing(_) => None,
            })
            .collect();
        disabled.sort_by(|a, b| a.0.cmp(&b.0));
        disabled
    }

    /// Enables `endpoint` again, its failing run forgotten (with a shared store, written there
    /// at the next [`flush`](Self::flush)).
    pub fn enable(&self, endpoint: &str) {
        self.change(endpoint, Change::Enable);
    }

    /// `endpoint` took a delivery: its failing run ends.
    pub fn succeeded(&self, endpoint: &str) {
        self.change(endpoint, Change::Succeeded);
    }

    /// `endpoint` failed an attempt at `at`; returns the reason if this disabled it.
    pub fn failed(&self, endpoint: &str, at: SystemTime) -> Option<DisableReason> {
        self.change(endpoint, Change::Failed(unix_ms(at)))
    }

    /// `endpoint` answered `410 Gone`; returns the reason if this disabled it.
    pub fn gone(&self, endpoint: &str) -> Option<DisableReason> {
        if !self.rules.disable_on_gone {
            return None;
        }
        self.disable(endpoint, DisableReason::Gone)
    }

    /// The rules.
    pub fn rules(&self) -> &HealthRules {
        &self.rules
    }

    /// Disables `endpoint` for `reason`; returns the reason if this disabled it (`None` when it
    /// was disabled already).
    pub fn disable(&self, endpoint: &str, reason: DisableReason) -> Option<DisableReason> {
        self.change(endpoint, Change::Disable(reason))
    }

    /// With a shared store: writes the changes made since the last flush (unless a flush runs,
    /// which writes them: a send never waits for it), then reads `endpoint`'s state from the
    /// store unless it was read less than [`REFRESH`] ago. Without a store, nothing. A store
    /// that fails is counted ([`store_errors`](Self::store_errors)) and the process goes on with
    /// its own view; the changes not written are tried again next time.
    pub async fn sync(&self, endpoint: &str) {
        let Some(shared) = &self.shared else {
            return;
        };
        if let Ok(_flushing) = shared.flushing.try_lock() {
            self.write_pending(shared).await;
        }
        let fresh = lock(&shared.read_at)
            .get(endpoint)
            .is_some_and(|at| at.elapsed() < REFRESH);
        if fresh {
            return;
        }
        let written = shared.written.load(Ordering::Acquire);
        match shared.store.get(endpoint).await {
            Ok(stored) => {
                let state = self.parse(shared, stored.as_deref());
                self.adopt(shared, endpoint, state, Some(written));
            }
            Err(_) => {
                shared.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// With a shared store: writes the changes made since the last flush, in their order, each
    /// applied to the stored state by compare-and-swap (a success elsewhere in the fleet ends a
    /// failing run here too). One flush runs at a time; a call while another runs waits for it,
    /// so that when a call returns, the changes made before it are written (a peer reads a
    /// failing run before this process acts on it, as when it moves the endpoint's backlog), or
    /// the store failed, or the running flush did not end within [`REFRESH`]: they are then kept
    /// for the next flush. After such a wait, calls do not wait until that flush ends: a store
    /// that hangs costs one wait, not one a delivery. Without a store, nothing.
    pub async fn flush(&self) {
        let Some(shared) = &self.shared else {
            return;
        };
        // A change leaves `pending` only once written.
        if lock(&shared.pending).is_empty() {
            return;
        }
        let failed_before = shared.failed_flushes.load(Ordering::Acquire);
        let flushing = if shared.stalled.load(Ordering::Acquire) {
            shared.flushing.try_lock().ok()
        } else {
            tokio::time::timeout(REFRESH, shared.flushing.lock())
                .await
                .ok()
        };
        let Some(_flushing) = flushing else {
            shared.stalled.store(true, Ordering::Release);
            return;
        };
        if shared.failed_flushes.load(Ordering::Acquire) != failed_before {
            return;
        }
        self.write_pending(shared).await;
    }

    /// Writes the pending changes in their order until none is left or the store fails; the
    /// caller holds `flushing`.
    async fn write_pending(&self, shared: &Shared) {
        shared.stalled.store(false, Ordering::Release);
        loop {
            let Some((endpoint, change)) = lock(&shared.pending).front().cloned() else {
                break;
            };
            match self.publish(shared, &endpoint, change).await {
                Ok(state) => {
                    lock(&shared.pending).pop_front();
                    shared.written.fetch_add(1, Ordering::AcqRel);
                    self.adopt(shared, &endpoint, state, None);
                }
                Err(_) => {
                    shared.errors.fetch_add(1, Ordering::Relaxed);
                    shared.failed_flushes.fetch_add(1, Ordering::Release);
                    break;
                }
            }
        }
    }

    /// Calls to the shared store that failed, and stored values that could not be read (0
    /// without a store).
    pub fn store_errors(&self) -> u64 {
        self.shared
            .as_ref()
            .map_or(0, |shared| shared.errors.load(Ordering::Relaxed))
    }

    /// Changes made in this view and not yet written to the shared store (0 without one): a
    /// flush that failed leaves them for the next. A figure that keeps growing says the store
    /// is out of reach.
    pub fn unwritten(&self) -> usize {
        self.shared
            .as_ref()
            .map_or(0, |shared| lock(&shared.pending).len())
    }

    /// Applies `change` to the process's view, queued for the store when it changed something;
    /// returns the reason if it disabled the endpoint.
    fn change(&self, endpoint: &str, change: Change) -> Option<DisableReason> {
        let mut endpoints = lock(&self.endpoints);
        let before = endpoints.get(endpoint).copied();
        let after = next(before, change, &self.rules);
        // An operator's enable or disable is written even when this view had nothing to change
        // (a process that never read the endpoint): the store may hold another state.
        let explicit = matches!(change, Change::Enable | Change::Disable(_));
        if after == before && !(explicit && self.shared.is_some()) {
            return None;
        }
        match after {
            Some(state) => endpoints.insert(endpoint.to_owned(), state),
            None => endpoints.remove(endpoint),
        };
        if let Some(shared) = &self.shared {
            // Under the view's lock, as `adopt` folds the pending changes over what it read.
            let mut pending = lock(&shared.pending);
            if pending.len() >= MAX_PENDING {
                pending.pop_front();
                shared.errors.fetch_add(1, Ordering::Relaxed);
            }
            pending.push_back((endpoint.to_owned(), change));
        }
        drop(endpoints);
        match (before, after) {
            (Some(State::Disabled(_)), _) => None,
            (_, Some(State::Disabled(reason))) => Some(reason),
            _ => None,
        }
    }

    /// Applies `change` to the stored state of `endpoint`; returns the state stored after it.
    async fn publish(
        &self,
        shared: &Shared,
        endpoint: &str,
        change: Change,
    ) -> Result<Option<State>, BoxError> {
        for _ in 0..SWAP_TRIES {
            let stored = shared.store.get(endpoint).await?;
            let current = self.parse(shared, stored.as_deref());
            let new = next(current, change, &self.rules);
            if new == current {
                return Ok(current);
            }
            let written = new.map(|state| serde_json::to_string(&state).expect("plain data"));
            if shared
                .store
                .swap(endpoint, stored.as_deref(), written.as_deref())
                .await?
            {
                return Ok(new);
            }
        }
        Err(
            format!("endpoint health of {endpoint}: changed by others {SWAP_TRIES} times in a row")
                .into(),
        )
    }

    /// A stored value; one that cannot be read counts as no state (and is counted), and is
    /// replaced by the next change.
    fn parse(&self, shared: &Shared, stored: Option<&str>) -> Option<State> {
        let state = serde_json::from_str(stored?);
        if state.is_err() {
            shared.errors.fetch_add(1, Ordering::Relaxed);
        }
        state.ok()
    }

    /// Takes `stored`, the state read or written for `endpoint`, as the process's view, with
    /// the endpoint's changes still pending applied on top (none is undone before it is
    /// written). `written_before`: the count of writes when a read began; a read older than a
    /// write is not adopted.
    fn adopt(
        &self,
        shared: &Shared,
        endpoint: &str,
        stored: Option<State>,
        written_before: Option<u64>,
    ) {
        let mut endpoints = lock(&self.endpoints);
        if written_before.is_some_and(|seen| seen != shared.written.load(Ordering::Acquire)) {
            return;
        }
        let view = lock(&shared.pending)
            .iter()
            .filter(|(pending, _)| pending == endpoint)
            .fold(stored, |state, (_, change)| {
                next(state, *change, &self.rules)
            });
        match view {
            Some(state) => endpoints.insert(endpoint.to_owned(), state),
            None => endpoints.remove(endpoint),
        };
        lock(&shared.read_at).insert(endpoint.to_owned(), Instant::now());
    }
}

/// A panic while a map was held left it whole: every write is a single insert or remove.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_success_ends_the_failing_run() {
        let health = EndpointHealth::new(
            HealthRules::new()
                .disable_after(Duration::from_secs(10))
                .unwrap(),
        );
        let start = SystemTime::now();
        health.failed("e", start);
        health.succeeded("e");
        assert_eq!(health.failed("e", start + Duration::from_secs(9)), None);
        assert_eq!(
            health.failed("e", start + Duration::from_secs(18)),
            None,
            "run restarted at 9 s"
        );
        assert!(health
            .failed("e", start + Duration::from_secs(19))
            .is_some());
        health.succeeded("e");
        assert!(
            health.disabled("e").is_some(),
            "a disabled endpoint stays so until enabled"
        );
    }

    #[test]
    fn only_continuous_failure_disables() {
        const HOUR: Duration = Duration::from_secs(3600);
        let health = EndpointHealth::default();
        let start = SystemTime::now();
        // Failing every 6 hours for 5 days: disabled at the end of the fifth day, not before.
        for n in 0..20 {
            assert_eq!(health.failed("e", start + HOUR * 6 * n), None, "{n}");
        }
        assert!(health.failed("e", start + HOUR * 120).is_some());

        // Two failures five days apart: a new run.
        let quiet = EndpointHealth::default();
        quiet.failed("e", start);
        assert_eq!(quiet.failed("e", start + HOUR * 120), None);
        // A day whose failures spanned less than half of it starts the run again, as does a day
        // without a failure.
        let sparse = EndpointHealth::default();
        for n in 0..=5 {
            // Two failures an hour apart each day.
            sparse.failed("e", start + HOUR * 24 * n);
            assert_eq!(sparse.failed("e", start + HOUR * (24 * n + 1)), None, "{n}");
        }
    }

    #[test]
    fn gone_disables_at_once_unless_turned_off() {
        let health = EndpointHealth::default();
        assert_eq!(health.gone("e"), Some(DisableReason::Gone));
        assert_eq!(health.gone("e"), None, "reported once");
        assert_eq!(
            health.disabled_endpoints(),
            [("e".to_owned(), DisableReason::Gone)]
        );
        let lenient = EndpointHealth::new(HealthRules::new().disable_on_gone(false));
        assert_eq!(lenient.gone("e"), None);
        assert_eq!(lenient.disabled("e"), None);
    }

    /// A store in memory, as an engine's table would keep it; `fail` makes every call fail;
    /// with a `gate`, each write waits until the test opens it.
    #[derive(Clone, Default)]
    struct MemoryStore {
        values: Arc<Mutex<HashMap<String, String>>>,
        fail: Arc<std::sync::atomic::AtomicBool>,
        fail_writes: Arc<std::sync::atomic::AtomicBool>,
        gate: Option<Arc<tokio::sync::Semaphore>>,
    }

    impl HealthStore for MemoryStore {
        fn get<'a>(&'a self, endpoint: &'a str) -> StoreFuture<'a, Option<String>> {
            let result = self
                .check()
                .map(|()| lock(&self.values).get(endpoint).cloned());
            Box::pin(async move { result })
        }

        fn swap<'a>(
            &'a self,
            endpoint: &'a str,
            expected: Option<&'a str>,
            new: Option<&'a str>,
        ) -> StoreFuture<'a, bool> {
            Box::pin(async move {
                if let Some(gate) = &self.gate {
                    let _open = gate.acquire().await;
                }
                if self.fail_writes.load(Ordering::Relaxed) {
                    return Err("read-only".into());
                }
                self.check().map(|()| {
                    let mut values = lock(&self.values);
                    if values.get(endpoint).map(String::as_str) != expected {
                        return false;
                    }
                    match new {
                        Some(new) => values.insert(endpoint.to_owned(), new.to_owned()),
                        None => values.remove(endpoint),
                    };
                    true
                })
            })
        }
    }

    impl MemoryStore {
        fn check(&self) -> Result<(), BoxError> {
            if self.fail.load(Ordering::Relaxed) {
                return Err("store down".into());
            }
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_fleet_shares_one_state_and_a_restart_keeps_it() {
        let rules = HealthRules::new()
            .disable_after(Duration::from_secs(10))
            .unwrap();
        let store = MemoryStore::default();
        let (a, b) = (
            EndpointHealth::shared(rules, store.clone()),
            EndpointHealth::shared(rules, store.clone()),
        );
        let start = SystemTime::now();
        a.failed("e", start);
        a.flush().await;
        b.sync("e").await;
        assert!(b.disabled("e").is_none());
        // A success in another process ends the failing run: the next failure starts a new one.
        b.succeeded("e");
        b.flush().await;
        assert!(lock(&store.values).is_empty(), "the run ended in the store");
        a.failed("e", start + Duration::from_secs(9));
        a.flush().await;
        assert_eq!(
            a.failed("e", start + Duration::from_secs(15)),
            None,
            "the run restarted at 9 s"
        );
        a.flush().await;
        assert!(a.failed("e", start + Duration::from_secs(19)).is_some());
        a.flush().await;
        // A restarted process (a fresh view on the same store) reads the endpoint disabled.
        let restarted = EndpointHealth::shared(rules, store.clone());
        assert_eq!(restarted.disabled("e"), None, "not read yet");
        restarted.sync("e").await;
        assert!(restarted.disabled("e").is_some());
        // Enabled by an operator anywhere: every process reads it within one refresh.
        restarted.enable("e");
        restarted.flush().await;
        let later = EndpointHealth::shared(rules, store);
        later.sync("e").await;
        assert_eq!(later.disabled("e"), None);
        assert_eq!(a.store_errors() + restarted.store_errors(), 0);
    }

    #[tokio::test]
    async fn a_change_not_yet_written_is_never_undone_by_a_read() {
        let store = MemoryStore::default();
        let health = EndpointHealth::shared(HealthRules::new(), store.clone());
        store.fail_writes.store(true, Ordering::Relaxed);
        assert_eq!(health.gone("e"), Some(DisableReason::Gone));
        // The write fails, the read works and finds nothing: the 410 stays in the view.
        health.sync("e").await;
        assert_eq!(health.disabled("e"), Some(DisableReason::Gone));
        assert!(health.store_errors() >= 1);
        // A failure then a 410, written in their order once the store takes writes again.
        let later = SystemTime::now();
        assert_eq!(health.failed("f", later), None);
        health.gone("f");
        store.fail_writes.store(false, Ordering::Relaxed);
        health.flush().await;
        assert_eq!(health.disabled("f"), Some(DisableReason::Gone));
        let fresh = EndpointHealth::shared(HealthRules::new(), store.clone());
        fresh.sync("e").await;
        fresh.sync("f").await;
        assert_eq!(fresh.disabled("e"), Some(DisableReason::Gone));
        assert_eq!(fresh.disabled("f"), Some(DisableReason::Gone));
    }

    /// A view on a gated store, with a flush of a failure of `e` running: its write waits at
    /// the gate; then a 410 of `f`, made while it waits.
    async fn a_flush_waiting_at_the_gate(
    ) -> (EndpointHealth, MemoryStore, Arc<tokio::sync::Semaphore>) {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let store = MemoryStore {
            gate: Some(Arc::clone(&gate)),
            ..MemoryStore::default()
        };
        let health = EndpointHealth::shared(HealthRules::new(), store.clone());
        health.failed("e", SystemTime::now());
        tokio::spawn({
            let health = health.clone();
            async move { health.flush().await }
        });
        let shared = health.shared.as_ref().unwrap();
        for _ in 0..100 {
            if shared.flushing.try_lock().is_err() {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(shared.flushing.try_lock().is_err(), "the first flush runs");
        health.gone("f");
        (health, store, gate)
    }

    #[tokio::test(start_paused = true)]
    async fn a_flush_beside_another_returns_once_its_changes_are_written() {
        let (health, store, gate) = a_flush_waiting_at_the_gate().await;
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            gate.add_permits(100);
        });
        // Returned at once before, the 410 not yet written: a process could move a backlog its
        // peers never knew failing.
        health.flush().await;
        assert_eq!(health.unwritten(), 0);
        let values = lock(&store.values);
        assert!(values.contains_key("e") && values.contains_key("f"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_flush_waits_a_refresh_at_most_for_a_store_that_hangs() {
        let (health, _store, _gate) = a_flush_waiting_at_the_gate().await;
        let waited = tokio::time::Instant::now();
        health.flush().await;
        assert_eq!(waited.elapsed(), REFRESH);
        assert_eq!(health.unwritten(), 2, "both kept for the next flush");
        // Until that flush ends, no call waits for it again.
        let again = tokio::time::Instant::now();
        health.flush().await;
        assert_eq!(again.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_sync_reads_while_a_flush_runs() {
        let (health, store, _gate) = a_flush_waiting_at_the_gate().await;
        lock(&store.values).insert("g".to_owned(), r#"{"disabled":"gone"}"#.to_owned());
        health.sync("g").await;
        assert_eq!(health.disabled("g"), Some(DisableReason::Gone));
    }

    #[tokio::test(start_paused = true)]
    async fn a_flush_that_waited_for_one_that_failed_does_not_try_again() {
        let (health, store, gate) = a_flush_waiting_at_the_gate().await;
        tokio::spawn({
            let store = store.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                store.fail.store(true, Ordering::Relaxed);
                gate.add_permits(100);
            }
        });
        health.flush().await;
        assert_eq!(
            health.store_errors(),
            1,
            "one failed call to the store, not one a caller"
        );
        assert_eq!(health.unwritten(), 2, "both kept for the next flush");
    }

    #[tokio::test]
    async fn an_operator_enables_from_a_process_that_never_read_the_endpoint() {
        let store = MemoryStore::default();
        let worker = EndpointHealth::shared(HealthRules::new(), store.clone());
        assert_eq!(worker.gone("e"), Some(DisableReason::Gone));
        worker.flush().await;
        let admin = EndpointHealth::shared(HealthRules::new(), store.clone());
        admin.enable("e");
        admin.flush().await;
        assert!(lock(&store.values).is_empty(), "enabled for the fleet");
    }

    #[tokio::test]
    async fn a_healthy_endpoint_costs_no_write_and_a_failing_store_loses_no_change() {
        let store = MemoryStore::default();
        let health = EndpointHealth::shared(HealthRules::new(), store.clone());
        health.sync("e").await;
        health.succeeded("e");
        assert_eq!(health.unwritten(), 0);

        store.fail.store(true, Ordering::Relaxed);
        assert_eq!(health.gone("e"), Some(DisableReason::Gone));
        health.flush().await;
        assert_eq!(health.store_errors(), 1);
        assert_eq!(health.unwritten(), 1, "kept for the next flush");
        assert!(lock(&store.values).is_empty());
        store.fail.store(false, Ordering::Relaxed);
        health.sync("e").await;
        assert_eq!(health.unwritten(), 0);
        assert!(
            lock(&store.values).contains_key("e"),
            "written once the store is back"
        );
        assert_eq!(health.disabled("e"), Some(DisableReason::Gone));

        // A stored value of another shape is counted and replaced by the next change.
        lock(&store.values).insert("f".to_owned(), "not json".to_owned());
        let fresh = EndpointHealth::shared(HealthRules::new(), store.clone());
        fresh.sync("f").await;
        assert_eq!(fresh.store_errors(), 1);
        assert_eq!(fresh.gone("f"), Some(DisableReason::Gone));
        fresh.flush().await;
        assert_eq!(
            lock(&store.values).get("f").map(String::as_str),
            Some(r#"{"disabled":"gone"}"#)
        );
    }
}

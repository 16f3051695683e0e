//! [`PacingStore`], the trait every store implements, and [`StoreCall`], what its calls return:
//! ready at once from an in-process store (no allocation, no await point), a boxed future from
//! a remote one.

use super::protocol::{Applied, Event, StoreStats, View};
use crate::pacing::PacingRules;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::time::Instant;

/// Where the fleet-shared pacing state of endpoints is kept, and the one way it changes.
///
/// A store keeps, per endpoint, the state the whole fleet shares (mode, learned rate, probe
/// stream, release slots) and applies [`Event`]s to it atomically, through the crate's one
/// transition function. Two implementations: [`InProcessStore`](super::InProcessStore) (the
/// state under a lock: the processes are tasks or layers of one process) and, in the
/// `tower-http-retry-redis` crate, `RedisStore` (a versioned record per endpoint, changed by a
/// compare-and-set script, on the [`remote`](super::remote) kit). Every process of a fleet
/// must use the same [`Pacing`](crate::Pacing) configuration with the same store.
///
/// A call always answers. When a remote store fails, the answer comes from the process's
/// fallback pacing and says why ([`Applied::fallback`]).
///
/// ```
/// use tokio::time::Instant;
/// use tower_http_retry::pacing::store::{Event, InProcessStore, PacingStore, Release};
/// use tower_http_retry::pacing::{Pacing, PacingMode};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let pacing = Pacing::new();
/// let one = InProcessStore::new();
/// let other = one.peer(); // another process of the same fleet
/// let now = Instant::now();
/// let down = [Event::Down { jitter: 0.5 }];
/// one.apply(pacing.rules(), "api.example.com", &down, now).await;
/// let ask = [Event::Release { want: 1, jitter: 0.5 }];
/// let applied = other.apply(pacing.rules(), "api.example.com", &ask, now).await;
/// assert_eq!(applied.view.mode, PacingMode::Probing);
/// assert!(matches!(applied.release(), Some(Release::At(_))), "the first probe is due later");
/// # }
/// ```
pub trait PacingStore: fmt::Debug + Send + Sync + 'static {
    /// Applies `events`, in order and atomically, to `endpoint`'s shared state at `now` (the
    /// caller's clock), under `rules` (the [`Pacing`](crate::Pacing)'s, see
    /// [`Pacing::rules`](crate::Pacing::rules)).
    fn apply<'a>(
        &'a self,
        rules: &'a PacingRules,
        endpoint: &'a str,
        events: &'a [Event],
        now: Instant,
    ) -> StoreCall<'a>;

    /// The endpoint as this process last heard of it, without a call (`None`: never heard of).
    /// A remote store refreshes what it knows in the background when it is older than a
    /// short time to live, so that a request to an open endpoint costs no call.
    fn cached(&self, rules: &PacingRules, endpoint: &str, now: Instant) -> Option<View>;

    /// The store's counters.
    fn stats(&self) -> StoreStats;
}

impl<S: PacingStore + ?Sized> PacingStore for Arc<S> {
    fn apply<'a>(
        &'a self,
        rules: &'a PacingRules,
        endpoint: &'a str,
        events: &'a [Event],
        now: Instant,
    ) -> StoreCall<'a> {
        (**self).apply(rules, endpoint, events, now)
    }

    fn cached(&self, rules: &PacingRules, endpoint: &str, now: Instant) -> Option<View> {
        (**self).cached(rules, endpoint, now)
    }

    fn stats(&self) -> StoreStats {
        (**self).stats()
    }
}

/// The answer of [`PacingStore::apply`]: ready at once, or a future.
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct StoreCall<'a> {
    inner: Inner<'a>,
}

enum Inner<'a> {
    /// Boxed: an answer is large beside a future's pointer.
    Ready(Option<Box<Applied>>),
    Pending(Pin<Box<dyn Future<Output = Applied> + Send + 'a>>),
}

impl<'a> StoreCall<'a> {
    /// An answer known at once.
    pub fn ready(applied: Applied) -> Self {
        Self {
            inner: Inner::Ready(Some(Box::new(applied))),
        }
    }

    /// An answer that needs `future`.
    pub fn pending(future: impl Future<Output = Applied> + Send + 'a) -> Self {
        Self {
            inner: Inner::Pending(Box::pin(future)),
        }
    }

    /// The answer if it is known already (an in-process store), or the call back.
    pub fn into_ready(self) -> Result<Applied, Self> {
        match self.inner {
            Inner::Ready(Some(applied)) => Ok(*applied),
            inner => Err(Self { inner }),
        }
    }
}

impl Future for StoreCall<'_> {
    type Output = Applied;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Applied> {
        match &mut self.inner {
            Inner::Ready(applied) => Poll::Ready(
                *applied
                    .take()
                    .expect("a StoreCall polled after it completed"),
            ),
            Inner::Pending(future) => future.as_mut().poll(cx),
        }
    }
}

impl fmt::Debug for StoreCall<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.inner {
            Inner::Ready(Some(_)) => "ready",
            Inner::Ready(None) => "done",
            Inner::Pending(_) => "pending",
        };
        f.debug_struct("StoreCall").field("state", &state).finish()
    }
}

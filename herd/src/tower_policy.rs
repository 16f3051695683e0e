//! The peer anchor: `tower::retry::Retry` with the policy a user of tower writes.

use crate::{Params, ATTEMPT};
use http::{HeaderValue, Request, Response};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::time::Sleep;
use tower::retry::backoff::{
    Backoff as _, ExponentialBackoff, ExponentialBackoffMaker, MakeBackoff,
};
use tower::retry::budget::{Budget, TpsBudget};
use tower::retry::Policy;

/// The `tower::retry::Policy` a user of tower writes: 5xx is retried up to the attempt limit if
/// the budget allows (withdraw on failure, deposit on success, as `tower::retry::budget`'s docs
/// show), sleeping what the session's `ExponentialBackoff` says.
///
/// `tower::retry::Retry` clones the policy for every request session, so each session starts from
/// the same `ExponentialBackoff`, random generator included: that is how tower is used, and why
/// its jitter does not spread a herd.
#[derive(Clone)]
pub(crate) struct TowerPolicy {
    backoff: ExponentialBackoff<SplitMix>,
    budget: Option<Arc<TpsBudget>>,
    attempts: u32,
    max_attempts: u32,
    /// Deliveries given up because the budget was empty, and because attempts ran out.
    pub(crate) gave_up: Arc<[AtomicU64; 2]>,
}

impl TowerPolicy {
    pub(crate) fn new(p: &Params, seed: u64, budget: bool) -> Self {
        let mut maker = ExponentialBackoffMaker::new(p.base, p.cap, p.tower_jitter, SplitMix(seed))
            .expect("valid tower backoff");
        Self {
            backoff: maker.make_backoff(),
            budget: budget.then(|| {
                Arc::new(TpsBudget::new(
                    p.tower_ttl,
                    p.budget_per_second,
                    p.budget_ratio,
                ))
            }),
            attempts: 1,
            max_attempts: p.max_attempts,
            gave_up: Arc::default(),
        }
    }
}

impl Policy<Request<String>, Response<String>, Infallible> for TowerPolicy {
    type Future = Sleep;

    fn retry(
        &mut self,
        request: &mut Request<String>,
        result: &mut Result<Response<String>, Infallible>,
    ) -> Option<Sleep> {
        let response = match result {
            Ok(response) => response,
            Err(never) => match *never {},
        };
        if response.status().is_success() {
            if let Some(budget) = &self.budget {
                budget.deposit();
            }
            return None;
        }
        if !response.status().is_server_error() {
            return None;
        }
        if self.attempts >= self.max_attempts {
            self.gave_up[1].fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if self
            .budget
            .as_ref()
            .is_some_and(|budget| !budget.withdraw())
        {
            self.gave_up[0].fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.attempts += 1;
        request
            .headers_mut()
            .insert(ATTEMPT, HeaderValue::from(self.attempts));
        Some(self.backoff.next_backoff())
    }

    fn clone_request(&mut self, request: &Request<String>) -> Option<Request<String>> {
        Some(request.clone())
    }
}

/// A seeded generator for tower's backoff (splitmix64), so tower's row is reproducible too.
/// tower's default, `HasherRng::default()`, would behave the same way (one generator, cloned
/// into every session), only with a different draw each run.
#[derive(Clone, Debug)]
struct SplitMix(u64);

impl tower::util::rng::Rng for SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

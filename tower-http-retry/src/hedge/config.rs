//! What every clone of a hedging layer shares at run time: the settings, the charges a hedge
//! pays (the layer's cap and the shared retry budget), the gates, the endpoints' sketches and
//! the counters; and the admission of one hedge, apart from the poll plumbing.

use super::endpoints::Sketches;
use super::gate::HedgeGate;
use super::sketch::SketchRules;
use super::stats::{Counters, Event};
use crate::retry::budget::Withdrawal;
use crate::retry::stats::Counters as RetryCounters;
use crate::retry::{Idempotency, RetryBudget, TokenBucket};
use http::uri::Authority;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub(crate) struct Config<C> {
    pub(crate) classifier: C,
    pub(crate) idempotency: Idempotency,
    /// A fixed delay, or `None`: read from the endpoint's sketch.
    pub(crate) fixed_delay: Option<Duration>,
    pub(crate) rules: SketchRules,
    pub(crate) max_hedges: u32,
    pub(crate) charges: Arc<Charges>,
    pub(crate) gates: Vec<Arc<dyn HedgeGate>>,
    pub(crate) sketches: Sketches,
    pub(crate) counters: Counters,
}

/// What a hedge is paid with: a token of the layer's own cap, which every request fills by
/// `max_extra_load`, and one of the shared retry budget, if there is one.
#[derive(Debug)]
pub(crate) struct Charges {
    pub(crate) cap: TokenBucket,
    pub(crate) budget: Option<SharedBudget>,
}

/// The shared retry budget a hedge is charged to, with the counters its grants, denials and
/// refunds go to: the retry layer's when the budget came with it
/// ([`retry_layer`](crate::hedge::HedgeLayerBuilder::retry_layer)), so that its stats count what hedges
/// took from the budget as well as what retries took.
#[derive(Clone)]
pub(crate) struct SharedBudget {
    pub(crate) budget: Arc<dyn RetryBudget>,
    pub(crate) counters: RetryCounters,
}

impl fmt::Debug for SharedBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.budget.fmt(f)
    }
}

/// Why a hedge was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    Gate,
    Cap,
    Budget,
}

impl Refusal {
    pub(crate) fn event(self) -> Event {
        match self {
            Refusal::Gate => Event::RefusedByGate,
            Refusal::Cap => Event::RefusedByCap,
            Refusal::Budget => Event::RefusedByBudget,
        }
    }
}

/// A hedge paid for and not sent yet: dropped unspent (its request finished first, or its
/// service failed to get ready), it gives its tokens back. Its budget token is a retry's
/// ([`Withdrawal`]): one type, one refund rule.
pub(crate) struct Admission {
    charges: Arc<Charges>,
    budget: Option<Withdrawal>,
    spent: bool,
}

impl fmt::Debug for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admission")
            .field("budget", &self.budget.is_some())
            .field("spent", &self.spent)
            .finish()
    }
}

impl Admission {
    pub(crate) fn spend(mut self) {
        self.spent = true;
        if let Some(budget) = self.budget.take() {
            budget.spend();
        }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if !self.spent {
            // The budget's token, if any, is refunded as it drops.
            self.charges.cap.refund();
        }
    }
}

impl<C> Config<C> {
    /// Whether a hedge to `authority` may be sent now: every gate allows it (asked first, so
    /// that a refused hedge costs no token), the cap has a token, and so has the budget.
    pub(crate) fn admit(&self, authority: Option<&Authority>) -> Result<Admission, Refusal> {
        if self.gates.iter().any(|gate| !gate.allows(authority)) {
            return Err(Refusal::Gate);
        }
        let charges = &self.charges;
        if !charges.cap.withdraw() {
            return Err(Refusal::Cap);
        }
        let budget = match &charges.budget {
            Some(shared) => match Withdrawal::take(&shared.budget, &shared.counters) {
                Some(token) => Some(token),
                None => {
                    charges.cap.refund();
                    return Err(Refusal::Budget);
                }
            },
            None => None,
        };
        Ok(Admission {
            charges: Arc::clone(charges),
            budget,
            spent: false,
        })
    }
}

impl<C: fmt::Debug> fmt::Debug for Config<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HedgeConfig")
            .field("classifier", &self.classifier)
            .field("idempotency", &self.idempotency)
            .field("fixed_delay", &self.fixed_delay)
            .field("rules", &self.rules)
            .field("max_hedges", &self.max_hedges)
            .field("charges", &self.charges)
            .field("gates", &self.gates)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hedge::endpoints::Endpoints;
    use crate::retry::RetryBudget;

    #[derive(Debug)]
    struct Shut;

    impl HedgeGate for Shut {
        fn allows(&self, _: Option<&Authority>) -> bool {
            false
        }
    }

    fn config(gates: Vec<Arc<dyn HedgeGate>>, budget: Option<Arc<dyn RetryBudget>>) -> Config<()> {
        let cap = TokenBucket::builder()
            .capacity(1.0)
            .deposit_per_success(0.5)
            .refill_per_second(0.0)
            .build()
            .unwrap();
        Config {
            classifier: (),
            idempotency: Idempotency::default(),
            fixed_delay: Some(Duration::from_millis(5)),
            rules: SketchRules {
                quantile: 0.95,
                floor: Duration::from_millis(1),
                window: Duration::from_secs(30),
                min_samples: 20,
                pause_share: 0.5,
            },
            max_hedges: 1,
            charges: Arc::new(Charges {
                cap,
                budget: budget.map(|budget| SharedBudget {
                    budget,
                    counters: RetryCounters::default(),
                }),
            }),
            gates,
            sketches: Sketches::Own(Endpoints::new(8)),
            counters: Counters::default(),
        }
    }

    #[test]
    fn a_closed_gate_refuses_before_any_token_is_taken() {
        let config = config(vec![Arc::new(Shut)], None);
        assert_eq!(config.admit(None).unwrap_err(), Refusal::Gate);
        assert_eq!(config.charges.cap.available(), 1.0);
    }

    #[test]
    fn an_empty_budget_refuses_and_gives_the_cap_its_token_back() {
        let empty = TokenBucket::builder()
            .capacity(1.0)
            .refill_per_second(0.0)
            .build()
            .unwrap();
        assert!(empty.withdraw());
        let config = config(Vec::new(), Some(Arc::new(empty)));
        assert_eq!(config.admit(None).unwrap_err(), Refusal::Budget);
        assert_eq!(config.charges.cap.available(), 1.0);
    }

    #[test]
    fn an_admission_dropped_unspent_refunds_and_a_spent_one_does_not() {
        let config = config(Vec::new(), None);
        drop(config.admit(None).unwrap());
        assert_eq!(config.charges.cap.available(), 1.0);
        config.admit(None).unwrap().spend();
        assert_eq!(config.charges.cap.available(), 0.0);
        assert_eq!(config.admit(None).unwrap_err(), Refusal::Cap);
        // Two requests at 0.5 each pay for the next hedge.
        config.charges.cap.deposit();
        config.charges.cap.deposit();
        assert!(config.admit(None).is_ok());
    }
}

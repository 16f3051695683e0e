//! The [`Template`] that makes breakers from a checked [`Config`] (one for a
//! [`CircuitBreakerLayer`](crate::CircuitBreakerLayer), one per authority for a
//! [`KeyedCircuitBreakerLayer`](crate::circuit_breaker::KeyedCircuitBreakerLayer)), and the
//! [`Shared`] breaker with its classifier.
//!
//! Apart from `config.rs` because it names the breaker, whose state reads the configuration.

use super::config::{Config, Settings};
use super::state::{Breaker, Hold};
use crate::abort::AbortSignal;
use crate::error::InvalidConfig;
use crate::pacing::endpoint_key;
use crate::random::RandomSource;
use http::uri::Authority;
use std::sync::Arc;

/// One breaker and the classifier that feeds it; one `Arc` per layer (per authority when keyed).
pub(crate) struct Shared<C> {
    pub(crate) breaker: Breaker,
    pub(crate) classifier: Arc<C>,
}

/// A checked configuration, from which breakers are made.
pub(crate) struct Template<C> {
    config: Config,
    abort: Option<AbortSignal>,
    /// Whether each breaker made guards one authority (its opening holds only that authority).
    per_authority: bool,
    random: RandomSource,
    /// Shared by every breaker made, so a keyed layer does not clone it per authority.
    classifier: Arc<C>,
}

impl<C> Template<C> {
    /// Checks `settings`.
    pub(crate) fn new(
        classifier: C,
        settings: Settings,
        per_authority: bool,
    ) -> Result<Self, InvalidConfig> {
        Ok(Self {
            config: settings.check()?,
            abort: settings.abort,
            per_authority,
            random: settings.random,
            classifier: Arc::new(classifier),
        })
    }

    /// A new closed breaker, with its own random stream, for calls to `authority` when the
    /// template is per authority.
    pub(crate) fn make(&self, authority: Option<&Authority>) -> Arc<Shared<C>> {
        Arc::new(self.shared(authority))
    }

    /// [`make`](Self::make), not yet shared.
    pub(crate) fn shared(&self, authority: Option<&Authority>) -> Shared<C> {
        let hold = if self.per_authority {
            Hold::Authority(authority.cloned())
        } else {
            Hold::Everyone
        };
        let abort = self.abort.clone().map(|signal| (signal, hold));
        let mut config = self.config.clone();
        if self.per_authority {
            // Its metrics carry its authority when the layer lists it.
            config.labels = config.labels.for_endpoint(&endpoint_key(authority));
        }
        Shared {
            breaker: Breaker::new(config, abort, &self.random),
            classifier: Arc::clone(&self.classifier),
        }
    }

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn abort_signal(&self) -> Option<&AbortSignal> {
        self.abort.as_ref()
    }

    pub(crate) fn classifier(&self) -> &C {
        &self.classifier
    }
}

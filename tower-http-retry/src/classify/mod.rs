//! Sorting outcomes into success, transient and permanent: an [`Outcome`] (with [`NotSent`] for
//! a request that provably never reached the application), decided by a [`Classify`]
//! implementation: the default table [`HttpClassifier`], two closures through [`classify_fn`]
//! ([`ClassifyFn`]), or one of the caller's own. [`AsStdError`] gives a classifier an error's
//! `source()` chain, and [`is_rotation_refusal`] reads one for a layer below the retry layer;
//! [`SerialDispatch`] and [`Unretryable`] are the markers a client crate
//! attaches to tell the classifier what only the client knows.
//!
//! The retry layer and the circuit breaker take the same classifier, so that a failure that is
//! retried is also a failure that trips the breaker:
//!
//! ```
//! use http::StatusCode;
//! use tower_http_retry::{CircuitBreakerLayer, HttpClassifier, Outcome, RetryLayer};
//!
//! let classifier = HttpClassifier::new().status(StatusCode::CONFLICT, Outcome::Transient);
//! assert_eq!(classifier.classify_status(StatusCode::CONFLICT), Outcome::Transient);
//! let retry = RetryLayer::builder().classifier(classifier.clone()).build().unwrap();
//! let breaker = CircuitBreakerLayer::builder().classifier(classifier).build().unwrap();
//! # let _ = (retry, breaker);
//! ```
//!
//! The table of [`HttpClassifier`] is written on it, where rustdoc shows it.

mod classifier;
mod error_chain;
mod marker;
mod outcome;
mod signals;
mod table;

pub use classifier::{classify_fn, Classify, ClassifyFn};
pub use error_chain::{is_rotation_refusal, AsStdError};
pub use marker::{SerialDispatch, Unretryable};
pub use outcome::{NotSent, Outcome};
pub use signals::{default_signals, Ask, Signals};
pub use table::HttpClassifier;

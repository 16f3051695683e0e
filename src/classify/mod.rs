//! Sorting outcomes into success, transient and permanent.
//!
//! The table of [`HttpClassifier`] is written on it, where rustdoc shows it.

mod error_chain;
mod outcome;
mod table;

pub use error_chain::AsStdError;
pub use outcome::{classify_fn, Classify, ClassifyFn, NotSent, Outcome};
pub use table::HttpClassifier;

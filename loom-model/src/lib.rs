//! The loom model of tower-http-retry's token bucket lives in `tests/loom.rs`; this crate holds
//! nothing else. Run it with
//!
//! ```text
//! RUSTFLAGS="--cfg tower_http_retry_loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p loom-model --release --test loom
//! ```

#![forbid(unsafe_code)]

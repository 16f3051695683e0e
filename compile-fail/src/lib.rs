//! Nothing: the compile-fail cases are this crate's tests (`tests/compile_fail.rs`).

#![forbid(unsafe_code)]

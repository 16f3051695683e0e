//! The compile errors a request with a streaming (non-`Clone`) body gives when sent through the
//! retry layer, and the one `fail_unsent` gives over an error type that cannot hold an `Unsent`
//! (`tests/ui_unsent/`), pinned so that a change to the diagnostics, or to the bounds, shows up
//! in review.
//!
//! Method calls through `ServiceExt` (`oneshot`, `ready`) give E0599, whose text no attribute of
//! this crate can change; forms that check `Service<Req>` as a bound give E0277, which shows
//! `RetryRequest`'s own message naming `Clone` and `ReplayBody::buffer_request`. The `.stderr` files are rustc's output and also name the source
//! files of the impls: regenerate them with
//! `TRYBUILD=overwrite cargo test -p compile-fail` after a toolchain update or
//! a move of those files, and read the diff.

/// `RetryLayerBuilder::fail_unsent` returns a request it did not send as the service's error:
/// only an error type that implements `From<Unsent>` (as `tower::BoxError` does) compiles.
#[test]
fn fail_unsent_needs_an_error_that_can_hold_an_unsent_request() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui_unsent/*.rs");
}

#[test]
fn streaming_bodies_are_rejected_with_errors_naming_the_fix() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}

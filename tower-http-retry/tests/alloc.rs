//! A successful call through `Retry` allocates nothing beyond the copy of the request it keeps
//! for a possible retry.
//!
//! A counting global allocator counts the allocations made on the current thread (the test
//! harness runs tests on several threads at once). Each test compares three counts taken on
//! requests built the same way: `request.clone()` alone, a call to the bare inner service, and a
//! call through the layer; the layer may add the clone and nothing else. The futures complete on
//! their first poll and are polled directly, so no executor allocates during the measurement.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use tower::{Layer, Service, ServiceExt};
use tower_http_retry::{RetryLayer, RetryReport};

thread_local! {
    // `const`-initialised and without a destructor: reading it never allocates, so the
    // allocator can use it without recursing into itself.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// `System`, plus a per-thread count of allocations (`alloc`, `alloc_zeroed` and `realloc`).
struct Counting;

fn count_one() {
    // `try_with`: during thread teardown the slot may be gone; those allocations are not ours.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so `System`'s
// guarantees hold; counting touches only a thread-local `Cell` and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: forwarded as received (see the impl).
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: forwarded as received (see the impl).
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: forwarded as received (see the impl).
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as received (see the impl).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` and returns how many allocations it made on this thread, and its result.
fn allocations<T>(f: impl FnOnce() -> T) -> (u64, T) {
    let before = ALLOCATIONS.with(Cell::get);
    let output = f();
    (ALLOCATIONS.with(Cell::get) - before, output)
}

/// Always ready, answers 200 with an empty body at once, and allocates nothing itself.
#[derive(Clone, Copy, Debug)]
struct Ok200;

impl<B> Service<Request<B>> for Ok200 {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<B>) -> Self::Future {
        ready(Ok(Response::new(String::new())))
    }
}

struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

/// `ready().await` + `call().await`, polled once: everything here completes at once.
fn call_now<S, B>(service: &mut S, request: Request<B>, waker: &Waker) -> Response<String>
where
    S: Service<Request<B>, Response = Response<String>, Error = Infallible>,
{
    let call = async { service.ready().await?.call(request).await };
    match pin!(call).poll(&mut Context::from_waker(waker)) {
        Poll::Ready(Ok(response)) => response,
        Poll::Ready(Err(never)) => match never {},
        Poll::Pending => panic!("an always-ready service answers on the first poll"),
    }
}

/// The allocations of `request.clone()`, of a bare call and of a call through `layer`, each on a
/// fresh request from `make`, after warming everything up.
fn measure<B: Clone>(layer: &RetryLayer, make: impl Fn() -> Request<B>) -> (u64, u64, u64) {
    let waker = Waker::from(Arc::new(NoopWake));
    let mut bare = Ok200;
    let mut retried = layer.layer(Ok200);
    // Warm-up: thread-locals, lazily registered statics (e.g. `tracing` call sites).
    for _ in 0..3 {
        call_now(&mut bare, make(), &waker);
        let response = call_now(&mut retried, make(), &waker);
        assert_eq!(RetryReport::of(&response).attempts, 1);
    }

    let request = make();
    let (clone, copy) = allocations(|| request.clone());
    drop((request, copy));
    let request = make();
    let (bare_call, _) = allocations(|| call_now(&mut bare, request, &waker));
    let request = make();
    let (layered_call, response) = allocations(|| call_now(&mut retried, request, &waker));
    assert_eq!(response.status(), 200);
    (clone, bare_call, layered_call)
}

#[test]
fn the_counter_sees_allocations_on_this_thread() {
    let (n, boxed) = allocations(|| Box::new(7u64));
    assert_eq!((n, *boxed), (1, 7));
    let (n, ()) = allocations(|| ());
    assert_eq!(n, 0);
}

#[test]
fn success_with_default_config_allocates_nothing_for_an_empty_request() {
    let (clone, bare, layered) = measure(&RetryLayer::new(), || Request::new(String::new()));
    assert_eq!(
        layered,
        bare + clone,
        "request.clone(): {clone}, bare call: {bare}, through the layer: {layered}"
    );
}

#[test]
fn success_with_default_config_allocates_nothing_for_a_full_bytes_body() {
    let make = || Request::new(Full::new(Bytes::from_static(b"ping")));
    let (clone, bare, layered) = measure(&RetryLayer::new(), make);
    assert_eq!(
        layered,
        bare + clone,
        "request.clone(): {clone}, bare call: {bare}, through the layer: {layered}"
    );
}

#[test]
fn success_allocates_only_the_request_copy_when_the_copy_allocates() {
    // A header and an owned body make `clone()` allocate, so the equality below is not 0 == 0.
    let make = || {
        Request::put("http://example.test/item")
            .header("x-trace", "abc")
            .body(String::from("payload"))
            .expect("a valid request")
    };
    let (clone, bare, layered) = measure(&RetryLayer::new(), make);
    assert!(clone > 0, "this request's copy allocates");
    assert_eq!(
        layered,
        bare + clone,
        "request.clone(): {clone}, bare call: {bare}, through the layer: {layered}"
    );
}

#[test]
fn success_without_a_budget_allocates_nothing_beyond_the_copy() {
    let layer = RetryLayer::builder()
        .without_budget()
        .build()
        .expect("a valid configuration");
    let (clone, bare, layered) = measure(&layer, || Request::new(String::new()));
    assert_eq!(
        layered,
        bare + clone,
        "request.clone(): {clone}, bare call: {bare}, through the layer: {layered}"
    );
}

#[test]
fn the_measurement_sees_allocations_made_by_the_layer() {
    // Stamping an attempt header inserts into the request's empty header map, which allocates:
    // the same measurement must report it, or the tests above prove nothing.
    let layer = RetryLayer::builder()
        .attempt_header(http::HeaderName::from_static("x-retry-attempt"))
        .build()
        .expect("a valid configuration");
    let (clone, bare, layered) = measure(&layer, || Request::new(String::new()));
    assert!(
        layered > bare + clone,
        "request.clone(): {clone}, bare call: {bare}, through the layer: {layered}"
    );
}

//! [`StreamSlotsLayer`]: fewer requests in flight per authority than the server's HTTP/2 stream
//! limit, so that hyper never parks one, and no more than its connections serve before they
//! rotate (learned: `learning.rs`), so that few are turned away.

mod learning;

use http::uri::Authority;
use http::{Request, Response, Version};
use http_body::{Body, Frame, SizeHint};
use hyper_util::client::legacy::connect::HttpInfo;
use learning::Learning;
use pin_project_lite::pin_project;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{ready, Context, Poll};
use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};
use tower_http_retry::classify::{is_rotation_refusal, AsStdError};
use tower_http_retry::InvalidConfig;
use tower_layer::Layer;
use tower_service::Service;

/// At most `max_concurrent_streams - 1` requests in flight per authority, and no more than
/// its HTTP/2 connections serve before they rotate (learned), each from its call until its
/// response body ends, fails or is dropped (or the call fails); the others wait in the order
/// they came.
///
/// hyper's HTTP/2 client parks a request when h2 says its stream brings the connection to the
/// server's `SETTINGS_MAX_CONCURRENT_STREAMS`, and a `GOAWAY` then fails the parked request with
/// `User(DispatchGone)`, which may or may not have been processed: transient, not resent for a
/// POST. With one stream fewer in flight than the limit, no request is parked. Give it the
/// server's value (nginx: `http2_max_concurrent_streams`, 128 by default; HAProxy:
/// `tune.h2.max-concurrent-streams`, 100; Go: 250). A value above the server's brings parking
/// back, and with it failures (never a request sent twice); one below costs throughput only.
///
/// **What it learns.** A server may also end each connection after a number of requests
/// (nginx: `keepalive_requests`, 1,000 by default; some are set to a handful), with a `GOAWAY`
/// that turns away every stream past that number: the retry layer resends those, but with 127
/// requests in flight on a connection that serves 3, that is 124 resends per connection. So
/// the slots of an authority start at 3 and follow its connections, told apart by the local
/// address hyper-util's `HttpConnector` reports (`HttpInfo`, in each response's extensions):
/// a connection that saw a rotation refusal
/// ([`is_rotation_refusal`](tower_http_retry::classify::is_rotation_refusal)) served what the
/// server allows, and the slots become that count once the next
/// connection answers; a connection that served twice the slots with no refusal doubles them,
/// up to `max_concurrent_streams - 1`. An HTTP/1 answer gives the whole number at once. A
/// client whose connector reports no `HttpInfo` is seen as one connection, so its slots only
/// grow. What cannot be learned from above hyper is the server's
/// `SETTINGS_MAX_CONCURRENT_STREAMS` itself: that is the number to give.
/// [`StreamSlotsLayer::slots_of`] reads what an authority has now.
///
/// It goes under the retry layer (each attempt waits for a slot) and above a per-attempt
/// timeout, so that the wait for a slot is not part of the attempt. All services made by one
/// layer and its clones share the slots. Authorities are told apart without their scheme, which
/// is safe (an `http` and an `https` origin on one authority share their slots). A response
/// body that is neither read to its end nor dropped keeps its slot.
///
/// **The response body type.** The services it makes answer with the inner response's body
/// wrapped in a [`SlotBody`], which holds the slot until it ends: a stack that names its body
/// type (or boxes it) names `SlotBody<Incoming>` under it, or maps it away, e.g. with
/// `http_body_util::BodyExt::boxed`, which keeps the slot as long as the boxed body lives.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use tower::{service_fn, Layer, ServiceExt};
/// use tower_http_retry_hyper::StreamSlotsLayer;
///
/// let layer = StreamSlotsLayer::new(4).unwrap();
/// assert_eq!(layer.slots(), 3);
/// let client = layer.layer(service_fn(|_: http::Request<String>| async {
///     Ok::<_, std::io::Error>(http::Response::new(String::new()))
/// }));
/// let response = client.oneshot(http::Request::new(String::new())).await.unwrap();
/// drop(response); // its slot is free again
/// # }
/// ```
#[derive(Clone)]
#[must_use]
pub struct StreamSlotsLayer {
    slots: usize,
    authorities: Arc<Mutex<Authorities>>,
}

/// The slots of each authority seen, dropped once none is taken (nor waited for).
#[derive(Default)]
struct Authorities {
    map: HashMap<Option<Authority>, Arc<Slots>>,
    /// The map is swept of authorities with no slot taken once it grows to this size.
    sweep_at: usize,
}

/// The size of the map at which the first sweep happens.
const FIRST_SWEEP: usize = 64;

impl StreamSlotsLayer {
    /// For a server that allows `max_concurrent_streams` concurrent streams per connection (its
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`): `max_concurrent_streams - 1` slots per authority.
    ///
    /// # Errors
    ///
    /// `max_concurrent_streams` is below 2: with one stream allowed, every request brings the
    /// connection to its limit, and no number of slots keeps hyper from parking it.
    pub fn new(max_concurrent_streams: u32) -> Result<Self, InvalidConfig> {
        if max_concurrent_streams < 2 {
            return Err(InvalidConfig::new(
                "max_concurrent_streams",
                "must be at least 2 (one stream is kept free)",
            ));
        }
        let slots = usize::try_from(max_concurrent_streams - 1)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        Ok(Self {
            slots,
            authorities: Arc::new(Mutex::new(Authorities {
                map: HashMap::new(),
                sweep_at: FIRST_SWEEP,
            })),
        })
    }

    /// Requests in flight at most per authority: `max_concurrent_streams - 1`.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// The slots `authority` has now, as learned from its connections; `None` for an authority
    /// not seen yet, or forgotten: once many are known, those with nothing in flight are swept,
    /// and start again at 3.
    ///
    /// ```
    /// use tower_http_retry_hyper::StreamSlotsLayer;
    ///
    /// let layer = StreamSlotsLayer::new(128).unwrap();
    /// let authority = http::uri::Authority::from_static("api.example");
    /// assert_eq!(layer.slots_of(&authority), None);
    /// ```
    pub fn slots_of(&self, authority: &Authority) -> Option<usize> {
        let authorities = self
            .authorities
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let slots = authorities.map.get(&Some(authority.clone()))?;
        let slots = slots.lock().learning.slots();
        Some(slots)
    }

    /// The slots of `authority`, made when first needed. A new authority may sweep the map of
    /// those with no slot taken (nothing else holds their `Slots`).
    fn of(&self, authority: Option<&Authority>) -> Arc<Slots> {
        let mut authorities = self
            .authorities
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(slots) = authorities.map.get(&authority.cloned()) {
            return Arc::clone(slots);
        }
        if authorities.map.len() >= authorities.sweep_at {
            authorities
                .map
                .retain(|_, slots| Arc::strong_count(slots) > 1);
            authorities.sweep_at = (authorities.map.len() * 2).max(FIRST_SWEEP);
        }
        let slots = Arc::new(Slots::new(self.slots));
        authorities
            .map
            .insert(authority.cloned(), Arc::clone(&slots));
        slots
    }
}

/// One authority's slots: a semaphore whose permits follow what [`Learning`] says.
#[derive(Debug)]
struct Slots {
    semaphore: Arc<Semaphore>,
    state: Mutex<SlotState>,
}

#[derive(Debug)]
struct SlotState {
    learning: Learning,
    /// Permits the semaphore has, free or taken: above the learned slots while taken ones are
    /// still to be given back, and then forgotten.
    permits: usize,
    /// Permits of a batch given back and held until the rest of it is (see [`Learning`]).
    held: usize,
}

impl Slots {
    fn new(most: usize) -> Self {
        let learning = Learning::new(most);
        let permits = learning.slots();
        Self {
            semaphore: Arc::new(Semaphore::new(permits)),
            state: Mutex::new(SlotState {
                learning,
                permits,
                held: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What a finished call teaches: an answer on a connection, or a rotation refusal.
    fn learn(&self, lesson: impl FnOnce(&mut Learning)) {
        let mut state = self.lock();
        lesson(&mut state.learning);
        if !state.learning.batches() {
            let held = std::mem::take(&mut state.held);
            self.give_back(&mut state, held);
        }
        let slots = state.learning.slots();
        let total = state.permits + state.held;
        if slots > total {
            self.give_back(&mut state, slots - total);
        } else if slots < total {
            let cut = (total - slots).min(state.held);
            state.held -= cut;
            // The free ones now; the taken ones as they come back (`release`).
            let excess = state.permits + state.held - slots;
            state.permits -= self.semaphore.forget_permits(excess);
        }
    }

    fn give_back(&self, state: &mut SlotState, permits: usize) {
        self.semaphore.add_permits(permits);
        state.permits += permits;
    }

    /// A slot comes back: to the semaphore, held until its batch is back, or forgotten while
    /// the slots are fewer now.
    fn release(&self, permit: OwnedSemaphorePermit) {
        let mut state = self.lock();
        if state.permits + state.held > state.learning.slots() {
            permit.forget();
            state.permits -= 1;
        } else if state.learning.batches() {
            permit.forget();
            state.permits -= 1;
            state.held += 1;
            if state.permits == self.semaphore.available_permits() {
                // None of the batch is out any more.
                let held = std::mem::take(&mut state.held);
                self.give_back(&mut state, held);
            }
        }
    }
}

/// A taken slot, given back when dropped.
#[derive(Debug)]
struct Slot {
    permit: Option<OwnedSemaphorePermit>,
    slots: Arc<Slots>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            self.slots.release(permit);
        }
    }
}

impl fmt::Debug for StreamSlotsLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let authorities = self
            .authorities
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map
            .len();
        f.debug_struct("StreamSlotsLayer")
            .field("slots", &self.slots)
            .field("authorities", &authorities)
            .finish()
    }
}

impl<S> Layer<S> for StreamSlotsLayer {
    type Service = StreamSlots<S>;

    fn layer(&self, inner: S) -> StreamSlots<S> {
        StreamSlots {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of a [`StreamSlotsLayer`]: calls the inner service once the request's
/// authority has a free slot, and holds the slot in the response body ([`SlotBody`]).
///
/// # Clone
///
/// Clones share the layer's slots. The inner service made ready is the one called (a clone
/// stays behind for the next call).
#[derive(Clone, Debug)]
pub struct StreamSlots<S> {
    inner: S,
    layer: StreamSlotsLayer,
}

impl<S> StreamSlots<S> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, the slots left behind.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B, RB> Service<Request<B>> for StreamSlots<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone,
    S::Error: AsStdError,
{
    type Response = Response<SlotBody<RB>>;
    type Error = S::Error;
    type Future = StreamSlotsFuture<S, Request<B>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let slots = self.layer.of(request.uri().authority());
        // The service made ready goes with this call; its clone stays for the next one.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let state = match Arc::clone(&slots.semaphore).try_acquire_owned() {
            Ok(permit) => State::Calling {
                future: inner.call(request),
                slot: Some(Slot {
                    permit: Some(permit),
                    slots,
                }),
            },
            Err(_) => State::Waiting {
                acquire: Box::pin(Arc::clone(&slots.semaphore).acquire_owned()),
                call: Some((inner, request, slots)),
            },
        };
        StreamSlotsFuture { state }
    }
}

/// Waiting for a slot; boxed because tokio's `acquire_owned` future has no name.
type Acquire = Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>;

pin_project! {
    /// The response future of [`StreamSlots`]: waits for a slot, then the inner call.
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct StreamSlotsFuture<S, Req>
    where
        S: Service<Req>,
    {
        #[pin]
        state: State<S, Req>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, Req>
    where
        S: Service<Req>,
    {
        /// No slot yet: the ready service and the request wait with it.
        Waiting {
            acquire: Acquire,
            call: Option<(S, Req, Arc<Slots>)>,
        },
        /// Called with a slot, which the response body takes over.
        Calling {
            #[pin]
            future: S::Future,
            slot: Option<Slot>,
        },
    }
}

impl<S, Req, RB> Future for StreamSlotsFuture<S, Req>
where
    S: Service<Req, Response = Response<RB>>,
    S::Error: AsStdError,
{
    type Output = Result<Response<SlotBody<RB>>, S::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match self.as_mut().project().state.project() {
                StateProj::Waiting { acquire, call } => {
                    // The semaphore is never closed; were it, the call would go without a slot.
                    let permit = ready!(acquire.as_mut().poll(cx)).ok();
                    let Some((mut service, request, slots)) = call.take() else {
                        unreachable!("the call waits here until a slot is free");
                    };
                    let future = service.call(request);
                    let slot = Some(Slot { permit, slots });
                    self.as_mut()
                        .project()
                        .state
                        .set(State::Calling { future, slot });
                }
                StateProj::Calling { future, slot } => {
                    let result = ready!(future.poll(cx));
                    let slot = slot.take();
                    if let Some(slot) = &slot {
                        match &result {
                            Ok(response) => {
                                let http2 = response.version() == Version::HTTP_2;
                                let info = response.extensions().get::<HttpInfo>();
                                let local = info.map(HttpInfo::local_addr);
                                slot.slots.learn(|learning| learning.answered(http2, local));
                            }
                            Err(error) if error.as_std_error().is_some_and(is_rotation_refusal) => {
                                slot.slots.learn(Learning::refused);
                            }
                            Err(_) => {}
                        }
                    }
                    let response = result?;
                    return Poll::Ready(Ok(response.map(|inner| SlotBody { inner, slot })));
                }
            }
        }
    }
}

impl<S: Service<Req>, Req> fmt::Debug for StreamSlotsFuture<S, Req> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Waiting { .. } => "waiting for a slot",
            State::Calling { .. } => "calling",
        };
        f.debug_struct("StreamSlotsFuture")
            .field("state", &state)
            .finish()
    }
}

pin_project! {
    /// The response body of [`StreamSlots`]: the inner body, holding its request's slot until it
    /// ends, fails or is dropped.
    #[derive(Debug)]
    pub struct SlotBody<B> {
        #[pin]
        inner: B,
        slot: Option<Slot>,
    }
}

impl<B> SlotBody<B> {
    /// The inner body.
    pub fn get_ref(&self) -> &B {
        &self.inner
    }
}

impl<B: Body> Body for SlotBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            this.slot.take();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tokio_test::{assert_pending, assert_ready_ok, task};

    type Req = Request<String>;

    fn request(uri: &str) -> Req {
        Request::builder().uri(uri).body(String::new()).unwrap()
    }

    fn client(
    ) -> StreamSlots<impl Service<Req, Response = Response<String>, Error = std::io::Error> + Clone>
    {
        let answer = tower::service_fn(|_: Req| async {
            Ok::<_, std::io::Error>(Response::new("body".to_owned()))
        });
        StreamSlotsLayer::new(3).unwrap().layer(answer)
    }

    #[test]
    fn one_stream_is_kept_free_and_a_single_stream_is_refused() {
        assert_eq!(StreamSlotsLayer::new(2).unwrap().slots(), 1);
        assert_eq!(StreamSlotsLayer::new(128).unwrap().slots(), 127);
        assert_eq!(
            StreamSlotsLayer::new(1).unwrap_err().field(),
            "max_concurrent_streams"
        );
        assert!(StreamSlotsLayer::new(0).is_err());
    }

    #[tokio::test]
    async fn a_request_waits_until_a_body_of_its_authority_ends() {
        let mut client = client();
        let mut bodies = Vec::new();
        for _ in 0..2 {
            let response = task::spawn(client.call(request("http://a.test/"))).await;
            bodies.push(response.unwrap().into_body());
        }
        let mut third = task::spawn(client.call(request("http://a.test/")));
        assert_pending!(third.poll());
        // Another authority has its own slots.
        let other = client.call(request("http://b.test/")).await.unwrap();
        assert_pending!(third.poll());
        drop(other);
        assert_pending!(third.poll());
        // A body read to its end frees its slot.
        let body = bodies.pop().unwrap();
        assert_eq!(body.collect().await.unwrap().to_bytes(), "body");
        assert!(third.is_woken());
        assert_ready_ok!(third.poll());
    }

    #[tokio::test]
    async fn a_dropped_body_or_a_failed_call_frees_its_slot() {
        let layer = StreamSlotsLayer::new(2).unwrap();
        let failing = tower::service_fn(|_: Req| async {
            Err::<Response<String>, _>(std::io::Error::other("refused"))
        });
        let mut failing = layer.layer(failing);
        failing.call(request("http://a.test/")).await.unwrap_err();
        let answer = tower::service_fn(|_: Req| async {
            Ok::<_, std::io::Error>(Response::new(String::new()))
        });
        let mut client = layer.layer(answer);
        let first = client.call(request("http://a.test/")).await.unwrap();
        let mut second = task::spawn(client.call(request("http://a.test/")));
        assert_pending!(second.poll());
        drop(first);
        assert_ready_ok!(second.poll());
    }

    #[test]
    fn authorities_with_no_slot_taken_are_swept() {
        let layer = StreamSlotsLayer::new(2).unwrap();
        let held = layer.of(Some(&Authority::from_static("held.test")));
        for i in 0..1_000 {
            let authority = Authority::try_from(format!("a{i}.test")).unwrap();
            drop(layer.of(Some(&authority)));
        }
        let authorities = layer.authorities.lock().unwrap();
        assert!(
            authorities.map.len() <= 2 * FIRST_SWEEP,
            "{}",
            authorities.map.len()
        );
        assert!(authorities
            .map
            .contains_key(&Some(Authority::from_static("held.test"))));
        drop(held);
    }
}

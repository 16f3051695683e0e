// The instruction benches' harness, included (`include!`) by each bench where its items stood
// in the gated bench, so that the gated binary is built from the same items in the same order:
// a row added to it moved another row's count by 3 % (where code lands in a binary changes
// what `memcpy` and the caches see), so rows that are not gated live in a binary of their own.

/// Calls per counted batch.
const CALLS: usize = 100;

type Req = Request<String>;
type Resp = Response<String>;

/// The same small GET in every row. The URI is parsed, as a real client's would be, so copying the
/// request bumps reference counts; the empty body copies without allocating.
fn request() -> Req {
    Request::get("http://example.test/ping")
        .body(String::new())
        .expect("a valid request")
}

/// The inner service: always ready, answers `200` at once.
fn endpoint() -> impl Service<Req, Response = Resp, Error = Infallible> + Clone {
    service_fn(|_: Req| ready(Ok(Response::new(String::new()))))
}

/// A batch of calls prepared outside the counted function. A trait object, so that one benchmark
/// function serves every stack; its single dynamic call per batch is the only cost it adds.
trait Batch {
    /// Sends every prepared request and keeps the responses (the counted part).
    fn run(&mut self);
    /// Asserts that every call was answered with a `200`, so a row cannot count a failure.
    fn check(&self);
}

struct Calls<S> {
    service: S,
    requests: Vec<Req>,
    // Capacity reserved beforehand: keeping a response does not allocate.
    responses: Vec<Resp>,
    waker: Waker,
    _runtime: EnterGuard<'static>,
}

impl<S> Batch for Calls<S>
where
    S: Service<Req, Response = Resp>,
    S::Error: Debug,
{
    fn run(&mut self) {
        for request in self.requests.drain(..) {
            let response = call(&mut self.service, request, &self.waker);
            self.responses.push(response);
        }
    }

    fn check(&self) {
        assert_eq!(self.responses.len(), CALLS);
        for response in &self.responses {
            assert_eq!(response.status(), StatusCode::OK);
        }
    }
}

fn call<S>(service: &mut S, request: Req, waker: &Waker) -> Resp
where
    S: Service<Req, Response = Resp>,
    S::Error: Debug,
{
    let call = async { service.ready().await?.call(request).await };
    poll_now(call, waker).expect("the call succeeds")
}

/// Builds the stack inside an entered runtime, makes one warm-up call, and prepares the batch.
fn batch<S>(stack: impl FnOnce() -> S) -> Box<dyn Batch>
where
    S: Service<Req, Response = Resp> + 'static,
    S::Error: Debug,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    // The process runs one row and exits; the runtime lives until then.
    let runtime: &'static Runtime = Box::leak(Box::new(runtime));
    let entered = runtime.enter();
    let mut service = stack();
    let waker = noop_waker();
    let warm_up = call(&mut service, request(), &waker);
    assert_eq!(warm_up.status(), StatusCode::OK);
    Box::new(Calls {
        service,
        requests: (0..CALLS).map(|_| request()).collect(),
        responses: Vec::with_capacity(CALLS),
        waker,
        _runtime: entered,
    })
}

fn no_layer() -> Box<dyn Batch> {
    batch(endpoint)
}

fn tower_retry_tps_budget() -> Box<dyn Batch> {
    batch(|| {
        let policy = TowerPolicy {
            budget: Arc::new(TpsBudget::default()),
            delay: Duration::from_millis(100),
        };
        tower::retry::Retry::new(policy, endpoint())
    })
}

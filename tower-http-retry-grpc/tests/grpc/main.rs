//! gRPC end to end: a tonic server on loopback (the health service, whose generated code ships
//! in `tonic-health`, so no `protoc` is needed) with a scripted handler, and a tonic client over
//! a `Channel` wrapped by the retry layer. Real sockets, so real time (see CONTRIBUTING.md).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio_stream::Stream;
use tonic::body::Body;
use tonic::metadata::MetadataMap;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Code, Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use tower::{BoxError, ServiceBuilder};
use tower_http_retry::body::{BufferRequestLayer, ReplayBody};
use tower_http_retry::classify::{Classify, NotSent};
use tower_http_retry::retry::RetryLayerBuilder;
use tower_http_retry::{Backoff, Jitter, Outcome, StopReason};
use tower_http_retry_grpc::{GrpcClassifier, GrpcServiceConfig};

mod hedging;

const MS: Duration = Duration::from_millis(1);

/// What the handler saw of one call.
#[derive(Clone, Debug)]
struct Call {
    at: Instant,
    grpc_timeout: Option<String>,
    previous_attempts: Option<String>,
}

/// A health service whose `Check` answers the scripted statuses in turn, then SERVING; whose
/// `Watch` sends one message and then fails with UNAVAILABLE (after its headers went out); and
/// that records every call.
#[derive(Clone, Default)]
struct Scripted {
    answers: Arc<Mutex<VecDeque<Status>>>,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl Scripted {
    fn answering(answers: impl IntoIterator<Item = Status>) -> Self {
        let scripted = Self::default();
        scripted.lock_answers().extend(answers);
        scripted
    }

    fn lock_answers(&self) -> std::sync::MutexGuard<'_, VecDeque<Status>> {
        self.answers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn calls(&self) -> Vec<Call> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn record(&self, metadata: &MetadataMap) {
        let text = |name: &str| {
            metadata
                .get(name)
                .map(|value| value.to_str().unwrap().to_owned())
        };
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Call {
                at: Instant::now(),
                grpc_timeout: text("grpc-timeout"),
                previous_attempts: text("grpc-previous-rpc-attempts"),
            });
    }
}

fn serving() -> HealthCheckResponse {
    HealthCheckResponse {
        status: ServingStatus::Serving as i32,
    }
}

#[tonic::async_trait]
impl Health for Scripted {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        self.record(request.metadata());
        // A status returned here goes out as a Trailers-Only response.
        match self.lock_answers().pop_front() {
            Some(status) => Err(status),
            None => Ok(Response::new(serving())),
        }
    }

    type WatchStream =
        Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send + 'static>>;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        self.record(request.metadata());
        let messages = vec![Ok(serving()), Err(Status::unavailable("went away"))];
        Ok(Response::new(Box::pin(tokio_stream::iter(messages))))
    }
}

/// Serves `handler` on `127.0.0.1:0` until the returned guard is dropped.
async fn serve(handler: Scripted) -> (SocketAddr, tokio::task::AbortHandle) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let server = Server::builder()
        .add_service(HealthServer::new(handler))
        .serve_with_incoming(incoming);
    let task = tokio::spawn(server);
    (addr, task.abort_handle())
}

fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy()
}

/// Fast, predictable delays: no jitter, 20 ms, 40 ms, ...; no budget.
fn builder() -> RetryLayerBuilder<GrpcClassifier> {
    tower_http_retry_grpc::builder()
        .max_attempts(4)
        .backoff(Backoff::new(Jitter::None, 20 * MS, Duration::from_secs(10)))
        .without_budget()
}

/// The stack a tonic client goes through: bodies buffered, retried, then tonic's channel.
macro_rules! client {
    ($layer:expr, $channel:expr) => {
        HealthClient::new(
            ServiceBuilder::new()
                .layer(BufferRequestLayer::new())
                .layer($layer)
                .map_request(|request: http::Request<ReplayBody<Body>>| request.map(Body::new))
                .map_err(BoxError::from)
                .service($channel),
        )
    };
}

fn check() -> Request<HealthCheckRequest> {
    Request::new(HealthCheckRequest {
        service: String::new(),
    })
}

fn pushback(code: Code, millis: &str) -> Status {
    let mut metadata = MetadataMap::new();
    metadata.insert("grpc-retry-pushback-ms", millis.parse().unwrap());
    Status::with_metadata(code, "pushed back", metadata)
}

#[tokio::test]
async fn a_unary_call_that_succeeds_is_sent_once() {
    let handler = Scripted::default();
    let (addr, _server) = serve(handler.clone()).await;
    let layer = builder().build().unwrap();
    let mut client = client!(layer.clone(), channel(addr));
    let response = client.check(check()).await.unwrap();
    assert_eq!(response.get_ref().status, ServingStatus::Serving as i32);
    assert_eq!(handler.calls().len(), 1);
    assert_eq!(handler.calls()[0].previous_attempts, None);
    assert_eq!(layer.stats().stopped(StopReason::Success), 1);
}

#[tokio::test]
async fn trailers_only_unavailable_is_retried_until_it_succeeds() {
    let handler = Scripted::answering([
        Status::unavailable("down"),
        Status::unavailable("still down"),
    ]);
    let (addr, _server) = serve(handler.clone()).await;
    let layer = builder().build().unwrap();
    let mut client = client!(layer.clone(), channel(addr));
    let response = client.check(check()).await.unwrap();
    assert_eq!(response.get_ref().status, ServingStatus::Serving as i32);
    let calls = handler.calls();
    assert_eq!(calls.len(), 3);
    let previous: Vec<_> = calls
        .iter()
        .map(|c| c.previous_attempts.as_deref())
        .collect();
    assert_eq!(previous, [None, Some("1"), Some("2")]);
    assert_eq!(layer.stats().retries, 2);
}

#[tokio::test]
async fn unavailable_after_the_response_headers_is_not_retried() {
    let handler = Scripted::default();
    let (addr, _server) = serve(handler.clone()).await;
    let layer = builder().build().unwrap();
    let mut client = client!(layer.clone(), channel(addr));
    let mut stream = client.watch(check()).await.unwrap().into_inner();
    assert_eq!(
        stream.message().await.unwrap().unwrap().status,
        ServingStatus::Serving as i32
    );
    let error = stream.message().await.unwrap_err();
    assert_eq!(error.code(), Code::Unavailable);
    // The call was committed when its headers arrived: one call, passed through.
    assert_eq!(handler.calls().len(), 1);
    assert_eq!(layer.stats().stopped(StopReason::Success), 1);
    assert_eq!(layer.stats().retries, 0);
}

#[tokio::test]
async fn resource_exhausted_with_pushback_is_retried_after_the_pushback() {
    let handler = Scripted::answering([pushback(Code::ResourceExhausted, "300")]);
    let (addr, _server) = serve(handler.clone()).await;
    let layer = builder().build().unwrap();
    let mut client = client!(layer.clone(), channel(addr));
    client.check(check()).await.unwrap();
    let calls = handler.calls();
    assert_eq!(calls.len(), 2);
    let waited = calls[1].at - calls[0].at;
    // The pushback, not the 20 ms backoff; at most +10 % jitter (the default `HintPolicy`)
    // and some scheduling.
    assert!(waited >= 300 * MS, "{waited:?}");
    assert!(waited < 600 * MS, "{waited:?}");
    assert_eq!(layer.stats().retry_after_seen, 1);
}

/// `google.rpc.Status`, `google.protobuf.Any`, `google.rpc.RetryInfo` and
/// `google.protobuf.Duration`: what a Google API puts in a rich status (AIP-194), as tonic's
/// `Status::with_details` sends it (`grpc-status-details-bin`).
mod rich {
    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Status {
        #[prost(int32, tag = "1")]
        pub(crate) code: i32,
        #[prost(string, tag = "2")]
        pub(crate) message: String,
        #[prost(message, repeated, tag = "3")]
        pub(crate) details: Vec<Any>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Any {
        #[prost(string, tag = "1")]
        pub(crate) type_url: String,
        #[prost(bytes = "vec", tag = "2")]
        pub(crate) value: Vec<u8>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct RetryInfo {
        #[prost(message, optional, tag = "1")]
        pub(crate) retry_delay: Option<Duration>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Duration {
        #[prost(int64, tag = "1")]
        pub(crate) seconds: i64,
        #[prost(int32, tag = "2")]
        pub(crate) nanos: i32,
    }
}

/// A RESOURCE_EXHAUSTED whose rich status says to retry after `delay`.
fn retry_info(delay: Duration) -> Status {
    use prost::Message;
    let info = rich::RetryInfo {
        retry_delay: Some(rich::Duration {
            seconds: i64::try_from(delay.as_secs()).unwrap(),
            nanos: i32::try_from(delay.subsec_nanos()).unwrap(),
        }),
    };
    let status = rich::Status {
        code: Code::ResourceExhausted as i32,
        message: "quota".to_owned(),
        details: vec![rich::Any {
            type_url: "type.googleapis.com/google.rpc.RetryInfo".to_owned(),
            value: info.encode_to_vec(),
        }],
    };
    Status::with_details(
        Code::ResourceExhausted,
        "quota",
        status.encode_to_vec().into(),
    )
}

#[tokio::test]
async fn resource_exhausted_with_a_retry_info_is_retried_after_its_delay() {
    let handler = Scripted::answering([retry_info(300 * MS)]);
    let (addr, _server) = serve(handler.clone()).await;
    let layer = builder().build().unwrap();
    let mut client = client!(layer.clone(), channel(addr));
    client.check(check()).await.unwrap();
    let calls = handler.calls();
    assert_eq!(calls.len(), 2);
    let waited = calls[1].at - calls[0].at;
    // The server's delay, not the 20 ms backoff; at most +10 % jitter and some scheduling.
    assert!(waited >= 300 * MS, "{waited:?}");
    assert!(waited < 600 * MS, "{waited:?}");
    assert_eq!(layer.stats().retry_after_seen, 1);
}

#[tokio::test]
async fn resource_exhausted_without_pushback_is_not_retried() {
    let handler = Scripted::answering([Status::resource_exhausted("quota")]);
    let (addr, _server) = serve(handler.clone()).await;
    let layer = builder().build().unwrap();
    let mut client = client!(layer.clone(), channel(addr));
    let error = client.check(check()).await.unwrap_err();
    assert_eq!(error.code(), Code::ResourceExhausted);
    assert_eq!(handler.calls().len(), 1);
    assert_eq!(layer.stats().stopped(StopReason::Permanent), 1);
}

#[tokio::test]
async fn a_negative_pushback_stands_down() {
    let handler = Scripted::answering([pushback(Code::Unavailable, "-1")]);
    let (addr, _server) = serve(handler.clone()).await;
    let layer = builder().build().unwrap();
    let mut client = client!(layer.clone(), channel(addr));
    let error = client.check(check()).await.unwrap_err();
    assert_eq!(error.code(), Code::Unavailable);
    assert_eq!(handler.calls().len(), 1);
    assert_eq!(layer.stats().stopped(StopReason::StandDown), 1);
}

#[tokio::test]
async fn permanent_codes_are_not_retried() {
    for status in [
        Status::invalid_argument("bad"),
        Status::deadline_exceeded("late"),
        Status::cancelled("gone"),
        Status::data_loss("lost"),
        Status::internal("oops"),
    ] {
        let code = status.code();
        let handler = Scripted::answering([status]);
        let (addr, _server) = serve(handler.clone()).await;
        let mut client = client!(builder().build().unwrap(), channel(addr));
        assert_eq!(client.check(check()).await.unwrap_err().code(), code);
        assert_eq!(handler.calls().len(), 1, "{code:?}");
    }
}

fn timeout_of(call: &Call) -> Duration {
    let value = call
        .grpc_timeout
        .as_deref()
        .expect("every attempt has a grpc-timeout");
    let (digits, unit) = value.split_at(value.len() - 1);
    let amount: u64 = digits.parse().unwrap();
    match unit {
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        other => panic!("unit {other}"),
    }
}

#[tokio::test]
async fn grpc_timeout_shrinks_to_the_time_left_on_every_attempt() {
    let handler = Scripted::answering([Status::unavailable("a"), Status::unavailable("b")]);
    let (addr, _server) = serve(handler.clone()).await;
    let mut client = client!(builder().build().unwrap(), channel(addr));
    let mut request = check();
    request.set_timeout(Duration::from_secs(5));
    client.check(request).await.unwrap();
    let calls = handler.calls();
    assert_eq!(calls.len(), 3);
    let timeouts: Vec<Duration> = calls.iter().map(timeout_of).collect();
    assert!(timeouts[0] <= Duration::from_secs(5), "{timeouts:?}");
    // Each retry is told the deadline less what has gone by: at least the sleep between them.
    assert!(timeouts[0] - timeouts[1] >= 20 * MS, "{timeouts:?}");
    assert!(timeouts[1] - timeouts[2] >= 40 * MS, "{timeouts:?}");
    // And no more than what went by between the calls (plus a little for the way there).
    let elapsed = calls[2].at - calls[0].at;
    assert!(
        timeouts[0] - timeouts[2] <= elapsed + 50 * MS,
        "{timeouts:?} in {elapsed:?}"
    );
}

#[tokio::test]
async fn no_retry_starts_past_the_grpc_timeout() {
    let handler = Scripted::answering((0..4).map(|_| Status::unavailable("down")));
    let (addr, _server) = serve(handler.clone()).await;
    let layer = builder()
        .backoff(Backoff::new(
            Jitter::None,
            200 * MS,
            Duration::from_secs(10),
        ))
        .build()
        .unwrap();
    let mut client = client!(layer.clone(), channel(addr));
    let mut request = check();
    request.set_timeout(Duration::from_millis(300));
    let started = Instant::now();
    let error = client.check(request).await.unwrap_err();
    // Attempt 1, 200 ms, attempt 2 with ~100 ms left; the next sleep (400 ms) would end past
    // the deadline, so the last status is returned at once.
    assert_eq!(error.code(), Code::Unavailable);
    assert_eq!(handler.calls().len(), 2);
    assert!(timeout_of(&handler.calls()[1]) <= 100 * MS);
    assert!(started.elapsed() < 300 * MS, "{:?}", started.elapsed());
    assert_eq!(layer.stats().stopped(StopReason::Deadline), 1);
}

#[tokio::test]
async fn a_service_config_drives_the_layer() {
    let config = GrpcServiceConfig::from_json(
        r#"{"methodConfig": [{
              "name": [{"service": "grpc.health.v1.Health", "method": "Check"}],
              "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.05s",
                              "backoffMultiplier": 2, "retryableStatusCodes": ["ABORTED"]}}]}"#,
    )
    .unwrap();
    let layer = config
        .retry_layer_builder("/grpc.health.v1.Health/Check")
        .build()
        .unwrap();
    // ABORTED is retryable here, UNAVAILABLE is not.
    let handler = Scripted::answering([
        Status::aborted("conflict"),
        Status::aborted("conflict"),
        Status::unavailable("down"),
    ]);
    let (addr, _server) = serve(handler.clone()).await;
    let mut client = client!(layer.clone(), channel(addr));
    let error = client.check(check()).await.unwrap_err();
    assert_eq!(error.code(), Code::Unavailable);
    assert_eq!(handler.calls().len(), 3);
    assert_eq!(layer.stats().stopped(StopReason::Permanent), 1);
}

#[tokio::test]
async fn a_refused_connection_is_classified_through_tonics_error() {
    // Bind and drop: nothing listens there now.
    let addr = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let mut raw = channel(addr);
    let request = http::Request::post(format!("http://{addr}/grpc.health.v1.Health/Check"))
        .body(Body::empty())
        .unwrap();
    let error: BoxError = tower::ServiceExt::oneshot(&mut raw, request)
        .await
        .unwrap_err()
        .into();
    let outcome =
        Classify::<http::Response<Body>, BoxError>::classify_error(&GrpcClassifier::new(), &error);
    assert_eq!(outcome, Outcome::NotSent(NotSent::Unconnected), "{error:?}");
}

#[tokio::test]
async fn the_stack_of_a_service_config_is_one_call() {
    let handler = Scripted::answering([Status::unavailable("down")]);
    let (addr, _server) = serve(handler.clone()).await;
    let config = GrpcServiceConfig::from_json(
        r#"{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}],
            "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.05s",
                            "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}"#,
    )
    .unwrap();
    let stack: tower_http_retry_grpc::GrpcStack<Channel, Body> = config
        .stack("/grpc.health.v1.Health/Check", channel(addr), Body::new)
        .unwrap();
    let mut client = HealthClient::new(stack);
    let (result, report) = tower_http_retry::RetryReport::capture(client.check(check())).await;
    assert_eq!(
        result.unwrap().get_ref().status,
        ServingStatus::Serving as i32
    );
    assert_eq!((report.attempts, report.stop), (2, StopReason::Success));
    assert_eq!(handler.calls().len(), 2);
}

#[tokio::test]
async fn capture_reports_a_call_that_ends_in_a_status() {
    let handler = Scripted::answering([Status::invalid_argument("no")]);
    let (addr, _server) = serve(handler.clone()).await;
    let layer = builder().build().unwrap();
    let mut client = HealthClient::new(tower_http_retry_grpc::stack(
        &layer,
        channel(addr),
        Body::new,
    ));
    let (result, report) = tower_http_retry::RetryReport::capture(client.check(check())).await;
    assert_eq!(result.unwrap_err().code(), Code::InvalidArgument);
    assert_eq!((report.attempts, report.stop), (1, StopReason::Permanent));
}

//! A service config's `hedgingPolicy` on tonic over loopback: a stalled call is answered by its
//! hedge, a fatal status from one copy ends the call, a fast non-fatal one does not beat a slow
//! success, and `retryThrottling` refuses hedges as it refuses retries.

use super::{check, serving};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio_stream::Stream;
use tonic::body::Body;
use tonic::transport::{Endpoint, Server};
use tonic::{Code, Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use tower::{BoxError, ServiceBuilder};
use tower_http_retry::body::{BufferRequestLayer, ReplayBody};
use tower_http_retry::hedge::HedgeLayer;
use tower_http_retry::report::HedgeReport;
use tower_http_retry_grpc::{GrpcClassifier, GrpcServiceConfig};

const CHECK: &str = "/grpc.health.v1.Health/Check";
/// Far longer than any test: a stalled copy answers only if it was never cancelled.
const STALL: Duration = Duration::from_secs(30);

/// A health service whose calls, in arrival order, wait and then answer as scripted (`None`:
/// SERVING); calls past the script answer SERVING at once.
/// Each call's wait, and its status (`None`: SERVING).
type Script = VecDeque<(Duration, Option<Code>)>;

#[derive(Clone, Default)]
struct Copies {
    script: Arc<Mutex<Script>>,
    calls: Arc<Mutex<u32>>,
}

impl Copies {
    fn new(script: impl IntoIterator<Item = (Duration, Option<Code>)>) -> Self {
        let copies = Self::default();
        copies.script.lock().unwrap().extend(script);
        copies
    }

    fn calls(&self) -> u32 {
        *self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[tonic::async_trait]
impl Health for Copies {
    async fn check(
        &self,
        _: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        *self.calls.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        let next = self
            .script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front();
        let (after, code) = next.unwrap_or((Duration::ZERO, None));
        tokio::time::sleep(after).await;
        match code {
            Some(code) => Err(Status::new(code, "scripted")),
            None => Ok(Response::new(serving())),
        }
    }

    type WatchStream =
        Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send + 'static>>;

    async fn watch(
        &self,
        _: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("not scripted"))
    }
}

fn config(throttling: &str) -> GrpcServiceConfig {
    GrpcServiceConfig::from_json(&format!(
        r#"{{"methodConfig": [{{
              "name": [{{"service": "grpc.health.v1.Health"}}],
              "hedgingPolicy": {{"maxAttempts": 2, "hedgingDelay": "0.05s",
                                 "nonFatalStatusCodes": ["UNAVAILABLE"]}}}}]
            {throttling}}}"#
    ))
    .unwrap()
}

struct Setup {
    hedge: HedgeLayer<GrpcClassifier>,
    copies: Copies,
    _server: tokio::task::AbortHandle,
    addr: std::net::SocketAddr,
}

async fn setup(config: &GrpcServiceConfig, copies: Copies) -> Setup {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let server = Server::builder()
        .add_service(HealthServer::new(copies.clone()))
        .serve_with_incoming(incoming);
    let task = tokio::spawn(server);
    let hedge = config.hedge_layer_builder(CHECK).unwrap().build().unwrap();
    Setup {
        hedge,
        copies,
        _server: task.abort_handle(),
        addr,
    }
}

/// The stack of a hedged method: bodies buffered, its retry layer (retries off), the hedging
/// layer, tonic's channel.
macro_rules! client {
    ($config:expr, $setup:expr) => {
        HealthClient::new(
            ServiceBuilder::new()
                .layer(BufferRequestLayer::new())
                .layer($config.retry_layer_builder(CHECK).build().unwrap())
                .layer($setup.hedge.clone())
                .map_request(|request: http::Request<ReplayBody<Body>>| request.map(Body::new))
                .map_err(BoxError::from)
                .service(
                    Endpoint::from_shared(format!("http://{}", $setup.addr))
                        .unwrap()
                        .connect_lazy(),
                ),
        )
    };
}

#[tokio::test]
async fn a_stalled_call_is_answered_by_its_hedge() {
    let config = config("");
    let setup = setup(&config, Copies::new([(STALL, None)])).await;
    let mut client = client!(config, setup);
    let response = client.check(check()).await.unwrap();
    assert_eq!(response.get_ref().status, ServingStatus::Serving as i32);
    assert_eq!(setup.copies.calls(), 2);
    // tonic hands the response's extensions on: which copy answered.
    let report = response.extensions().get::<HedgeReport>().copied().unwrap();
    assert_eq!((report.copies, report.winner), (2, 1));
    let stats = setup.hedge.stats();
    assert_eq!((stats.hedges, stats.won_by_hedge), (1, 1), "{stats:?}");
}

#[tokio::test]
async fn a_fatal_status_from_the_hedge_ends_the_call() {
    let config = config("");
    let copies = Copies::new([(STALL, None), (Duration::ZERO, Some(Code::InvalidArgument))]);
    let setup = setup(&config, copies).await;
    let mut client = client!(config, setup);
    let error = client.check(check()).await.unwrap_err();
    assert_eq!(error.code(), Code::InvalidArgument);
    assert_eq!(setup.copies.calls(), 2);
}

#[tokio::test]
async fn a_fast_non_fatal_status_does_not_beat_a_slow_success() {
    let config = config("");
    let slow = Duration::from_millis(300);
    let copies = Copies::new([(slow, None), (Duration::ZERO, Some(Code::Unavailable))]);
    let setup = setup(&config, copies).await;
    let mut client = client!(config, setup);
    let response = client.check(check()).await.unwrap();
    assert_eq!(response.get_ref().status, ServingStatus::Serving as i32);
    assert_eq!(setup.copies.calls(), 2);
    assert_eq!(setup.hedge.stats().won_by_hedge, 0);
    let report = response.extensions().get::<HedgeReport>().copied().unwrap();
    assert_eq!((report.copies, report.winner), (2, 0));
}

#[tokio::test]
async fn retry_throttling_refuses_hedges_as_it_refuses_retries() {
    // 3 tokens: the first hedge takes one (2 left, above half), the second would leave 1.01.
    let config = config(r#", "retryThrottling": {"maxTokens": 3, "tokenRatio": 0.01}"#);
    let copies = Copies::new([(STALL, None), (Duration::ZERO, None), (STALL, None)]);
    let setup = setup(&config, copies).await;
    let mut client = client!(config, setup);
    client.check(check()).await.unwrap();
    let second = tokio::time::timeout(Duration::from_millis(500), client.check(check())).await;
    assert!(
        second.is_err(),
        "the second call is not hedged: its copy stalls"
    );
    let stats = setup.hedge.stats();
    assert_eq!((stats.hedges, stats.refused_by_budget), (1, 1), "{stats:?}");
}

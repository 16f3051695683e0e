//! Retrying a tonic gRPC client by the gRPC rules.
//!
//! Starts a health service on 127.0.0.1 whose `Check` answers UNAVAILABLE (as a Trailers-Only
//! response) to every other call and RESOURCE_EXHAUSTED with a 50 ms pushback to every fifth,
//! then sends a few calls through the stack `tower_http_retry_grpc::stack` builds around a tonic
//! `Channel` (`BufferRequestLayer -> RetryLayer (from a service config) -> Channel`), prints
//! what happened to each (`RetryReport::capture`), and exits. The config's `retryThrottling` (10 tokens, 0.5 per success)
//! stops retrying once failures have taken the tokens down to half.
//!
//! ```text
//! cargo run -p tower-http-retry-grpc --example grpc
//! ```

use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use tokio_stream::Stream;
use tonic::body::Body;
use tonic::metadata::MetadataMap;
use tonic::transport::{Endpoint, Server};
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use tower::BoxError;
use tower_http_retry::{RetryReport, StopReason};
use tower_http_retry_grpc::GrpcServiceConfig;

/// The config a grpc-go or grpc-java client of this service would read.
const SERVICE_CONFIG: &str = r#"{
  "methodConfig": [{
    "name": [{ "service": "grpc.health.v1.Health" }],
    "retryPolicy": {
      "maxAttempts": 4,
      "initialBackoff": "0.02s",
      "maxBackoff": "0.2s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]
    }
  }],
  "retryThrottling": { "maxTokens": 10, "tokenRatio": 0.5 }
}"#;

/// Every other call fails; every fifth is pushed back.
#[derive(Default)]
struct Flaky {
    calls: AtomicU32,
}

#[tonic::async_trait]
impl Health for Flaky {
    async fn check(
        &self,
        _: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if n % 5 == 0 {
            let mut metadata = MetadataMap::new();
            metadata.insert("grpc-retry-pushback-ms", "50".parse().unwrap());
            return Err(Status::with_metadata(
                tonic::Code::ResourceExhausted,
                "quota",
                metadata,
            ));
        }
        if n % 2 == 1 {
            return Err(Status::unavailable("restarting"));
        }
        Ok(Response::new(HealthCheckResponse {
            status: ServingStatus::Serving as i32,
        }))
    }

    type WatchStream =
        Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send + 'static>>;

    async fn watch(
        &self,
        _: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("not in this example"))
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let flaky = Arc::new(Flaky::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(
        Server::builder()
            .add_service(HealthServer::from_arc(Arc::clone(&flaky)))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );

    let config = GrpcServiceConfig::from_json(SERVICE_CONFIG)?;
    let retry = config
        .retry_layer_builder("/grpc.health.v1.Health/Check")
        .build()?;
    let channel = Endpoint::from_shared(format!("http://{addr}"))?.connect_lazy();
    // Bodies buffered so a unary call's one message can be sent again, the retry layer, and
    // tonic's body type back: one call (`config.stack(path, channel, Body::new)` when the
    // layer's handle is not needed; here it is, for its stats).
    let mut client = HealthClient::new(tower_http_retry_grpc::stack(&retry, channel, Body::new));

    for call in 1..=5 {
        let mut request = Request::new(HealthCheckRequest {
            service: String::new(),
        });
        request.set_timeout(std::time::Duration::from_secs(2));
        // A failed call becomes a `Status`, which has no extensions: `capture` gets the report
        // of any outcome.
        let (result, report) = RetryReport::capture(client.check(request)).await;
        match result {
            Ok(_) => println!(
                "call {call}: SERVING after {} attempt(s), slept {:?}",
                report.attempts, report.slept
            ),
            Err(status) => println!(
                "call {call}: {:?} {} after {} attempt(s), stopped: {}",
                status.code(),
                status.message(),
                report.attempts,
                report.stop
            ),
        }
    }
    let stats = retry.stats();
    println!(
        "handler ran {} times for 5 calls; retries {}, pushbacks honoured {}, successes {}, \
         throttled {}",
        flaky.calls.load(Ordering::SeqCst),
        stats.retries,
        stats.retry_after_seen,
        stats.stopped(StopReason::Success),
        stats.stopped(StopReason::BudgetEmpty),
    );
    server.abort();
    Ok(())
}

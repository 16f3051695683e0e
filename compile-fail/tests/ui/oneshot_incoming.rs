// The README stack over hyper-util's client, sending a request with hyper's `Incoming` body
// through `ServiceExt::oneshot`: a method call, so rustc reports E0599.
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower::{ServiceBuilder, ServiceExt};
use tower_http_retry::RetryLayer;

async fn forward(request: http::Request<Incoming>) {
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new())
        .service(Client::builder(TokioExecutor::new()).build_http::<Incoming>());
    let _ = client.oneshot(request).await;
}

fn main() {
    drop(forward);
}

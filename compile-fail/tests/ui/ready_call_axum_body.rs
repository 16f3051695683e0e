// The README stack over hyper-util's client in an axum proxy, sending axum's `Body` with
// `ready().await?.call(..)`: a method call, so rustc reports E0599.
use axum::body::Body;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};
use tower_http_retry::RetryLayer;

async fn forward(request: http::Request<Body>) -> Result<(), BoxError> {
    let mut client = ServiceBuilder::new()
        .layer(RetryLayer::new())
        .service(Client::builder(TokioExecutor::new()).build_http::<Body>());
    client.ready().await?.call(request).await?;
    Ok(())
}

fn main() {
    drop(forward);
}

// `Service::call(&mut client, request)`, the fully qualified form: a trait bound on the path, so
// rustc reports E0277 rather than E0599.
use axum::body::Body;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower::{Service, ServiceBuilder};
use tower_http_retry::RetryLayer;

fn forward(request: http::Request<Body>) {
    let mut client = ServiceBuilder::new()
        .layer(RetryLayer::new())
        .service(Client::builder(TokioExecutor::new()).build_http::<Body>());
    drop(Service::call(&mut client, request));
}

fn main() {
    drop(forward);
}

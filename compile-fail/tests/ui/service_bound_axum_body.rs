// The retry service handed to a function that requires `S: Service<Req>` (as a router or a
// helper does): a trait bound, so rustc reports E0277.
use axum::body::Body;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower::{Service, ServiceBuilder};
use tower_http_retry::RetryLayer;

fn send<S: Service<Req>, Req>(mut service: S, request: Req) -> S::Future {
    service.call(request)
}

fn forward(request: http::Request<Body>) {
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new())
        .service(Client::builder(TokioExecutor::new()).build_http::<Body>());
    drop(send(client, request));
}

fn main() {
    drop(forward);
}

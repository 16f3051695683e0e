// `Service::call` as a method on the retry service, with hyper's `Incoming` body: E0599, but with
// the request type known, so the unsatisfied bound it lists is `RetryRequest`.
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower::{Service, ServiceBuilder};
use tower_http_retry::RetryLayer;

fn forward(request: http::Request<Incoming>) {
    let mut client = ServiceBuilder::new()
        .layer(RetryLayer::new())
        .service(Client::builder(TokioExecutor::new()).build_http::<Incoming>());
    drop(client.call(request));
}

fn main() {
    drop(forward);
}

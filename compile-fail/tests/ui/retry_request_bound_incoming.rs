// A function bounded on `RetryRequest` itself, given a request with hyper's `Incoming` body:
// rustc reports E0277 on `RetryRequest`.
use hyper::body::Incoming;
use tower_http_retry::retry::RetryRequest;

fn retryable<R: RetryRequest>(request: R) -> R {
    request
}

fn forward(request: http::Request<Incoming>) {
    drop(retryable(request));
}

fn main() {
    drop(forward);
}

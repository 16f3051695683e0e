// `fail_unsent` hands a request back as the service's error: an error type that cannot hold an
// `Unsent` (as a raw client's own error cannot) does not compile.
use tower::{Layer, Service};
use tower_http_retry::RetryLayer;

#[derive(Debug)]
struct RawClientError;

impl std::fmt::Display for RawClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("raw client error")
    }
}

impl std::error::Error for RawClientError {}

impl tower_http_retry::classify::AsStdError for RawClientError {
    fn as_std_error(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self)
    }
}

fn a_service<S: Service<http::Request<String>>>(_: &S) {}

fn main() {
    let layer = RetryLayer::builder().fail_unsent().build().unwrap();
    let client = tower::service_fn(|_: http::Request<String>| async {
        Ok::<_, RawClientError>(http::Response::new(String::new()))
    });
    a_service(&layer.layer(client));
}

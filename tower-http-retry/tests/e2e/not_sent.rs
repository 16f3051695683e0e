//! Requests that provably never reached the application are sent again whatever their method;
//! ambiguous failures are not. Real servers: HTTP/2 through the `h2` crate (and, for a `GOAWAY`
//! with a chosen last stream id, a few raw frames), HTTP/1 through hyper.

use super::frames::{GoAwayServer, Rotation};
use super::support::{
    get, h2_client, refused_addr, request, Arrival, Body, H2Reply, H2Server, HttpClient, Reply,
    TestServer,
};
use super::{retry, send, without_timeout};
use http::{Method, Response, StatusCode, Uri};
use hyper::body::Incoming;
use std::error::Error;
use std::io;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tower::{BoxError, Service, ServiceBuilder};
use tower_http_retry::classify::{is_rotation_refusal, AsStdError, Ask, Classify, NotSent};
use tower_http_retry::report::DelaySource;
use tower_http_retry::retry::Retry;
use tower_http_retry::{HttpClassifier, Outcome, RetryLayer, StopReason};

const ORDER: &str = r#"{"order":17}"#;

/// Bounds every wait on a server, so that a regression fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(10);

fn over_h2(layer: &RetryLayer) -> Retry<HttpClient, HttpClassifier> {
    ServiceBuilder::new()
        .layer(layer.clone())
        .service(h2_client())
}

fn classify<E: AsStdError>(error: &E) -> Outcome {
    <HttpClassifier as Classify<Response<Incoming>, E>>::classify_error(
        &HttpClassifier::new(),
        error,
    )
}

fn is_rotation(error: &(dyn Error + 'static)) -> bool {
    /// The error's chain, borrowed, as the classifier reads it.
    struct Chain<'a>(&'a (dyn Error + 'static));
    impl AsStdError for Chain<'_> {
        fn as_std_error(&self) -> Option<&(dyn Error + 'static)> {
            Some(self.0)
        }
    }
    let ask = Ask::new(Outcome::Transient, &std::time::SystemTime::now);
    HttpClassifier::new()
        .signals(&Err::<Response<Incoming>, _>(Chain(error)), &ask)
        .rotation
}

/// The `h2::Error` in the chain, if any.
fn h2_error<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a h2::Error> {
    let mut link = Some(error);
    while let Some(error) = link {
        if let Some(h2) = error.downcast_ref::<h2::Error>() {
            return Some(h2);
        }
        link = error.source();
    }
    None
}

#[tokio::test]
async fn a_refused_stream_is_resent_and_the_post_is_handled_once() {
    let server = H2Server::start(|arrival: &Arrival| match arrival.nth {
        1 => H2Reply::Refuse,
        _ => H2Reply::Status(200),
    })
    .await;
    let layer = retry().build().unwrap();
    let mut client = over_h2(&layer);
    let post = request(Method::POST, &server.uri("/orders"), "order", ORDER);

    let (result, report) = send(&mut client, post).await;

    assert_eq!(result.unwrap().status(), 200);
    assert_eq!(server.refused(), 1);
    assert_eq!(server.handled(&Method::POST, "order"), 1);
    assert_eq!((report.attempts, report.stop), (2, StopReason::Success));
    assert_eq!(report.delays.len(), 1);
    assert_eq!(report.delays[0].source, DelaySource::Refused);
    assert!(report.slept <= Duration::from_millis(4), "a short pause");
}

#[tokio::test]
async fn a_refused_stream_arrives_as_a_remote_h2_reset_and_is_classified_refused() {
    let server = H2Server::start(|_: &Arrival| H2Reply::Refuse).await;
    let layer = retry().max_refused_retries(0).build().unwrap();
    let mut client = over_h2(&layer);

    let (result, report) = send(&mut client, get(&server.uri("/"), "refused")).await;

    let error = result.expect_err("refused");
    let h2 = h2_error(&error).expect("an h2 error in the chain");
    assert!(h2.is_reset() && h2.is_remote(), "{h2:?}");
    assert_eq!(h2.reason(), Some(h2::Reason::REFUSED_STREAM));
    assert_eq!(classify(&error), Outcome::NotSent(NotSent::Refused));
    assert!(
        error.as_std_error().is_some_and(is_rotation_refusal),
        "{error:?}"
    );
    assert_eq!(
        (report.attempts, report.stop),
        (1, StopReason::RefusedTooOften)
    );
}

#[tokio::test]
async fn a_server_that_always_refuses_stops_at_the_cap_without_spending_budget() {
    let server = H2Server::start(|_: &Arrival| H2Reply::Refuse).await;
    let layer = retry().max_refused_retries(2).build().unwrap();
    let mut client = over_h2(&layer);
    let post = request(Method::POST, &server.uri("/orders"), "order", ORDER);

    let (result, report) = send(&mut client, post).await;

    assert!(result.is_err());
    assert_eq!(server.refused(), 3, "the first attempt and two resends");
    assert_eq!(server.total_handled(), 0);
    assert_eq!(
        (report.attempts, report.stop),
        (3, StopReason::RefusedTooOften)
    );
    let stats = layer.stats();
    assert_eq!(stats.stopped(StopReason::RefusedTooOften), 1);
    assert_eq!(stats.budget_granted, 0, "resends take no token");
}

/// Sends one request of `method` per body in `bodies` through `client` at once, the bodies told
/// apart by the server; returns each outcome with its error's classification.
async fn concurrent<S>(
    client: &S,
    server: &GoAwayServer,
    method: &Method,
    bodies: &[String],
) -> Vec<(Result<StatusCode, BoxError>, tower_http_retry::RetryReport)>
where
    S: Service<http::Request<Body>, Response = Response<Incoming>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError> + std::fmt::Debug + Send,
{
    let mut sent = JoinSet::new();
    for body in bodies {
        let mut client = client.clone();
        let request = request(
            method.clone(),
            &server.uri("/orders"),
            "order",
            body.clone(),
        );
        sent.spawn(async move {
            let (result, report) = send(&mut client, request).await;
            let result = result.map(|response| response.status()).map_err(Into::into);
            (result, report)
        });
    }
    tokio::time::timeout(PATIENCE, sent.join_all())
        .await
        .expect("every request ends")
}

/// A `GOAWAY` that reaches a request through hyper's HTTP/2 client is no proof that the server
/// did not process it: hyper can hand the connection's `GOAWAY` to a request whose stream it had
/// just opened. So with a plain hyper-util client the two POSTs above the last stream id stop
/// (transient, a rotation, not resent) while GETs in the same place are resent for free.
#[tokio::test]
async fn a_goaway_through_a_plain_hyper_client_resends_gets_for_free_and_never_a_post() {
    const BURST: usize = 4;
    let rotation = Rotation::FirstCoversLowest {
        burst: BURST,
        covered: 2,
    };
    let bodies =
        |method: &str| -> Vec<String> { (0..BURST).map(|i| format!("{method}-{i}")).collect() };

    let server = GoAwayServer::start(rotation).await;
    let layer = retry().build().unwrap();
    let posts = concurrent(&over_h2(&layer), &server, &Method::POST, &bodies("post")).await;
    let mut stopped = 0;
    for (result, report) in &posts {
        match result {
            Ok(status) => {
                assert_eq!(*status, StatusCode::OK);
                assert_eq!((report.attempts, report.stop), (1, StopReason::Success));
            }
            Err(error) => {
                assert!(
                    h2_error(&**error).is_some_and(h2::Error::is_go_away),
                    "{error:?}"
                );
                assert_eq!(classify(error), Outcome::Transient, "no proof: {error:?}");
                assert!(is_rotation(&**error), "{error:?}");
                assert!(is_rotation_refusal(&**error), "{error:?}");
                assert_eq!(
                    (report.attempts, report.stop),
                    (1, StopReason::NotIdempotent),
                    "not resent"
                );
                stopped += 1;
            }
        }
    }
    assert_eq!(
        stopped, 2,
        "the two POSTs above the last stream id: {posts:?}"
    );
    let handled = server.handled();
    assert_eq!(handled.len(), 2, "{handled:?}");
    assert!(handled.values().all(|&n| n == 1), "{handled:?}");
    assert_eq!((server.connections(), server.goaways()), (1, 1));
    let stats = layer.stats();
    assert_eq!((stats.unproven_rotations, stats.rotation_resends), (2, 0));

    let server = GoAwayServer::start(rotation).await;
    let layer = retry().build().unwrap();
    let gets = concurrent(&over_h2(&layer), &server, &Method::GET, &bodies("get")).await;
    let mut resent = 0;
    for (result, report) in &gets {
        assert_eq!(*result.as_ref().expect("answered"), StatusCode::OK);
        assert_eq!(report.stop, StopReason::Success);
        if report.attempts == 2 {
            assert_eq!(report.delays[0].source, DelaySource::Refused);
            resent += 1;
        }
    }
    assert_eq!(resent, 2, "the two GETs above the last stream id: {gets:?}");
    let handled = server.handled();
    assert_eq!(handled.len(), BURST, "{handled:?}");
    assert!(handled.values().all(|&n| n == 1), "{handled:?}");
    assert_eq!((server.connections(), server.goaways()), (2, 1));
    let stats = layer.stats();
    assert_eq!((stats.unproven_rotations, stats.rotation_resends), (2, 2));
    assert_eq!(stats.budget_granted, 0, "rotation takes no budget token");
    assert_eq!(
        stats.attempts, 6,
        "the resends are sent, and not counted against 3"
    );
}

/// The same POSTs through [`rotation_safe_client`]: its hyper tasks run one at a time, so a
/// `GOAWAY` it delivers is the request's own stream's verdict, proof for any method.
///
/// [`rotation_safe_client`]: tower_http_retry_hyper::rotation_safe_client
#[tokio::test]
async fn posts_above_the_last_stream_id_are_resent_through_the_rotation_safe_client_and_each_handled_once(
) {
    use tower_http_retry::classify::SerialDispatch;
    use tower_http_retry_hyper::{rotation_safe_client, SerialExecutor};
    const BURST: usize = 4;
    let server = GoAwayServer::start(Rotation::FirstCoversLowest {
        burst: BURST,
        covered: 2,
    })
    .await;
    let layer = retry().build().unwrap();
    let executor = SerialExecutor::start().unwrap();
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let client = rotation_safe_client(executor, connector, |builder| {
        builder.http2_only(true);
    });
    let bodies: Vec<String> = (0..BURST).map(|i| format!("order-{i}")).collect();

    let posts = concurrent(
        &ServiceBuilder::new()
            .layer(layer.clone())
            .service(client.clone()),
        &server,
        &Method::POST,
        &bodies,
    )
    .await;

    let mut resent = 0;
    for (result, report) in &posts {
        assert_eq!(*result.as_ref().expect("answered"), StatusCode::OK);
        assert_eq!(report.stop, StopReason::Success);
        if report.attempts == 2 {
            assert_eq!(report.delays[0].source, DelaySource::Refused);
            resent += 1;
        }
    }
    assert_eq!(
        resent, 2,
        "the two streams above the last stream id: {posts:?}"
    );
    let handled = server.handled();
    assert_eq!(handled.len(), BURST, "{handled:?}");
    assert!(handled.values().all(|&n| n == 1), "{handled:?}");
    assert_eq!((server.connections(), server.goaways()), (2, 1));
    let stats = layer.stats();
    assert_eq!((stats.unproven_rotations, stats.rotation_resends), (0, 2));

    // The marker is what the classifier read; responses carry it too.
    let response = client
        .request(get(&server.uri("/"), "marked"))
        .await
        .expect("answered");
    assert!(response.extensions().get::<SerialDispatch>().is_some());
}

/// Sends `requests` GETs through `client` from `workers` tasks, each sending its share one after
/// another (so that new requests keep arriving while a connection goes away); returns the reports
/// of those that failed, with whether their error was an h2 `GOAWAY` from the server.
async fn stream_of_gets<S>(
    server: &GoAwayServer,
    client: S,
    requests: u32,
    workers: u32,
) -> Vec<(bool, tower_http_retry::RetryReport)>
where
    S: Service<http::Request<Body>, Response = Response<Incoming>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Error + Send + 'static,
{
    let mut tasks = JoinSet::new();
    for worker in 0..workers {
        let mut client = client.clone();
        let uri = server.uri("/");
        tasks.spawn(async move {
            let mut failed = Vec::new();
            for i in 0..requests / workers {
                let (result, report) =
                    send(&mut client, get(&uri, &format!("g{worker}-{i}"))).await;
                match result {
                    Ok(response) => assert_eq!(response.status(), 200),
                    Err(error) => {
                        let go_away = h2_error(&error).is_some_and(|h2| h2.is_go_away());
                        failed.push((go_away, report));
                    }
                }
            }
            failed
        });
    }
    let failed = tokio::time::timeout(PATIENCE, tasks.join_all())
        .await
        .expect("every GET ends");
    failed.into_iter().flatten().collect()
}

const GETS: u32 = 400;
const WORKERS: u32 = 20;
/// Each connection sends its `GOAWAY` once this many requests have arrived on it.
const ROTATE_AFTER: usize = 50;

fn rotating() -> Rotation {
    Rotation::EachCoversReceived {
        after: ROTATE_AFTER,
    }
}

/// The control: without resends, a server that rotates its connections with a `GOAWAY` naming
/// the last stream it received fails the GETs sent meanwhile, each with the server's `GOAWAY` as
/// its error. Were there none, the test below would prove nothing.
#[tokio::test]
async fn without_resends_a_goaway_mid_burst_fails_gets() {
    let server = GoAwayServer::start(rotating()).await;
    let layer = retry().max_refused_retries(0).build().unwrap();

    let failed = stream_of_gets(&server, over_h2(&layer), GETS, WORKERS).await;

    eprintln!(
        "without resends: {} of {GETS} GETs failed; {} connections",
        failed.len(),
        server.connections()
    );
    assert!(!failed.is_empty());
    for (go_away, report) in &failed {
        assert!(go_away);
        assert_eq!(report.stop, StopReason::RefusedTooOften);
    }
}

#[tokio::test]
async fn a_goaway_mid_burst_fails_no_get() {
    let server = GoAwayServer::start(rotating()).await;
    let layer = retry().build().unwrap();

    let failed = stream_of_gets(&server, over_h2(&layer), GETS, WORKERS).await;

    let stats = layer.stats();
    let handled: u32 = server.handled().values().sum();
    eprintln!(
        "with resends: {} of {GETS} GETs failed; {} connections; {handled} handled; {} attempts",
        failed.len(),
        server.connections(),
        stats.attempts
    );
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(handled, GETS, "each GET processed once");
    assert!(stats.attempts > u64::from(GETS), "some GETs met a GOAWAY");
    assert_eq!(stats.budget_granted, 0, "resends take no budget token");
}

#[tokio::test]
async fn a_post_whose_body_was_read_before_the_connection_closed_is_not_resent() {
    let server = TestServer::start(|hit| match hit.nth {
        1 => Reply::Hangup, // reads the whole body, then closes
        _ => Reply::status(200),
    })
    .await;
    let layer = retry().build().unwrap();
    let mut client = without_timeout(&layer);
    let post = request(Method::POST, &server.uri("/orders"), "order", ORDER);

    let (result, report) = send(&mut client, post).await;

    let error = result.expect_err("the connection closed unanswered");
    assert_eq!(classify(&error), Outcome::Transient, "ambiguous: {error:?}");
    assert_eq!(server.hits(&Method::POST, "order"), 1);
    assert_eq!(
        (report.attempts, report.stop),
        (1, StopReason::NotIdempotent)
    );
}

#[tokio::test]
async fn a_post_to_a_refused_connection_is_retried_and_counts_attempts() {
    let layer = retry().max_attempts(3).build().unwrap();
    let mut client = without_timeout(&layer);
    let uri: Uri = format!("http://{}/orders", refused_addr()).parse().unwrap();

    let (result, report) = send(&mut client, request(Method::POST, &uri, "o", ORDER)).await;

    let error = result.expect_err("nothing listens there");
    assert!(error.is_connect(), "{error:?}");
    assert_eq!(classify(&error), Outcome::NotSent(NotSent::Unconnected));
    assert_eq!(
        (report.attempts, report.stop),
        (3, StopReason::AttemptsExhausted)
    );
    assert!(report
        .delays
        .iter()
        .all(|d| d.source == DelaySource::Backoff));
    assert_eq!(layer.stats().budget_granted, 2, "each retry took a token");
}

/// A connector that fails the way tokio-rustls reports a certificate it rejects.
fn rejecting_certificates() -> hyper_util::client::legacy::Client<
    impl hyper_util::client::legacy::connect::Connect + Clone,
    Body,
> {
    let connector = tower::service_fn(|_: Uri| {
        let rejected = io::Error::new(io::ErrorKind::InvalidData, "invalid peer certificate");
        std::future::ready(Err::<hyper_util::rt::TokioIo<TcpStream>, _>(rejected))
    });
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(connector)
}

#[tokio::test]
async fn a_rejected_certificate_is_permanent() {
    let layer = retry().build().unwrap();
    let mut client = ServiceBuilder::new()
        .layer(layer.clone())
        .service(rejecting_certificates());

    let (result, report) = send(&mut client, get(&"http://a.test/".parse().unwrap(), "tls")).await;

    let error = result.expect_err("the connector fails");
    assert!(error.is_connect(), "{error:?}");
    assert_eq!((report.attempts, report.stop), (1, StopReason::Permanent));
}

#[tokio::test]
async fn a_connect_that_fails_otherwise_is_not_sent() {
    let connector = tower::service_fn(|_: Uri| {
        let unreachable = io::Error::new(io::ErrorKind::TimedOut, "connect timeout");
        std::future::ready(Err::<hyper_util::rt::TokioIo<TcpStream>, _>(unreachable))
    });
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, Body>(connector);
    let mut client = ServiceBuilder::new()
        .layer(retry().build().unwrap())
        .service(client);
    let post = request(Method::POST, &"http://a.test/".parse().unwrap(), "o", ORDER);

    let (result, report) = send(&mut client, post).await;

    assert!(result.expect_err("the connector fails").is_connect());
    assert_eq!(
        (report.attempts, report.stop),
        (3, StopReason::AttemptsExhausted)
    );
}

/// An HTTP/2 server, frame by frame, that processes the first request of each connection and
/// then sends a `GOAWAY` with an error code naming it (`INTERNAL_ERROR`, last stream id 1) and
/// closes the connection without answering: a server that failed after processing.
async fn processes_then_goes_away_with_an_error(
) -> (Uri, std::sync::Arc<std::sync::atomic::AtomicU32>) {
    use std::sync::atomic::{AtomicU32, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://{}/orders", listener.local_addr().unwrap())
        .parse()
        .unwrap();
    let processed = std::sync::Arc::new(AtomicU32::new(0));
    let count = std::sync::Arc::clone(&processed);
    tokio::spawn(async move {
        let frame = |kind: u8, flags: u8, stream: u32, payload: &[u8]| {
            let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
            out.extend([kind, flags]);
            out.extend(stream.to_be_bytes());
            out.extend(payload);
            out
        };
        while let Ok((mut socket, _)) = listener.accept().await {
            let count = std::sync::Arc::clone(&count);
            let mut preface = [0; 24];
            if socket.read_exact(&mut preface).await.is_err() {
                continue;
            }
            let _ = socket.write_all(&frame(0x4, 0, 0, &[])).await; // SETTINGS
            loop {
                let mut head = [0; 9];
                if socket.read_exact(&mut head).await.is_err() {
                    break;
                }
                let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
                let (kind, flags) = (head[3], head[4]);
                let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
                let mut payload = vec![0; len];
                if socket.read_exact(&mut payload).await.is_err() {
                    break;
                }
                if kind == 0x4 && flags & 0x1 == 0 {
                    let _ = socket.write_all(&frame(0x4, 0x1, 0, &[])).await; // SETTINGS ACK
                }
                // The request is whole (END_STREAM on its HEADERS or DATA): processed.
                if (kind == 0x0 || kind == 0x1) && flags & 0x1 != 0 {
                    count.fetch_add(1, Ordering::SeqCst);
                    let mut go_away = stream.to_be_bytes().to_vec();
                    go_away.extend(2u32.to_be_bytes()); // INTERNAL_ERROR
                    let _ = socket.write_all(&frame(0x7, 0, 0, &go_away)).await;
                    break; // closes the connection unanswered
                }
            }
        }
    });
    (uri, processed)
}

/// Sends a POST through `client` (under the retry layer) to a server that processes it, then
/// sends a `GOAWAY` covering it and cuts the connection: the POST is not sent again.
async fn a_post_cut_after_a_goaway_covered_it_is_not_resent<C>(client: C)
where
    C: Service<http::Request<Body>, Response = Response<Incoming>> + Clone + Send + 'static,
    C::Future: Send,
    C::Error: Into<BoxError> + std::fmt::Debug + AsStdError,
{
    let (uri, processed) = processes_then_goes_away_with_an_error().await;
    let layer = retry().build().unwrap();
    let mut client = ServiceBuilder::new().layer(layer.clone()).service(client);
    let post = request(Method::POST, &uri, "order", ORDER);

    let (result, report) = tokio::time::timeout(PATIENCE, send(&mut client, post))
        .await
        .expect("the POST ends");

    let error = result.expect_err("the server went away unanswered");
    // h2 gives the stream an I/O error (the connection closed), not the GOAWAY: ambiguous.
    assert!(
        !error
            .as_std_error()
            .and_then(h2_error)
            .is_some_and(h2::Error::is_go_away),
        "{error:?}"
    );
    assert_ne!(
        classify(&error),
        Outcome::NotSent(NotSent::Refused),
        "{error:?}"
    );
    assert_eq!(
        processed.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "applied once"
    );
    assert_eq!(
        (report.attempts, report.stop),
        (1, StopReason::NotIdempotent)
    );
}

#[tokio::test]
async fn a_post_a_goaway_covers_and_the_connection_then_cuts_is_not_resent() {
    a_post_cut_after_a_goaway_covered_it_is_not_resent(h2_client()).await;
}

/// The marker of the rotation-safe client proves nothing by itself: what h2 said decides.
#[tokio::test]
async fn a_post_the_rotation_safe_client_saw_cut_after_a_goaway_covered_it_is_not_resent() {
    use tower_http_retry_hyper::{rotation_safe_client, SerialExecutor};
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let client = rotation_safe_client(SerialExecutor::start().unwrap(), connector, |builder| {
        builder.http2_only(true);
    });
    a_post_cut_after_a_goaway_covered_it_is_not_resent(client).await;
}

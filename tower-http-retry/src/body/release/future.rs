//! [`ReleaseBodyFuture`]: one attempt, then, for a transient response, the reading of its body.
//!
//! ```text
//!  call ──> Calling ──── error / success / permanent ─────────────────> Done, body untouched
//!               └──── transient ──> Reading ── end / error / overflow ──> Done, body read
//! ```

use super::body::{Fill, Read, ReleasedBody};
use super::config::Config;
use crate::classify::{Classify, Outcome};
use crate::hint::read_body_hint;
use http::response::Parts;
use http::Method;
use http_body::Body;
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

pin_project! {
    /// The future of [`ReleaseBody`](crate::body::ReleaseBody): resolves to the inner service's
    /// response, whose body was read if the response was transient, or to its error.
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct ReleaseBodyFuture<F, B, C> {
        #[pin]
        state: State<F, B>,
        method: Method,
        config: Arc<Config<C>>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, B> {
        // The attempt is in flight.
        Calling {
            #[pin]
            future: F,
        },
        // A transient response: its body is read; its head waits to be returned with it.
        Reading {
            head: Option<Parts>,
            #[pin]
            body: B,
            read: Read,
        },
        Done,
    }
}

impl<F, B, C> ReleaseBodyFuture<F, B, C> {
    pub(super) fn new(future: F, method: Method, config: Arc<Config<C>>) -> Self {
        Self {
            state: State::Calling { future },
            method,
            config,
        }
    }
}

impl<F, B, C, E> Future for ReleaseBodyFuture<F, B, C>
where
    F: Future<Output = Result<http::Response<B>, E>>,
    B: Body,
    C: Classify<http::Response<B>, E>,
{
    type Output = Result<http::Response<ReleasedBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Calling { future } => {
                    let result = ready!(future.poll(cx));
                    let outcome = this.config.classifier.classify(this.method, &result);
                    match result {
                        // Every response the retry layer may send again: transient, or refused
                        // unprocessed (`NotSent`, e.g. a 421 classified so).
                        Ok(response)
                            if matches!(outcome, Outcome::Transient | Outcome::NotSent(_)) =>
                        {
                            let (head, body) = response.into_parts();
                            this.state.set(State::Reading {
                                head: Some(head),
                                body,
                                read: Read::new(this.config.limit),
                            });
                        }
                        result => {
                            this.state.set(State::Done);
                            return Poll::Ready(result.map(|r| r.map(ReleasedBody::new)));
                        }
                    }
                }
                StateProj::Reading {
                    head,
                    mut body,
                    read,
                } => {
                    let (error, fill) = loop {
                        if body.is_end_stream() {
                            break (None, Fill::Fits);
                        }
                        match ready!(body.as_mut().poll_frame(cx)) {
                            Some(Ok(frame)) => match read.push(frame) {
                                Fill::Fits => {}
                                Fill::Overflowed => break (None, Fill::Overflowed),
                            },
                            Some(Err(error)) => break (Some(error), Fill::Fits),
                            None => break (None, Fill::Fits),
                        }
                    };
                    let mut head = head.take().expect("the head is taken once, when done");
                    let read = std::mem::replace(read, Read::new(0));
                    if error.is_none() && fill == Fill::Fits {
                        // A whole body: what it says of when to retry, for the classifier.
                        read_body_hint(&mut head, read.data());
                    }
                    // Drops the inner body: a body read to its end lets its connection go back
                    // to the pool; the rest of a longer one is dropped unread, which closes it.
                    this.state.set(State::Done);
                    let body = read.finish(error, fill);
                    return Poll::Ready(Ok(http::Response::from_parts(head, body)));
                }
                StateProj::Done => panic!("ReleaseBodyFuture polled after completion"),
            }
        }
    }
}

impl<F, B, C> fmt::Debug for ReleaseBodyFuture<F, B, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Calling { .. } => "calling",
            State::Reading { .. } => "reading",
            State::Done => "done",
        };
        f.debug_struct("ReleaseBodyFuture")
            .field("state", &state)
            .field("method", &self.method)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use crate::body::{ReleaseBodyLayer, ReleasedBody};
    use crate::{HttpClassifier, Outcome};
    use bytes::Bytes;
    use http::{HeaderMap, Method, StatusCode};
    use http_body::{Body, Frame};
    use http_body_util::BodyExt;
    use std::collections::VecDeque;
    use std::io;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll};
    use tokio_test::assert_pending;
    use tower::{service_fn, Layer, Service, ServiceExt};

    enum Step {
        Data(&'static [u8]),
        Trailers,
        Fail,
        /// Not ready yet (the task is woken to poll again).
        Wait,
    }

    /// A body that plays `steps`, then ends, or stays pending forever with `stall`, and records
    /// when it is dropped.
    struct Scripted {
        steps: VecDeque<Step>,
        stall: bool,
        dropped: Arc<AtomicBool>,
    }

    impl Scripted {
        fn new(steps: Vec<Step>) -> (Self, Arc<AtomicBool>) {
            let dropped = Arc::new(AtomicBool::new(false));
            let body = Self {
                steps: steps.into(),
                stall: false,
                dropped: Arc::clone(&dropped),
            };
            (body, dropped)
        }

        fn stalled() -> Self {
            let (mut body, _) = Self::new(Vec::new());
            body.stall = true;
            body
        }
    }

    impl Drop for Scripted {
        fn drop(&mut self) {
            self.dropped.store(true, Ordering::SeqCst);
        }
    }

    impl Body for Scripted {
        type Data = Bytes;
        type Error = &'static str;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, &'static str>>> {
            match self.steps.pop_front() {
                Some(Step::Data(data)) => Poll::Ready(Some(Ok(Frame::data(Bytes::from(data))))),
                Some(Step::Trailers) => Poll::Ready(Some(Ok(Frame::trailers(trailers())))),
                Some(Step::Fail) => Poll::Ready(Some(Err("reset"))),
                Some(Step::Wait) => {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
                None if self.stall => Poll::Pending,
                None => Poll::Ready(None),
            }
        }

        fn is_end_stream(&self) -> bool {
            self.steps.is_empty() && !self.stall
        }
    }

    fn trailers() -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert("grpc-status", "14".parse().unwrap());
        map
    }

    fn response(status: u16, body: Scripted) -> http::Response<Scripted> {
        http::Response::builder()
            .status(status)
            .header("x-upstream", "lb-3")
            .extension(7u32)
            .body(body)
            .unwrap()
    }

    /// Sends one GET through `ReleaseBodyLayer` (limit `limit`) to a service answering `response`.
    async fn release(
        limit: usize,
        response: http::Response<Scripted>,
    ) -> http::Response<ReleasedBody<Scripted>> {
        let layer = ReleaseBodyLayer::builder().limit(limit).build().unwrap();
        let once = std::sync::Mutex::new(Some(response));
        let inner = service_fn(move |_: http::Request<()>| {
            let response = once.lock().unwrap().take().expect("called once");
            async move { Ok::<_, io::Error>(response) }
        });
        let service = layer.layer(inner);
        service.oneshot(http::Request::new(())).await.unwrap()
    }

    #[tokio::test]
    async fn a_success_is_returned_without_reading_its_body() {
        let released = release(4, response(200, Scripted::stalled())).await;
        assert_eq!(released.status(), 200);
        assert!(!released.body().is_buffered());
    }

    #[tokio::test]
    async fn a_permanent_response_is_returned_without_reading_its_body() {
        let released = release(4, response(404, Scripted::stalled())).await;
        assert_eq!(released.status(), 404);
        assert!(!released.body().is_buffered());
    }

    #[tokio::test]
    async fn a_transient_body_within_the_limit_is_read_whole_with_its_trailers() {
        let steps = vec![
            Step::Data(b"ab"),
            Step::Wait,
            Step::Data(b"cd"),
            Step::Trailers,
        ];
        let (body, dropped) = Scripted::new(steps);
        let released = release(4, response(503, body)).await;
        assert!(dropped.load(Ordering::SeqCst), "the inner body is dropped");
        assert!(released.body().is_buffered() && !released.body().is_truncated());
        assert_eq!(released.body().size_hint().exact(), Some(4));
        let collected = released.into_body().collect().await.unwrap();
        assert_eq!(collected.trailers(), Some(&trailers()));
        assert_eq!(collected.to_bytes(), &b"abcd"[..]);
    }

    #[tokio::test]
    async fn a_transient_response_keeps_its_status_headers_and_extensions() {
        let (body, _) = Scripted::new(vec![Step::Data(b"down")]);
        let released = release(64, response(503, body)).await;
        assert_eq!(released.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(released.headers()["x-upstream"], "lb-3");
        assert_eq!(released.extensions().get::<u32>(), Some(&7));
    }

    #[tokio::test]
    async fn a_transient_body_past_the_limit_keeps_the_limit_and_drops_the_rest_unread() {
        // Read past "def", the failure would be kept and yielded by the released body.
        let steps = vec![Step::Data(b"abc"), Step::Data(b"def"), Step::Fail];
        let (body, dropped) = Scripted::new(steps);
        let released = release(4, response(503, body)).await;
        assert!(dropped.load(Ordering::SeqCst), "the rest is dropped");
        assert!(released.body().is_truncated());
        let data = released
            .into_body()
            .collect()
            .await
            .expect("the failure was not read");
        let data = data.to_bytes();
        assert_eq!(data, &b"abcd"[..]);
    }

    #[tokio::test]
    async fn a_transient_body_that_fails_while_read_keeps_the_data_and_then_the_error() {
        let (body, _) = Scripted::new(vec![Step::Data(b"ab"), Step::Fail]);
        let released = release(64, response(503, body)).await;
        assert_eq!(released.status(), 503);
        let mut body = released.into_body();
        let data = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(data, &b"ab"[..]);
        assert_eq!(body.frame().await.unwrap().unwrap_err(), "reset");
    }

    #[tokio::test]
    async fn the_response_waits_until_a_transient_body_is_read() {
        let (mut body, _) = Scripted::new(vec![Step::Data(b"ab")]);
        body.stall = true;
        let layer = ReleaseBodyLayer::new();
        let once = std::sync::Mutex::new(Some(response(503, body)));
        let mut service = layer.layer(service_fn(move |_: http::Request<()>| {
            let response = once.lock().unwrap().take().expect("called once");
            async move { Ok::<_, io::Error>(response) }
        }));
        let mut future = tokio_test::task::spawn(service.call(http::Request::new(())));
        assert_pending!(future.poll());
        assert_pending!(future.poll());
    }

    #[tokio::test]
    async fn an_error_of_the_inner_service_passes_through() {
        let layer = ReleaseBodyLayer::new();
        let service = layer.layer(service_fn(|_: http::Request<()>| async {
            Err::<http::Response<Scripted>, _>(io::Error::from(io::ErrorKind::ConnectionReset))
        }));
        let error = service.oneshot(http::Request::new(())).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::ConnectionReset);
    }

    #[tokio::test]
    async fn the_classifier_sees_the_method_of_the_request() {
        /// The default table, and a 409 is transient for a PUT only.
        #[derive(Clone, Debug)]
        struct PutConflicts;
        impl crate::classify::Classify<http::Response<Scripted>, io::Error> for PutConflicts {
            fn classify_response(&self, response: &http::Response<Scripted>) -> Outcome {
                HttpClassifier::new().classify_status(response.status())
            }
            fn classify_error(&self, _: &io::Error) -> Outcome {
                Outcome::Permanent
            }
            fn classify(
                &self,
                method: &Method,
                result: &Result<http::Response<Scripted>, io::Error>,
            ) -> Outcome {
                match result {
                    Ok(r) if r.status() == 409 && method == Method::PUT => Outcome::Transient,
                    Ok(r) => self.classify_response(r),
                    Err(e) => self.classify_error(e),
                }
            }
        }
        let layer = ReleaseBodyLayer::builder()
            .classifier(PutConflicts)
            .build()
            .unwrap();
        for (method, read) in [(Method::PUT, true), (Method::GET, false)] {
            let (body, _) = Scripted::new(vec![Step::Data(b"conflict")]);
            let once = std::sync::Mutex::new(Some(response(409, body)));
            let service = layer.layer(service_fn(move |_: http::Request<()>| {
                let response = once.lock().unwrap().take().expect("called once");
                async move { Ok::<_, io::Error>(response) }
            }));
            let request = http::Request::builder().method(method.clone()).body(());
            let released = service.oneshot(request.unwrap()).await.unwrap();
            assert_eq!(released.body().is_buffered(), read, "{method}");
        }
    }

    #[tokio::test]
    async fn a_response_refused_unprocessed_is_read_like_a_transient_one() {
        use crate::classify::NotSent;
        let layer = ReleaseBodyLayer::builder()
            .classifier(HttpClassifier::new().status(
                StatusCode::MISDIRECTED_REQUEST,
                Outcome::NotSent(NotSent::Refused),
            ))
            .build()
            .unwrap();
        let (body, _) = Scripted::new(vec![Step::Data(b"refused")]);
        let once = std::sync::Mutex::new(Some(response(421, body)));
        let service = layer.layer(service_fn(move |_: http::Request<()>| {
            let response = once.lock().unwrap().take().expect("called once");
            async move { Ok::<_, io::Error>(response) }
        }));
        let released = service.oneshot(http::Request::new(())).await.unwrap();
        assert!(
            released.body().is_buffered(),
            "the retry layer sends it again"
        );
    }
}

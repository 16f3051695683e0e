//! The simulated endpoint: it decides each outcome from the virtual time of the call (down,
//! or up with unlimited capacity or a token bucket's) and answers [`Params::latency`] later,
//! logging every arrival.

use crate::{Arrival, Model, Params, ATTEMPT};
use http::{HeaderValue, Request, Response, StatusCode};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};
use tower::Service;

/// When the endpoint is down (every request gets 503).
#[derive(Clone, Debug)]
pub(crate) enum Downtime {
    /// From t = 0 to [`Params::outage`]: every table's scenario.
    Once,
    /// As `Once`, and again for [`Params::outage`] from the instant
    /// [`Endpoint::start_second_outage`] is called (a flapping endpoint that fails again as the
    /// first burst completes).
    Twice(Arc<Mutex<Option<Duration>>>),
    /// Down for `period`, up for `period`, from t = 0 until `until`; up after.
    Alternating { period: Duration, until: Duration },
}

/// The endpoint: a tower `Service` shared by every sender of a run.
#[derive(Clone)]
pub(crate) struct Endpoint {
    state: Arc<Mutex<EndpointState>>,
    model: Model,
    downtime: Downtime,
    /// Whether a 503 of the outage carries `Retry-After` with the time left until recovery (an
    /// announced outage: maintenance). Only with [`Downtime::Once`].
    announced: bool,
    outage: Duration,
    latency: Duration,
    tick: Duration,
    per_tick: u64,
    burst: u64,
    retry_after: HeaderValue,
}

struct EndpointState {
    start: Instant,
    arrivals: Vec<Arrival>,
    /// Model B: the bucket's tokens, and the tick (counted from the start) they are up to date
    /// with.
    tokens: u64,
    refilled: u64,
}

impl Endpoint {
    pub(crate) fn new(p: &Params, model: Model, start: Instant) -> Self {
        Self::with_downtime(p, model, start, Downtime::Once, false)
    }

    pub(crate) fn with_downtime(
        p: &Params,
        model: Model,
        start: Instant,
        downtime: Downtime,
        announced: bool,
    ) -> Self {
        Self {
            state: Arc::new(Mutex::new(EndpointState {
                start,
                arrivals: Vec::with_capacity(p.deliveries * 4),
                tokens: p.capacity_burst,
                refilled: 0,
            })),
            model,
            downtime,
            announced,
            outage: p.outage,
            latency: p.latency,
            tick: p.capacity_tick,
            per_tick: p.tokens_per_tick(),
            burst: p.capacity_burst,
            retry_after: HeaderValue::from(p.retry_after_secs),
        }
    }

    pub(crate) fn take_arrivals(&self) -> Vec<Arrival> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::take(&mut state.arrivals)
    }

    /// [`Downtime::Twice`]: the second outage starts now, `at` from the start.
    pub(crate) fn start_second_outage(&self, at: Duration) {
        if let Downtime::Twice(second) = &self.downtime {
            second
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert(at);
        }
    }

    /// Whether the endpoint is down at `at`.
    fn is_down(&self, at: Duration) -> bool {
        match &self.downtime {
            Downtime::Once => at < self.outage,
            Downtime::Twice(second) => {
                let second = *second.lock().unwrap_or_else(PoisonError::into_inner);
                at < self.outage || second.is_some_and(|from| at >= from && at < from + self.outage)
            }
            Downtime::Alternating { period, until } => {
                at < *until && (at.as_nanos() / period.as_nanos()) % 2 == 0
            }
        }
    }

    /// Model B: takes a token if there is one, at `at`.
    fn admit(&self, state: &mut EndpointState, at: Duration) -> bool {
        let tick = (at.as_nanos() / self.tick.as_nanos()) as u64;
        if tick > state.refilled {
            let added = (tick - state.refilled).saturating_mul(self.per_tick);
            state.tokens = state.tokens.saturating_add(added).min(self.burst);
            state.refilled = tick;
        }
        state.tokens > 0 && {
            state.tokens -= 1;
            true
        }
    }
}

impl Service<Request<String>> for Endpoint {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = Respond;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<String>) -> Self::Future {
        let attempt = header(&request, ATTEMPT.as_str()).unwrap_or(1);
        let delivery = header(&request, "idempotency-key").expect("every webhook has a key");
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let at = state.start.elapsed();
        let down = self.is_down(at);
        let ok = !down
            && match self.model {
                Model::HardOutage => true,
                Model::Capacity { .. } => self.admit(&mut state, at),
            };
        state.arrivals.push(Arrival {
            at,
            delivery,
            attempt,
            ok,
        });
        drop(state);
        let mut response = Response::new(String::new());
        if !ok {
            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            let hint = if down {
                // An announced outage: the time left, in whole seconds rounded up.
                self.announced.then(|| {
                    let left = self.outage.saturating_sub(at);
                    HeaderValue::from(left.as_secs() + u64::from(left.subsec_nanos() > 0))
                })
            } else {
                (self.model == (Model::Capacity { retry_after: true }))
                    .then(|| self.retry_after.clone())
            };
            if let Some(hint) = hint {
                response
                    .headers_mut()
                    .insert(http::header::RETRY_AFTER, hint);
            }
        }
        Respond {
            latency: Box::pin(tokio::time::sleep(self.latency)),
            response: Some(response),
        }
    }
}

fn header<T: std::str::FromStr>(request: &Request<String>, name: &str) -> Option<T> {
    request.headers().get(name)?.to_str().ok()?.parse().ok()
}

/// The endpoint's response, once its latency has passed.
pub(crate) struct Respond {
    latency: Pin<Box<Sleep>>,
    response: Option<Response<String>>,
}

impl Future for Respond {
    type Output = Result<Response<String>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        ready!(self.latency.as_mut().poll(cx));
        Poll::Ready(Ok(self.response.take().expect("polled after completion")))
    }
}

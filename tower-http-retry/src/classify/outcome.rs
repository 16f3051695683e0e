//! What a classifier decides: an [`Outcome`], and for a request that provably never reached the
//! application, how it failed ([`NotSent`]).

/// How an outcome is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Done: return it (and deposit in the retry budget).
    Success,
    /// Worth another attempt: the endpoint may answer differently soon.
    Transient,
    /// Not worth another attempt: return it at once.
    Permanent,
    /// The request provably never reached the application, so sending it again is safe whatever
    /// its method, a POST without an `Idempotency-Key` included. See [`NotSent`] for what each
    /// kind costs.
    NotSent(NotSent),
}

/// How a request that never reached the application failed, which decides what resending it
/// costs.
///
/// An ambiguous failure (a connection that ended after the request was written, a stream reset
/// with another reason, a read timeout) is not one of these: the server may have processed the
/// request, and such an outcome is [`Outcome::Transient`], retried only when idempotent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NotSent {
    /// The server turned the request away before processing it, as it does when it rotates or
    /// drains a connection (RFC 9113, section 8.7): an HTTP/2 `REFUSED_STREAM` reset, or a `GOAWAY`
    /// whose last stream id is below the request's stream (a request sent on the connection after
    /// it included). The endpoint is up; this is rotation, not failure. The request is sent again
    /// after a short jittered pause (so that it lands on the next connection, not on the one
    /// closing), bounded by the deadline and by
    /// [`max_refused_retries`](crate::retry::RetryLayerBuilder::max_refused_retries), without
    /// spending an attempt or a budget token; the circuit breaker counts it neither as a success
    /// nor as a failure, and pacing not as congestion.
    Refused,
    /// No connection carried the request: the connection was refused, the name did not resolve,
    /// the connect timed out, or the connection closed before the request was written (hyper
    /// hands such a request back, "canceled"). This is what an outage looks like, so it counts
    /// as an attempt, takes the backoff delay and a budget token, and is a failure for the
    /// circuit breaker, like a transient outcome.
    Unconnected,
    /// The server answered `425 Too Early` (RFC 8470): it would not risk processing a request
    /// that came in TLS early data, and did not. The request is sent again once, after a short
    /// jittered pause (by then the handshake is done), whatever its method, without spending an
    /// attempt or a budget token; a second `425` stops it
    /// ([`RefusedTooOften`](crate::StopReason::RefusedTooOften)). Like a refusal, the circuit
    /// breaker counts it neither way, and pacing not as congestion.
    TooEarly,
}

//! [`SignLayer`] and [`SignService`]: the middleware that signs each attempt.

use http::header::{HeaderName, HeaderValue};
use http::Request;
use std::fmt;
use std::future::Ready;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};
use tower::util::future::{EitherResponseFuture, MapErrFuture};
use tower::util::{Either, MapErr};
use tower::{BoxError, Layer};
use tower_service::Service;

use super::{sign, SignError, Signer, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};

/// The clock a [`SignLayer`] reads at each attempt.
type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// A tower layer that signs each request it passes on, with a fresh `webhook-timestamp`: put
/// it **under** the retry layer (see [the module](crate::signature)).
///
/// On every call, [`SignService`] reads the delivery id (`webhook-id`), reads the clock, and
/// sets `webhook-timestamp` and `webhook-signature`, replacing any value the request already
/// had (an attempt never carries an earlier attempt's signature).
#[derive(Clone)]
pub struct SignLayer {
    config: Config,
}

#[derive(Clone)]
struct Config {
    signer: Signer,
    id_header: HeaderName,
    clock: Clock,
}

impl SignLayer {
    /// Signs with `signer`; the id in `webhook-id`; the time from [`SystemTime::now`].
    pub fn new(signer: Signer) -> Self {
        Self {
            config: Config {
                signer,
                id_header: WEBHOOK_ID,
                clock: Arc::new(SystemTime::now),
            },
        }
    }

    /// The header the delivery id is read from (`webhook-id` by default): the one the record's
    /// [`RecordRules::id_header`](crate::RecordRules::id_header) names. Standard Webhooks
    /// receivers read `webhook-id`; change it only for receivers that read the id elsewhere.
    pub fn id_header(mut self, name: HeaderName) -> Self {
        self.config.id_header = name;
        self
    }

    /// Reads the time of each attempt from `clock` instead of [`SystemTime::now`] (for tests).
    pub fn with_clock(mut self, clock: impl Fn() -> SystemTime + Send + Sync + 'static) -> Self {
        self.config.clock = Arc::new(clock);
        self
    }
}

impl<S> Layer<S> for SignLayer {
    type Service = SignService<S>;

    fn layer(&self, inner: S) -> SignService<S> {
        SignService {
            inner,
            config: Arc::new(self.config.clone()),
        }
    }
}

impl fmt::Debug for SignLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SignLayer")
            .field("signer", &self.config.signer)
            .field("id_header", &self.config.id_header)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// Sets `request`'s timestamp and signature, or says why it cannot.
    fn stamp<B: AsRef<[u8]>>(&self, request: &mut Request<B>) -> Result<(), SignError> {
        let id = request
            .headers()
            .get(&self.id_header)
            .ok_or_else(|| SignError::MissingId {
                header: self.id_header.clone(),
            })?
            .to_str()
            .ok()
            .filter(|id| !id.is_empty())
            .ok_or_else(|| SignError::InvalidId {
                header: self.id_header.clone(),
            })?;
        let secrets = self.signer.secrets_for(request.uri())?;
        let timestamp = (self.clock)()
            .duration_since(UNIX_EPOCH)
            .map_err(|_| SignError::ClockBeforeEpoch)?
            .as_secs();
        let signature = sign(&secrets, id, timestamp, request.body().as_ref());
        let headers = request.headers_mut();
        headers.insert(WEBHOOK_TIMESTAMP, HeaderValue::from(timestamp));
        headers.insert(WEBHOOK_SIGNATURE, signature);
        Ok(())
    }
}

/// The service of [`SignLayer`]: signs each request, then calls the inner service with it.
///
/// It takes `http::Request<B>` for any body `B: AsRef<[u8]>` (the signature covers the body's
/// bytes, read without consuming it): [`Bytes`](bytes::Bytes), `Vec<u8>`, `String`. A request it cannot
/// sign fails with a [`SignError`] (boxed, as the inner service's errors are) and is not sent.
#[derive(Clone)]
pub struct SignService<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> SignService<S> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes the service, returning the inner one.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: fmt::Debug> fmt::Debug for SignService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SignService")
            .field("inner", &self.inner)
            .field("signer", &self.config.signer)
            .field("id_header", &self.config.id_header)
            .finish_non_exhaustive()
    }
}

/// The future of [`SignService`] over an inner future `F` with response `T` and error `E`: the
/// inner call with its error boxed, or a ready [`SignError`] when the request was not signed.
pub type SignFuture<F, T, E> =
    EitherResponseFuture<Ready<Result<T, BoxError>>, MapErrFuture<F, fn(E) -> BoxError>>;

impl<S, B> Service<Request<B>> for SignService<S>
where
    S: Service<Request<B>>,
    S::Error: Into<BoxError>,
    B: AsRef<[u8]>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = SignFuture<S::Future, S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        // tower's `Either` makes the one future type of both outcomes, without an allocation
        // or a pin projection of our own.
        let boxed: fn(S::Error) -> BoxError = Into::into;
        match self.config.stamp(&mut request) {
            Ok(()) => Either::<Refuse<S::Response>, _>::Right(MapErr::new(&mut self.inner, boxed))
                .call(request),
            Err(error) => Either::<_, MapErr<&mut S, _>>::Left(Refuse::new(error)).call(request),
        }
    }
}

/// A service that answers its one call with the error it holds: the [`SignError`] of a request
/// that was not signed, which it drops.
struct Refuse<T> {
    error: Option<SignError>,
    response: std::marker::PhantomData<fn() -> T>,
}

impl<T> Refuse<T> {
    fn new(error: SignError) -> Self {
        Self {
            error: Some(error),
            response: std::marker::PhantomData,
        }
    }
}

impl<T, R> Service<R> for Refuse<T> {
    type Response = T;
    type Error = BoxError;
    type Future = Ready<Result<T, BoxError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: R) -> Self::Future {
        let error = self.error.take().map_or_else(
            || BoxError::from("the request was refused already"),
            BoxError::from,
        );
        std::future::ready(Err(error))
    }
}

//! [Standard Webhooks](https://www.standardwebhooks.com/) signatures, made at send time: a
//! tower layer, [`SignLayer`], that stamps each attempt with a fresh `webhook-timestamp` and
//! its `webhook-signature`.
//!
//! The signed content is `{webhook-id}.{webhook-timestamp}.{body}`, its MAC HMAC-SHA256 keyed
//! with the secret's bytes; the header is `v1,<base64 of the MAC>`, one such signature for each
//! secret in use, space separated (key rotation). Receivers reject a timestamp more than five
//! minutes old, so a signature is never stored with a delivery: a slot a day later, or a
//! retry a second later, is signed anew with the time of that attempt.
//!
//! * [`Secret`]: one key, parsed from its `whsec_<base64>` form ([`SecretError`] when it is
//!   not one).
//! * [`Signer`]: the secrets to sign with, one, several (rotation), or chosen per endpoint.
//! * [`SignLayer`] / [`SignService`]: the middleware; [`SignError`] when a request cannot be
//!   signed.
//! * [`sign`]: the signature itself, a pure function.
//!
//! ```
//! use bytes::Bytes;
//! use tower::{Layer, Service, ServiceExt};
//! use tower_http_retry_redelivery::signature::{Secret, SignLayer, Signer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tower::BoxError> {
//! let secret: Secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".parse()?;
//! let transport = tower::service_fn(|request: http::Request<Bytes>| async move {
//!     // What the receiver gets: the id the outbox set, and the two headers stamped here.
//!     assert_eq!(request.headers()["webhook-id"], "msg_1");
//!     assert!(request.headers().contains_key("webhook-timestamp"));
//!     assert!(request.headers()["webhook-signature"].to_str()?.starts_with("v1,"));
//!     Ok::<_, tower::BoxError>(http::Response::new(()))
//! });
//! let mut client = SignLayer::new(Signer::new(secret)).layer(transport);
//!
//! let request = http::Request::post("https://hooks.example/in")
//!     .header("webhook-id", "msg_1")
//!     .body(Bytes::from(r#"{"type":"invoice.paid"}"#))?;
//! client.ready().await?.call(request).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Where it goes
//!
//! `RetryLayer -> SignLayer -> TimeoutLayer -> transport`: **under** the retry layer, so that
//! each attempt the retry layer makes goes through it and is signed with its own time. Above
//! the retry layer (or before [`RecordRules::record`](crate::RecordRules::record)) the first
//! attempt's headers would be resent as they are, and a receiver would refuse every retry made
//! more than five minutes later. The outbox's record sets `webhook-id`
//! ([`RecordRules::id_header`](crate::RecordRules::id_header)); this layer reads it.
//!
//! The layer signs bodies it can read without consuming them: any `B: AsRef<[u8]>`, such as
//! [`Bytes`], the body of a [`Delivery`](crate::Delivery)'s request. A transport that wants
//! another body (hyper's client and `http_body_util::Full<Bytes>`) gets it below the signature:
//!
//! ```no_run
//! # fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use tower::ServiceBuilder;
//! use tower_http_retry_redelivery::signature::{SignLayer, Signer};
//! use tower_http_retry_redelivery::Schedule;
//!
//! let schedule = Schedule::standard_webhooks();
//! let signer = Signer::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".parse()?);
//! let transport = tower::service_fn(|_: http::Request<Full<Bytes>>| async {
//!     Ok::<_, tower::BoxError>(http::Response::new(()))
//! });
//! let client = ServiceBuilder::new()
//!     .layer(schedule.retry_layer().build()?) // every attempt goes down from here...
//!     .layer(SignLayer::new(signer)) // ...and is signed here, with its own timestamp
//!     // (a per-attempt timeout goes here, under the signature)
//!     .map_request(|request: http::Request<Bytes>| request.map(Full::new))
//!     .service(transport);
//! # let _ = client;
//! # Ok(())
//! # }
//! ```
//!
//! # A request that cannot be signed
//!
//! A request without a `webhook-id`, or whose endpoint has no secret, is **not sent**: the call
//! fails with a [`SignError`], and the transport never sees the request (a webhook sent unsigned
//! would be refused by a receiver that checks, or, worse, accepted by one that does not). The
//! error carries tower-http-retry's [`Unretryable`] marker, so the retry layer's
//! [`HttpClassifier`](tower_http_retry::HttpClassifier) takes it for permanent and does not try
//! again: every other attempt would fail the same way.

use crate::record::endpoint_of;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use http::header::{HeaderName, HeaderValue};
use http::Uri;
use sha2::Sha256;
use std::borrow::Cow;
use std::error::Error;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use tower_http_retry::classify::Unretryable;

/// `webhook-id`: the delivery id, which the outbox sets and the signature covers.
pub const WEBHOOK_ID: HeaderName = HeaderName::from_static("webhook-id");
/// `webhook-timestamp`: the attempt's time, in Unix seconds, stamped by [`SignService`].
pub const WEBHOOK_TIMESTAMP: HeaderName = HeaderName::from_static("webhook-timestamp");
/// `webhook-signature`: `v1,<base64>` for each secret, space separated, stamped by
/// [`SignService`].
pub const WEBHOOK_SIGNATURE: HeaderName = HeaderName::from_static("webhook-signature");

/// The prefix of a secret's text form.
const PREFIX: &str = "whsec_";

/// A signing secret: the key of the HMAC, shared with the receiver.
///
/// Parsed from its text form, `whsec_` followed by the key's bytes in standard base64 (the
/// specification's serialization); the bare base64 without the prefix is accepted too, as the
/// reference libraries accept it. The specification's secrets are 24 to 64 random bytes; any
/// non-empty key is taken, as the receivers take it.
///
/// The key stays inside: no accessor returns it, [`Debug`](fmt::Debug) prints `Secret(..)`,
/// there is no `Display`, and it is not serializable, so that a secret cannot end up in a log
/// line or a stored record by accident:
///
/// ```
/// use tower_http_retry_redelivery::signature::Secret;
///
/// let secret: Secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".parse().unwrap();
/// assert_eq!(format!("{secret:?}"), "Secret(..)");
/// ```
///
/// ```compile_fail,E0277
/// use tower_http_retry_redelivery::signature::Secret;
///
/// fn stored<T: serde::Serialize>(_: &T) {}
/// let secret: Secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".parse().unwrap();
/// stored(&secret); // a secret is never serializable
/// ```
#[derive(Clone)]
pub struct Secret {
    /// The HMAC keyed with the secret's bytes, before any input: each signature starts from a
    /// copy of it (the key is hashed once, at parse time).
    keyed: Hmac<Sha256>,
}

impl Secret {
    /// The secret written `whsec_<base64>`, or as the bare base64.
    ///
    /// Fails with [`SecretError::Empty`] when there is no key, and with
    /// [`SecretError::NotBase64`] when the text is not standard, padded base64. The error never
    /// holds the text itself.
    pub fn new(secret: &str) -> Result<Self, SecretError> {
        let encoded = secret.strip_prefix(PREFIX).unwrap_or(secret);
        let key = STANDARD
            .decode(encoded)
            .map_err(|_| SecretError::NotBase64)?;
        Self::from_bytes(key)
    }

    /// The secret whose key is `key` itself (not its base64). Fails with
    /// [`SecretError::Empty`] for an empty key.
    pub fn from_bytes(key: impl AsRef<[u8]>) -> Result<Self, SecretError> {
        let key = key.as_ref();
        if key.is_empty() {
            return Err(SecretError::Empty);
        }
        // An HMAC takes a key of any length, so this never fails.
        let keyed = Hmac::<Sha256>::new_from_slice(key).map_err(|_| SecretError::Empty)?;
        Ok(Self { keyed })
    }
}

impl FromStr for Secret {
    type Err = SecretError;

    /// As [`Secret::new`].
    fn from_str(secret: &str) -> Result<Self, SecretError> {
        Self::new(secret)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Why a text is not a [`Secret`]. It never holds the text, which may be a secret with a typo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SecretError {
    /// No key: an empty text, `whsec_` alone, or no bytes.
    Empty,
    /// The text (after `whsec_`) is not standard base64 with its padding.
    NotBase64,
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("the webhook secret is empty"),
            Self::NotBase64 => {
                f.write_str("the webhook secret is not `whsec_` followed by standard base64")
            }
        }
    }
}

impl Error for SecretError {}

/// The `webhook-signature` value for `body`, sent under `id` at `timestamp` (Unix seconds):
/// `v1,<base64 of HMAC-SHA256(key, "{id}.{timestamp}.{body}")>` for each secret, in the order
/// given, space separated. Empty when `secrets` is (which [`SignService`] never sends).
///
/// ```
/// use tower_http_retry_redelivery::signature::{sign, Secret};
///
/// // The Standard Webhooks libraries' own test vector.
/// let secret: Secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".parse().unwrap();
/// let signature = sign(&[secret], "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, br#"{"test": 2432232314}"#);
/// assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
/// ```
pub fn sign(secrets: &[Secret], id: &str, timestamp: u64, body: &[u8]) -> HeaderValue {
    let timestamp = timestamp.to_string();
    // `v1,` and 44 characters of base64 for each, and the spaces between.
    let mut value = String::with_capacity(secrets.len() * 48);
    for secret in secrets {
        if !value.is_empty() {
            value.push(' ');
        }
        let mut mac = secret.keyed.clone();
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        value.push_str("v1,");
        STANDARD.encode_string(mac.finalize().into_bytes(), &mut value);
    }
    HeaderValue::from_maybe_shared(Bytes::from(value))
        .expect("`v1,`, base64 and spaces are all valid in a header value")
}

/// The lookup of a per-endpoint [`Signer`].
type Lookup = dyn Fn(&str) -> Option<Vec<Secret>> + Send + Sync;

/// The secrets [`SignService`] signs with: the same for every request, or chosen for each
/// request's endpoint.
///
/// ```
/// use tower_http_retry_redelivery::signature::{Secret, Signer};
///
/// let current: Secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".parse().unwrap();
/// let previous: Secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD".parse().unwrap();
///
/// // One secret for every endpoint.
/// let one = Signer::new(current.clone());
/// // Rotation: both signatures on every request, until receivers all hold the new secret.
/// let rotating = Signer::rotating([current.clone(), previous]);
/// // Each endpoint its own secret; an endpoint without one is not sent to (`SignError::NoSecret`).
/// let per_endpoint = Signer::per_endpoint(move |endpoint: &str| match endpoint {
///     "https://hooks.example" => Some(vec![current.clone()]),
///     _ => None,
/// });
/// ```
#[derive(Clone)]
pub struct Signer {
    secrets: Secrets,
}

#[derive(Clone)]
enum Secrets {
    /// The same for every request.
    Fixed(Arc<[Secret]>),
    /// Looked up by the request's endpoint.
    PerEndpoint(Arc<Lookup>),
}

impl Signer {
    /// Signs every request with `secret`.
    pub fn new(secret: Secret) -> Self {
        Self::rotating([secret])
    }

    /// Signs every request with each of `secrets`, in their order: the header holds one
    /// signature for each, space separated, and a receiver holding any one of them verifies.
    /// This is how a secret is rotated without downtime: sign with the new and the old one
    /// until every receiver has the new one, then drop the old one. With no secret at all,
    /// every request fails with [`SignError::NoSecret`].
    pub fn rotating(secrets: impl IntoIterator<Item = Secret>) -> Self {
        Self {
            secrets: Secrets::Fixed(secrets.into_iter().collect()),
        }
    }

    /// Signs each request with the secrets `lookup` returns for its endpoint, its URI's
    /// `scheme://authority` (`https://hooks.example`, `http://127.0.0.1:8080`: the key by which
    /// the outbox paces and disables endpoints, [`Delivery::endpoint`](crate::Delivery::endpoint)).
    ///
    /// An endpoint for which `lookup` returns `None` or no secret, and a request whose URI has
    /// no scheme or authority (`lookup` is not asked then), fail with [`SignError::NoSecret`]:
    /// nothing is sent unsigned. `lookup` runs at each attempt, so a secret changed in your
    /// store is used from the next attempt on; keep it cheap (a map read, not a query).
    pub fn per_endpoint<F>(lookup: F) -> Self
    where
        F: Fn(&str) -> Option<Vec<Secret>> + Send + Sync + 'static,
    {
        Self {
            secrets: Secrets::PerEndpoint(Arc::new(lookup)),
        }
    }

    /// The secrets for a request to `uri`.
    fn secrets_for(&self, uri: &Uri) -> Result<Cow<'_, [Secret]>, SignError> {
        let endpoint = endpoint_of(uri);
        let secrets = match &self.secrets {
            Secrets::Fixed(secrets) => Some(Cow::Borrowed(&secrets[..])),
            Secrets::PerEndpoint(lookup) => endpoint
                .as_deref()
                .and_then(|endpoint| lookup(endpoint))
                .map(Cow::Owned),
        };
        match secrets {
            Some(secrets) if !secrets.is_empty() => Ok(secrets),
            _ => Err(SignError::NoSecret {
                endpoint: endpoint.unwrap_or_default(),
            }),
        }
    }
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.secrets {
            Secrets::Fixed(secrets) => f.debug_struct("Signer").field("secrets", secrets).finish(),
            Secrets::PerEndpoint(_) => f
                .debug_struct("Signer")
                .field("secrets", &format_args!("per endpoint"))
                .finish(),
        }
    }
}

/// Why [`SignService`] did not send a request. The request is dropped, never sent unsigned.
///
/// Its [`source`](Error::source) is tower-http-retry's [`Unretryable`]: the retry layer's
/// classifier takes it for permanent, since every other attempt would fail the same way.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SignError {
    /// The request has no delivery id header (`webhook-id` unless
    /// [`SignLayer::id_header`] says otherwise): the signature covers the id, so there is
    /// nothing to sign. The outbox's record always sets it.
    MissingId {
        /// The header looked for.
        header: HeaderName,
    },
    /// The delivery id header is empty, or not visible ASCII text.
    InvalidId {
        /// The header read.
        header: HeaderName,
    },
    /// No secret for the request's endpoint (see [`Signer::per_endpoint`]), or a [`Signer`]
    /// made with no secret at all.
    NoSecret {
        /// The endpoint, `scheme://authority`; empty when the URI has neither.
        endpoint: String,
    },
    /// The clock read a time before the Unix epoch, which no timestamp can say.
    ClockBeforeEpoch,
}

impl fmt::Display for SignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingId { header } => {
                write!(f, "the webhook has no `{header}` header to sign")
            }
            Self::InvalidId { header } => {
                write!(f, "the webhook's `{header}` header is empty or not text")
            }
            Self::NoSecret { endpoint } => {
                write!(f, "no webhook secret for the endpoint `{endpoint}`")
            }
            Self::ClockBeforeEpoch => f.write_str("the clock is before the Unix epoch"),
        }
    }
}

/// The marker every [`SignError`] holds as its source.
static UNRETRYABLE: Unretryable = Unretryable::new();

impl Error for SignError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&UNRETRYABLE)
    }
}

mod layer;

pub use layer::{SignFuture, SignLayer, SignService};

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{BoxError, Layer};
    use tower_http_retry::{HttpClassifier, Outcome};

    /// The test vector of the Standard Webhooks libraries (`test_sign_function` in
    /// `libraries/python/tests/test_webhooks.py`, "sign function works" in
    /// `libraries/javascript/src/webhook.test.ts`, repository standard-webhooks/standard-webhooks).
    const VECTOR_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const VECTOR_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const VECTOR_TIMESTAMP: u64 = 1614265330;
    const VECTOR_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const VECTOR_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    /// The vector of the Rust library's own `test_sign` (`libraries/rust/src/lib.rs`).
    const RUST_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const RUST_ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
    const RUST_TIMESTAMP: u64 = 1649367553;
    const RUST_BODY: &[u8] = br#"{"email":"test@example.com","username":"test_user"}"#;
    const RUST_SIGNATURE: &str = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";

    fn secret(text: &str) -> Secret {
        text.parse().unwrap()
    }

    #[test]
    fn the_standard_webhooks_vector() {
        let signature = sign(
            &[secret(VECTOR_SECRET)],
            VECTOR_ID,
            VECTOR_TIMESTAMP,
            VECTOR_BODY,
        );
        assert_eq!(signature, VECTOR_SIGNATURE);
    }

    #[test]
    fn the_rust_librarys_vector() {
        let signature = sign(&[secret(RUST_SECRET)], RUST_ID, RUST_TIMESTAMP, RUST_BODY);
        assert_eq!(signature, RUST_SIGNATURE);
    }

    #[test]
    fn the_bare_base64_and_the_key_bytes_are_the_same_secret() {
        let bare = secret(VECTOR_SECRET.strip_prefix("whsec_").unwrap());
        let key = STANDARD
            .decode(VECTOR_SECRET.strip_prefix("whsec_").unwrap())
            .unwrap();
        let from_bytes = Secret::from_bytes(key).unwrap();
        for secret in [bare, from_bytes] {
            let signature = sign(&[secret], VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY);
            assert_eq!(signature, VECTOR_SIGNATURE);
        }
    }

    #[test]
    fn two_secrets_give_two_signatures_space_separated_in_order() {
        let (new, old) = (secret(VECTOR_SECRET), secret(RUST_SECRET));
        let both = sign(
            &[new.clone(), old.clone()],
            VECTOR_ID,
            VECTOR_TIMESTAMP,
            VECTOR_BODY,
        );
        let new_alone = sign(&[new], VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY);
        let old_alone = sign(&[old], VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY);
        assert_eq!(
            both.to_str().unwrap(),
            format!("{VECTOR_SIGNATURE} {}", old_alone.to_str().unwrap())
        );
        assert_eq!(new_alone, VECTOR_SIGNATURE);
        let parts: Vec<&str> = both.to_str().unwrap().split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert!(parts
            .iter()
            .all(|part| part.starts_with("v1,") && part.len() == 47));
    }

    #[test]
    fn no_secret_signs_nothing() {
        assert_eq!(sign(&[], VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY), "");
    }

    #[test]
    fn every_part_of_the_content_is_signed() {
        let secrets = [secret(VECTOR_SECRET)];
        let changed = [
            sign(&secrets, "msg_other", VECTOR_TIMESTAMP, VECTOR_BODY),
            sign(&secrets, VECTOR_ID, VECTOR_TIMESTAMP + 1, VECTOR_BODY),
            sign(
                &secrets,
                VECTOR_ID,
                VECTOR_TIMESTAMP,
                br#"{"test":2432232314}"#,
            ),
        ];
        for signature in changed {
            assert_ne!(signature, VECTOR_SIGNATURE);
        }
    }

    #[test]
    fn debug_hides_the_key() {
        let key_text = VECTOR_SECRET.strip_prefix("whsec_").unwrap();
        let secret = secret(VECTOR_SECRET);
        assert_eq!(format!("{secret:?}"), "Secret(..)");
        assert_eq!(format!("{secret:#?}"), "Secret(..)");
        let signer = Signer::rotating([secret.clone(), secret]);
        let layer = SignLayer::new(signer.clone());
        let service = layer.layer(());
        for printed in [
            format!("{signer:?}"),
            format!("{layer:?}"),
            format!("{service:?}"),
        ] {
            assert!(printed.contains("Secret(..)"), "{printed}");
            assert!(!printed.contains(key_text), "{printed}");
        }
        let per_endpoint = Signer::per_endpoint(|_: &str| None);
        assert_eq!(
            format!("{per_endpoint:?}"),
            "Signer { secrets: per endpoint }"
        );
    }

    #[test]
    fn bad_secrets_are_errors_that_do_not_repeat_them() {
        let cases = [
            ("", SecretError::Empty),
            ("whsec_", SecretError::Empty),
            ("whsec_not base64!", SecretError::NotBase64),
            // One character short: the padding is wrong.
            (
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS",
                SecretError::NotBase64,
            ),
            (
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n",
                SecretError::NotBase64,
            ),
            // URL-safe base64 is not the standard alphabet.
            (
                "whsec_C2FVsBQIhrscChlQIMV-b5sSYspob7oD",
                SecretError::NotBase64,
            ),
            (
                "v1,MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                SecretError::NotBase64,
            ),
        ];
        for (text, expected) in cases {
            let error = Secret::new(text).unwrap_err();
            assert_eq!(error, expected, "{text:?}");
            assert_eq!(text.parse::<Secret>().unwrap_err(), expected);
            let message = error.to_string();
            assert!(
                !message.contains("MfKQ") && !message.contains("C2FV"),
                "{message}"
            );
        }
        assert_eq!(
            Secret::from_bytes(Vec::<u8>::new()).unwrap_err(),
            SecretError::Empty
        );
    }

    #[test]
    fn sign_errors_are_permanent_for_the_retry_layer() {
        let errors = [
            SignError::MissingId { header: WEBHOOK_ID },
            SignError::InvalidId { header: WEBHOOK_ID },
            SignError::NoSecret {
                endpoint: "https://hooks.example".into(),
            },
            SignError::ClockBeforeEpoch,
        ];
        let classifier = HttpClassifier::new().unknown_errors(Outcome::Transient);
        for error in errors {
            assert_eq!(classifier.classify_error_chain(&error), Outcome::Permanent);
            let boxed = BoxError::from(error);
            assert_eq!(classifier.classify_error_chain(&*boxed), Outcome::Permanent);
        }
    }

    #[test]
    fn the_secrets_for_a_uri() {
        let fixed = Signer::new(secret(VECTOR_SECRET));
        assert_eq!(
            fixed
                .secrets_for(&Uri::from_static("/relative"))
                .unwrap()
                .len(),
            1
        );

        let none = Signer::rotating([]);
        assert_eq!(
            none.secrets_for(&Uri::from_static("https://hooks.example/in"))
                .unwrap_err(),
            SignError::NoSecret {
                endpoint: "https://hooks.example".into()
            }
        );

        let per_endpoint = Signer::per_endpoint(|endpoint: &str| match endpoint {
            "https://hooks.example:8443" => Some(vec![secret(VECTOR_SECRET), secret(RUST_SECRET)]),
            "https://empty.example" => Some(Vec::new()),
            _ => None,
        });
        let uri = Uri::from_static("https://hooks.example:8443/in?x=1");
        assert_eq!(per_endpoint.secrets_for(&uri).unwrap().len(), 2);
        for (uri, endpoint) in [
            ("https://hooks.example/in", "https://hooks.example"),
            ("https://empty.example/in", "https://empty.example"),
            ("/relative?token=1", ""),
        ] {
            assert_eq!(
                per_endpoint
                    .secrets_for(&Uri::from_static(uri))
                    .unwrap_err(),
                SignError::NoSecret {
                    endpoint: endpoint.into()
                }
            );
        }
    }
}

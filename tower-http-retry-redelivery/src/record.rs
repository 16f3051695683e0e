//! [`Delivery`]: the durable record of one request to deliver, and [`RecordRules`], which make
//! one from an `http::Request`.
//!
//! A record is what the queue stores, so it holds everything a worker in another process needs
//! to send the request again and to know where the delivery stands: the request itself (method,
//! URI, end-to-end headers, body), its delivery id, the schedule position, the attempts so far
//! and what each slot's sequence ended with. Its serde form is versioned
//! ([`RECORD_VERSION`]); its size is the body's base64 (4/3 of the body) plus the headers plus
//! about 250 bytes, and about 90 bytes more for each slot already tried (the history is bounded
//! by the schedule's length).

use crate::schedule::unix_ms;
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Method, Request, Uri};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::{Duration, SystemTime};
use tower_http_retry::StopReason;

/// The version of the record's serde form. A worker refuses a record of another version with
/// [`RecordError::Version`] rather than guess at it.
pub const RECORD_VERSION: u16 = 1;

/// Headers a record does not keep: hop-by-hop headers (RFC 9110, section 7.6.1), which belong
/// to one connection, and `host` and `content-length`, which the client sets from the URI and
/// the body.
const NOT_END_TO_END: [&str; 11] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

/// How requests become records: the largest body a record keeps, and the header that carries
/// the delivery id to the receiver.
///
/// ```
/// use bytes::Bytes;
/// use tower_http_retry_redelivery::record::{RecordError, RecordRules};
///
/// let rules = RecordRules::new().max_body(16);
/// let request = http::Request::post("http://127.0.0.1:9/hook").body(Bytes::from("{}")).unwrap();
/// let delivery = rules.record("msg_1", request).unwrap();
/// assert_eq!(delivery.id(), "msg_1");
/// assert_eq!(delivery.request().headers()["webhook-id"], "msg_1");
///
/// let large = http::Request::post("http://127.0.0.1:9/hook").body(Bytes::from(vec![0; 17])).unwrap();
/// assert!(matches!(rules.record("msg_2", large), Err(RecordError::BodyTooLarge { len: 17, limit: 16 })));
/// ```
#[derive(Clone, Debug)]
pub struct RecordRules {
    max_body: usize,
    id_header: HeaderName,
}

impl RecordRules {
    /// A body limit of 1 MiB; the id in `webhook-id` (the Standard Webhooks header).
    pub fn new() -> Self {
        Self {
            max_body: 1 << 20,
            id_header: HeaderName::from_static("webhook-id"),
        }
    }

    /// The largest body a record keeps; a longer one is refused
    /// ([`RecordError::BodyTooLarge`]), never truncated.
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// The header that carries the delivery id, by which the receiver deduplicates
    /// (`webhook-id` by default; `idempotency-key` is the IETF draft's).
    pub fn id_header(mut self, name: HeaderName) -> Self {
        self.id_header = name;
        self
    }

    /// The record of `request`, to be delivered under `id` (also the key the receiver
    /// deduplicates by: give a retried enqueue the same id).
    pub fn record(
        &self,
        id: impl Into<String>,
        request: Request<Bytes>,
    ) -> Result<Delivery, RecordError> {
        let id = id.into();
        if id.is_empty() || HeaderValue::from_str(&id).is_err() {
            return Err(RecordError::Id(id));
        }
        let (parts, body) = request.into_parts();
        if body.len() > self.max_body {
            return Err(RecordError::BodyTooLarge {
                len: body.len(),
                limit: self.max_body,
            });
        }
        let endpoint =
            endpoint_of(&parts.uri).ok_or_else(|| RecordError::Uri(parts.uri.to_string()))?;
        let mut headers = Vec::with_capacity(parts.headers.len());
        for (name, value) in &parts.headers {
            if NOT_END_TO_END.contains(&name.as_str()) || *name == self.id_header {
                continue;
            }
            let value = value
                .to_str()
                .map_err(|_| RecordError::HeaderNotText(name.as_str().to_owned()))?;
            headers.push((name.as_str().to_owned(), value.to_owned()));
        }
        let now = unix_ms(SystemTime::now());
        Ok(Delivery {
            version: RECORD_VERSION,
            id,
            id_header: self.id_header.as_str().to_owned(),
            endpoint,
            method: parts.method.as_str().to_owned(),
            uri: parts.uri.to_string(),
            headers,
            body,
            enqueued_at: now,
            due_at: now,
            slot: 0,
            attempts: 0,
            deferrals: 0,
            replays: 0,
            step: 0,
            history: Vec::new(),
            stored_form: None,
        })
    }
}

impl Default for RecordRules {
    fn default() -> Self {
        Self::new()
    }
}

/// The text a stored record holds for its endpoint, `"endpoint":"<endpoint>"`, as the engines
/// store a record (compact JSON): an engine finds an endpoint's records by it without reading
/// each as JSON. Nothing else in a record can hold it, since a quote inside a string value is
/// escaped.
pub(crate) fn endpoint_field(endpoint: &str) -> String {
    format!(
        "\"endpoint\":{}",
        serde_json::to_string(endpoint).unwrap_or_default()
    )
}

/// `scheme://host[:port]`, what pacing, endpoint health and per-endpoint secrets key by: the
/// authority without its userinfo, so that credentials in a URI never reach a key, a log line or
/// an error.
pub(crate) fn endpoint_of(uri: &Uri) -> Option<String> {
    let (scheme, host) = (uri.scheme_str()?, uri.host()?);
    Some(match uri.port_u16() {
        Some(port) => format!("{scheme}://{host}:{port}"),
        None => format!("{scheme}://{host}"),
    })
}

/// Why a request could not become a record, or a stored record could not be read back.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordError {
    /// The body is longer than [`RecordRules::max_body`].
    BodyTooLarge {
        /// The body's length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// A header's value is not visible ASCII, which the record's text form cannot keep.
    HeaderNotText(String),
    /// The URI has no scheme or authority: a delivery needs an absolute URI.
    Uri(String),
    /// The delivery id is empty or cannot be a header value.
    Id(String),
    /// The record was written by another version of its format.
    Version(u16),
    /// A stored method, URI or header no longer parses.
    Corrupt(String),
    /// The stored form is not this build's record (a renamed or missing field, a value of a
    /// newer build): the record holds it whole ([`Delivery::stored_form`]).
    Shape(String),
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::BodyTooLarge { len, limit } => {
                write!(
                    f,
                    "body of {len} bytes is longer than the record's limit of {limit}"
                )
            }
            RecordError::HeaderNotText(name) => write!(f, "header {name:?} is not text"),
            RecordError::Uri(uri) => write!(f, "{uri:?} is not an absolute URI"),
            RecordError::Id(id) => write!(f, "{id:?} cannot be a delivery id"),
            RecordError::Version(version) => write!(
                f,
                "record version {version}, this build reads version {RECORD_VERSION}"
            ),
            RecordError::Corrupt(what) => write!(f, "stored record does not parse: {what}"),
            RecordError::Shape(what) => write!(f, "stored record of another shape: {what}"),
        }
    }
}

impl std::error::Error for RecordError {}

/// The durable record of one delivery. Made by [`RecordRules::record`]; stored by an
/// [`Outbox`](crate::Outbox); taken by a worker, which sends [`request`](Self::request) through
/// the retry layer and stores the record again, dead-letters it or is done with it.
///
/// Reading a record never fails on well-formed JSON: a stored form of another shape (a renamed
/// field, a newer build's [`StopReason`]) reads back as an *unreadable* record that keeps the
/// stored JSON whole ([`stored_form`](Self::stored_form)), whose
/// [`try_request`](Self::try_request) says why, and which a worker dead-letters as
/// [`DeadReason::Unreadable`](crate::DeadReason::Unreadable) instead of stopping on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(remote = "Self")]
pub struct Delivery {
    version: u16,
    id: String,
    id_header: String,
    endpoint: String,
    method: String,
    uri: String,
    headers: Vec<(String, String)>,
    #[serde(with = "body_base64")]
    body: Bytes,
    /// Unix milliseconds.
    enqueued_at: u64,
    /// When the delivery is next due, Unix milliseconds.
    due_at: u64,
    slot: u32,
    attempts: u32,
    deferrals: u32,
    replays: u32,
    /// Times the record was stored again since it was stored or replayed.
    step: u32,
    history: Vec<SlotOutcome>,
    /// The stored JSON of a record that did not read back in this shape; `None` for every
    /// record this build wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stored_form: Option<String>,
}

impl Serialize for Delivery {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Delivery::serialize(self, serializer)
    }
}

impl<'de> Deserialize<'de> for Delivery {
    /// The record, or an unreadable one holding the stored JSON: a task's bytes are decoded
    /// before any handler runs, so a failure here would stop the worker (apalis ends its run on
    /// a task it cannot decode), and the next worker to take the task, in turn.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let stored = serde_json::Value::deserialize(deserializer)?;
        Ok(Delivery::deserialize(&stored)
            .unwrap_or_else(|_| Delivery::unreadable(&stored, stored.to_string())))
    }
}

/// What one schedule slot's sequence through the retry layer ended with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotOutcome {
    /// The slot (0: the first send).
    pub slot: u32,
    /// When the slot's first attempt went out, Unix milliseconds.
    pub at: u64,
    /// Attempts the retry layer made in the slot.
    pub attempts: u32,
    /// Why the retry layer stopped.
    pub stop: StopReason,
    /// The last response's status, if there was a response.
    pub status: Option<u16>,
}

impl SlotOutcome {
    /// When the slot's first attempt went out.
    pub fn sent_at(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(self.at)
    }
}

impl Delivery {
    /// The record of a stored `form` that does not read back in this shape: its id and
    /// endpoint when `fields` (the form, or the record inside it) still names them as text, so
    /// that its dead letter is keyed and listed by them; the whole form kept.
    pub(crate) fn unreadable(fields: &serde_json::Value, form: String) -> Self {
        let text = |field: &str| fields.get(field).and_then(serde_json::Value::as_str);
        let id = text("id").map_or_else(
            || {
                // A form without an id still needs a key of its own: its contents' hash, the
                // same in every build.
                let digest = <sha2::Sha256 as sha2::Digest>::digest(form.as_bytes());
                let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
                format!("unreadable-{hex}")
            },
            str::to_owned,
        );
        let at = |field: &str| fields.get(field).and_then(serde_json::Value::as_u64);
        let count = |field: &str| at(field).and_then(|n| u32::try_from(n).ok()).unwrap_or(0);
        Delivery {
            version: RECORD_VERSION,
            id,
            id_header: String::new(),
            endpoint: text("endpoint").unwrap_or_default().to_owned(),
            method: String::new(),
            uri: String::new(),
            headers: Vec::new(),
            body: Bytes::new(),
            enqueued_at: at("enqueued_at").unwrap_or(0),
            due_at: at("due_at").unwrap_or(0),
            slot: 0,
            attempts: 0,
            deferrals: 0,
            replays: count("replays"),
            step: count("step"),
            history: Vec::new(),
            stored_form: Some(form),
        }
    }

    /// The stored JSON of a record that did not read back in this build's shape (kept for
    /// inspection, and to be enqueued again by hand once fixed); `None` for a readable record.
    pub fn stored_form(&self) -> Option<&str> {
        self.stored_form.as_deref()
    }

    /// The delivery id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `scheme://authority` of the request: the endpoint whose health and pacing it shares.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The schedule slot the delivery is due in (0: the first send).
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// Attempts sent so far, over every slot.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Times the retry layer handed the delivery back unsent (its endpoint down or paused) and
    /// it was stored again at the pacer's time, without using a slot.
    pub fn deferrals(&self) -> u32 {
        self.deferrals
    }

    /// When the delivery was stored, or last replayed: its schedule's span counts from here.
    pub fn enqueued_at(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(self.enqueued_at)
    }

    /// When the delivery is next due.
    pub fn due_at(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(self.due_at)
    }

    /// What each slot tried so far ended with, oldest first.
    pub fn history(&self) -> &[SlotOutcome] {
        &self.history
    }

    /// When the first attempt went out, if one did.
    pub fn first_attempt_at(&self) -> Option<SystemTime> {
        self.history.first().map(SlotOutcome::sent_at)
    }

    /// When the first attempt since the delivery was stored (or last replayed) went out.
    pub(crate) fn first_attempt_since_stored(&self) -> Option<SystemTime> {
        let stored = self.enqueued_at();
        self.history
            .iter()
            .map(SlotOutcome::sent_at)
            .find(|at| *at >= stored)
    }

    /// Times the delivery was replayed from the dead-letter queue.
    pub fn replays(&self) -> u32 {
        self.replays
    }

    /// The key that names this step of the delivery in the queue: the id, the replays and the
    /// number of times it was stored again. Whatever a worker decides for a step (the next
    /// slot, or the same one later because the pacer held it back), the record it stores has the
    /// same key, so a step re-run after a crash (whose worker may decide otherwise) stores one
    /// next step, not a second chain, in an engine with unique keys.
    pub fn step_key(&self) -> String {
        format!("{}/{}/{}", self.id, self.replays, self.step)
    }

    /// The key of the delivery's dead letter: one per replay, and one of its own for an
    /// unreadable record (whose id and replays may be a guess), so that it never falls on the
    /// key of a letter already stored and is dropped as a duplicate.
    pub fn dead_key(&self) -> String {
        match self.stored_form {
            None => format!("{}/{}/dead", self.id, self.replays),
            Some(_) => format!("{}/{}/unreadable", self.id, self.replays),
        }
    }

    /// The request to send: the stored one, with the delivery id in its header.
    ///
    /// A record read back from a queue was checked when it was made; should a stored field no
    /// longer parse, [`try_request`](Self::try_request) says which.
    pub fn request(&self) -> Request<Bytes> {
        self.try_request()
            .expect("a record made by RecordRules holds a valid request")
    }

    /// The request to send, or why a stored record no longer makes one.
    pub fn try_request(&self) -> Result<Request<Bytes>, RecordError> {
        if let Some(form) = &self.stored_form {
            // Read again for the reason, which the record does not keep.
            let why = serde_json::from_str::<serde_json::Value>(form)
                .and_then(|stored| Delivery::deserialize(&stored).map(drop))
                .err()
                .map_or_else(String::new, |error| error.to_string());
            return Err(RecordError::Shape(format!("{}: {why}", self.id)));
        }
        if self.version != RECORD_VERSION {
            return Err(RecordError::Version(self.version));
        }
        let corrupt = |what: &str| RecordError::Corrupt(format!("{what} of {}", self.id));
        let method = Method::from_bytes(self.method.as_bytes()).map_err(|_| corrupt("method"))?;
        let uri: Uri = self.uri.parse().map_err(|_| corrupt("uri"))?;
        let mut request = Request::new(self.body.clone());
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        for (name, value) in &self.headers {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| corrupt("header"))?;
            let value = HeaderValue::from_str(value).map_err(|_| corrupt("header"))?;
            headers.append(name, value);
        }
        let id_header =
            HeaderName::from_bytes(self.id_header.as_bytes()).map_err(|_| corrupt("id header"))?;
        headers.insert(
            id_header,
            HeaderValue::from_str(&self.id).map_err(|_| corrupt("id"))?,
        );
        Ok(request)
    }

    /// The record after a slot's sequence ended with `outcome`: the next slot, due at `due`.
    pub(crate) fn next_slot(mut self, outcome: SlotOutcome, due: SystemTime) -> Self {
        self.attempts += outcome.attempts;
        self.history.push(outcome);
        self.slot += 1;
        self.step += 1;
        self.due_at = unix_ms(due);
        self
    }

    /// The record after the retry layer handed it back unsent: the same slot, due at `due`.
    pub(crate) fn deferred(mut self, due: SystemTime) -> Self {
        self.deferrals += 1;
        self.step += 1;
        self.due_at = unix_ms(due);
        self
    }

    /// The record of a replay: the same delivery, due at `due`, from its first slot with a
    /// whole schedule ahead of it (stored anew at `due`), its history kept.
    pub(crate) fn replayed(mut self, due: SystemTime) -> Self {
        self.replays += 1;
        self.enqueued_at = unix_ms(due);
        self.slot = 0;
        self.step = 0;
        self.due_at = unix_ms(due);
        self
    }

    /// The record with the outcome of the slot that ended it (a dead letter's last entry).
    pub(crate) fn with_last(mut self, outcome: SlotOutcome) -> Self {
        self.attempts += outcome.attempts;
        self.history.push(outcome);
        self
    }
}

/// The body as base64 text in the record's serde form.
mod body_base64 {
    use base64::Engine;
    use bytes::Bytes;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(body: &Bytes, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(body))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Bytes, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map(Bytes::from)
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(body: &'static str) -> Request<Bytes> {
        Request::post("https://hooks.example/in?x=1")
            .header("content-type", "application/json")
            .header("connection", "keep-alive")
            .header("x-sig", "v1,abc")
            .header("x-sig", "v1,def")
            .body(Bytes::from(body))
            .unwrap()
    }

    #[test]
    fn a_stored_record_holds_its_endpoint_field_and_no_other() {
        let record = |uri: &str, header: &str| {
            let request = Request::post(uri)
                .header("x-note", header)
                .body(Bytes::from_static(br#"{"endpoint":"http://b.example"}"#))
                .unwrap();
            let delivery = RecordRules::new().record("msg_1", request).unwrap();
            serde_json::to_string(&delivery).unwrap()
        };
        let stored = record("http://a.example/hook", r#""endpoint":"http://b.example""#);
        assert!(stored.contains(&super::endpoint_field("http://a.example")));
        assert!(!stored.contains(&super::endpoint_field("http://b.example")));
    }

    #[test]
    fn a_record_round_trips_through_json_and_gives_back_the_request() {
        let delivery = RecordRules::new()
            .record("msg_1", post("{\"a\":1}"))
            .unwrap();
        let json = serde_json::to_string(&delivery).unwrap();
        let back: Delivery = serde_json::from_str(&json).unwrap();
        assert_eq!(back, delivery);
        let request = back.request();
        assert_eq!(request.method(), Method::POST);
        assert_eq!(request.uri(), "https://hooks.example/in?x=1");
        assert_eq!(request.body(), "{\"a\":1}");
        assert_eq!(request.headers()["webhook-id"], "msg_1");
        let sigs: Vec<_> = request.headers().get_all("x-sig").iter().collect();
        assert_eq!(sigs, ["v1,abc", "v1,def"]);
        assert!(
            request.headers().get("connection").is_none(),
            "hop-by-hop dropped"
        );
        assert_eq!(back.endpoint(), "https://hooks.example");
    }

    #[test]
    fn bad_requests_are_refused_with_a_typed_error() {
        let rules = RecordRules::new().max_body(3);
        assert_eq!(
            rules.record("m", post("four")).unwrap_err(),
            RecordError::BodyTooLarge { len: 4, limit: 3 }
        );
        let relative = Request::post("/in").body(Bytes::new()).unwrap();
        assert!(matches!(
            RecordRules::new().record("m", relative),
            Err(RecordError::Uri(_))
        ));
        assert!(matches!(
            RecordRules::new().record("", post("")),
            Err(RecordError::Id(_))
        ));
        let mut binary = post("");
        binary
            .headers_mut()
            .insert("x-bin", HeaderValue::from_bytes(&[0xfe]).unwrap());
        assert_eq!(
            RecordRules::new().record("m", binary).unwrap_err(),
            RecordError::HeaderNotText("x-bin".into())
        );
    }

    #[test]
    fn a_record_of_another_shape_reads_back_unreadable_with_its_stored_form() {
        let delivery = RecordRules::new().record("m", post("{}")).unwrap();
        let mut json: serde_json::Value = serde_json::to_value(&delivery).unwrap();
        json["headers"] = serde_json::json!({"content-type": "application/json"});
        let back: Delivery = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back.id(), "m");
        assert_eq!(back.endpoint(), "https://hooks.example");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(back.stored_form().unwrap()).unwrap(),
            json
        );
        assert!(matches!(back.try_request(), Err(RecordError::Shape(_))));
        // Its own form round-trips, still unreadable: a dead letter keeps it.
        let again: Delivery = serde_json::from_str(&serde_json::to_string(&back).unwrap()).unwrap();
        assert_eq!(again, back);
        // A form without an id is keyed by its contents.
        let anonymous: Delivery = serde_json::from_str("{\"v\": 9}").unwrap();
        assert!(
            anonymous.id().starts_with("unreadable-"),
            "{}",
            anonymous.id()
        );
        assert!(serde_json::from_str::<Delivery>("not json").is_err());
        // A replayed record keeps its replays, and its letter a key of its own.
        let mut replayed = serde_json::to_value(&delivery).unwrap();
        replayed["replays"] = 1.into();
        replayed["headers"] = serde_json::json!({});
        let replayed: Delivery = serde_json::from_value(replayed).unwrap();
        assert_eq!(replayed.replays(), 1);
        assert_eq!(replayed.dead_key(), "m/1/unreadable");
        assert_ne!(
            replayed.dead_key(),
            delivery.clone().replayed(SystemTime::now()).dead_key()
        );

        let letter = crate::DeadLetter {
            delivery,
            reason: crate::DeadReason::Permanent,
            at: 7,
        };
        let mut json = serde_json::to_value(&letter).unwrap();
        json["reason"] = "expired".into();
        let back: crate::DeadLetter = serde_json::from_value(json).unwrap();
        assert_eq!(
            (back.delivery.id(), back.reason, back.at),
            ("m", crate::DeadReason::Unreadable, 7)
        );
        assert!(back.delivery.stored_form().unwrap().contains("expired"));
    }

    #[test]
    fn a_record_of_another_version_is_refused() {
        let delivery = RecordRules::new().record("m", post("")).unwrap();
        let mut json: serde_json::Value = serde_json::to_value(&delivery).unwrap();
        json["version"] = 2.into();
        let future: Delivery = serde_json::from_value(json).unwrap();
        assert_eq!(future.try_request().unwrap_err(), RecordError::Version(2));
    }

    #[test]
    fn the_size_is_the_documented_one() {
        let body = "x".repeat(3000);
        let mut delivery = RecordRules::new()
            .record("msg_2Lp7", post(Box::leak(body.into_boxed_str())))
            .unwrap();
        let bare = serde_json::to_vec(&delivery).unwrap().len();
        // 4000 bytes of base64, three headers of about 30 bytes, about 250 bytes of the rest.
        assert!((4000 + 250..4000 + 250 + 150).contains(&bare), "{bare}");
        let outcome = SlotOutcome {
            slot: 0,
            at: u64::MAX / 2,
            attempts: 1,
            stop: StopReason::AttemptsExhausted,
            status: Some(503),
        };
        delivery = delivery.next_slot(outcome, SystemTime::now());
        let per_slot = serde_json::to_vec(&delivery).unwrap().len() - bare;
        assert!(per_slot <= 90, "{per_slot}");
    }
}

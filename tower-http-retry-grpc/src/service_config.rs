//! The gRPC service config's `retryPolicy`, `hedgingPolicy` and `retryThrottling` (proposal
//! A6), read into this crate's configuration.

use super::classify::GrpcClassifier;
use super::code::GrpcCode;
use super::throttle::GrpcThrottle;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;
use tower_http_retry::hedge::{HedgeLayer, HedgeLayerBuilder};
use tower_http_retry::retry::{Backoff, Idempotency, Jitter, RetryLayerBuilder};
use tower_http_retry::InvalidConfig;

/// A6 treats a larger `maxAttempts` as 5.
const MAX_ATTEMPTS_CAP: u32 = 5;

/// The retry parts of a gRPC service config (the JSON form grpc-go and grpc-java read):
/// each `methodConfig`'s `name` and `retryPolicy`, and the channel's `retryThrottling`.
///
/// One [`RetryLayer`](tower_http_retry::RetryLayer) carries one policy;
/// [`retry_layer_builder`](Self::retry_layer_builder) sets up the layer for one method (or for all
/// methods that share a policy) by the service config's lookup rules: the entry naming the method,
/// else the one naming its service, else the default entry (an empty name). Everything else in the
/// config (`timeout`, `waitForReady`, load balancing) is ignored. A method with a
/// `hedgingPolicy` is hedged instead: [`hedge_layer_builder`](Self::hedge_layer_builder) sets up
/// the [`HedgeLayer`] for it, which goes below its retry layer (retries off, as A6 has it).
///
/// ```
/// use tower_http_retry_grpc::GrpcServiceConfig;
///
/// let config = GrpcServiceConfig::from_json(r#"{
///   "methodConfig": [{
///     "name": [{ "service": "grpc.health.v1.Health" }],
///     "retryPolicy": {
///       "maxAttempts": 4,
///       "initialBackoff": "0.1s",
///       "maxBackoff": "1s",
///       "backoffMultiplier": 2,
///       "retryableStatusCodes": ["UNAVAILABLE", "ABORTED"]
///     }
///   }],
///   "retryThrottling": { "maxTokens": 10, "tokenRatio": 0.1 }
/// }"#).unwrap();
/// let policy = config.retry_policy("/grpc.health.v1.Health/Check").unwrap();
/// assert_eq!(policy.max_attempts(), 4);
/// assert!(config.retry_policy("/other.Service/Call").is_none());
/// let layer = config.retry_layer_builder("/grpc.health.v1.Health/Check").build().unwrap();
/// assert_eq!(layer.max_attempts(), 4);
/// ```
///
/// `retryThrottling` is the channel's: every layer built from one config (and from its clones)
/// shares one [`GrpcThrottle`], so building a layer per method keeps A6's single token count.
#[derive(Clone, Debug)]
pub struct GrpcServiceConfig {
    methods: Vec<MethodConfig>,
    throttle: Option<Arc<GrpcThrottle>>,
}

#[derive(Clone, Debug, PartialEq)]
struct MethodConfig {
    /// `(service, method)`; an empty string stands for "any".
    names: Vec<(String, String)>,
    retry: Option<GrpcRetryPolicy>,
    hedging: Option<GrpcHedgingPolicy>,
}

/// A6's `hedgingPolicy`, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct GrpcHedgingPolicy {
    max_attempts: u32,
    delay: Duration,
    non_fatal: Vec<GrpcCode>,
}

impl GrpcHedgingPolicy {
    /// `maxAttempts`: copies of a call in all, the first included (above 5 read as 5).
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// `hedgingDelay`: the wait before each further copy (`0s` by default: all at once).
    pub fn hedging_delay(&self) -> Duration {
        self.delay
    }

    /// `nonFatalStatusCodes`: the statuses after which the other copies go on.
    pub fn non_fatal_codes(&self) -> &[GrpcCode] {
        &self.non_fatal
    }

    /// The classifier for it: a non-fatal status is transient (the other copies may still
    /// answer), any other failing status permanent (it ends every copy, as A6's fatal status
    /// commits the call).
    pub fn classifier(&self) -> GrpcClassifier {
        GrpcClassifier::new()
            .retryable_codes(self.non_fatal.iter().copied())
            .resource_exhausted_with_pushback(false)
    }
}

/// A6's `retryPolicy`, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct GrpcRetryPolicy {
    max_attempts: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
    multiplier: f64,
    codes: Vec<GrpcCode>,
}

impl GrpcRetryPolicy {
    /// `maxAttempts`, the first attempt included (above 5 read as 5, as A6 says).
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// `initialBackoff`.
    pub fn initial_backoff(&self) -> Duration {
        self.initial_backoff
    }

    /// `maxBackoff`.
    pub fn max_backoff(&self) -> Duration {
        self.max_backoff
    }

    /// `backoffMultiplier`.
    pub fn backoff_multiplier(&self) -> f64 {
        self.multiplier
    }

    /// `retryableStatusCodes`.
    pub fn retryable_codes(&self) -> &[GrpcCode] {
        &self.codes
    }

    /// The crate's backoff for it: A6's delay before retry `n` (1 for the first) is
    /// `random(0, min(initialBackoff * backoffMultiplier^(n-1), maxBackoff))`, which is
    /// [`Jitter::Full`] with base `initialBackoff`, cap `maxBackoff` and the same multiplier.
    /// (A `maxBackoff` below `initialBackoff` caps every delay; the base is lowered to it, which
    /// draws the same delays.)
    pub fn backoff(&self) -> Backoff {
        Backoff::new(
            Jitter::Full,
            self.initial_backoff.min(self.max_backoff),
            self.max_backoff,
        )
        .multiplier(self.multiplier)
    }

    /// The classifier for it: the retryable codes, and RESOURCE_EXHAUSTED with pushback not
    /// retried unless listed (A6's rule, not AIP-194's).
    pub fn classifier(&self) -> GrpcClassifier {
        GrpcClassifier::new()
            .retryable_codes(self.codes.iter().copied())
            .resource_exhausted_with_pushback(false)
    }
}

impl GrpcServiceConfig {
    /// Reads a service config in its JSON form. Fails, naming the field, on JSON that does not
    /// parse or a value A6 rejects (`maxAttempts` below 2, a backoff that is not a positive
    /// duration such as `"0.5s"`, a multiplier not above 0, an empty or unknown status code,
    /// `maxTokens` outside (0, 1000], `tokenRatio` not above 0), on a `backoffMultiplier` below
    /// 1 (delays that shrink, which [`Backoff`] does not draw), and on a method config with both a
    /// `retryPolicy` and a `hedgingPolicy`.
    pub fn from_json(json: &str) -> Result<Self, InvalidConfig> {
        let root: Value = serde_json::from_str(json).map_err(|error| {
            InvalidConfig::new("serviceConfig", format!("is not JSON: {error}"))
        })?;
        let root = object(&root, "serviceConfig")?;
        let methods = match root.get("methodConfig") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(entries)) => entries
                .iter()
                .map(method_config)
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(InvalidConfig::new("methodConfig", "must be an array")),
        };
        let throttle = match root.get("retryThrottling") {
            None | Some(Value::Null) => None,
            Some(value) => {
                let throttling = object(value, "retryThrottling")?;
                let max = number(throttling, "maxTokens", "retryThrottling.maxTokens")?;
                let ratio = number(throttling, "tokenRatio", "retryThrottling.tokenRatio")?;
                Some(Arc::new(GrpcThrottle::new(max, ratio)?))
            }
        };
        Ok(Self { methods, throttle })
    }

    /// The entry for the method at `path` (`/package.Service/Method`) by the lookup rules.
    fn entry(&self, path: &str) -> Option<&MethodConfig> {
        let (service, method) = path
            .strip_prefix('/')
            .and_then(|path| path.split_once('/'))
            .unwrap_or((path, ""));
        let matches = |want_service: &str, want_method: &str| {
            self.methods.iter().find(|entry| {
                entry
                    .names
                    .iter()
                    .any(|(s, m)| s == want_service && m == want_method)
            })
        };
        // The most specific entry wins, and its policy (or its lack of one) decides.
        matches(service, method)
            .or_else(|| matches(service, ""))
            .or_else(|| matches("", ""))
    }

    /// The retry policy for the method at `path` (`/package.Service/Method`), if any.
    pub fn retry_policy(&self, path: &str) -> Option<&GrpcRetryPolicy> {
        self.entry(path)?.retry.as_ref()
    }

    /// The hedging policy for the method at `path`, if any.
    pub fn hedging_policy(&self, path: &str) -> Option<&GrpcHedgingPolicy> {
        self.entry(path)?.hedging.as_ref()
    }

    /// The throttle for `retryThrottling`, if the config has one: the one every layer built
    /// from this config spends from.
    pub fn throttle(&self) -> Option<&Arc<GrpcThrottle>> {
        self.throttle.as_ref()
    }

    /// A builder from the preset [`layer`](crate::layer) set up for the
    /// method at `path`: its policy's attempts, backoff and retryable codes, and the throttle as
    /// the budget (no budget without one, as in A6). Without a policy for the method, retries are
    /// off (`max_attempts(1)`), as in gRPC; a refused stream or an unconnected attempt may still be
    /// sent again.
    pub fn retry_layer_builder(&self, path: &str) -> RetryLayerBuilder<GrpcClassifier> {
        let builder = crate::builder();
        let builder = match self.throttle() {
            Some(throttle) => builder.budget(Arc::clone(throttle)),
            None => builder.without_budget(),
        };
        match self.retry_policy(path) {
            Some(policy) => builder
                .max_attempts(policy.max_attempts)
                .backoff(policy.backoff())
                .classifier(policy.classifier()),
            None => builder.max_attempts(1),
        }
    }

    /// A builder of the [`HedgeLayer`] for the method at `path`, if its policy is a
    /// `hedgingPolicy`: `maxAttempts - 1` hedges, each after `hedgingDelay`, the non-fatal codes
    /// transient ([`GrpcHedgingPolicy::classifier`]), every call repeatable (the service config
    /// vouches for the method), and the throttle as the budget, so that `retryThrottling`
    /// applies to hedges. It goes below the method's retry layer
    /// ([`retry_layer_builder`](Self::retry_layer_builder): retries off, which still sends a
    /// call again that never left), with the buffered bodies above both:
    ///
    /// ```
    /// use tower_http_retry_grpc::GrpcServiceConfig;
    ///
    /// let config = GrpcServiceConfig::from_json(r#"{
    ///   "methodConfig": [{
    ///     "name": [{ "service": "grpc.health.v1.Health" }],
    ///     "hedgingPolicy": {
    ///       "maxAttempts": 3, "hedgingDelay": "0.05s", "nonFatalStatusCodes": ["UNAVAILABLE"]
    ///     }
    ///   }],
    ///   "retryThrottling": { "maxTokens": 10, "tokenRatio": 0.1 }
    /// }"#).unwrap();
    /// let path = "/grpc.health.v1.Health/Check";
    /// assert_eq!(config.hedging_policy(path).unwrap().max_attempts(), 3);
    /// let retry = config.retry_layer_builder(path).build().unwrap();
    /// assert_eq!(retry.max_attempts(), 1);
    /// let hedge = config.hedge_layer_builder(path).unwrap().build().unwrap();
    /// assert!(config.hedge_layer_builder("/other.Service/Call").is_none());
    /// ```
    pub fn hedge_layer_builder(&self, path: &str) -> Option<HedgeLayerBuilder<GrpcClassifier>> {
        let policy = self.hedging_policy(path)?;
        let builder = HedgeLayer::builder()
            .delay(policy.delay)
            .max_hedges(policy.max_attempts - 1)
            .idempotency(Idempotency::Any);
        let builder = match self.throttle() {
            Some(throttle) => builder.budget(Arc::clone(throttle) as _),
            None => builder,
        };
        Some(builder.classifier(policy.classifier()))
    }
}

fn object<'a>(
    value: &'a Value,
    field: &'static str,
) -> Result<&'a Map<String, Value>, InvalidConfig> {
    value
        .as_object()
        .ok_or_else(|| InvalidConfig::new(field, "must be an object"))
}

fn number(
    object: &Map<String, Value>,
    key: &str,
    field: &'static str,
) -> Result<f64, InvalidConfig> {
    match object.get(key) {
        Some(Value::Number(number)) => number
            .as_f64()
            .ok_or_else(|| InvalidConfig::new(field, "must be a number")),
        Some(_) => Err(InvalidConfig::new(field, "must be a number")),
        None => Err(InvalidConfig::new(field, "is required")),
    }
}

fn string<'a>(
    object: &'a Map<String, Value>,
    key: &str,
    field: &'static str,
) -> Result<&'a str, InvalidConfig> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(text)) => Ok(text),
        Some(_) => Err(InvalidConfig::new(field, "must be a string")),
    }
}

fn method_config(value: &Value) -> Result<MethodConfig, InvalidConfig> {
    let entry = object(value, "methodConfig")?;
    let names = match entry.get("name") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(names)) => names
            .iter()
            .map(|name| {
                let name = object(name, "methodConfig.name")?;
                let service = string(name, "service", "methodConfig.name.service")?;
                let method = string(name, "method", "methodConfig.name.method")?;
                if service.is_empty() && !method.is_empty() {
                    return Err(InvalidConfig::new(
                        "methodConfig.name.method",
                        "needs a service",
                    ));
                }
                Ok((service.to_owned(), method.to_owned()))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(InvalidConfig::new("methodConfig.name", "must be an array")),
    };
    let retry = match entry.get("retryPolicy") {
        None | Some(Value::Null) => None,
        Some(policy) => Some(retry_policy(object(policy, "retryPolicy")?)?),
    };
    let hedging = match entry.get("hedgingPolicy") {
        None | Some(Value::Null) => None,
        Some(policy) => Some(hedging_policy(object(policy, "hedgingPolicy")?)?),
    };
    if retry.is_some() && hedging.is_some() {
        return Err(InvalidConfig::new(
            "methodConfig.hedgingPolicy",
            "and retryPolicy are mutually exclusive (A6)",
        ));
    }
    Ok(MethodConfig {
        names,
        retry,
        hedging,
    })
}

fn retry_policy(policy: &Map<String, Value>) -> Result<GrpcRetryPolicy, InvalidConfig> {
    let max_attempts = max_attempts(policy, "retryPolicy.maxAttempts")?;
    let positive = |key: &str, field: &'static str| -> Result<Duration, InvalidConfig> {
        let value = duration(policy, key, field)?;
        if value.is_zero() {
            return Err(InvalidConfig::new(
                field,
                "must be a positive duration such as \"0.5s\", got zero",
            ));
        }
        Ok(value)
    };
    let initial_backoff = positive("initialBackoff", "retryPolicy.initialBackoff")?;
    let max_backoff = positive("maxBackoff", "retryPolicy.maxBackoff")?;
    let multiplier = number(policy, "backoffMultiplier", "retryPolicy.backoffMultiplier")?;
    if multiplier.is_nan() || multiplier <= 0.0 {
        return Err(InvalidConfig::new(
            "retryPolicy.backoffMultiplier",
            format!("must be above 0, got {multiplier}"),
        ));
    }
    if multiplier < 1.0 {
        return Err(InvalidConfig::new(
            "retryPolicy.backoffMultiplier",
            format!("below 1 ({multiplier}) is not supported: the backoff does not shrink"),
        ));
    }
    let codes = match policy.get("retryableStatusCodes") {
        Some(Value::Array(codes)) if !codes.is_empty() => {
            status_codes(codes, "retryPolicy.retryableStatusCodes")?
        }
        Some(Value::Array(_)) | None => {
            return Err(InvalidConfig::new(
                "retryPolicy.retryableStatusCodes",
                "must name at least one status code",
            ))
        }
        Some(_) => {
            return Err(InvalidConfig::new(
                "retryPolicy.retryableStatusCodes",
                "must be an array",
            ))
        }
    };
    Ok(GrpcRetryPolicy {
        max_attempts,
        initial_backoff,
        max_backoff,
        multiplier,
        codes,
    })
}

/// A6's `hedgingPolicy`: `maxAttempts` as for retries, `hedgingDelay` optional (`0s`), and
/// `nonFatalStatusCodes` optional (none: every failing status is fatal).
fn hedging_policy(policy: &Map<String, Value>) -> Result<GrpcHedgingPolicy, InvalidConfig> {
    let max_attempts = max_attempts(policy, "hedgingPolicy.maxAttempts")?;
    let delay = match policy.get("hedgingDelay") {
        None | Some(Value::Null) => Duration::ZERO,
        Some(_) => duration(policy, "hedgingDelay", "hedgingPolicy.hedgingDelay")?,
    };
    let non_fatal = match policy.get("nonFatalStatusCodes") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(codes)) => status_codes(codes, "hedgingPolicy.nonFatalStatusCodes")?,
        Some(_) => {
            return Err(InvalidConfig::new(
                "hedgingPolicy.nonFatalStatusCodes",
                "must be an array",
            ))
        }
    };
    Ok(GrpcHedgingPolicy {
        max_attempts,
        delay,
        non_fatal,
    })
}

/// `maxAttempts`: an integer of at least 2, above 5 read as 5 (A6).
fn max_attempts(policy: &Map<String, Value>, field: &'static str) -> Result<u32, InvalidConfig> {
    let attempts = number(policy, "maxAttempts", field)?;
    if attempts.fract() != 0.0 || attempts < 2.0 {
        return Err(InvalidConfig::new(
            field,
            format!("must be an integer of at least 2, got {attempts}"),
        ));
    }
    Ok(if attempts > f64::from(MAX_ATTEMPTS_CAP) {
        MAX_ATTEMPTS_CAP
    } else {
        attempts as u32
    })
}

/// The duration string at `key` (`"0.5s"`); an error when it is absent or malformed.
fn duration(
    policy: &Map<String, Value>,
    key: &str,
    field: &'static str,
) -> Result<Duration, InvalidConfig> {
    let text = match policy.get(key) {
        Some(Value::String(text)) => text,
        Some(_) => {
            return Err(InvalidConfig::new(
                field,
                "must be a duration string such as \"0.5s\"",
            ))
        }
        None => return Err(InvalidConfig::new(field, "is required")),
    };
    parse_duration(text).ok_or_else(|| {
        InvalidConfig::new(
            field,
            format!("must be a duration such as \"0.5s\", got {text:?}"),
        )
    })
}

/// Status codes by name in any case (`"UNAVAILABLE"`, `"unavailable"`: A6 asks for both) or by
/// number (`14`).
fn status_codes(codes: &[Value], field: &'static str) -> Result<Vec<GrpcCode>, InvalidConfig> {
    codes
        .iter()
        .map(|code| {
            let found = match code {
                Value::String(name) => GrpcCode::from_name(&name.to_ascii_uppercase()),
                Value::Number(number) => number
                    .as_i64()
                    .filter(|number| (0..=16).contains(number))
                    .map(|number| GrpcCode::from_i32(number as i32)),
                _ => None,
            };
            found.ok_or_else(|| {
                InvalidConfig::new(field, format!("has an unknown status code: {code}"))
            })
        })
        .collect()
}

/// A protobuf JSON `Duration`: seconds with up to nine decimals and an `s` (`"1.5s"`); `None` for
/// anything else, a negative one included. Past
/// [`InvalidConfig::MAX_DURATION`](tower_http_retry::InvalidConfig::MAX_DURATION) the backoff's own check
/// refuses it.
fn parse_duration(text: &str) -> Option<Duration> {
    let number = text.strip_suffix('s')?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |part: &str| part.bytes().all(|byte| byte.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) || fraction.len() > 9 {
        return None;
    }
    if number.ends_with('.') {
        return None;
    }
    let seconds: u64 = whole.parse().ok()?;
    let nanos: u32 = if fraction.is_empty() {
        0
    } else {
        format!("{fraction:0<9}").parse().ok()?
    };
    Some(Duration::new(seconds, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEALTH: &str = r#"{
      "methodConfig": [
        {
          "name": [{ "service": "grpc.health.v1.Health", "method": "Check" }],
          "retryPolicy": {
            "maxAttempts": 3, "initialBackoff": "0.25s", "maxBackoff": "2s",
            "backoffMultiplier": 1.5, "retryableStatusCodes": ["UNAVAILABLE", 10]
          }
        },
        { "name": [{ "service": "grpc.health.v1.Health" }] },
        {
          "name": [{}],
          "retryPolicy": {
            "maxAttempts": 9, "initialBackoff": "1s", "maxBackoff": "0.5s",
            "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]
          },
          "timeout": "10s", "waitForReady": true
        }
      ],
      "retryThrottling": { "maxTokens": 10, "tokenRatio": 0.1 },
      "loadBalancingConfig": [{ "round_robin": {} }]
    }"#;

    #[test]
    fn a_valid_config_is_read_whole() {
        let config = GrpcServiceConfig::from_json(HEALTH).unwrap();
        let check = config.retry_policy("/grpc.health.v1.Health/Check").unwrap();
        assert_eq!(check.max_attempts(), 3);
        assert_eq!(check.initial_backoff(), Duration::from_millis(250));
        assert_eq!(check.max_backoff(), Duration::from_secs(2));
        assert_eq!(check.backoff_multiplier(), 1.5);
        assert_eq!(
            check.retryable_codes(),
            [GrpcCode::Unavailable, GrpcCode::Aborted]
        );
        let backoff = check.backoff();
        assert_eq!(backoff.jitter(), Jitter::Full);
        assert_eq!(backoff.ceiling(0), Duration::from_millis(250));
        assert_eq!(backoff.ceiling(2), Duration::from_micros(562_500));
        let throttle = config.throttle().unwrap();
        assert_eq!((throttle.max_tokens(), throttle.token_ratio()), (10.0, 0.1));
    }

    #[test]
    fn layers_built_from_one_config_share_its_throttle() {
        let config = GrpcServiceConfig::from_json(HEALTH).unwrap();
        let check = config
            .retry_layer_builder("/grpc.health.v1.Health/Check")
            .build()
            .unwrap();
        let other = config
            .clone()
            .retry_layer_builder("/other.Service/Call")
            .build()
            .unwrap();
        let full = config.throttle().unwrap().available();
        assert!(check.budget().unwrap().withdraw());
        // The failure one layer paid for is gone for the other too.
        assert_eq!(config.throttle().unwrap().available(), full - 1.0);
        other.budget().unwrap().deposit();
        assert_eq!(config.throttle().unwrap().available(), full - 0.9);
    }

    #[test]
    fn the_most_specific_name_decides() {
        let config = GrpcServiceConfig::from_json(HEALTH).unwrap();
        // The service's entry has no policy: Watch is not retried, though a default exists.
        assert_eq!(config.retry_policy("/grpc.health.v1.Health/Watch"), None);
        let default = config.retry_policy("/other.Service/Call").unwrap();
        // Above 5 is read as 5; a cap below the base caps every delay.
        assert_eq!(default.max_attempts(), 5);
        assert_eq!(default.backoff().ceiling(0), Duration::from_millis(500));
        assert_eq!(default.backoff().ceiling(5), Duration::from_millis(500));
    }

    #[test]
    fn the_layer_follows_the_policy_or_does_not_retry() {
        let config = GrpcServiceConfig::from_json(HEALTH).unwrap();
        let check = config
            .retry_layer_builder("/grpc.health.v1.Health/Check")
            .build()
            .unwrap();
        assert_eq!(check.max_attempts(), 3);
        assert_eq!(
            check.backoff(),
            &config
                .retry_policy("/grpc.health.v1.Health/Check")
                .unwrap()
                .backoff()
        );
        assert!(check.budget().is_some());
        let watch = config
            .retry_layer_builder("/grpc.health.v1.Health/Watch")
            .build()
            .unwrap();
        assert_eq!(watch.max_attempts(), 1);
        let unthrottled = GrpcServiceConfig::from_json(r#"{"methodConfig": []}"#).unwrap();
        assert!(unthrottled
            .retry_layer_builder("/a.B/C")
            .build()
            .unwrap()
            .budget()
            .is_none());
    }

    #[test]
    fn durations_are_read_as_protobuf_json_writes_them() {
        assert_eq!(parse_duration("1s"), Some(Duration::from_secs(1)));
        assert_eq!(
            parse_duration("0.000000001s"),
            Some(Duration::from_nanos(1))
        );
        assert_eq!(parse_duration("2.5s"), Some(Duration::from_millis(2500)));
        for bad in [
            "",
            "s",
            "1",
            "1ms",
            "-1s",
            "1.s",
            ".5s",
            "1.0000000001s",
            "1e3s",
            " 1s",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }

    fn field_of(json: &str) -> &'static str {
        GrpcServiceConfig::from_json(json).unwrap_err().field()
    }

    fn with_policy(policy: &str) -> String {
        format!(r#"{{"methodConfig": [{{"name": [{{}}], "retryPolicy": {policy}}}]}}"#)
    }

    const GOOD: &str = r#""initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]"#;

    #[test]
    fn invalid_configs_name_the_field() {
        assert_eq!(field_of("{"), "serviceConfig");
        assert_eq!(field_of("[]"), "serviceConfig");
        assert_eq!(field_of(r#"{"methodConfig": {}}"#), "methodConfig");
        let cases = [
            (format!(r#"{{"maxAttempts": 1, {GOOD}}}"#), "retryPolicy.maxAttempts"),
            (format!(r#"{{"maxAttempts": 2.5, {GOOD}}}"#), "retryPolicy.maxAttempts"),
            (format!(r#"{{"maxAttempts": "3", {GOOD}}}"#), "retryPolicy.maxAttempts"),
            (
                r#"{"maxAttempts": 3, "initialBackoff": "0s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}"#.to_owned(),
                "retryPolicy.initialBackoff",
            ),
            (
                r#"{"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": 1, "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}"#.to_owned(),
                "retryPolicy.maxBackoff",
            ),
            (
                r#"{"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 0, "retryableStatusCodes": ["UNAVAILABLE"]}"#.to_owned(),
                "retryPolicy.backoffMultiplier",
            ),
            (
                r#"{"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 0.5, "retryableStatusCodes": ["UNAVAILABLE"]}"#.to_owned(),
                "retryPolicy.backoffMultiplier",
            ),
            (
                r#"{"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": []}"#.to_owned(),
                "retryPolicy.retryableStatusCodes",
            ),
            (
                r#"{"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE", "SOMETIMES"]}"#.to_owned(),
                "retryPolicy.retryableStatusCodes",
            ),
            (
                r#"{"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": [17]}"#.to_owned(),
                "retryPolicy.retryableStatusCodes",
            ),
        ];
        for (policy, field) in cases {
            assert_eq!(field_of(&with_policy(&policy)), field, "{policy}");
        }
        assert_eq!(
            field_of(r#"{"retryThrottling": {"maxTokens": 0, "tokenRatio": 0.1}}"#),
            "retryThrottling.maxTokens"
        );
        assert_eq!(
            field_of(r#"{"retryThrottling": {"maxTokens": 10}}"#),
            "retryThrottling.tokenRatio"
        );
        assert_eq!(
            field_of(r#"{"methodConfig": [{"name": [{}], "hedgingPolicy": {"maxAttempts": 1}}]}"#),
            "hedgingPolicy.maxAttempts"
        );
        assert_eq!(
            field_of(
                r#"{"methodConfig": [{"name": [{}], "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "soon"}}]}"#
            ),
            "hedgingPolicy.hedgingDelay"
        );
        assert_eq!(
            field_of(
                r#"{"methodConfig": [{"name": [{}], "hedgingPolicy": {"maxAttempts": 2, "nonFatalStatusCodes": ["LATER"]}}]}"#
            ),
            "hedgingPolicy.nonFatalStatusCodes"
        );
        let both = r#"{"methodConfig": [{"name": [{}],
            "hedgingPolicy": {"maxAttempts": 2},
            "retryPolicy": {"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s",
                            "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}"#;
        assert_eq!(field_of(both), "methodConfig.hedgingPolicy");
        assert_eq!(
            field_of(r#"{"methodConfig": [{"name": [{"method": "Check"}]}]}"#),
            "methodConfig.name.method"
        );
    }

    #[test]
    fn a_hedging_policy_is_read_with_its_defaults() {
        let config = GrpcServiceConfig::from_json(
            r#"{"methodConfig": [
                {"name": [{"service": "a.A"}], "hedgingPolicy": {"maxAttempts": 9}},
                {"name": [{"service": "b.B"}], "hedgingPolicy": {
                    "maxAttempts": 3, "hedgingDelay": "0.25s",
                    "nonFatalStatusCodes": ["UNAVAILABLE", 4]}}
            ]}"#,
        )
        .unwrap();
        let a = config.hedging_policy("/a.A/Get").unwrap();
        assert_eq!(a.max_attempts(), 5, "above 5 read as 5");
        assert_eq!(a.hedging_delay(), Duration::ZERO);
        assert!(a.non_fatal_codes().is_empty());
        let b = config.hedging_policy("/b.B/Get").unwrap();
        assert_eq!(b.max_attempts(), 3);
        assert_eq!(b.hedging_delay(), Duration::from_millis(250));
        assert_eq!(
            b.non_fatal_codes(),
            [GrpcCode::Unavailable, GrpcCode::DeadlineExceeded]
        );
        assert!(config.retry_policy("/b.B/Get").is_none());
        assert_eq!(
            config
                .retry_layer_builder("/b.B/Get")
                .build()
                .unwrap()
                .max_attempts(),
            1
        );
        assert!(config
            .hedge_layer_builder("/b.B/Get")
            .unwrap()
            .build()
            .is_ok());
        assert!(config.hedge_layer_builder("/c.C/Get").is_none());
    }
}

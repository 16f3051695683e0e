//! gRPC proposal A6's service-config rules (`retryPolicy`, `hedgingPolicy`, `retryThrottling`)
//! run against [`GrpcServiceConfig::from_json`]: the proposal's examples and one case per side of
//! each validation rule, written as JSON in `tests/conformance/a6-service-configs.json` (its
//! README names the proposal's commit and licence).
//!
//! A valid case must parse and read back as its `expect` says; an invalid one must be refused
//! with an error naming its `field`. Every case must agree except those in [`DELIBERATE`], each
//! of which must still disagree, so that the list stays exact.

use serde_json::Value;
use std::time::Duration;
use tower_http_retry_grpc::{GrpcCode, GrpcServiceConfig};

const CASES: &str = include_str!("conformance/a6-service-configs.json");

/// The cases this crate deliberately decides otherwise, as `(name, reason)`.
const DELIBERATE: &[(&str, &str)] = &[(
    "backoffMultiplier between 0 and 1",
    "refused: delays that shrink are not a backoff the core draws (its ceilings never fall), \
     and refusing the config says so where reading it otherwise would not",
)];

/// Why the crate's outcome for `case` is not A6's, or `None` when they agree.
fn disagreement(case: &Value) -> Option<String> {
    let config = case["config"].to_string();
    let parsed = GrpcServiceConfig::from_json(&config);
    if case["valid"] == Value::Bool(false) {
        let want = case["field"]
            .as_str()
            .expect("an invalid case names its field");
        return match parsed {
            Ok(_) => Some(format!("accepted, must be refused at {want}")),
            Err(error) if error.field() != want => Some(format!(
                "refused at {}, not at {want}: {error}",
                error.field()
            )),
            // A clear error: it names the field and says what is wrong with it.
            Err(error) => (error.message().is_empty() || !error.to_string().contains(want))
                .then(|| format!("an unclear error: {error:?}")),
        };
    }
    let config = match parsed {
        Ok(config) => config,
        Err(error) => return Some(format!("refused: {error}")),
    };
    let path = case["path"].as_str().unwrap_or("/example.Service/Method");
    let expect = &case["expect"];
    let mut differences = Vec::new();
    if let Some(want) = expect.get("retryPolicy") {
        differences.extend(retry_policy(&config, path, want));
    }
    if let Some(want) = expect.get("hedgingPolicy") {
        differences.extend(hedging_policy(&config, path, want));
    }
    if let Some(want) = expect.get("retryThrottling") {
        differences.extend(throttling(&config, want));
    }
    (!differences.is_empty()).then(|| differences.join("; "))
}

fn nanos(value: &Value) -> Duration {
    Duration::from_nanos(value.as_u64().expect("a count of nanoseconds"))
}

fn codes(value: &Value) -> Vec<GrpcCode> {
    value
        .as_array()
        .expect("an array of codes")
        .iter()
        .map(|name| GrpcCode::from_name(name.as_str().expect("a code name")).expect("a code"))
        .collect()
}

/// Each difference between what was read and what is wanted, as `field: got, want`.
fn compare<T: PartialEq + std::fmt::Debug>(field: &str, got: T, want: T) -> Option<String> {
    (got != want).then(|| format!("{field}: got {got:?}, want {want:?}"))
}

fn retry_policy(config: &GrpcServiceConfig, path: &str, want: &Value) -> Vec<String> {
    let got = config.retry_policy(path);
    let (Some(got), false) = (got, want.is_null()) else {
        return compare("retryPolicy present", got.is_some(), !want.is_null())
            .into_iter()
            .collect();
    };
    [
        compare(
            "maxAttempts",
            u64::from(got.max_attempts()),
            want["maxAttempts"].as_u64().expect("maxAttempts"),
        ),
        compare(
            "initialBackoff",
            got.initial_backoff(),
            nanos(&want["initialBackoffNanos"]),
        ),
        compare(
            "maxBackoff",
            got.max_backoff(),
            nanos(&want["maxBackoffNanos"]),
        ),
        compare(
            "backoffMultiplier",
            got.backoff_multiplier(),
            want["backoffMultiplier"]
                .as_f64()
                .expect("backoffMultiplier"),
        ),
        compare(
            "retryableStatusCodes",
            got.retryable_codes().to_vec(),
            codes(&want["retryableStatusCodes"]),
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn hedging_policy(config: &GrpcServiceConfig, path: &str, want: &Value) -> Vec<String> {
    let got = config.hedging_policy(path);
    let (Some(got), false) = (got, want.is_null()) else {
        return compare("hedgingPolicy present", got.is_some(), !want.is_null())
            .into_iter()
            .collect();
    };
    [
        compare(
            "maxAttempts",
            u64::from(got.max_attempts()),
            want["maxAttempts"].as_u64().expect("maxAttempts"),
        ),
        compare(
            "hedgingDelay",
            got.hedging_delay(),
            nanos(&want["hedgingDelayNanos"]),
        ),
        compare(
            "nonFatalStatusCodes",
            got.non_fatal_codes().to_vec(),
            codes(&want["nonFatalStatusCodes"]),
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn throttling(config: &GrpcServiceConfig, want: &Value) -> Vec<String> {
    let Some(got) = config.throttle() else {
        return vec!["retryThrottling: missing".to_owned()];
    };
    [
        compare(
            "maxTokens",
            got.max_tokens(),
            want["maxTokens"].as_f64().expect("maxTokens"),
        ),
        compare(
            "tokenRatio",
            got.token_ratio(),
            want["tokenRatio"].as_f64().expect("tokenRatio"),
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[test]
fn a6_service_configs_agree_but_for_the_listed_differences() {
    let cases: Vec<Value> = serde_json::from_str(CASES).expect("the fixture is JSON");
    let (mut agreed, mut listed) = (0, 0);
    let mut unexpected = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().expect("a name");
        let deliberate = DELIBERATE.iter().any(|(listed, _)| *listed == name);
        match (disagreement(case), deliberate) {
            (None, false) => agreed += 1,
            (Some(_), true) => listed += 1,
            (Some(why), false) => unexpected.push(format!("{name}: {why}")),
            (None, true) => unexpected.push(format!("{name}: listed, but now agrees")),
        }
    }
    for (name, _) in DELIBERATE {
        assert!(
            cases.iter().any(|case| case["name"] == *name),
            "listed, not in the fixture: {name}"
        );
    }
    println!(
        "A6 service configs: {} cases, {agreed} agree, {listed} listed differences",
        cases.len()
    );
    assert!(unexpected.is_empty(), "{}", unexpected.join("\n"));
    assert_eq!(agreed + listed, cases.len());
}

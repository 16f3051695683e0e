//! Configuration of every builder (retry layer, budget, backoff, breaker): every value that cannot work is a typed error at build time naming its field;
//! extreme values that can work saturate, and no configuration that builds panics at request time.

use proptest::prelude::*;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_http_retry::hint::{HintPolicy, WhenLonger};
use tower_http_retry::report::DelaySource;
use tower_http_retry::retry::TokenBucketBuilder;
use tower_http_retry::retry::{RandomSource, RetryLayerBuilder, TokenBucket};
use tower_http_retry::{Backoff, InvalidConfig, Jitter, RetryLayer, RetryReport, StopReason};

const MS: Duration = Duration::from_millis(1);

fn backoff(base: Duration, cap: Duration) -> Backoff {
    Backoff::new(Jitter::Full, base, cap)
}

fn layer_error(builder: RetryLayerBuilder) -> InvalidConfig {
    builder.build().expect_err("an invalid value")
}

fn bucket_error(builder: TokenBucketBuilder) -> InvalidConfig {
    builder.build().expect_err("an invalid value")
}

const BAD_FLOATS: [f64; 4] = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0];

#[test]
fn invalid_backoff_values_name_their_field() {
    let ok = backoff(MS, 10 * MS);
    let cases = [
        (backoff(Duration::ZERO, MS), "backoff.base"),
        (backoff(Duration::ZERO, Duration::ZERO), "backoff.base"),
        (backoff(10 * MS, MS), "backoff.cap"),
        (backoff(MS, Duration::MAX), "backoff.cap"),
        (backoff(Duration::MAX, Duration::MAX), "backoff.cap"),
        (
            backoff(MS, InvalidConfig::MAX_DURATION + Duration::from_nanos(1)),
            "backoff.cap",
        ),
        (ok.multiplier(0.5), "backoff.multiplier"),
        (ok.multiplier(0.0), "backoff.multiplier"),
        (ok.multiplier(1.0 - f64::EPSILON), "backoff.multiplier"),
    ];
    let floats = BAD_FLOATS.map(|m| (ok.multiplier(m), "backoff.multiplier"));
    for (policy, field) in cases.into_iter().chain(floats) {
        let error = layer_error(RetryLayer::builder().backoff(policy));
        assert_eq!(error.field(), field, "{policy:?}");
    }
}

#[test]
fn invalid_layer_values_name_their_field() {
    let cases = [
        (RetryLayer::builder().max_attempts(0), "max_attempts"),
        (RetryLayer::builder().deadline(Duration::ZERO), "deadline"),
        (
            RetryLayer::builder().first_attempt_jitter(Duration::MAX),
            "first_attempt_jitter",
        ),
        (
            RetryLayer::builder().first_attempt_jitter(InvalidConfig::MAX_DURATION + MS),
            "first_attempt_jitter",
        ),
    ];
    for (builder, field) in cases {
        assert_eq!(layer_error(builder).field(), field);
    }
}

#[test]
fn invalid_retry_after_values_name_their_field() {
    let clamps = [
        Duration::ZERO,
        InvalidConfig::MAX_DURATION + MS,
        Duration::MAX,
    ]
    .map(|clamp| {
        (
            HintPolicy::honored().max_delay(clamp),
            "hint_policy.max_delay",
        )
    });
    let jitters = [
        f64::NAN,
        f64::INFINITY,
        -0.1,
        1.0 + f64::EPSILON,
        -f64::MIN_POSITIVE,
    ]
    .map(|jitter| (HintPolicy::honored().jitter(jitter), "hint_policy.jitter"));
    for (policy, field) in clamps.into_iter().chain(jitters) {
        let error = layer_error(RetryLayer::builder().hint_policy(policy));
        assert_eq!(error.field(), field, "{policy:?}");
    }
}

#[test]
fn invalid_budget_values_name_their_field() {
    let b = TokenBucket::builder;
    let mut cases = vec![
        (b().capacity(0.0), "budget.capacity"),
        (b().capacity(1e-9), "budget.capacity"), // rounds to no micro-token at all
        (b().capacity(1e10), "budget.capacity"),
        (b().retry_cost(0.0), "budget.retry_cost"),
        (b().retry_cost(1e-9), "budget.retry_cost"),
        (b().capacity(1.0).retry_cost(2.0), "budget.retry_cost"),
    ];
    for bad in BAD_FLOATS {
        cases.push((b().capacity(bad), "budget.capacity"));
        cases.push((b().retry_cost(bad), "budget.retry_cost"));
        cases.push((b().deposit_per_success(bad), "budget.deposit_per_success"));
        cases.push((b().refill_per_second(bad), "budget.refill_per_second"));
    }
    for (builder, field) in cases {
        assert_eq!(bucket_error(builder).field(), field, "{builder:?}");
    }
}

#[test]
fn error_messages_name_the_field() {
    let error = layer_error(RetryLayer::builder().backoff(backoff(MS, MS).multiplier(f64::NAN)));
    let text = error.to_string();
    assert!(
        text.contains("backoff.multiplier") && text.contains("NaN"),
        "{text}"
    );
}

#[test]
fn zero_and_boundary_values_that_can_work_are_accepted() {
    let valid = [
        RetryLayer::builder().first_attempt_jitter(Duration::ZERO), // off
        RetryLayer::builder().first_attempt_jitter(InvalidConfig::MAX_DURATION),
        RetryLayer::builder().deadline(Duration::MAX), // saturating arithmetic, never reached
        RetryLayer::builder().max_attempts(1),         // retries off
        RetryLayer::builder().max_attempts(u32::MAX),
        RetryLayer::builder().backoff(backoff(Duration::from_nanos(1), Duration::from_nanos(1))),
        RetryLayer::builder().backoff(
            backoff(InvalidConfig::MAX_DURATION, InvalidConfig::MAX_DURATION).multiplier(f64::MAX),
        ),
        RetryLayer::builder().hint_policy(
            HintPolicy::honored()
                .max_delay(InvalidConfig::MAX_DURATION)
                .jitter(1.0),
        ),
        RetryLayer::builder().hint_policy(HintPolicy::honored().jitter(0.0)),
    ];
    for builder in valid {
        let debug = format!("{builder:?}");
        assert!(builder.build().is_ok(), "{debug}");
    }
    let budget = TokenBucket::builder()
        .capacity(1e9)
        .retry_cost(1e9)
        .deposit_per_success(0.0)
        .refill_per_second(0.0)
        .build();
    assert!(budget.is_ok());
}

/// An endpoint answering 503 with `Retry-After: 99999999999999999999` to the first `failures`
/// attempts, then 200.
fn failing(
    failures: u32,
) -> impl Service<http::Request<()>, Response = http::Response<()>, Error = Infallible> + Clone {
    let calls = Arc::new(AtomicU32::new(0));
    service_fn(move |_req: http::Request<()>| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        let mut response = http::Response::new(());
        if n < failures {
            *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
            let huge = http::HeaderValue::from_static("99999999999999999999");
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, huge);
        }
        async move { Ok(response) }
    })
}

/// Sends one request through `layer` over [`failing`]`(failures)`, on paused time.
async fn send(layer: &RetryLayer, failures: u32) -> RetryReport {
    let mut service = layer.layer(failing(failures));
    let response = service
        .ready()
        .await
        .unwrap()
        .call(http::Request::new(()))
        .await
        .unwrap();
    RetryReport::of(&response).clone()
}

#[tokio::test(start_paused = true)]
async fn extreme_but_valid_values_saturate_at_request_time() {
    for jitter in [
        Jitter::None,
        Jitter::Full,
        Jitter::Equal,
        Jitter::Decorrelated,
    ] {
        for retry_after in [
            Some(
                HintPolicy::honored()
                    .max_delay(InvalidConfig::MAX_DURATION)
                    .jitter(1.0),
            ),
            None,
        ] {
            let builder = RetryLayer::builder();
            let builder = match retry_after {
                Some(policy) => builder.hint_policy(policy),
                None => builder.without_hint_delays(),
            };
            let layer = builder
                .max_attempts(u32::MAX)
                .backoff(
                    Backoff::new(
                        jitter,
                        InvalidConfig::MAX_DURATION,
                        InvalidConfig::MAX_DURATION,
                    )
                    .multiplier(f64::MAX),
                )
                .first_attempt_jitter(InvalidConfig::MAX_DURATION)
                .deadline(Duration::MAX)
                .budget(
                    TokenBucket::builder()
                        .capacity(1e9)
                        .deposit_per_success(1e9)
                        .refill_per_second(1e9)
                        .build()
                        .unwrap(),
                )
                .random_source(RandomSource::seeded(1))
                .build()
                .unwrap();
            let report = send(&layer, 30).await;
            assert_eq!((report.attempts, report.stop), (31, StopReason::Success));
            assert!(report
                .delays
                .iter()
                .all(|d| d.duration <= InvalidConfig::MAX_DURATION));
        }
    }
}

/// Mostly a usable value in `range`, sometimes any float at all.
fn float_in(range: std::ops::RangeInclusive<f64>) -> impl Strategy<Value = f64> {
    prop_oneof![9 => range, 1 => float()]
}

/// Mostly a duration in `[1 ms, InvalidConfig::MAX_DURATION]`, sometimes any duration at all.
fn usable_duration() -> impl Strategy<Value = Duration> {
    let max = InvalidConfig::MAX_DURATION.as_millis() as u64;
    prop_oneof![9 => (1u64..=max).prop_map(Duration::from_millis), 1 => duration()]
}

fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(f64::MAX),
        Just(f64::MIN_POSITIVE),
        Just(0.0),
        Just(-0.0),
        -2.0f64..3.0,
        0.0f64..2e9,
    ]
}

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        Just(InvalidConfig::MAX_DURATION),
        Just(InvalidConfig::MAX_DURATION + Duration::from_nanos(1)),
        any::<u64>().prop_map(Duration::from_nanos),
        (0u64..1_000_000).prop_map(Duration::from_millis),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

fn jitter() -> impl Strategy<Value = Jitter> {
    prop_oneof![
        Just(Jitter::None),
        Just(Jitter::Full),
        Just(Jitter::Equal),
        Just(Jitter::Decorrelated)
    ]
}

/// Every field `build` may name.
const FIELDS: [&str; 12] = [
    "backoff.base",
    "backoff.cap",
    "backoff.multiplier",
    "max_attempts",
    "deadline",
    "first_attempt_jitter",
    "hint_policy.max_delay",
    "hint_policy.jitter",
    "budget.capacity",
    "budget.retry_cost",
    "budget.deposit_per_success",
    "budget.refill_per_second",
];

#[derive(Debug, Clone)]
struct AnyConfig {
    jitter: Jitter,
    base: Duration,
    cap: Duration,
    multiplier: f64,
    attempts: u32,
    first_attempt_jitter: Duration,
    deadline: Option<Duration>,
    clamp: Option<Duration>,
    retry_after_jitter: f64,
    give_up: bool,
    budget: [f64; 4],
    failures: u32,
}

fn any_config() -> impl Strategy<Value = AnyConfig> {
    let attempts = prop_oneof![Just(0u32), Just(1), 2u32..10, Just(u32::MAX), any::<u32>()];
    (
        (
            jitter(),
            // Mostly in order, so that the rest of the configuration gets exercised too.
            (
                usable_duration(),
                usable_duration(),
                proptest::bool::weighted(0.9),
            )
                .prop_map(|(a, b, sorted)| if sorted { (a.min(b), a.max(b)) } else { (a, b) }),
            float_in(1.0..=10.0),
            attempts,
        ),
        (
            usable_duration(),
            proptest::option::of(usable_duration()),
            proptest::option::of(usable_duration()),
        ),
        (
            float_in(0.0..=1.0),
            any::<bool>(),
            [
                float_in(1.0..=1e9),
                float_in(0.001..=1.0),
                float_in(0.0..=1e9),
                float_in(0.0..=1e9),
            ],
            0u32..12,
        ),
    )
        .prop_map(
            |(
                (jitter, (base, cap), multiplier, attempts),
                (first_attempt_jitter, deadline, clamp),
                (retry_after_jitter, give_up, budget, failures),
            )| AnyConfig {
                jitter,
                base,
                cap,
                multiplier,
                attempts,
                first_attempt_jitter,
                deadline,
                clamp,
                retry_after_jitter,
                give_up,
                budget,
                failures,
            },
        )
}

impl AnyConfig {
    fn build(&self) -> Result<RetryLayer, InvalidConfig> {
        let [capacity, cost, deposit, refill] = self.budget;
        let budget = TokenBucket::builder()
            .capacity(capacity)
            .retry_cost(cost)
            .deposit_per_success(deposit)
            .refill_per_second(refill)
            .build()?;
        let mut retry_after = HintPolicy::honored().jitter(self.retry_after_jitter);
        if let Some(clamp) = self.clamp {
            retry_after = retry_after.max_delay(clamp);
        }
        if self.give_up {
            retry_after = retry_after.when_longer(WhenLonger::GiveUp);
        }
        let mut builder = RetryLayer::builder()
            .backoff(Backoff::new(self.jitter, self.base, self.cap).multiplier(self.multiplier))
            .max_attempts(self.attempts)
            .first_attempt_jitter(self.first_attempt_jitter)
            .hint_policy(retry_after)
            .budget(budget)
            .random_source(RandomSource::seeded(5));
        if let Some(deadline) = self.deadline {
            builder = builder.deadline(deadline);
        }
        builder.build()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    /// Any values at all: `build` fails naming a known field, or the layer serves a request
    /// (on paused time) without panicking and within its bounds.
    #[test]
    fn any_configuration_fails_at_build_time_or_works(config in any_config()) {
        let layer = match config.build() {
            Err(error) => {
                prop_assert!(FIELDS.contains(&error.field()), "{}", error);
                return Ok(());
            }
            Ok(layer) => layer,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let report = runtime.block_on(send(&layer, config.failures));
        prop_assert!(report.attempts >= 1 && report.attempts <= config.attempts);
        let clamp = config.clamp.unwrap_or(config.cap);
        for delay in &report.delays {
            let bound = match delay.source {
                DelaySource::FirstAttempt => config.first_attempt_jitter,
                DelaySource::Backoff => config.cap,
                _ => clamp,
            };
            prop_assert!(delay.duration <= bound, "{:?} > {:?}", delay, bound);
        }
    }
}

#[test]
fn the_same_bound_has_the_same_wording_in_every_builder() {
    use tower_http_retry::CircuitBreakerLayer;
    let retry_count = RetryLayer::builder().max_attempts(0).build().unwrap_err();
    let breaker_count = CircuitBreakerLayer::builder()
        .half_open_probes(0)
        .build()
        .unwrap_err();
    assert_eq!(retry_count.message(), breaker_count.message());
    let retry_zero = RetryLayer::builder()
        .deadline(Duration::ZERO)
        .build()
        .unwrap_err();
    let breaker_zero = CircuitBreakerLayer::builder()
        .window(Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(retry_zero.message(), breaker_zero.message());
    let retry_long = RetryLayer::builder()
        .first_attempt_jitter(Duration::MAX)
        .build()
        .unwrap_err();
    let breaker_long = CircuitBreakerLayer::builder()
        .open_duration(Duration::MAX)
        .build()
        .unwrap_err();
    let tail = |e: &InvalidConfig| e.message().split(") ").nth(1).unwrap_or("").to_owned();
    assert_eq!(
        tail(&retry_long),
        tail(&breaker_long),
        "{retry_long} / {breaker_long}"
    );
    let retry_jitter = RetryLayer::builder()
        .hint_policy(HintPolicy::honored().jitter(2.0))
        .build()
        .unwrap_err();
    let breaker_jitter = CircuitBreakerLayer::builder()
        .open_jitter(2.0)
        .build()
        .unwrap_err();
    assert_eq!(retry_jitter.message(), breaker_jitter.message());
}

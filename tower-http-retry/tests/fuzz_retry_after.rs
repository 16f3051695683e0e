//! Fuzzing `Retry-After`: the parser on its own, and the whole decision path (a [`RetryLayer`]
//! over an endpoint that answers 503/429 with hostile headers, on paused time).
//!
//! Every generated header value knows what it means (a number of seconds, a date at a known
//! distance from the injected wall clock, or garbage), so the parser is checked against that
//! expectation rather than against itself. Arbitrary header bytes are thrown in too; for those
//! only "no panic, deterministic, consistent with the known values beside them" is checked.
//!
//! CI runs a few hundred cases per property. The long run (1,000,000 cases per property, with
//! the count of header values tried printed at the end) is `#[ignore]`d and run by hand:
//!
//! ```text
//! cargo test --release --all-features --test fuzz_retry_after -- --ignored --nocapture
//! ```
//!
//! `FUZZ_CASES=<n>` changes the number of cases of the long run.

use http::header::{HeaderMap, HeaderValue, RETRY_AFTER};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_http_retry::hint::{parse_retry_after, RetryAfterHint};
use tower_http_retry::hint::{HintPolicy, WhenLonger};
use tower_http_retry::report::DelaySource;
use tower_http_retry::retry::RandomSource;
use tower_http_retry::InvalidConfig;
use tower_http_retry::{Backoff, Jitter, RetryLayer, RetryReport, StopReason};

/// The last second an HTTP-date can name: 9999-12-31 23:59:59 UTC.
const LAST_DATE: u64 = 253_402_300_799;

// ---------------------------------------------------------------------------------------------
// Generated header values and what they mean.

/// The three HTTP-date forms of RFC 9110.
#[derive(Clone, Copy, Debug)]
enum Form {
    Imf,
    Rfc850,
    Asctime,
}

/// A way to break an otherwise valid IMF-fixdate.
#[derive(Clone, Copy, Debug)]
enum Defect {
    WrongWeekday(u8),
    LowercaseGmt,
    LowercaseMonth,
    Day32,
    Day00,
    Hour24,
    Second60,
    Year1969,
    February30,
    TrailingGarbage,
    NonAscii(u8, usize),
}

/// One `Retry-After` value, before it is rendered against the wall clock.
#[derive(Clone, Debug)]
enum Spec {
    /// delta-seconds, with optional whitespace around it.
    Seconds {
        digits: String,
        pad: (String, String),
    },
    /// A valid HTTP-date `offset` seconds from now (clamped to the years HTTP-dates can name).
    Date {
        offset: i64,
        form: Form,
        pad: (String, String),
    },
    /// An IMF-fixdate `offset` seconds from now, broken.
    BrokenDate { offset: i64, defect: Defect },
    /// Text that is neither delta-seconds nor an HTTP-date.
    Garbage(Vec<u8>),
    /// Any bytes a header value may hold: no expectation beyond "no panic".
    Arbitrary(Vec<u8>),
}

/// What the parser must make of a value.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    Delay(Duration),
    Malformed,
    Unknown,
}

impl Spec {
    fn render(&self, now: SystemTime) -> (Vec<u8>, Expect) {
        let padded =
            |pad: &(String, String), text: &str| format!("{}{text}{}", pad.0, pad.1).into_bytes();
        match self {
            Spec::Seconds { digits, pad } => (
                padded(pad, digits),
                Expect::Delay(Duration::from_secs(saturating_seconds(digits))),
            ),
            Spec::Date { offset, form, pad } => {
                let at = date_near(now, *offset);
                let text = format_date(at, *form);
                let delay = (UNIX_EPOCH + Duration::from_secs(at))
                    .duration_since(now)
                    .unwrap_or(Duration::ZERO);
                (padded(pad, &text), Expect::Delay(delay))
            }
            Spec::BrokenDate { offset, defect } => {
                // Day, hour and second defects need a date that has those fields to replace.
                let at = date_near(now, *offset);
                (break_date(at, *defect), Expect::Malformed)
            }
            Spec::Garbage(bytes) => (bytes.clone(), Expect::Malformed),
            Spec::Arbitrary(bytes) => (bytes.clone(), Expect::Unknown),
        }
    }
}

/// The value of a string of digits, saturated at `u64::MAX` (the parser's documented behaviour).
fn saturating_seconds(digits: &str) -> u64 {
    let significant = digits.trim_start_matches('0');
    if significant.len() > 20 {
        return u64::MAX;
    }
    let value: u128 = significant.parse().unwrap_or(0);
    u64::try_from(value).unwrap_or(u64::MAX)
}

/// Seconds since the epoch of the instant `offset` seconds from `now`, kept within the years an
/// HTTP-date can name.
fn date_near(now: SystemTime, offset: i64) -> u64 {
    let now = now.duration_since(UNIX_EPOCH).unwrap().as_secs();
    let at = i128::from(now) + i128::from(offset);
    u64::try_from(at.clamp(0, i128::from(LAST_DATE))).unwrap()
}

/// A civil date and time in UTC.
struct Civil {
    year: u64,
    month: usize,
    day: u64,
    hour: u64,
    minute: u64,
    second: u64,
    /// 0 = Sunday.
    weekday: usize,
}

const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
const LONG_WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Splits seconds since the epoch into a civil date (H. Hinnant's `civil_from_days`), so that the
/// test does not format dates with the library the parser uses.
fn civil(seconds: u64) -> Civil {
    let days = seconds / 86_400;
    let rest = seconds % 86_400;
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    Civil {
        year,
        month: month as usize,
        day,
        hour: rest / 3600,
        minute: rest % 3600 / 60,
        second: rest % 60,
        // 1970-01-01 was a Thursday.
        weekday: ((days + 4) % 7) as usize,
    }
}

fn format_date(seconds: u64, form: Form) -> String {
    let c = civil(seconds);
    let (wd, mon) = (WEEKDAYS[c.weekday], MONTHS[c.month - 1]);
    let (h, mi, s) = (c.hour, c.minute, c.second);
    match form {
        // RFC 850 has two-digit years, read as 1970-2069.
        Form::Rfc850 if (1970..2070).contains(&c.year) => format!(
            "{}, {:02}-{mon}-{:02} {h:02}:{mi:02}:{s:02} GMT",
            LONG_WEEKDAYS[c.weekday],
            c.day,
            c.year % 100
        ),
        Form::Asctime => format!("{wd} {mon} {:>2} {h:02}:{mi:02}:{s:02} {}", c.day, c.year),
        Form::Imf | Form::Rfc850 => format!(
            "{wd}, {:02} {mon} {} {h:02}:{mi:02}:{s:02} GMT",
            c.day, c.year
        ),
    }
}

fn break_date(seconds: u64, defect: Defect) -> Vec<u8> {
    let c = civil(seconds);
    let (wd, mon) = (WEEKDAYS[c.weekday], MONTHS[c.month - 1]);
    let imf = |wd: &str, day: &str, mon: &str, year: &str, time: &str, zone: &str| {
        format!("{wd}, {day} {mon} {year} {time} {zone}")
    };
    let (day, year) = (format!("{:02}", c.day), c.year.to_string());
    let time = format!("{:02}:{:02}:{:02}", c.hour, c.minute, c.second);
    let text = match defect {
        Defect::WrongWeekday(shift) => {
            let wrong = WEEKDAYS[(c.weekday + usize::from(shift)) % 7];
            imf(wrong, &day, mon, &year, &time, "GMT")
        }
        Defect::LowercaseGmt => imf(wd, &day, mon, &year, &time, "gmt"),
        Defect::LowercaseMonth => imf(wd, &day, &mon.to_lowercase(), &year, &time, "GMT"),
        Defect::Day32 => imf(wd, "32", mon, &year, &time, "GMT"),
        Defect::Day00 => imf(wd, "00", mon, &year, &time, "GMT"),
        Defect::Hour24 => imf(
            wd,
            &day,
            mon,
            &year,
            &time.replacen(&time[..2], "24", 1),
            "GMT",
        ),
        Defect::Second60 => imf(wd, &day, mon, &year, &format!("{}60", &time[..6]), "GMT"),
        Defect::Year1969 => imf(wd, &day, mon, "1969", &time, "GMT"),
        Defect::February30 => imf(wd, "30", "Feb", &year, &time, "GMT"),
        Defect::TrailingGarbage => imf(wd, &day, mon, &year, &time, "GMT;x"),
        Defect::NonAscii(byte, at) => {
            let mut bytes = imf(wd, &day, mon, &year, &time, "GMT").into_bytes();
            let at = at % bytes.len();
            bytes[at] = byte;
            return bytes;
        }
    };
    text.into_bytes()
}

// ---------------------------------------------------------------------------------------------
// Strategies.

fn ows() -> impl Strategy<Value = (String, String)> {
    ("[ \t]{0,3}", "[ \t]{0,3}")
}

fn digits() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{1,3}",
        "[1-9][0-9]{0,11}",
        "[0-9]{15,40}",
        "0{1,30}[0-9]{0,3}",
        Just("99999999999999999999".to_owned()),
        Just("18446744073709551615".to_owned()),
        Just("18446744073709551616".to_owned()),
    ]
}

fn offset() -> impl Strategy<Value = i64> {
    prop_oneof![
        -5i64..=5,
        -300i64..=300,
        -1_000_000i64..=1_000_000,
        // Centuries either way: far past and far future.
        -20_000_000_000i64..=20_000_000_000,
        Just(i64::MIN),
        Just(i64::MAX),
    ]
}

fn form() -> impl Strategy<Value = Form> {
    prop_oneof![Just(Form::Imf), Just(Form::Rfc850), Just(Form::Asctime)]
}

fn defect() -> impl Strategy<Value = Defect> {
    prop_oneof![
        (1u8..7).prop_map(Defect::WrongWeekday),
        Just(Defect::LowercaseGmt),
        Just(Defect::LowercaseMonth),
        Just(Defect::Day32),
        Just(Defect::Day00),
        Just(Defect::Hour24),
        Just(Defect::Second60),
        Just(Defect::Year1969),
        Just(Defect::February30),
        Just(Defect::TrailingGarbage),
        (0x80u8..=0xff, any::<usize>()).prop_map(|(b, at)| Defect::NonAscii(b, at)),
    ]
}

/// Text that is never delta-seconds nor an HTTP-date, optionally padded.
fn garbage() -> impl Strategy<Value = Vec<u8>> {
    let text = prop_oneof![
        "-[0-9]{1,25}",
        "[0-9]{0,5}\\.[0-9]{0,5}",
        "[0-9]{1,3}[eE][+-]?[0-9]{1,3}",
        "\\+[0-9]{1,5}",
        "[0-9]{1,5} ?(s|ms|sec|seconds|min)",
        "[0-9]{1,3}[ \t]+[0-9]{1,3}",
        "[ \t]{0,4}",
        "0x[0-9a-f]{1,8}",
        "(NaN|inf|-inf|infinity|never|now|tomorrow|null|-0|5,5)",
        "[0-9]{1,3}, ?[0-9]{1,3}",
    ];
    let ascii = (text, ows()).prop_map(|(t, (a, b))| format!("{a}{t}{b}").into_bytes());
    // Digits with a non-ASCII byte somewhere inside.
    let non_ascii = ("[0-9]{1,8}", 0x80u8..=0xff, any::<usize>()).prop_map(|(d, byte, at)| {
        let mut bytes = d.into_bytes();
        let at = at % (bytes.len() + 1);
        bytes.insert(at, byte);
        bytes
    });
    prop_oneof![4 => ascii, 1 => non_ascii]
}

/// Bytes `HeaderValue::from_bytes` accepts: tab, visible ASCII, space, and obs-text.
fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    let any_byte = prop_oneof![Just(b'\t'), 0x20u8..=0x7e, 0x80u8..=0xff];
    let near_miss = proptest::sample::select(b"0123456789 \t,:-+.GMTSunNovMonWedDec".to_vec());
    prop_oneof![
        proptest::collection::vec(any_byte, 0..48),
        proptest::collection::vec(near_miss, 0..32),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        3 => (digits(), ows()).prop_map(|(digits, pad)| Spec::Seconds { digits, pad }),
        3 => (offset(), form(), ows()).prop_map(|(offset, form, pad)| Spec::Date { offset, form, pad }),
        2 => (offset(), defect()).prop_map(|(offset, defect)| Spec::BrokenDate { offset, defect }),
        3 => garbage().prop_map(Spec::Garbage),
        2 => header_bytes().prop_map(Spec::Arbitrary),
    ]
}

/// The `Retry-After` headers of one response: none, one, several, or several that agree (the
/// same seconds with other padding and leading zeros, the same instant in other date forms).
fn headers() -> impl Strategy<Value = Vec<Spec>> {
    let agreeing_seconds = (
        digits(),
        proptest::collection::vec((ows(), 0usize..3), 2..4),
    )
        .prop_map(|(digits, copies)| {
            copies
                .into_iter()
                .map(|(pad, zeros)| Spec::Seconds {
                    digits: format!("{}{digits}", "0".repeat(zeros)),
                    pad,
                })
                .collect()
        });
    let agreeing_dates = (offset(), proptest::collection::vec((form(), ows()), 2..4)).prop_map(
        |(offset, copies)| {
            copies
                .into_iter()
                .map(|(form, pad)| Spec::Date { offset, form, pad })
                .collect()
        },
    );
    prop_oneof![
        1 => Just(Vec::new()),
        6 => spec().prop_map(|s| vec![s]),
        2 => proptest::collection::vec(spec(), 2..5),
        1 => agreeing_seconds,
        1 => agreeing_dates,
    ]
}

/// The wall clock, with sub-second precision: mostly around today, sometimes anywhere an
/// HTTP-date can name, and the two ends.
fn wall_clock() -> impl Strategy<Value = SystemTime> {
    let seconds = prop_oneof![
        3 => 1_600_000_000u64..1_900_000_000,
        2 => 0u64..=LAST_DATE,
        1 => Just(0u64),
        1 => Just(LAST_DATE),
    ];
    (seconds, 0u32..1_000_000_000).prop_map(|(s, nanos)| UNIX_EPOCH + Duration::new(s, nanos))
}

// ---------------------------------------------------------------------------------------------
// The parser.

/// Renders `specs` into a header map; returns it with the expectation for the whole map.
fn render(specs: &[Spec], now: SystemTime) -> (HeaderMap, Expect, Vec<Duration>) {
    let mut headers = HeaderMap::new();
    let mut known_delays = Vec::new();
    let mut any_malformed = false;
    let mut any_unknown = false;
    for spec in specs {
        let (bytes, expect) = spec.render(now);
        let value = HeaderValue::from_bytes(&bytes).expect("generated values are valid headers");
        headers.append(RETRY_AFTER, value);
        match expect {
            Expect::Delay(d) => known_delays.push(d),
            Expect::Malformed => any_malformed = true,
            Expect::Unknown => any_unknown = true,
        }
    }
    let expect = if any_malformed {
        // Whether it comes first or later, a value that does not parse spoils the set.
        Expect::Malformed
    } else if any_unknown {
        Expect::Unknown
    } else if known_delays.windows(2).any(|w| w[0] != w[1]) {
        Expect::Malformed
    } else {
        match known_delays.first() {
            Some(d) => Expect::Delay(*d),
            None => Expect::Unknown, // no header at all: checked below as `Absent`
        }
    };
    (headers, expect, known_delays)
}

fn check_parser(now: SystemTime, specs: &[Spec]) -> Result<(), TestCaseError> {
    let (headers, expect, known) = render(specs, now);
    let hint = parse_retry_after(&headers, now);
    prop_assert_eq!(hint, parse_retry_after(&headers, now), "deterministic");
    if specs.is_empty() {
        prop_assert_eq!(hint, RetryAfterHint::Absent);
        return Ok(());
    }
    match expect {
        Expect::Delay(d) => prop_assert_eq!(hint, RetryAfterHint::Delay(d)),
        Expect::Malformed => prop_assert_eq!(hint, RetryAfterHint::Malformed),
        Expect::Unknown => match hint {
            RetryAfterHint::Absent => prop_assert!(false, "headers present, read as absent"),
            RetryAfterHint::Delay(d) => prop_assert!(known.iter().all(|k| *k == d)),
            RetryAfterHint::Malformed => {}
        },
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The decision path.

/// How `Retry-After` is configured for one case.
#[derive(Clone, Debug)]
struct Policy {
    honored: bool,
    max_delay: Option<Duration>,
    jitter: f64,
    when_longer: WhenLonger,
}

impl Policy {
    /// The policy, or `None` when hints are ignored.
    fn retry_after(&self) -> Option<HintPolicy> {
        if !self.honored {
            return None;
        }
        let policy = HintPolicy::honored()
            .jitter(self.jitter)
            .when_longer(self.when_longer);
        Some(match self.max_delay {
            Some(max) => policy.max_delay(max),
            None => policy,
        })
    }
}

#[derive(Clone, Debug)]
struct DecisionCase {
    now: SystemTime,
    /// One response per attempt: 503 or 429 and its `Retry-After` values.
    responses: Vec<(u16, Vec<Spec>)>,
    backoff: Backoff,
    policy: Policy,
    seed: u64,
}

/// A duration from 1 ms to [`InvalidConfig::MAX_DURATION`], spread evenly over the orders of
/// magnitude.
fn log_duration() -> impl Strategy<Value = Duration> {
    let max_ms = InvalidConfig::MAX_DURATION.as_millis() as f64;
    (0.0f64..=1.0).prop_map(move |x| Duration::from_millis(max_ms.powf(x).round().max(1.0) as u64))
}

fn backoff() -> impl Strategy<Value = Backoff> {
    let jitter = prop_oneof![
        Just(Jitter::None),
        Just(Jitter::Full),
        Just(Jitter::Equal),
        Just(Jitter::Decorrelated)
    ];
    (jitter, log_duration(), log_duration(), 1.0f64..10.0)
        .prop_map(|(jitter, a, b, m)| Backoff::new(jitter, a.min(b), a.max(b)).multiplier(m))
}

fn policy() -> impl Strategy<Value = Policy> {
    let jitter = prop_oneof![Just(0.0), Just(1.0), 0.0f64..=1.0];
    let when_longer = prop_oneof![3 => Just(WhenLonger::Clamp), 1 => Just(WhenLonger::GiveUp)];
    (
        proptest::bool::weighted(0.9),
        proptest::option::of(log_duration()),
        jitter,
        when_longer,
    )
        .prop_map(|(honored, max_delay, jitter, when_longer)| Policy {
            honored,
            max_delay,
            jitter,
            when_longer,
        })
}

fn decision_case() -> impl Strategy<Value = DecisionCase> {
    let response = (prop_oneof![Just(503u16), Just(429u16)], headers());
    (
        wall_clock(),
        proptest::collection::vec(response, 1..=5),
        backoff(),
        policy(),
        any::<u64>(),
    )
        .prop_map(|(now, responses, backoff, policy, seed)| DecisionCase {
            now,
            responses,
            backoff,
            policy,
            seed,
        })
}

/// What one run of the layer produced.
struct Run {
    report: RetryReport,
    calls: u32,
    /// Paused time from the call to the response.
    elapsed: Duration,
    malformed: u64,
    seen: u64,
    clamped: u64,
}

/// Sends one GET through a `RetryLayer` to an endpoint that answers the scripted responses in
/// order, on a fresh runtime with paused time.
fn run_layer(case: &DecisionCase, scripted: Vec<(u16, HeaderMap)>) -> Run {
    let builder = RetryLayer::builder()
        .max_attempts(case.responses.len() as u32)
        .backoff(case.backoff);
    let builder = match case.policy.retry_after() {
        Some(policy) => builder.hint_policy(policy),
        None => builder.without_hint_delays(),
    };
    let layer = builder
        .without_budget()
        .random_source(RandomSource::seeded(case.seed))
        .wall_clock({
            let now = case.now;
            move || now
        })
        .build()
        .expect("generated configurations are valid");
    let calls = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&calls);
    let scripted = Arc::new(scripted);
    let endpoint = service_fn(move |_req: http::Request<()>| {
        let n = counter.fetch_add(1, Ordering::SeqCst) as usize;
        let (status, headers) = scripted[n.min(scripted.len() - 1)].clone();
        let mut response = http::Response::new(());
        *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
        *response.headers_mut() = headers;
        async move { Ok::<_, Infallible>(response) }
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let mut client = layer.layer(endpoint);
    let (report, elapsed) = runtime.block_on(async {
        let start = tokio::time::Instant::now();
        let ready = client.ready().await.unwrap();
        let response = ready.call(http::Request::new(())).await.unwrap();
        (RetryReport::of(&response).clone(), start.elapsed())
    });
    let stats = layer.stats();
    Run {
        report,
        calls: calls.load(Ordering::SeqCst),
        elapsed,
        malformed: stats.retry_after_malformed,
        seen: stats.retry_after_seen,
        clamped: stats.retry_after_clamped,
    }
}

fn check_decision(case: &DecisionCase) -> Result<(), TestCaseError> {
    let max_attempts = case.responses.len() as u32;
    let mut scripted = Vec::new();
    let mut hints = Vec::new();
    for (status, specs) in &case.responses {
        let (headers, expect, _) = render(specs, case.now);
        let hint = parse_retry_after(&headers, case.now);
        // The parser's answer is checked against the generator's in `check_parser`; here it only
        // has to agree where the answer is known.
        match expect {
            Expect::Delay(d) if !specs.is_empty() => {
                prop_assert_eq!(hint, RetryAfterHint::Delay(d))
            }
            Expect::Malformed => prop_assert_eq!(hint, RetryAfterHint::Malformed),
            _ => {}
        }
        hints.push(hint);
        scripted.push((*status, headers));
    }
    let run = run_layer(case, scripted);
    let report = &run.report;
    let clamp = case.policy.max_delay.unwrap_or_else(|| case.backoff.cap());

    // Replay the decisions the layer had to take, attempt by attempt.
    let mut expected = (0u64, 0u64, 0u64); // malformed, seen, clamped
    let mut stop = StopReason::AttemptsExhausted;
    let mut attempts = max_attempts;
    for (index, hint) in hints.iter().enumerate() {
        let attempt = index as u32 + 1;
        if attempt == max_attempts {
            break; // the last outcome is returned: its header is never read
        }
        if !case.policy.honored {
            continue;
        }
        match hint {
            RetryAfterHint::Malformed => expected.0 += 1,
            RetryAfterHint::Delay(h) => {
                expected.1 += 1;
                if *h > clamp && case.policy.when_longer == WhenLonger::GiveUp {
                    expected.2 += 1; // refused, counted as clamped
                    stop = StopReason::RetryAfterTooLong;
                    attempts = attempt;
                    break;
                }
            }
            RetryAfterHint::Absent => {}
        }
    }
    // Whether a hint near or above the clamp was cut depends on the draw below the clamp: the
    // report says, and each delay is checked against its hint below.
    expected.2 += report
        .delays
        .iter()
        .filter(|d| d.source == DelaySource::RetryAfterClamped)
        .count() as u64;
    prop_assert_eq!((report.attempts, report.stop), (attempts, stop));
    prop_assert_eq!(run.calls, attempts, "the endpoint saw every attempt, once");
    prop_assert_eq!((run.malformed, run.seen, run.clamped), expected);
    prop_assert_eq!(report.delays.len() as u32, attempts - 1);

    for delay in &report.delays {
        let hint = hints[delay.after_attempt as usize - 1];
        let d = delay.duration;
        match (case.policy.honored, hint) {
            // The clamp cuts the hint or its spread: spread just below the clamp.
            (true, RetryAfterHint::Delay(h))
                if h > clamp
                    || (h + h.mul_f64(case.policy.jitter) > clamp
                        && case.policy.when_longer == WhenLonger::Clamp) =>
            {
                // `mul_f64` may round above `clamp`, as the layer knows too.
                let lower = clamp.saturating_sub(clamp.mul_f64(case.policy.jitter));
                prop_assert!(
                    lower <= d && d <= clamp,
                    "{:?} outside [{:?}, {:?}]",
                    d,
                    lower,
                    clamp
                );
                let cut = d < h;
                prop_assert_eq!(delay.source == DelaySource::RetryAfterClamped, cut);
            }
            (true, RetryAfterHint::Delay(h)) => {
                prop_assert_eq!(delay.source, DelaySource::RetryAfter);
                // With `GiveUp` the spread is cut at the clamp, never moved below the hint.
                let upper = (h + h.mul_f64(case.policy.jitter)).min(clamp);
                prop_assert!(
                    h <= d && d <= upper,
                    "{:?} outside [{:?}, {:?}]",
                    d,
                    h,
                    upper
                );
            }
            // Malformed, absent or ignored: not honoured, the backoff policy decides.
            _ => {
                prop_assert_eq!(delay.source, DelaySource::Backoff);
                prop_assert!(d <= case.backoff.cap());
            }
        }
        if delay.source != DelaySource::Backoff {
            prop_assert!(d <= clamp, "{:?} above the clamp {:?}", d, clamp);
        }
    }
    // The time the request really waited (paused clock): the report's total, plus less than a
    // millisecond per sleep (tokio's timer granularity).
    let sleeps = report.delays.len() as u32;
    prop_assert!(run.elapsed >= report.slept);
    prop_assert!(
        run.elapsed <= report.slept + sleeps * Duration::from_millis(1),
        "waited {:?} for {:?} of sleeps",
        run.elapsed,
        report.slept
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The tests.

proptest! {
    #![proptest_config(Config { failure_persistence: None, ..Config::default() })]

    #[test]
    fn parser_reads_every_value_as_its_generator_meant(now in wall_clock(), specs in headers()) {
        check_parser(now, &specs)?;
    }

    #[test]
    fn decisions_never_honour_malformed_hints_nor_exceed_the_clamp(case in decision_case()) {
        check_decision(&case)?;
    }
}

/// Cases of the long run: `FUZZ_CASES`, or a million.
fn long_cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000)
}

/// Runs `test` on `long_cases()` values of `strategy` and prints how many header values it tried.
fn long_run<S>(
    name: &str,
    strategy: S,
    values_in: impl Fn(&S::Value) -> usize,
    test: impl Fn(&S::Value) -> Result<(), TestCaseError>,
) where
    S: Strategy,
{
    let cases = long_cases();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let tried = AtomicU64::new(0);
    let started = std::time::Instant::now();
    let result = runner.run(&strategy, |value| {
        tried.fetch_add(values_in(&value) as u64, Ordering::Relaxed);
        test(&value)
    });
    eprintln!(
        "{name}: {cases} cases, {} Retry-After values, {:.1?}",
        tried.load(Ordering::Relaxed),
        started.elapsed()
    );
    if let Err(error) = result {
        panic!("{name}: {error}");
    }
}

#[test]
#[ignore = "the long fuzz run: cargo test --release --all-features --test fuzz_retry_after -- --ignored"]
fn long_run_parser() {
    long_run(
        "parser",
        (wall_clock(), headers()),
        |(_, specs)| specs.len(),
        |(now, specs)| check_parser(*now, specs),
    );
}

#[test]
#[ignore = "the long fuzz run: cargo test --release --all-features --test fuzz_retry_after -- --ignored"]
fn long_run_decision_path() {
    long_run(
        "decision path",
        decision_case(),
        |case| case.responses.iter().map(|(_, specs)| specs.len()).sum(),
        check_decision,
    );
}

//! express-rate-limit's `ratelimit-header-parser` test cases, converted to
//! `tests/conformance/ratelimit-header-parser/cases.json` (its README names the source files,
//! their commits and the licence), run against the rate-limit dialect readers behind
//! [`ServerHints`].
//!
//! That parser reports every quota (limit, remaining, used, reset); these readers decide only
//! whether a quota is used up and when it resets. So each case's `expect` is the source's
//! expectation in those terms: a remaining count of 0 is a used-up quota whose reset is the
//! wait, any other count is no hint at all, and a field the source reads is not malformed. Each
//! case is read as a successful (200) response at the case's `now`, without a `Date` header.
//!
//! Every case must agree except those in [`DELIBERATE`], each of which must still disagree, so
//! that the list stays exact.

// serde_json, which reads the cases, is the `json` feature's dependency.
#![cfg(feature = "json")]

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use serde_json::Value;
use std::time::{Duration, UNIX_EPOCH};
use tower_http_retry::hint::{ResetFormat, ResetHeader, ServerHints, XRateLimit};

const CASES: &str = include_str!("conformance/ratelimit-header-parser/cases.json");

/// The cases these readers deliberately decide otherwise, as `(name, reason)`.
const DELIBERATE: &[(&str, &str)] = &[
    (
        "date tests: date string auto-detection",
        "a reset is read as a number (Unix time or seconds from now), not as a free-form date \
         string; an unreadable reset is counted as malformed and ignored",
    ),
    (
        "draft 7 policy parsing: combined RateLimit header: keeps partial info when reset is \
         absent (lenient)",
        "draft 7 requires `remaining`, and a field without it says nothing about the quota: it \
         is counted as malformed and ignored, as the draft asks, where the source keeps the \
         limit",
    ),
];

/// The readers a case names (`readers`: reset and remaining header names, in the automatic
/// format), after the defaults; the defaults alone without.
fn hints(case: &Value) -> ServerHints {
    let Some(readers) = case.get("readers") else {
        return ServerHints::new();
    };
    let name = |value: &Value| {
        HeaderName::from_bytes(value.as_str().expect("a header name").as_bytes())
            .expect("a valid header name")
    };
    readers
        .as_array()
        .expect("readers are an array")
        .iter()
        .fold(ServerHints::new(), |hints, reader| {
            let header = XRateLimit::new(name(&reader["reset"]), ResetFormat::AUTO)
                .remaining(name(&reader["remaining"]));
            hints.add_reset_header(ResetHeader::XRateLimit(header))
        })
}

/// Why the readers' outcome for `case` is not the expected one, or `None` when they agree.
fn disagreement(case: &Value) -> Option<String> {
    let mut headers = HeaderMap::new();
    for pair in case["headers"].as_array().expect("headers are an array") {
        let name = pair[0].as_str().expect("a header name");
        let value = pair[1].as_str().expect("a header value");
        headers.append(
            HeaderName::from_bytes(name.as_bytes()).expect("a valid header name"),
            HeaderValue::from_str(value).expect("a valid header value"),
        );
    }
    let now = UNIX_EPOCH + Duration::from_secs(case["now"].as_u64().expect("now, in Unix seconds"));
    let hint = hints(case).read(StatusCode::OK, &headers, now);
    let expect = &case["expect"];
    let used_up = expect["quota_used_up"].as_bool().expect("quota_used_up");
    let reset = expect["reset_after_secs"].as_u64().map(Duration::from_secs);
    let malformed = expect["malformed"].as_bool().expect("malformed");
    let got = (
        hint.is_quota_reset(),
        hint.retry_after(),
        hint.is_malformed(),
    );
    (got != (used_up, reset, malformed)).then(|| {
        format!(
            "read as (quota used up, reset, malformed) = {got:?}, expected {:?}",
            (used_up, reset, malformed)
        )
    })
}

#[test]
fn ratelimit_header_parser_cases_agree_but_for_the_listed_differences() {
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
        "ratelimit-header-parser: {} cases, {agreed} agree, {listed} listed differences",
        cases.len()
    );
    assert!(unexpected.is_empty(), "{}", unexpected.join("\n"));
    assert_eq!(agreed + listed, cases.len());
}

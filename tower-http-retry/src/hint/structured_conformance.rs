//! The HTTP working group's shared Structured Field test suite (httpwg/structured-field-tests,
//! vendored as data under `tests/conformance/structured-field-tests/`, its README naming the
//! commit and the licence) run against this parser.
//!
//! A unit test rather than an integration test: the parser is crate-private, and stays so.
//!
//! Each case's field lines are joined with ", " (RFC 9110's combination) and parsed as its
//! `header_type` says: a List or a Dictionary by the functions the rate-limit readers call, an
//! Item by the same item parser with RFC 9651's top-level rule around it (leading and trailing
//! spaces only). A `must_fail` case must fail; any other must parse to `expected`, except that a
//! `can_fail` case may fail. How `expected` is compared with what this parser keeps:
//! * a String and a Token are both [`Bare::Text`]: the rate-limit drafts name policies with either;
//! * a Byte Sequence, a Date and a Display String are [`Bare::Other`] (their syntax is checked,
//!   their value not kept): they are compared by kind only;
//! * Decimals are compared in thousandths, RFC 9651's precision, so that neither side's float
//!   rounding of the same decimal counts as a difference;
//! * repeated parameters are folded as RFC 9651 folds them (the first position, the last value),
//!   which is what [`Item::param`] reads.
//!
//! Every case must agree except those in [`DELIBERATE`], each of which must still disagree, so
//! that the list stays exact.

use super::{join, parse_dictionary, parse_list, Bare, Item, Parser};
use serde_json::Value;

/// The vendored files named, each as `(name, text)`.
macro_rules! vendored {
    ($($name:literal),* $(,)?) => {
        &[$((
            $name,
            include_str!(concat!("../../tests/conformance/structured-field-tests/", $name)),
        )),*]
    };
}

/// The vendored files, by their names in the suite.
const FILES: &[(&str, &str)] = vendored![
    "binary.json",
    "boolean.json",
    "date.json",
    "dictionary.json",
    "display-string.json",
    "examples.json",
    "item.json",
    "key-generated.json",
    "list.json",
    "listlist.json",
    "number-generated.json",
    "number.json",
    "param-dict.json",
    "param-list.json",
    "param-listlist.json",
    "string-generated.json",
    "string.json",
    "token-generated.json",
    "token.json",
];

/// Why a case is refused although RFC 9651 accepts it.
const INNER_LIST: &str = "Inner Lists are not parsed: no rate-limit policy, member or parameter \
    is one (a List member that is not a policy already makes the RateLimit field malformed)";

/// The cases this parser deliberately decides otherwise, as `("file: name", reason)`.
const DELIBERATE: &[(&str, &str)] = &[
    ("dictionary.json: empty list item dictionary", INNER_LIST),
    ("dictionary.json: list item dictionary", INNER_LIST),
    ("dictionary.json: single list item dictionary", INNER_LIST),
    ("examples.json: Example-DictListHeader", INNER_LIST),
    ("examples.json: Example-ListListParam", INNER_LIST),
    ("examples.json: Example-MixDict", INNER_LIST),
    ("examples.json: Example-ParamListHeader", INNER_LIST),
    ("examples.json: Example-StrListListHeader", INNER_LIST),
    ("listlist.json: basic list of lists", INNER_LIST),
    ("listlist.json: empty item list of lists", INNER_LIST),
    ("listlist.json: empty middle item list of lists", INNER_LIST),
    ("listlist.json: extra whitespace list of lists", INNER_LIST),
    ("listlist.json: single item list of lists", INNER_LIST),
    (
        "param-dict.json: list item parameterised dictionary",
        INNER_LIST,
    ),
    ("param-listlist.json: parameterised inner list", INNER_LIST),
    (
        "param-listlist.json: parameterised inner list item",
        INNER_LIST,
    ),
    (
        "param-listlist.json: parameterised inner list with parameterised item",
        INNER_LIST,
    ),
];

/// A parse result in one shape for the three header types: a List is members without keys, an
/// Item is a List of one.
type Members = Vec<(Option<String>, Item)>;

/// RFC 9651's top-level Item: spaces around it, nothing else.
fn parse_item(input: &[u8]) -> Option<Item> {
    let mut parser = Parser { input, at: 0 };
    parser.skip_sp();
    let item = parser.item()?;
    parser.skip_sp();
    parser.done().then_some(item)
}

fn parse(header_type: &str, raw: &[String]) -> Option<Members> {
    let lines = || raw.iter().map(|line| line.as_bytes());
    let members = match header_type {
        "list" => parse_list(lines())?
            .into_iter()
            .map(|item| (None, item))
            .collect(),
        "dictionary" => parse_dictionary(lines())?
            .into_iter()
            .map(|(key, item)| (Some(key), item))
            .collect(),
        "item" => vec![(None, parse_item(&join(lines()))?)],
        other => panic!("unknown header_type {other:?}"),
    };
    Some(
        members
            .into_iter()
            .map(|(key, item)| (key, fold_params(item)))
            .collect(),
    )
}

/// Repeated parameters as RFC 9651 keeps them: the first one's place, the last one's value.
fn fold_params(item: Item) -> Item {
    let mut params: Vec<(String, Bare)> = Vec::new();
    for (key, value) in item.params {
        match params.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => params.push((key, value)),
        }
    }
    Item {
        bare: item.bare,
        params,
    }
}

/// `expected` in this parser's terms; `None` when it holds what the parser never returns (an
/// Inner List).
fn expected(header_type: &str, value: &Value) -> Option<Members> {
    let array = value.as_array().expect("expected is an array");
    match header_type {
        "list" => array
            .iter()
            .map(|item| Some((None, item_of(item)?)))
            .collect(),
        "dictionary" => array
            .iter()
            .map(|member| {
                let pair = member.as_array().expect("a dictionary member is a pair");
                let key = pair[0].as_str().expect("a key is a string").to_owned();
                Some((Some(key), item_of(&pair[1])?))
            })
            .collect(),
        "item" => Some(vec![(None, item_of(value)?)]),
        other => panic!("unknown header_type {other:?}"),
    }
}

/// `[bare, params]`; `None` for an Inner List (`[[items], params]`).
fn item_of(value: &Value) -> Option<Item> {
    let pair = value.as_array().expect("an item is a pair");
    let bare = bare_of(&pair[0])?;
    let params = pair[1]
        .as_array()
        .expect("parameters are an array")
        .iter()
        .map(|param| {
            let pair = param.as_array().expect("a parameter is a pair");
            let key = pair[0].as_str().expect("a key is a string").to_owned();
            Some((key, bare_of(&pair[1])?))
        })
        .collect::<Option<_>>()?;
    Some(Item { bare, params })
}

fn bare_of(value: &Value) -> Option<Bare> {
    Some(match value {
        Value::Number(n) => match n.as_i64() {
            Some(integer) => Bare::Integer(integer),
            None => Bare::Decimal(n.as_f64().expect("a number")),
        },
        Value::String(text) => Bare::Text(text.clone()),
        Value::Bool(b) => Bare::Boolean(*b),
        Value::Object(typed) => match typed["__type"].as_str() {
            Some("token") => Bare::Text(typed["value"].as_str().expect("a token").to_owned()),
            Some("binary" | "date" | "displaystring") => Bare::Other,
            other => panic!("unknown __type {other:?}"),
        },
        Value::Array(_) => return None,
        Value::Null => panic!("null is no bare item"),
    })
}

fn same_bare(ours: &Bare, theirs: &Bare) -> bool {
    match (ours, theirs) {
        (Bare::Decimal(a), Bare::Decimal(b)) => (a * 1000.0).round() == (b * 1000.0).round(),
        _ => ours == theirs,
    }
}

fn same_item(ours: &Item, theirs: &Item) -> bool {
    same_bare(&ours.bare, &theirs.bare)
        && ours.params.len() == theirs.params.len()
        && ours
            .params
            .iter()
            .zip(&theirs.params)
            .all(|((k1, v1), (k2, v2))| k1 == k2 && same_bare(v1, v2))
}

fn same(ours: &Members, theirs: &Members) -> bool {
    ours.len() == theirs.len()
        && ours
            .iter()
            .zip(theirs)
            .all(|((k1, i1), (k2, i2))| k1 == k2 && same_item(i1, i2))
}

/// Why this parser's outcome for `case` is not the suite's, or `None` when they agree.
fn disagreement(case: &Value) -> Option<String> {
    let header_type = case["header_type"].as_str().expect("a header_type");
    let raw: Vec<String> = case["raw"]
        .as_array()
        .expect("parse tests have raw lines")
        .iter()
        .map(|line| line.as_str().expect("a raw line").to_owned())
        .collect();
    let flag = |key: &str| case.get(key).and_then(Value::as_bool).unwrap_or(false);
    let ours = parse(header_type, &raw);
    if flag("must_fail") {
        return ours.map(|parsed| format!("must fail, parsed as {parsed:?}"));
    }
    let theirs = expected(header_type, &case["expected"]);
    match (ours, theirs) {
        (None, _) if flag("can_fail") => None,
        (None, _) => Some("failed, must parse".to_owned()),
        (Some(parsed), None) => Some(format!("parsed as {parsed:?}, expected an Inner List")),
        (Some(parsed), Some(expected)) if !same(&parsed, &expected) => {
            Some(format!("parsed as {parsed:?}, expected {expected:?}"))
        }
        _ => None,
    }
}

#[test]
fn structured_field_tests_agree_but_for_the_listed_differences() {
    let (mut run, mut agreed, mut listed) = (0, 0, 0);
    let mut unexpected = Vec::new();
    let mut seen = Vec::new();
    for (file, text) in FILES {
        let cases: Vec<Value> = serde_json::from_str(text).expect("a vendored file is JSON");
        for case in &cases {
            let name = format!("{file}: {}", case["name"].as_str().expect("a name"));
            let deliberate = DELIBERATE.iter().any(|(listed, _)| *listed == name);
            run += 1;
            match (disagreement(case), deliberate) {
                (None, false) => agreed += 1,
                (Some(_), true) => listed += 1,
                (Some(why), false) => unexpected.push(format!("{name}: {why}")),
                (None, true) => unexpected.push(format!("{name}: listed, but now agrees")),
            }
            seen.push(name);
        }
    }
    for (name, _) in DELIBERATE {
        assert!(
            seen.contains(&name.to_string()),
            "listed, not in the suite: {name}"
        );
    }
    println!("structured-field-tests: {run} cases, {agreed} agree, {listed} listed differences");
    assert!(unexpected.is_empty(), "{}", unexpected.join("\n"));
    assert_eq!(agreed + listed, run);
}

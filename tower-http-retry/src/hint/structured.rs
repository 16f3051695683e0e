//! The part of RFC 9651 (Structured Field Values) the `RateLimit` fields need: a List of Items
//! with Parameters. Hand-written rather than a dependency: the maintained parser (`sfv`) needs a
//! newer Rust than this crate's MSRV, and the grammar used here is a page long.
//!
//! Parsing is strict, as RFC 9651 asks: any syntax error fails the whole field, which the
//! caller then ignores (and counts as malformed).

/// A bare item, as far as the rate-limit fields care.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Bare {
    Integer(i64),
    Decimal(f64),
    /// A String or a Token: the drafts name policies with either.
    Text(String),
    Boolean(bool),
    /// A Byte Sequence, a Date or a Display String: valid, but never what a rate-limit
    /// parameter holds.
    Other,
}

/// An item with its parameters.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Item {
    pub(crate) bare: Bare,
    pub(crate) params: Vec<(String, Bare)>,
}

impl Item {
    /// The value of parameter `key` (the last one wins, as RFC 9651 says of duplicates).
    pub(crate) fn param(&self, key: &str) -> Option<&Bare> {
        self.params
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// Parameter `key` as a non-negative integer, if it is one.
    pub(crate) fn non_negative(&self, key: &str) -> Option<u64> {
        match self.param(key)? {
            Bare::Integer(n) => u64::try_from(*n).ok(),
            _ => None,
        }
    }
}

/// Parses the field lines `values` (combined as one comma-separated list) as a List whose
/// members are Items. Inner lists are valid syntax but not rate-limit policies: `None`, like any
/// error.
pub(crate) fn parse_list<'a>(values: impl Iterator<Item = &'a [u8]>) -> Option<Vec<Item>> {
    let joined = join(values);
    let mut parser = Parser {
        input: &joined,
        at: 0,
    };
    parser.skip_sp();
    let mut items = Vec::new();
    if parser.done() {
        return Some(items);
    }
    loop {
        items.push(parser.item()?);
        parser.skip_ows();
        if parser.done() {
            return Some(items);
        }
        parser.expect(b',')?;
        parser.skip_ows();
        if parser.done() {
            return None; // a trailing comma
        }
    }
}

/// Parses the field lines `values` (combined as one comma-separated list) as a Dictionary whose
/// members are Items (draft-07's `RateLimit: limit=100, remaining=0, reset=2`); a key without a
/// value is `true`, and a repeated key takes the last value, as RFC 9651 says. Inner lists and any
/// syntax error give `None`.
pub(crate) fn parse_dictionary<'a>(
    values: impl Iterator<Item = &'a [u8]>,
) -> Option<Vec<(String, Item)>> {
    let joined = join(values);
    let mut parser = Parser {
        input: &joined,
        at: 0,
    };
    parser.skip_sp();
    let mut members: Vec<(String, Item)> = Vec::new();
    if parser.done() {
        return Some(members);
    }
    loop {
        let key = parser.key()?;
        let item = if parser.peek() == Some(b'=') {
            parser.at += 1;
            parser.item()?
        } else {
            Item {
                bare: Bare::Boolean(true),
                params: parser.params()?,
            }
        };
        // A repeated key keeps its first place and takes the last value (RFC 9651).
        match members.iter_mut().find(|(k, _)| *k == key) {
            Some(member) => member.1 = item,
            None => members.push((key, item)),
        }
        parser.skip_ows();
        if parser.done() {
            return Some(members);
        }
        parser.expect(b',')?;
        parser.skip_ows();
        if parser.done() {
            return None; // a trailing comma
        }
    }
}

/// The field lines as one value, joined as RFC 9110 combines repeated fields.
fn join<'a>(values: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut joined = Vec::new();
    for (i, value) in values.enumerate() {
        if i > 0 {
            joined.extend_from_slice(b", ");
        }
        joined.extend_from_slice(value);
    }
    joined
}

struct Parser<'a> {
    input: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.input.get(self.at).copied()
    }

    fn done(&self) -> bool {
        self.at >= self.input.len()
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn skip_sp(&mut self) {
        while self.peek() == Some(b' ') {
            self.at += 1;
        }
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.at += 1;
        }
    }

    fn item(&mut self) -> Option<Item> {
        let bare = self.bare()?;
        let params = self.params()?;
        Some(Item { bare, params })
    }

    fn params(&mut self) -> Option<Vec<(String, Bare)>> {
        let mut params = Vec::new();
        while self.peek() == Some(b';') {
            self.at += 1;
            self.skip_sp();
            let key = self.key()?;
            let value = if self.peek() == Some(b'=') {
                self.at += 1;
                self.bare()?
            } else {
                Bare::Boolean(true)
            };
            params.push((key, value));
        }
        Some(params)
    }

    fn key(&mut self) -> Option<String> {
        let start = self.at;
        match self.peek()? {
            b'a'..=b'z' | b'*' => self.at += 1,
            _ => return None,
        }
        while let Some(b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*') = self.peek() {
            self.at += 1;
        }
        Some(String::from_utf8_lossy(&self.input[start..self.at]).into_owned())
    }

    fn bare(&mut self) -> Option<Bare> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => self.number(),
            b'"' => self.string().map(Bare::Text),
            b'A'..=b'Z' | b'a'..=b'z' | b'*' => Some(Bare::Text(self.token())),
            b':' => self.byte_sequence(),
            b'?' => {
                self.at += 1;
                let value = match self.peek()? {
                    b'0' => false,
                    b'1' => true,
                    _ => return None,
                };
                self.at += 1;
                Some(Bare::Boolean(value))
            }
            b'@' => {
                self.at += 1;
                matches!(self.number()?, Bare::Integer(_)).then_some(Bare::Other)
            }
            b'%' => {
                self.at += 1;
                self.display_string()
            }
            _ => None,
        }
    }

    fn number(&mut self) -> Option<Bare> {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.at += 1;
        }
        let start = self.at;
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
        let integer_digits = self.at - start;
        if integer_digits == 0 {
            return None;
        }
        if self.peek() != Some(b'.') {
            if integer_digits > 15 {
                return None;
            }
            let text = std::str::from_utf8(&self.input[start..self.at]).ok()?;
            let value: i64 = text.parse().ok()?;
            return Some(Bare::Integer(if negative { -value } else { value }));
        }
        self.at += 1;
        let fraction_start = self.at;
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
        let fraction_digits = self.at - fraction_start;
        if integer_digits > 12 || !(1..=3).contains(&fraction_digits) {
            return None;
        }
        let text = std::str::from_utf8(&self.input[start..self.at]).ok()?;
        let value: f64 = text.parse().ok()?;
        Some(Bare::Decimal(if negative { -value } else { value }))
    }

    fn string(&mut self) -> Option<String> {
        self.expect(b'"')?;
        let mut text = String::new();
        loop {
            let byte = self.peek()?;
            self.at += 1;
            match byte {
                b'"' => return Some(text),
                b'\\' => {
                    let escaped = self.peek()?;
                    if escaped != b'"' && escaped != b'\\' {
                        return None;
                    }
                    self.at += 1;
                    text.push(char::from(escaped));
                }
                0x20..=0x7e => text.push(char::from(byte)),
                _ => return None,
            }
        }
    }

    fn token(&mut self) -> String {
        let start = self.at;
        self.at += 1;
        while let Some(byte) = self.peek() {
            let tchar = byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&byte);
            if !tchar {
                break;
            }
            self.at += 1;
        }
        String::from_utf8_lossy(&self.input[start..self.at]).into_owned()
    }

    fn byte_sequence(&mut self) -> Option<Bare> {
        self.expect(b':')?;
        let start = self.at;
        loop {
            match self.peek()? {
                b':' => break,
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'+' | b'/' | b'=' => self.at += 1,
                _ => return None,
            }
        }
        let content = &self.input[start..self.at];
        self.at += 1;
        // Base64 that decodes: `=` only at the end, never more than the last group lacks; a
        // missing `=` is accepted, as RFC 9651 asks of parsers.
        let data = content.iter().position(|&b| b == b'=');
        let data = data.unwrap_or(content.len());
        let padding = content.len() - data;
        let padded = content[data..].iter().all(|&b| b == b'=');
        let lacks = (4 - data % 4) % 4;
        (padded && data % 4 != 1 && padding <= lacks).then_some(Bare::Other)
    }

    /// A Display String after its `%`: printable ASCII and lowercase `%xx` escapes, together
    /// valid UTF-8. Not kept: no rate-limit parameter holds one.
    fn display_string(&mut self) -> Option<Bare> {
        self.expect(b'"')?;
        let mut bytes = Vec::new();
        loop {
            let byte = self.peek()?;
            self.at += 1;
            match byte {
                b'"' => return std::str::from_utf8(&bytes).ok().map(|_| Bare::Other),
                b'%' => {
                    let high = self.lower_hex()?;
                    let low = self.lower_hex()?;
                    bytes.push(high << 4 | low);
                }
                0x20..=0x7e => bytes.push(byte),
                _ => return None,
            }
        }
    }

    fn lower_hex(&mut self) -> Option<u8> {
        let digit = match self.peek()? {
            byte @ b'0'..=b'9' => byte - b'0',
            byte @ b'a'..=b'f' => byte - b'a' + 10,
            _ => return None,
        };
        self.at += 1;
        Some(digit)
    }
}

// The shared Structured Field test suite, which reads the vendored JSON through serde_json
// (the `json` feature's dependency).
#[cfg(all(test, feature = "json"))]
#[path = "structured_conformance.rs"]
mod conformance;

#[cfg(test)]
mod tests {
    use super::*;

    fn list(text: &str) -> Option<Vec<Item>> {
        parse_list(std::iter::once(text.as_bytes()))
    }

    fn text(s: &str) -> Bare {
        Bare::Text(s.to_owned())
    }

    #[test]
    fn items_with_parameters() {
        let items = list(r#""default";r=0;t=30, daily;r=100;t=3600"#).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].bare, text("default"));
        assert_eq!(items[0].non_negative("r"), Some(0));
        assert_eq!(items[0].non_negative("t"), Some(30));
        assert_eq!(items[1].bare, text("daily"));
        assert_eq!(items[1].non_negative("t"), Some(3600));
    }

    #[test]
    fn field_lines_are_joined_into_one_list() {
        let lines: [&[u8]; 2] = [b"\"a\";r=1", b"\"b\";r=0;t=5"];
        let items = parse_list(lines.into_iter()).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[1].non_negative("t"), Some(5));
    }

    #[test]
    fn bare_item_kinds() {
        let items =
            list(r#"1;a=-5;b=1.5;c=?0;d;e=:aGk=:;f=@1700000000;g=%"x\%c3%bc";h="q\"s""#).unwrap();
        let item = &items[0];
        assert_eq!(item.bare, Bare::Integer(1));
        assert_eq!(item.param("a"), Some(&Bare::Integer(-5)));
        assert_eq!(item.param("b"), Some(&Bare::Decimal(1.5)));
        assert_eq!(item.param("c"), Some(&Bare::Boolean(false)));
        assert_eq!(item.param("d"), Some(&Bare::Boolean(true)));
        assert_eq!(item.param("e"), Some(&Bare::Other));
        assert_eq!(item.param("f"), Some(&Bare::Other));
        assert_eq!(item.param("g"), Some(&Bare::Other));
        assert_eq!(item.param("h"), Some(&text("q\"s")));
        assert_eq!(item.non_negative("a"), None, "negative");
        assert_eq!(item.non_negative("b"), None, "not an integer");
    }

    #[test]
    fn duplicate_parameters_take_the_last() {
        let items = list("p;t=1;t=9").unwrap();
        assert_eq!(items[0].non_negative("t"), Some(9));
    }

    #[test]
    fn empty_field_is_an_empty_list() {
        assert_eq!(list("").unwrap(), vec![]);
        assert_eq!(list("   ").unwrap(), vec![]);
    }

    fn dictionary(text: &str) -> Option<Vec<(String, Item)>> {
        parse_dictionary(std::iter::once(text.as_bytes()))
    }

    #[test]
    fn dictionary_members() {
        let members = dictionary("limit=100, remaining=0, reset=2").unwrap();
        let keys: Vec<&str> = members.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["limit", "remaining", "reset"]);
        assert_eq!(members[1].1.bare, Bare::Integer(0));
        assert_eq!(members[2].1.bare, Bare::Integer(2));
        let members = dictionary("a;x=1, b=?0, a=5").unwrap();
        assert_eq!(
            members.len(),
            2,
            "a repeated key keeps one member, in its first place"
        );
        assert_eq!(members[0], ("a".to_owned(), list("5").unwrap().remove(0)));
        assert_eq!(members[1].1.bare, Bare::Boolean(false));
        assert_eq!(dictionary("").unwrap(), vec![]);
    }

    #[test]
    fn dictionary_syntax_errors_fail_the_whole_field() {
        for bad in [
            "limit=100,",
            "Limit=1",
            "\"default\";r=0",
            "a=(1 2)",
            "a=",
            "a=1 b=2",
            "a=1,,b=2",
        ] {
            assert_eq!(dictionary(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn syntax_errors_fail_the_whole_field() {
        for bad in [
            "a,",
            ",a",
            "a;;r=1",
            "a;R=1",
            "a;r=",
            "\"unterminated",
            "\"bad\\escape\"",
            "(inner list)",
            "a b",
            "1234567890123456",
            "1.2345",
            "a;r=1 ;t=2",
            "?2",
            ":not base64!:",
            ":=aGk:",
            ":aGk==:",
            "a;g=%\"%C3%BC\"",
            "a;g=%\"%c3\"",
            "a;r=1,,b",
        ] {
            assert_eq!(list(bad), None, "{bad:?}");
        }
    }
}

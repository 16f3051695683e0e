//! The items of a token stream: functions, modules, `impl`s and traits, with their attributes
//! and whether they are test code.

use super::lex::{Kind, Token};

/// An item: from its first attribute (`first`) or its first word (`head`) to its last token.
#[derive(Debug)]
pub(super) struct Item {
    pub(super) first: usize,
    pub(super) head: usize,
    pub(super) last: usize,
    /// `fn`, `mod`, `impl`, `trait`, `struct`, ... or a macro's name.
    pub(super) kind: String,
    /// The function's, module's or trait's name; an `impl`'s self type.
    pub(super) name: String,
    /// The `{ }` of a function, module, `impl` or `trait`: its opening and closing tokens.
    pub(super) body: Option<(usize, usize)>,
    pub(super) test: bool,
    pub(super) path_attr: Option<String>,
}

pub(super) struct Source<'a> {
    pub(super) tokens: &'a [Token],
    pub(super) close: &'a [usize],
}

impl Source<'_> {
    pub(super) fn punct(&self, i: usize, ch: char) -> bool {
        self.tokens
            .get(i)
            .is_some_and(|t| t.kind == Kind::Punct(ch))
    }

    pub(super) fn ident(&self, i: usize) -> Option<&str> {
        self.tokens
            .get(i)
            .filter(|t| t.kind == Kind::Ident)
            .map(|t| t.text.as_str())
    }

    /// The items between tokens `from` and `to` (exclusive).
    pub(super) fn items(&self, from: usize, to: usize) -> Vec<Item> {
        let mut items = Vec::new();
        let mut i = from;
        while i < to {
            if self.punct(i, ';') {
                i += 1;
                continue;
            }
            // An inner attribute, `#![...]`: no item's.
            if self.punct(i, '#') && self.punct(i + 1, '!') && self.punct(i + 2, '[') {
                i = self.close[i + 2] + 1;
                continue;
            }
            let first = i;
            let mut test = false;
            let mut path_attr = None;
            while i < to && self.punct(i, '#') && self.punct(i + 1, '[') {
                let end = self.close[i + 1];
                test |= self.attribute_is_test(i + 2, end);
                path_attr = path_attr.or_else(|| self.path_attribute(i + 2, end));
                i = end + 1;
            }
            if i >= to {
                break;
            }
            let head = i;
            let (kind, at) = self.kind(head, to);
            let name = match kind.as_str() {
                "impl" => self.self_type(at + 1, to),
                _ => self.ident(at + 1).unwrap_or_default().to_owned(),
            };
            // `const`, `static`, `type` and `use` end at their `;`, whatever braces they hold.
            let semicolon_only = matches!(kind.as_str(), "const" | "static" | "type" | "use");
            let mut j = head;
            let mut body = None;
            let last = loop {
                if j >= to {
                    break to - 1;
                }
                match self.tokens[j].kind {
                    Kind::Punct(';') => break j,
                    Kind::Punct('{') if !semicolon_only => {
                        body = Some((j, self.close[j]));
                        break self.close[j];
                    }
                    Kind::Punct('(' | '[' | '{') => j = self.close[j] + 1,
                    _ => j += 1,
                }
            };
            items.push(Item {
                first,
                head,
                last,
                kind,
                name,
                body,
                test,
                path_attr,
            });
            i = last + 1;
        }
        items
    }

    /// The item's kind word and where it is: the first word after its visibility and
    /// qualifiers (`pub(crate) const unsafe fn` is a `fn`).
    pub(super) fn kind(&self, mut i: usize, to: usize) -> (String, usize) {
        while i < to {
            match self.ident(i) {
                Some("pub") => {
                    i += 1;
                    if self.punct(i, '(') {
                        i = self.close[i] + 1;
                    }
                }
                Some("async" | "unsafe" | "default" | "safe") => i += 1,
                Some("extern") => {
                    i += 1;
                    if self.tokens.get(i).is_some_and(|t| t.kind == Kind::Literal) {
                        i += 1;
                    }
                }
                Some("const")
                    if matches!(
                        self.ident(i + 1),
                        Some("fn" | "unsafe" | "async" | "extern")
                    ) =>
                {
                    i += 1
                }
                Some(word) => return (word.to_owned(), i),
                None => break,
            }
        }
        (String::new(), i)
    }

    /// The self type's name of the `impl` whose generics or type start at `i`: the last word of
    /// the path after `for` (or of the path, when there is no `for`), before its own generics.
    pub(super) fn self_type(&self, mut i: usize, to: usize) -> String {
        if self.punct(i, '<') {
            i = self.angle_end(i, to);
        }
        let start = i;
        let mut depth = 0usize;
        let mut j = i;
        let mut after_for = None;
        while j < to && !self.punct(j, '{') && self.ident(j) != Some("where") {
            if self.punct(j, '<') {
                depth += 1;
            } else if self.punct(j, '>') && !self.arrow(j) {
                depth = depth.saturating_sub(1);
            } else if depth == 0 && self.ident(j) == Some("for") {
                after_for = Some(j + 1);
            }
            j += 1;
        }
        let mut name = String::new();
        let mut depth = 0usize;
        for k in after_for.unwrap_or(start)..j {
            if self.punct(k, '<') {
                depth += 1;
            } else if self.punct(k, '>') && !self.arrow(k) {
                depth = depth.saturating_sub(1);
            } else if depth == 0 {
                if let Some(word) = self.ident(k).filter(|w| !matches!(*w, "dyn" | "mut")) {
                    name = word.to_owned();
                }
            }
        }
        name
    }

    /// Past the `>` that closes the `<` at `i`.
    pub(super) fn angle_end(&self, mut i: usize, to: usize) -> usize {
        let mut depth = 0usize;
        while i < to {
            if self.punct(i, '<') {
                depth += 1;
            } else if self.punct(i, '>') && !self.arrow(i) {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            } else if self.punct(i, '(') || self.punct(i, '[') {
                i = self.close[i];
            }
            i += 1;
        }
        i
    }

    /// Whether the `>` at `i` is the end of a `->`.
    pub(super) fn arrow(&self, i: usize) -> bool {
        i > 0 && self.punct(i - 1, '-') && self.tokens[i - 1].end == self.tokens[i].start
    }

    /// Whether the attribute whose contents are tokens `from..to` makes its item test code:
    /// `#[test]`, `#[tokio::test]`, `#[cfg(test)]`, `#[cfg(all(test, ...))]`, `#[cfg(doctest)]`.
    pub(super) fn attribute_is_test(&self, from: usize, to: usize) -> bool {
        if self.ident(from) == Some("cfg") && self.punct(from + 1, '(') {
            let end = self.close[from + 1];
            return self.needs_test(from + 2, end);
        }
        let path = (from..to).all(|i| self.ident(i).is_some() || self.punct(i, ':'));
        path && to > from && self.ident(to - 1) == Some("test")
    }

    /// Whether the `cfg` predicate in tokens `from..to` holds only in a test build.
    pub(super) fn needs_test(&self, from: usize, to: usize) -> bool {
        match self.ident(from) {
            Some("test" | "doctest") => to == from + 1,
            Some(op @ ("all" | "any")) if self.punct(from + 1, '(') => {
                let end = self.close[from + 1];
                let args = self.arguments(from + 2, end);
                if op == "all" {
                    args.iter().any(|&(a, b)| self.needs_test(a, b))
                } else {
                    !args.is_empty() && args.iter().all(|&(a, b)| self.needs_test(a, b))
                }
            }
            _ => false,
        }
    }

    /// The comma-separated ranges of tokens `from..to`.
    pub(super) fn arguments(&self, from: usize, to: usize) -> Vec<(usize, usize)> {
        let mut args = Vec::new();
        let mut start = from;
        let mut i = from;
        while i < to {
            if self.punct(i, ',') {
                if i > start {
                    args.push((start, i));
                }
                start = i + 1;
            } else if matches!(self.tokens[i].kind, Kind::Punct('(' | '[' | '{')) {
                i = self.close[i];
            }
            i += 1;
        }
        if to > start {
            args.push((start, to));
        }
        args
    }

    /// `path = "file.rs"`: the file.
    pub(super) fn path_attribute(&self, from: usize, to: usize) -> Option<String> {
        if to != from + 3 || self.ident(from) != Some("path") || !self.punct(from + 1, '=') {
            return None;
        }
        let literal = &self.tokens[from + 2];
        (literal.kind == Kind::Literal).then(|| literal.text.trim_matches('"').to_owned())
    }
}

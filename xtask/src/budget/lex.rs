//! The budget's lexer: the tokens of a source file, comments left out, and the bracket each
//! opening bracket closes.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Ident,
    Punct(char),
    Literal,
    Lifetime,
}

#[derive(Debug)]
pub(super) struct Token {
    pub(super) kind: Kind,
    pub(super) text: String,
    /// Char offsets in the file, `end` past the token.
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) line: usize,
    pub(super) end_line: usize,
}

/// The tokens of `text`, comments left out.
pub(super) fn lex(text: &str) -> Vec<Token> {
    let c: Vec<char> = text.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let is_ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut tokens = Vec::new();
    let mut i = 0;
    let mut line = 1;
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
            continue;
        }
        if ch.is_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
            continue;
        }
        let kind = if let Some(end) = prefixed_literal(&c, i) {
            i = end;
            Kind::Literal
        } else if ch == '"' {
            i = string_end(&c, i + 1);
            Kind::Literal
        } else if ch == '\'' {
            if at(i + 1) == '\\' {
                i += 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
                Kind::Literal
            } else if at(i + 2) == '\'' {
                i += 3;
                Kind::Literal
            } else {
                i += 1;
                while i < c.len() && is_ident(c[i]) {
                    i += 1;
                }
                Kind::Lifetime
            }
        } else if ch.is_ascii_digit() {
            while i < c.len() && is_ident(c[i]) {
                i += 1;
            }
            Kind::Literal
        } else if is_ident(ch) {
            if ch == 'r' && at(i + 1) == '#' && is_ident(at(i + 2)) {
                i += 2; // a raw identifier, `r#type`
            }
            while i < c.len() && is_ident(c[i]) {
                i += 1;
            }
            Kind::Ident
        } else {
            i += 1;
            Kind::Punct(ch)
        };
        let text: String = c[start..i.min(c.len())].iter().collect();
        let end_line = line + text.matches('\n').count();
        tokens.push(Token {
            kind,
            text,
            start,
            end: i,
            line,
            end_line,
        });
        line = end_line;
    }
    tokens
}

/// The end of a literal with a prefix at `i`: `b'x'`, `b"..."`, `c"..."`, `r"..."`,
/// `r#"..."#`, `br#"..."#`, `cr"..."`.
pub(super) fn prefixed_literal(c: &[char], i: usize) -> Option<usize> {
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    match (c[i], at(i + 1)) {
        ('b', '\'') => {
            let mut j = i + 2;
            if at(j) == '\\' {
                j += 1;
            }
            j += 1;
            while j < c.len() && c[j] != '\'' {
                j += 1;
            }
            Some(j + 1)
        }
        ('b' | 'c', '"') => Some(string_end(c, i + 2)),
        ('b' | 'c', 'r') => raw_string_end(c, i + 1),
        ('r', _) => raw_string_end(c, i),
        _ => None,
    }
}

/// Past the closing quote of a string whose contents start at `i`.
pub(super) fn string_end(c: &[char], mut i: usize) -> usize {
    while i < c.len() && c[i] != '"' {
        if c[i] == '\\' {
            i += 1;
        }
        i += 1;
    }
    i + 1
}

/// Past the end of a raw string whose `r` is at `i`, if one starts there.
pub(super) fn raw_string_end(c: &[char], i: usize) -> Option<usize> {
    let mut j = i + 1;
    while c.get(j) == Some(&'#') {
        j += 1;
    }
    if c.get(j) != Some(&'"') {
        return None;
    }
    let hashes = j - i - 1;
    j += 1;
    while j < c.len() {
        if c[j] == '"' && (1..=hashes).all(|k| c.get(j + k) == Some(&'#')) {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(c.len())
}

/// For each opening bracket, the index of its closing one (unmatched: the last token).
pub(super) fn matching(tokens: &[Token]) -> Vec<usize> {
    let mut close = vec![0; tokens.len()];
    let mut stack = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        match token.kind {
            Kind::Punct('(' | '[' | '{') => stack.push(i),
            Kind::Punct(')' | ']' | '}') => {
                if let Some(open) = stack.pop() {
                    close[open] = i;
                }
            }
            _ => {}
        }
    }
    for open in stack {
        close[open] = tokens.len().saturating_sub(1);
    }
    close
}

//! `cargo xtask cycles`: the import graph between the files of each published crate, and the
//! cycles in it.
//!
//! A file depends on another when its code (comments, `#[cfg(test)]` code and `#[cfg(doc)]`
//! imports left out) names an
//! item of the other through a `crate::`, `super::` or `self::` path, or a path that starts with
//! one of its own child modules. A path that ends at a module's file is followed through that
//! file's re-exports (`pub use`, `pub(crate) use`) to the file that defines the item, and the
//! re-export lines themselves are no dependency: a module's front door re-exporting its
//! children is not a loop.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A module path from the crate root (`[]` is `lib.rs`).
type ModPath = Vec<String>;

struct Module {
    file: PathBuf,
    /// The item paths the file's code names, each absolute.
    uses: Vec<ModPath>,
    /// Names re-exported by the file, and the absolute path each comes from.
    reexports: BTreeMap<String, ModPath>,
}

/// One cycle: its files (relative to the crate), sorted, and the edges between them, each with
/// the first path that makes it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Cycle {
    pub(crate) files: Vec<String>,
    pub(crate) edges: Vec<(String, String, String)>,
}

/// The cycles of the crate whose sources are under `src`.
pub(crate) fn cycles(src: &Path) -> Result<Vec<Cycle>, String> {
    let mut modules = BTreeMap::new();
    load(src, &src.join("lib.rs"), Vec::new(), &mut modules)?;
    let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    let mut why: BTreeMap<(ModPath, ModPath), String> = BTreeMap::new();
    for (path, module) in &modules {
        let targets = edges.entry(path.clone()).or_default();
        for used in &module.uses {
            if let Some(target) = resolve(&modules, used, 0) {
                if &target != path {
                    why.entry((path.clone(), target.clone()))
                        .or_insert_with(|| format!("crate::{}", used.join("::")));
                    targets.insert(target);
                }
            }
        }
    }
    let name = |path: &ModPath| {
        let file = &modules[path].file;
        file.strip_prefix(src.parent().unwrap_or(src))
            .unwrap_or(file)
            .display()
            .to_string()
    };
    Ok(strongly_connected(&edges)
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| {
            let mut files: Vec<String> = component.iter().map(name).collect();
            files.sort();
            let members: BTreeSet<&ModPath> = component.iter().collect();
            let edges = why
                .iter()
                .filter(|((from, to), _)| members.contains(from) && members.contains(to))
                .map(|((from, to), path)| (name(from), name(to), path.clone()))
                .collect();
            Cycle { files, edges }
        })
        .collect())
}

/// Reads the module at `file` (module path `path`) and, recursively, its child modules.
fn load(
    src: &Path,
    file: &Path,
    path: ModPath,
    modules: &mut BTreeMap<ModPath, Module>,
) -> Result<(), String> {
    let text = fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let code = strip_comments(&text);
    let lines: Vec<&str> = code.lines().collect();
    // Own-file module directory: `lib.rs` and `mod.rs` hold their children beside them.
    let owns_dir = matches!(
        file.file_name().and_then(|n| n.to_str()),
        Some("lib.rs" | "mod.rs")
    );
    let dir = if owns_dir {
        file.parent().unwrap_or(src).to_path_buf()
    } else {
        file.with_extension("")
    };
    let mut children = Vec::new();
    let mut uses = Vec::new();
    let mut reexports = BTreeMap::new();
    let mut test_attr = false;
    let mut doc_attr = false;
    for line in &lines {
        let trimmed = line.trim();
        if trimmed.starts_with("#[cfg(test)]") {
            test_attr = true;
            continue;
        }
        // An import for rustdoc's links only: no dependency of the code.
        if trimmed.starts_with("#[cfg(doc)]") {
            doc_attr = true;
            continue;
        }
        if std::mem::take(&mut doc_attr) {
            continue;
        }
        if let Some(child) = mod_declaration(trimmed) {
            if !test_attr {
                children.push(child);
            }
            test_attr = false;
            continue;
        }
        if test_attr {
            // Code under `#[cfg(test)]` (an inline test module at the end of a file): the rest
            // of the file, by this crate's convention.
            if !trimmed.starts_with("#[") {
                break;
            }
            continue;
        }
        let reexport = ["pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .any(|p| trimmed.starts_with(p));
        for named in paths(trimmed) {
            let Some(absolute) = absolute(&path, &children, &named) else {
                continue;
            };
            if reexport {
                let last = named.last().cloned().unwrap_or_default();
                reexports.insert(last, absolute);
            } else {
                uses.push(absolute);
            }
        }
    }
    modules.insert(
        path.clone(),
        Module {
            file: file.to_path_buf(),
            uses,
            reexports,
        },
    );
    for child in children {
        let flat = dir.join(format!("{child}.rs"));
        let nested = dir.join(&child).join("mod.rs");
        let child_file = if flat.is_file() { flat } else { nested };
        if !child_file.is_file() {
            continue; // a `#[path]` module or one generated: not followed
        }
        let mut child_path = path.clone();
        child_path.push(child);
        load(src, &child_file, child_path, modules)?;
    }
    Ok(())
}

/// `mod name;` (any visibility), the name.
fn mod_declaration(line: &str) -> Option<String> {
    let rest = line
        .trim_start_matches("pub(crate) ")
        .trim_start_matches("pub(super) ")
        .trim_start_matches("pub ");
    let name = rest.strip_prefix("mod ")?.strip_suffix(';')?;
    Some(name.trim().to_owned())
}

/// `named` from the module at `path` as an absolute path, when it names the crate's own items.
fn absolute(path: &ModPath, children: &[String], named: &[String]) -> Option<ModPath> {
    let (first, rest) = named.split_first()?;
    let mut base = match first.as_str() {
        "crate" => Vec::new(),
        "self" => path.clone(),
        "super" => {
            let mut base = path.clone();
            base.pop();
            base
        }
        child if children.iter().any(|c| c == child) => {
            let mut base = path.clone();
            base.push(child.to_owned());
            base
        }
        _ => return None,
    };
    let mut rest = rest;
    while let Some(("super", tail)) = rest.split_first().map(|(h, t)| (h.as_str(), t)) {
        base.pop();
        rest = tail;
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The module whose file defines the item at `item`: the longest module prefix, followed
/// through that module's re-exports.
fn resolve(modules: &BTreeMap<ModPath, Module>, item: &ModPath, depth: u32) -> Option<ModPath> {
    let mut prefix = item.clone();
    while !modules.contains_key(&prefix) {
        prefix.pop()?;
    }
    if depth < 16 && prefix.len() < item.len() {
        let name = &item[prefix.len()];
        if let Some(source) = modules[&prefix].reexports.get(name) {
            let mut source = source.clone();
            source.extend(item[prefix.len() + 1..].iter().cloned());
            if let Some(found) = resolve(modules, &source, depth + 1) {
                return Some(found);
            }
        }
    }
    Some(prefix)
}

/// Every path a line of code names that starts with `crate`, `self`, `super` or any other
/// identifier followed by `::`, with `{...}` groups expanded.
fn paths(line: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = line.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_ident = (chars[i].is_alphabetic() || chars[i] == '_')
            && (i == 0
                || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_' || chars[i - 1] == ':'));
        if starts_ident {
            let (ident, next) = ident_at(&chars, i);
            if chars.get(next) == Some(&':') && chars.get(next + 1) == Some(&':') {
                let mut out = Vec::new();
                let end = tree(&chars, i, vec![], &mut out);
                found.extend(out);
                i = end.max(next);
                continue;
            }
            i = next.max(i + ident.len().max(1));
            continue;
        }
        i += 1;
    }
    found
}

fn ident_at(chars: &[char], start: usize) -> (String, usize) {
    let mut end = start;
    while end < chars.len() && (chars[end].is_alphanumeric() || chars[end] == '_') {
        end += 1;
    }
    (chars[start..end].iter().collect(), end)
}

/// Reads a use tree at `i` (a path, or a path ending in `::{a, b::c}`), with `prefix` before it.
fn tree(
    chars: &[char],
    mut i: usize,
    mut prefix: Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    loop {
        while chars.get(i) == Some(&' ') {
            i += 1;
        }
        if chars.get(i) == Some(&'{') {
            i += 1;
            loop {
                while matches!(chars.get(i), Some(' ' | ',')) {
                    i += 1;
                }
                match chars.get(i) {
                    None => return i,
                    Some('}') => return i + 1,
                    _ => {}
                }
                let before = i;
                i = tree(chars, i, prefix.clone(), out);
                if i == before {
                    i += 1;
                }
            }
        }
        if !chars.get(i).is_some_and(|c| c.is_alphabetic() || *c == '_') {
            if !prefix.is_empty() {
                out.push(prefix);
            }
            return i;
        }
        let (ident, next) = ident_at(chars, i);
        prefix.push(ident);
        i = next;
        if chars.get(i) == Some(&':') && chars.get(i + 1) == Some(&':') {
            i += 2;
            continue;
        }
        out.push(prefix);
        return i;
    }
}

/// `text` without its comments (`//` to the end of the line, `/* */`) and string literals'
/// contents, so that neither a doc link nor a string is taken for a path.
fn strip_comments(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        match (chars[i], chars.get(i + 1)) {
            ('/', Some('/')) => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ('/', Some('*')) => {
                i += 2;
                while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                    i += 1;
                }
                i += 2;
            }
            ('"', _) => {
                out.push('"');
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    if chars.get(i) == Some(&'\n') {
                        out.push('\n');
                    }
                    i += 1;
                }
                out.push('"');
                i += 1;
            }
            ('\'', _) if chars.get(i + 2) == Some(&'\'') || chars.get(i + 1) == Some(&'\\') => {
                // A char literal ('"', '\'', '\n'): skipped whole.
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// Tarjan's strongly connected components of `edges`.
fn strongly_connected(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct State<'a> {
        edges: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on_stack: BTreeSet<&'a ModPath>,
        components: Vec<Vec<ModPath>>,
    }
    fn visit<'a>(state: &mut State<'a>, node: &'a ModPath) {
        let n = state.index.len();
        state.index.insert(node, n);
        state.low.insert(node, n);
        state.stack.push(node);
        state.on_stack.insert(node);
        let edges = state.edges;
        for next in edges.get(node).into_iter().flatten() {
            if !state.index.contains_key(next) {
                visit(state, next);
                let low = state.low[node].min(state.low[next]);
                state.low.insert(node, low);
            } else if state.on_stack.contains(next) {
                let low = state.low[node].min(state.index[next]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(top) = state.stack.pop() {
                state.on_stack.remove(top);
                component.push(top.clone());
                if top == node {
                    break;
                }
            }
            state.components.push(component);
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for node in edges.keys() {
        if !state.index.contains_key(node) {
            visit(&mut state, node);
        }
    }
    state.components
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_trees_are_expanded_and_comments_and_strings_ignored() {
        let code = strip_comments(
            "use super::{a::B, c};\nlet x = \"crate::nope\"; // crate::nope\nuse crate::d::{e::{F, G}};",
        );
        let found: Vec<Vec<String>> = code.lines().flat_map(paths).collect();
        let joined: Vec<String> = found.iter().map(|p| p.join("::")).collect();
        assert!(joined.contains(&"super::a::B".to_owned()), "{joined:?}");
        assert!(joined.contains(&"super::c".to_owned()), "{joined:?}");
        assert!(joined.contains(&"crate::d::e::F".to_owned()), "{joined:?}");
        assert!(joined.contains(&"crate::d::e::G".to_owned()), "{joined:?}");
        assert!(!joined.iter().any(|p| p.contains("nope")), "{joined:?}");
    }

    #[test]
    fn a_loop_between_two_files_is_found_and_a_front_door_is_not_one() {
        let dir = std::env::temp_dir().join(format!("xtask-cycles-{}", std::process::id()));
        let src = dir.join("src");
        fs::create_dir_all(src.join("m")).unwrap();
        fs::write(src.join("lib.rs"), "mod m;\npub use m::A;\n").unwrap();
        fs::write(src.join("m/mod.rs"), "mod a;\nmod b;\npub use a::A;\n").unwrap();
        fs::write(src.join("m/a.rs"), "use super::b::B;\npub struct A;\n").unwrap();
        fs::write(src.join("m/b.rs"), "pub struct B;\n").unwrap();
        assert!(cycles(&src).unwrap().is_empty());
        fs::write(src.join("m/b.rs"), "use crate::A;\npub struct B;\n").unwrap();
        let found = cycles(&src).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        let files: Vec<Vec<String>> = found.into_iter().map(|cycle| cycle.files).collect();
        assert_eq!(
            files,
            vec![vec!["src/m/a.rs".to_owned(), "src/m/b.rs".to_owned()]]
        );
    }
}

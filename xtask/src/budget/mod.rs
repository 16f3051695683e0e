//! `cargo xtask budget`: the core's code lines against its budget, and the functions of the
//! published crates that are longer than [`MAX_FUNCTION_LINES`].
//!
//! A code line is a line with code on it: blank lines and lines of comments only (`//`, `///`,
//! `//!`, `/* */`) are left out, and so is test code: every item under `#[cfg(test)]` (or a
//! `cfg` that needs `test` or `doctest`, such as `all(test, feature = "json")`) or marked
//! `#[test]`, and the files of modules declared `#[cfg(test)] mod tests;`, so that tests grow
//! freely. The files are those the crate compiles: the module tree from `lib.rs`, `#[path]`
//! modules included, every `cfg` of a feature counted. Sources are read by a small lexer (std
//! only, like the rest of this crate): comments, strings, raw strings, char literals and
//! lifetimes are told apart, and items are found by their brackets.
//!
//! A function's length runs from its signature's first line (`pub fn`, after its attributes
//! and doc comment) to its closing brace: free functions, methods of `impl` blocks and the
//! default methods of traits, in the files above, test code left out. A function inside a
//! function counts in the outer one; one a `macro_rules!` defines is not read.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

mod items;
mod lex;

use items::{Item, Source};
use lex::{lex, matching};

/// The core's budget in code lines (`tower-http-retry/src`, test code left out).
///
/// Where it comes from: the core had 13,625 code lines when the budget was set; that figure
/// plus 5 % (14,306), rounded up to the next 500. Growth past it is a decision: raise this
/// figure in the same change, and say why in CONTRIBUTING.md ("The core's size").
pub(crate) const BUDGET: usize = 15_200;

/// The longest a non-test function of a published crate should be, in lines: a target not met
/// when the check was written (8 functions, of 81 to 152 lines), so the command lists the
/// functions over it and does not fail on them.
pub(crate) const MAX_FUNCTION_LINES: usize = 80;

/// The core, whose code lines the budget bounds.
const CORE: &str = "tower-http-retry";

/// `cargo xtask budget`: prints the core's code lines per module and the functions over
/// [`MAX_FUNCTION_LINES`] in the `published` crates; fails when the core is over [`BUDGET`].
pub(crate) fn check(root: &Path, published: &[&str]) -> ExitCode {
    let mut core = None;
    let mut long = Vec::new();
    for krate in published {
        let src = root.join(krate).join("src");
        let mut measured = match measure(root, &src) {
            Ok(measured) => measured,
            Err(error) => {
                eprintln!("xtask: {krate}: {error}");
                return ExitCode::FAILURE;
            }
        };
        for file in &measured.unreached {
            println!(
                "xtask: {krate}: {} is in no module tree: not read",
                file.display()
            );
        }
        long.append(&mut measured.long_functions);
        if *krate == CORE {
            core = Some(measured);
        }
    }
    let Some(core) = core else {
        eprintln!("xtask: {CORE} is not among the published crates");
        return ExitCode::FAILURE;
    };
    let total = core.total();
    println!("xtask: {CORE}'s code lines (not blank, not comments, not test code), per module:");
    println!("  {:<24} {:>6} {:>6}", "module", "lines", "share");
    for (module, lines) in core.by_module(&Path::new(CORE).join("src")) {
        let share = 100.0 * lines as f64 / total.max(1) as f64;
        println!("  {module:<24} {lines:>6} {share:>5.1}%");
    }
    println!("  {:<24} {total:>6} {:>5.1}%", "total", 100.0);
    println!();
    if long.is_empty() {
        println!(
            "xtask: no non-test function of a published crate is over {MAX_FUNCTION_LINES} lines"
        );
    } else {
        println!(
            "xtask: warning: {} non-test function(s) of the published crates over \
             {MAX_FUNCTION_LINES} lines (signature to closing brace), a target not yet met; \
             listed, not failed:",
            long.len()
        );
        for function in &long {
            println!(
                "  {}:{}  {}  {} lines",
                function.file.display(),
                function.line,
                function.name,
                function.lines
            );
        }
    }
    println!();
    if total > BUDGET {
        eprintln!(
            "xtask: FAILED: {CORE} has {total} code lines, over its budget of {BUDGET} \
             (CONTRIBUTING.md, \"The core's size\"). A capability goes in the core only if \
             the decision whether and when to send a request again needs it (classification, \
             backoff, the retry budget, hints, the circuit breaker, hedging, pacing) and it adds no \
             required dependency; one that wraps an engine, a protocol or a client with its \
             own release cadence is a companion crate. Growing the core past the budget is a \
             decision: raise BUDGET in xtask/src/budget.rs in the same change and say why in \
             CONTRIBUTING.md."
        );
        return ExitCode::FAILURE;
    }
    println!(
        "xtask: {CORE}: {total} code lines of a budget of {BUDGET} ({:.1}%, {} left)",
        100.0 * total as f64 / BUDGET as f64,
        BUDGET - total
    );
    ExitCode::SUCCESS
}

/// The code lines of one crate: per file (relative to the workspace root) and the functions over
/// [`MAX_FUNCTION_LINES`].
#[derive(Debug, Default)]
pub(crate) struct Measure {
    pub(crate) files: BTreeMap<PathBuf, usize>,
    pub(crate) long_functions: Vec<LongFunction>,
    /// `.rs` files under `src/` that no module declaration reaches, test modules' files aside.
    pub(crate) unreached: Vec<PathBuf>,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) struct LongFunction {
    pub(crate) file: PathBuf,
    pub(crate) line: usize,
    pub(crate) name: String,
    pub(crate) lines: usize,
}

impl Measure {
    pub(crate) fn total(&self) -> usize {
        self.files.values().sum()
    }

    /// The code lines per top-level module of the crate (`src/retry.rs` and `src/retry/**` are
    /// both `retry`; `lib.rs` is the crate root), largest first.
    pub(crate) fn by_module(&self, src: &Path) -> Vec<(String, usize)> {
        let mut modules: BTreeMap<String, usize> = BTreeMap::new();
        for (file, lines) in &self.files {
            let relative = file.strip_prefix(src).unwrap_or(file);
            let first = relative
                .components()
                .next()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .unwrap_or_default();
            let module = match first.as_str() {
                "lib.rs" => "lib.rs (crate root)".to_owned(),
                other => other.strip_suffix(".rs").unwrap_or(other).to_owned(),
            };
            *modules.entry(module).or_default() += lines;
        }
        let mut rows: Vec<(String, usize)> = modules.into_iter().collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        rows
    }
}

/// Measures the crate whose sources are under `src` (`root/<crate>/src`); paths are reported
/// relative to `root`.
pub(crate) fn measure(root: &Path, src: &Path) -> Result<Measure, String> {
    let mut measure = Measure::default();
    let mut test_dirs = Vec::new();
    let mut test_files = BTreeSet::new();
    let mut queue = vec![(src.join("lib.rs"), src.to_path_buf())];
    let mut seen = BTreeSet::new();
    while let Some((file, dir)) = queue.pop() {
        if !seen.insert(file.clone()) {
            continue;
        }
        let text = fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let shown = file.strip_prefix(root).unwrap_or(&file).to_path_buf();
        let read = read_file(&text, &shown);
        measure.files.insert(shown, read.code_lines);
        measure.long_functions.extend(read.long_functions);
        let base = file.parent().unwrap_or(src).to_path_buf();
        for child in read.children {
            let (child_file, child_dir) = child.locate(&dir, &base);
            if child.test {
                test_dirs.push(child_dir);
                test_files.insert(child_file);
            } else if child_file.is_file() {
                queue.push((child_file, child_dir));
            }
        }
    }
    for file in rust_files(src) {
        let is_test =
            test_files.contains(&file) || test_dirs.iter().any(|dir| file.starts_with(dir));
        if !seen.contains(&file) && !is_test {
            measure
                .unreached
                .push(file.strip_prefix(root).unwrap_or(&file).to_path_buf());
        }
    }
    measure
        .long_functions
        .sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    Ok(measure)
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// A `mod name;` declaration of a file.
#[derive(Debug)]
struct Child {
    name: String,
    /// The module's directory, relative to the file's own module directory: the names of the
    /// inline modules (`mod a { mod b; }`) the declaration is in.
    inline: Vec<String>,
    path_attr: Option<String>,
    test: bool,
}

impl Child {
    /// The child's file and the directory of its own children. `dir` is the declaring file's
    /// module directory, `base` the directory the declaring file is in.
    fn locate(&self, dir: &Path, base: &Path) -> (PathBuf, PathBuf) {
        let mut dir = dir.to_path_buf();
        for name in &self.inline {
            dir.push(name);
        }
        if let Some(path) = &self.path_attr {
            // `#[path]` outside inline modules is relative to the declaring file's directory;
            // the file it names holds its children beside it, as a `mod.rs` does.
            let from = if self.inline.is_empty() { base } else { &dir };
            let file = from.join(path);
            let children = file.parent().unwrap_or(from).to_path_buf();
            return (file, children);
        }
        let flat = dir.join(format!("{}.rs", self.name));
        let nested = dir.join(&self.name).join("mod.rs");
        let children = dir.join(&self.name);
        if flat.is_file() {
            (flat, children)
        } else {
            (nested, children)
        }
    }
}

/// What one file holds: its code lines, its functions over the limit, its `mod name;`
/// declarations.
#[derive(Debug, Default)]
struct FileRead {
    code_lines: usize,
    long_functions: Vec<LongFunction>,
    children: Vec<Child>,
}

fn read_file(text: &str, shown: &Path) -> FileRead {
    let tokens = lex(text);
    let close = matching(&tokens);
    let source = Source {
        tokens: &tokens,
        close: &close,
    };
    let mut read = FileRead::default();
    let mut test = vec![false; tokens.len()];
    let items = source.items(0, tokens.len());
    let mut walk = Walk {
        source: &source,
        shown,
        test: &mut test,
        read: &mut read,
    };
    walk.items(&items, &[], None);
    let blank: Vec<bool> = text.lines().map(|l| l.trim().is_empty()).collect();
    let mut lines = BTreeSet::new();
    for (token, &is_test) in tokens.iter().zip(&test) {
        if !is_test {
            for line in token.line..=token.end_line {
                if !blank.get(line - 1).copied().unwrap_or(true) {
                    lines.insert(line);
                }
            }
        }
    }
    read.code_lines = lines.len();
    read
}

struct Walk<'a> {
    source: &'a Source<'a>,
    shown: &'a Path,
    test: &'a mut Vec<bool>,
    read: &'a mut FileRead,
}

impl Walk<'_> {
    /// Marks test items, records functions and module declarations; `inline` is the path of
    /// inline modules the items are in, `owner` the type or trait of an `impl` or `trait` body.
    fn items(&mut self, items: &[Item], inline: &[String], owner: Option<&str>) {
        for item in items {
            if item.test {
                for flag in &mut self.test[item.first..=item.last] {
                    *flag = true;
                }
            }
            match (item.kind.as_str(), item.body) {
                ("mod", None) => self.read.children.push(Child {
                    name: item.name.clone(),
                    inline: inline.to_vec(),
                    path_attr: item.path_attr.clone(),
                    test: item.test,
                }),
                _ if item.test => {}
                ("mod", Some((open, close))) => {
                    let mut inner = inline.to_vec();
                    inner.push(item.name.clone());
                    let items = self.source.items(open + 1, close);
                    self.items(&items, &inner, None);
                }
                ("impl" | "trait", Some((open, close))) => {
                    let items = self.source.items(open + 1, close);
                    self.items(&items, inline, Some(&item.name));
                }
                ("fn", Some((_, close))) => {
                    let tokens = self.source.tokens;
                    let line = tokens[item.head].line;
                    let lines = tokens[close].end_line - line + 1;
                    if lines > MAX_FUNCTION_LINES {
                        let name = match owner {
                            Some(owner) => format!("{owner}::{}", item.name),
                            None => item.name.clone(),
                        };
                        self.read.long_functions.push(LongFunction {
                            file: self.shown.to_path_buf(),
                            line,
                            name,
                            lines,
                        });
                    }
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> FileRead {
        read_file(text, Path::new("src/x.rs"))
    }

    #[test]
    fn comments_blank_lines_and_test_code_are_left_out() {
        let text = "//! A module.\n\
                    \n\
                    /// A doc.\n\
                    pub fn f() -> u8 { // trailing\n\
                    /* a block\n\
                       comment */\n\
                        1\n\
                    }\n\
                    \n\
                    #[cfg(test)]\n\
                    mod tests {\n\
                        #[test]\n\
                        fn t() {}\n\
                    }\n\
                    #[cfg(all(test, feature = \"json\"))]\n\
                    fn helper() {}\n\
                    #[cfg(any(test, feature = \"json\"))]\n\
                    fn shared() {}\n";
        let read = read(text);
        // `pub fn f`, `1`, `}`, and `fn shared` with its attribute (not test-only).
        assert_eq!(read.code_lines, 5);
    }

    #[test]
    fn strings_and_chars_hide_comment_and_brace_look_alikes() {
        let text = "fn f() {\n\
                    let a = \"// not a comment {\";\n\
                    let b = r#\"}\"# ;\n\
                    let c = '{';\n\
                    let d: &'static str = \"\\\"}\";\n\
                    }\n\
                    fn g() {}\n";
        let read = read(text);
        assert_eq!(read.code_lines, 7);
        let source_tokens = lex(text);
        let close = matching(&source_tokens);
        let source = Source {
            tokens: &source_tokens,
            close: &close,
        };
        let items = source.items(0, source_tokens.len());
        let names: Vec<&str> = items.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["f", "g"]);
    }

    #[test]
    fn long_functions_are_named_with_their_impl_and_test_ones_are_not() {
        let body = "    let x = 1;\n".repeat(MAX_FUNCTION_LINES);
        let text = format!(
            "impl<S, F: Fn() -> u8> Service<Request> for Retry<S> where S: Clone {{\n\
             pub(crate) async fn call(&self) {{\n{body}}}\n\
             #[cfg(test)]\n\
             fn helper() {{\n{body}}}\n\
             }}\n\
             trait T {{\n\
             fn short(&self);\n\
             fn default_one(&self) {{\n{body}}}\n\
             }}\n\
             const X: Foo = Foo {{ a: 1 }};\n\
             fn free() {{\n{body}}}\n"
        );
        let read = read(&text);
        let found: Vec<(usize, &str, usize)> = read
            .long_functions
            .iter()
            .map(|f| (f.line, f.name.as_str(), f.lines))
            .collect();
        let n = MAX_FUNCTION_LINES + 2;
        assert_eq!(
            found,
            [
                (2, "Retry::call", n),
                (2 * n + 6, "T::default_one", n),
                (3 * n + 8, "free", n)
            ]
        );
    }

    #[test]
    fn module_declarations_are_found_with_their_test_flag_and_path() {
        let text = "mod a;\n#[cfg(test)]\nmod tests;\n#[path = \"b_off.rs\"]\nmod b;\n\
                    pub mod c { pub(crate) mod d; }\n";
        let children: Vec<(String, Vec<String>, Option<String>, bool)> = read(text)
            .children
            .into_iter()
            .map(|c| (c.name, c.inline, c.path_attr, c.test))
            .collect();
        assert_eq!(
            children,
            [
                ("a".to_owned(), vec![], None, false),
                ("tests".to_owned(), vec![], None, true),
                ("b".to_owned(), vec![], Some("b_off.rs".to_owned()), false),
                ("d".to_owned(), vec!["c".to_owned()], None, false),
            ]
        );
    }

    #[test]
    fn a_crate_is_walked_from_its_root_and_test_files_left_out() {
        let dir = std::env::temp_dir().join(format!("xtask-budget-{}", std::process::id()));
        let src = dir.join("src");
        fs::create_dir_all(src.join("m/tests")).unwrap();
        fs::write(src.join("lib.rs"), "mod m;\npub fn f() {}\n").unwrap();
        fs::write(
            src.join("m/mod.rs"),
            "#[cfg(test)]\nmod tests;\nfn g() {}\n",
        )
        .unwrap();
        fs::write(src.join("m/tests/mod.rs"), "mod more;\nfn t() {}\n").unwrap();
        fs::write(src.join("m/tests/more.rs"), "fn t2() {}\n").unwrap();
        fs::write(src.join("stray.rs"), "fn s() {}\n").unwrap();
        let measure = measure(&dir, &src).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(measure.total(), 3);
        assert_eq!(measure.unreached, [PathBuf::from("src/stray.rs")]);
        assert_eq!(
            measure.by_module(Path::new("src")),
            [("lib.rs (crate root)".to_owned(), 2), ("m".to_owned(), 1)]
        );
    }
}

//! The project's own commands, run as `cargo xtask <command>` (an alias in `.cargo/config.toml`).
//!
//! * `cargo xtask test [ARGS...]`: installs the Debian packages of the real servers the tests
//!   start (`tower-http-retry-hyper/tests/interop/`: nginx, HAProxy;
//!   `tower-http-retry-redis/tests/fleet/`: Redis; the redelivery engines: Redis, Postgres) when
//!   they are missing (with `apt-get` when run as root; otherwise it prints what to install),
//!   then runs
//!   `cargo test --all-features [ARGS...]` with `TOWER_HTTP_RETRY_REQUIRE_SERVERS=1`, so that a
//!   missing server fails the run instead of skipping its tests.
//! * `cargo xtask instructions`: the success-path instruction gate. Installs valgrind (Debian)
//!   and the `gungraun-runner` of the `gungraun` version pinned in
//!   `benches-instructions/Cargo.toml` when missing, runs that crate's bench (a workspace member
//!   of its own, so that its release build is the core with default features, tower, http,
//!   tokio, gungraun and tower-resilience's retry, not every dev-dependency), prints its table, and fails when a layer's
//!   overhead over tower's (instructions per successful call above the no-layer row, divided by
//!   `tower::retry` + `TpsBudget`'s) is more than 5 % above the value recorded in
//!   `benches-instructions/instructions.baseline`.
//! * `cargo xtask cycles`: the import graph between the files of each published crate (see
//!   `cycles.rs`); fails on any cycle, naming its files.
//! * `cargo xtask budget`: the core's code lines (test code, comments and blank lines left out)
//!   per module, against the budget `budget::BUDGET` (see `budget.rs` and CONTRIBUTING.md, "The
//!   core's size"), which fails the command when exceeded; and the non-test functions of the
//!   published crates over 80 lines, listed.

#![forbid(unsafe_code)]

mod budget;
mod cycles;

use std::env;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

/// The servers the interop, fleet and redelivery suites start: the binary and the Debian package
/// that installs it.
const SERVERS: [(&str, &str); 4] = [
    ("nginx", "nginx"),
    ("haproxy", "haproxy"),
    ("redis-server", "redis-server"),
    ("postgres", "postgresql"),
];

/// What the interop and fleet suites read to fail, instead of skip, when a server is missing.
const REQUIRE_SERVERS: &str = "TOWER_HTTP_RETRY_REQUIRE_SERVERS";

fn main() -> ExitCode {
    let mut args = env::args().skip(1);
    match args.next().as_deref() {
        Some("test") => test(args.collect()),
        Some("instructions") => instructions(),
        Some("cycles") => check_cycles(),
        Some("budget") => budget::check(&workspace_root(), &PUBLISHED),
        _ => {
            eprintln!(
                "usage: cargo xtask test [ARGS passed to `cargo test --all-features`]\n       \
                 cargo xtask instructions\n       \
                 cargo xtask cycles\n       \
                 cargo xtask budget"
            );
            ExitCode::FAILURE
        }
    }
}

fn test(extra: Vec<String>) -> ExitCode {
    install_servers();
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    println!("xtask: cargo test --all-features {}", extra.join(" "));
    let status = Command::new(cargo)
        .arg("test")
        .arg("--all-features")
        .args(&extra)
        .env(REQUIRE_SERVERS, "1")
        .status();
    match status {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("xtask: cargo test failed ({status})");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("xtask: could not run cargo: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Installs the packages of the servers that are missing, or says how to.
fn install_servers() {
    let why = format!("the interop and fleet suites fail without them ({REQUIRE_SERVERS}=1)");
    install_debian(&SERVERS, &why);
}

/// Installs the Debian packages of the `(binary, package)` pairs whose binary is missing (with
/// `apt-get`, as root), or says how to and `why`.
fn install_debian(wanted: &[(&str, &str)], why: &str) {
    let missing: Vec<&str> = wanted
        .iter()
        .filter(|(binary, _)| locate(binary).is_none())
        .map(|&(_, package)| package)
        .collect();
    if missing.is_empty() {
        return;
    }
    let list = missing.join(" ");
    if !is_root() || locate("apt-get").is_none() {
        eprintln!(
            "xtask: install {list} (Debian: `sudo apt-get install -y {list}`) and run again; \
             {why}."
        );
        return;
    }
    println!("xtask: installing {list} with apt-get");
    let update = Command::new("apt-get").arg("update").status();
    let install = Command::new("apt-get")
        .args(["install", "-y", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status();
    for (step, status) in [("apt-get update", update), ("apt-get install", install)] {
        match status {
            Ok(status) if status.success() => {}
            Ok(status) => eprintln!("xtask: {step} failed ({status})"),
            Err(error) => eprintln!("xtask: could not run {step}: {error}"),
        }
    }
}

/// Where `binary` is, on `PATH`, in the `sbin` directories Debian installs servers in, or in
/// Debian's Postgres directories.
fn locate(binary: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH").unwrap_or_default();
    // Debian keeps Postgres's programs in a directory per major version.
    let postgres = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("bin"));
    env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .chain(postgres)
        .map(|dir| dir.join(binary))
        .find(|candidate| candidate.is_file())
}

/// Whether this process runs as root (`id -u` says 0).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// The rows whose overhead over tower's is gated, as the bench names them.
const GATED: [&str; 3] = ["ours_default", "ours_pacing", "hedge_armed"];
/// The row every overhead is counted above: the bare service.
const NO_LAYER: &str = "no_layer";
/// The row the overheads are divided by: `tower::retry` with `TpsBudget`.
const TOWER: &str = "tower_retry_tps_budget";
/// How far above its recorded value an overhead ratio may rise before the gate fails.
const TOLERANCE: f64 = 1.05;
/// The recorded ratios, one `row ratio` line each (`#` starts a comment).
const BASELINE: &str = "benches-instructions/instructions.baseline";
/// The bench's own package, and its manifest (which pins the `gungraun` version).
const BENCH_PACKAGE: &str = "tower-http-retry-instructions";
const BENCH_MANIFEST: &str = "benches-instructions/Cargo.toml";
/// Where the bench is built: a path of the same length for every checkout, `/tmp/` and 16 hex
/// digits of a hash of the checkout's root. The path of the bench binary is on its stack, and
/// where the stack starts moves the alignment of the buffers `memcpy` copies, which changes its
/// instruction count (measured: 12 instructions a call on the `no_layer` and `tower` rows, 1.7 %
/// on the ratio, between two target directories). One directory per checkout, not one for all:
/// cargo decides freshness by file times, and would take another checkout's build for this one.
fn target_dir(root: &Path) -> PathBuf {
    use std::hash::{Hash, Hasher};
    // `DefaultHasher::new` has fixed keys: the same root gives the same directory every run.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    root.hash(&mut hasher);
    PathBuf::from(format!("/tmp/thr-instructions-{:016x}", hasher.finish()))
}

/// `cargo xtask instructions`: runs the instruction-count bench and compares our overhead ratios
/// with the recorded ones.
fn instructions() -> ExitCode {
    install_debian(
        &[("valgrind", "valgrind")],
        "the instruction counts are callgrind's",
    );
    let root = workspace_root();
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    if let Err(error) = install_runner(&cargo, &root) {
        eprintln!("xtask: {error}");
        return ExitCode::FAILURE;
    }
    let baseline = match fs::read_to_string(root.join(BASELINE)) {
        Ok(text) => parse_baseline(&text),
        Err(error) => {
            eprintln!("xtask: cannot read {BASELINE}: {error}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "xtask: cargo bench -p {BENCH_PACKAGE} --bench instructions -- --nocapture \
         (CARGO_TARGET_DIR={})",
        target_dir(&root).display()
    );
    let table = match run_bench(&cargo, &root) {
        Ok(table) => table,
        Err(error) => {
            eprintln!("xtask: {error}");
            return ExitCode::FAILURE;
        }
    };
    let (Some(&none), Some(&tower)) = (per_call(&table, NO_LAYER), per_call(&table, TOWER)) else {
        eprintln!("xtask: the bench's table lacks the {NO_LAYER} or {TOWER} row");
        return ExitCode::FAILURE;
    };
    let mut failed = false;
    println!("\nxtask: overhead over tower's (row - {NO_LAYER}) / ({TOWER} - {NO_LAYER})");
    for row in GATED {
        let Some(&n) = per_call(&table, row) else {
            eprintln!("xtask: the bench's table lacks the {row} row");
            failed = true;
            continue;
        };
        let ratio = overhead_ratio(n, none, tower);
        match baseline.iter().find(|(name, _)| name == row) {
            Some(&(_, recorded)) => {
                let verdict = if ratio > recorded * TOLERANCE {
                    failed = true;
                    "FAILED: more than 5 % above the recorded value"
                } else {
                    "ok"
                };
                println!("  {row:<14} {ratio:.3}x (recorded {recorded:.3}x): {verdict}");
            }
            None => {
                println!("  {row:<14} {ratio:.3}x: not recorded in {BASELINE}");
                failed = true;
            }
        }
    }
    if failed {
        eprintln!(
            "xtask: the success path got heavier; if that is intended, record the new ratio in \
             {BASELINE}"
        );
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// A layer's instructions per call above the bare service's, in units of tower's.
fn overhead_ratio(row: f64, no_layer: f64, tower: f64) -> f64 {
    (row - no_layer) / (tower - no_layer)
}

/// The workspace root: the parent of this crate's manifest directory.
fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// Installs `gungraun-runner` at the version of the bench's `gungraun` dependency (which pins
/// it with `=`; the two must match) unless that version is already on `PATH`.
fn install_runner(cargo: &std::ffi::OsStr, root: &Path) -> Result<(), String> {
    let manifest = fs::read_to_string(root.join(BENCH_MANIFEST))
        .map_err(|error| format!("cannot read {BENCH_MANIFEST}: {error}"))?;
    let version = pinned_version(&manifest, "gungraun")
        .ok_or(format!("{BENCH_MANIFEST} pins no `gungraun = \"=X.Y.Z\"`"))?;
    let installed = Command::new("gungraun-runner")
        .arg("--version")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned());
    if installed.is_some_and(|out| out.split_whitespace().any(|word| word == version)) {
        return Ok(());
    }
    println!("xtask: cargo install --locked --debug gungraun-runner --version {version}");
    // A debug build: the runner starts valgrind and reads its output files, so its own speed
    // does not show in a run of a few seconds, nor in the counts (valgrind counts the bench
    // binary only); it installs in about half the time of a release build (58 s against 1 min
    // 42 s on two idle cores, 2.3 against 4.4 minutes on two shared ones), which CI pays on
    // every clean machine.
    let status = Command::new(cargo)
        .args([
            "install",
            "--locked",
            "--debug",
            "gungraun-runner",
            "--version",
            version,
        ])
        .status()
        .map_err(|error| format!("could not run cargo install: {error}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo install gungraun-runner failed ({status})"))
    }
}

/// The version of `crate = "=X.Y.Z"` in a manifest.
fn pinned_version<'a>(manifest: &'a str, krate: &str) -> Option<&'a str> {
    manifest.lines().find_map(|line| {
        let (name, value) = line.split_once('=')?;
        if name.trim() != krate {
            return None;
        }
        value.trim().strip_prefix("\"=")?.strip_suffix('"')
    })
}

/// Runs the bench, echoing its output, and returns the rows of the table it prints at the end:
/// each row's name and instructions per call.
fn run_bench(cargo: &std::ffi::OsStr, root: &Path) -> Result<Vec<(String, f64)>, String> {
    let mut child = Command::new(cargo)
        .args([
            "bench",
            // Default features: what a user's build runs. The telemetry features add their
            // listener checks (README, Performance), measured apart.
            "--package",
            BENCH_PACKAGE,
            "--bench",
            "instructions",
            "--",
            "--nocapture",
        ])
        .current_dir(root)
        .env("CARGO_TARGET_DIR", target_dir(root))
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|error| format!("could not run cargo bench: {error}"))?;
    let mut table = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        let mut in_table = false;
        for line in BufReader::new(stdout).lines() {
            let line = line.map_err(|error| format!("reading the bench's output: {error}"))?;
            println!("{line}");
            if line.starts_with("instructions per successful call") {
                in_table = true;
                table.clear();
            } else if in_table {
                if let Some(row) = table_row(&line) {
                    table.push(row);
                }
            }
        }
    }
    let status = child
        .wait()
        .map_err(|error| format!("waiting for cargo bench: {error}"))?;
    if !status.success() {
        return Err(format!("cargo bench failed ({status})"));
    }
    Ok(table)
}

/// `name instr/call ...` from a line of the bench's table.
fn table_row(line: &str) -> Option<(String, f64)> {
    let mut words = line.split_whitespace();
    let name = words.next()?;
    let per_call = words.next()?.parse().ok()?;
    Some((name.to_string(), per_call))
}

fn per_call<'a>(table: &'a [(String, f64)], row: &str) -> Option<&'a f64> {
    table
        .iter()
        .find(|(name, _)| name == row)
        .map(|(_, per_call)| per_call)
}

/// `row ratio` lines; blank lines and `#` comments skipped.
fn parse_baseline(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or_default().trim())
        .filter_map(|line| {
            let (name, ratio) = line.split_once(char::is_whitespace)?;
            Some((name.to_string(), ratio.trim().parse().ok()?))
        })
        .collect()
}

/// The published crates, whose import graphs `cargo xtask cycles` checks and whose functions
/// `cargo xtask budget` measures.
const PUBLISHED: [&str; 6] = [
    "tower-http-retry",
    "tower-http-retry-hyper",
    "tower-http-retry-grpc",
    "tower-http-retry-redis",
    "tower-http-retry-reqwest-middleware",
    "tower-http-retry-redelivery",
];

fn check_cycles() -> ExitCode {
    let root = workspace_root();
    let mut found = 0;
    for krate in PUBLISHED {
        match cycles::cycles(&root.join(krate).join("src")) {
            Ok(cycles) if cycles.is_empty() => println!("xtask: {krate}: no import cycle"),
            Ok(cycles) => {
                for cycle in cycles {
                    found += 1;
                    println!(
                        "xtask: {krate}: import cycle: {}",
                        cycle.files.join(" <-> ")
                    );
                    for (from, to, path) in cycle.edges {
                        println!("xtask:     {from} -> {to} ({path})");
                    }
                }
            }
            Err(error) => {
                eprintln!("xtask: {krate}: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    if found == 0 {
        ExitCode::SUCCESS
    } else {
        eprintln!("xtask: {found} import cycle(s)");
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_version_is_read_from_the_manifest() {
        let manifest = "[dev-dependencies]\ncriterion = \"0.8\"\ngungraun = \"=0.20.0\"\n";
        assert_eq!(pinned_version(manifest, "gungraun"), Some("0.20.0"));
        assert_eq!(pinned_version(manifest, "criterion"), None);
    }

    #[test]
    fn table_rows_and_the_baseline_parse() {
        assert_eq!(
            table_row("ours_default                 4856.6           1.07x       1.53x"),
            Some(("ours_default".to_string(), 4856.6))
        );
        assert_eq!(table_row("row        instr/call vs tower_retry"), None);
        assert_eq!(
            parse_baseline("# comment\n\nours_default 1.43  # measured\nours_pacing 1.5\n"),
            [
                ("ours_default".to_string(), 1.43),
                ("ours_pacing".to_string(), 1.5)
            ]
        );
    }

    #[test]
    fn every_checkout_builds_the_bench_at_a_path_of_the_same_length() {
        let short = target_dir(Path::new("/a"));
        let long = target_dir(Path::new("/home/someone/work/tower-http-retry"));
        assert_ne!(short, long);
        assert_eq!(short.as_os_str().len(), long.as_os_str().len());
        assert_eq!(short, target_dir(Path::new("/a")));
    }

    #[test]
    fn the_overhead_ratio_is_taken_above_the_bare_service() {
        assert_eq!(overhead_ratio(3000.0, 1000.0, 2000.0), 2.0);
    }
}

//! The project's own commands, run as `cargo xtask <command>` (an alias in `.cargo/config.toml`).
//!
//! * `cargo xtask test [ARGS...]`: installs the Debian packages of the real servers the interop
//!   suite starts (`tests/interop/`: nginx, HAProxy) when they are missing (with `apt-get` when
//!   run as root; otherwise it prints what to install), then runs
//!   `cargo test --all-features [ARGS...]` with `TOWER_HTTP_RETRY_REQUIRE_SERVERS=1`, so that a
//!   missing server fails the run instead of skipping its tests.

#![forbid(unsafe_code)]

use std::env;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// The servers the interop suite starts: the binary and the Debian package that installs it.
const SERVERS: [(&str, &str); 2] = [("nginx", "nginx"), ("haproxy", "haproxy")];

/// What the interop suite reads to fail, instead of skip, when a server is missing.
const REQUIRE_SERVERS: &str = "TOWER_HTTP_RETRY_REQUIRE_SERVERS";

fn main() -> ExitCode {
    let mut args = env::args().skip(1);
    match args.next().as_deref() {
        Some("test") => test(args.collect()),
        _ => {
            eprintln!("usage: cargo xtask test [ARGS passed to `cargo test --all-features`]");
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
    let missing: Vec<&str> = SERVERS
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
            "xtask: the interop suite needs {list}; install them (Debian: `sudo apt-get install \
             -y {list}`) and run again. Its tests fail without them ({REQUIRE_SERVERS}=1)."
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

/// Where `binary` is, on `PATH` or in the `sbin` directories Debian installs servers in.
fn locate(binary: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH").unwrap_or_default();
    env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
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

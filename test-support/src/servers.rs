//! Real servers from Debian, started by the tests on loopback ports: nginx and HAProxy for the
//! interop suites, Redis for the fleet suite, Redis and Postgres for the redelivery engines.
//!
//! Each server gets a fresh directory under the system's temp dir, its config rendered there from
//! a template the suite passes in (`{{NAME}}` placeholders: ports, the directory, the upstream's
//! address), and runs in the foreground as a child of the test, stopped when dropped.
//! Nothing is written outside that directory, and nothing needs root.
//!
//! A missing binary makes the test print a loud `SKIPPED` line on stderr naming the Debian
//! package to install, and pass; with `TOWER_HTTP_RETRY_REQUIRE_SERVERS=1` (what `cargo xtask
//! test` sets) it fails instead.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Set to `1` to turn a missing server into a failure instead of a skip.
pub const REQUIRE_SERVERS: &str = "TOWER_HTTP_RETRY_REQUIRE_SERVERS";

/// A server program and the Debian package that installs it.
#[derive(Clone, Copy, Debug)]
pub struct Program {
    pub binary: &'static str,
    pub package: &'static str,
}

pub const NGINX: Program = Program {
    binary: "nginx",
    package: "nginx",
};

pub const HAPROXY: Program = Program {
    binary: "haproxy",
    package: "haproxy",
};

pub const REDIS: Program = Program {
    binary: "redis-server",
    package: "redis-server",
};

/// The Postgres server; its `initdb` is beside it.
pub const POSTGRES: Program = Program {
    binary: "postgres",
    package: "postgresql",
};

/// Where `program` is installed, looked up on `PATH`, in the `sbin` directories Debian puts
/// servers in (not on a normal user's `PATH`), and in Debian's versioned Postgres directories
/// (`/usr/lib/postgresql/<major>/bin`, the newest first).
pub fn locate(program: Program) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut postgres: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse().ok()?;
            Some((major, entry.path().join("bin")))
        })
        .collect();
    postgres.sort_by_key(|(major, _)| std::cmp::Reverse(*major));
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .chain(postgres.into_iter().map(|(_, bin)| bin))
        .map(|dir| dir.join(program.binary))
        .find(|candidate| candidate.is_file())
}

/// The installed `program`, or `None` after saying loudly that the test is skipped (or a panic
/// when servers are required). `test` names the caller in the message.
pub fn require(program: Program, test: &str) -> Option<PathBuf> {
    let required = std::env::var(REQUIRE_SERVERS).is_ok_and(|v| v == "1");
    // Straight to the process's stderr: the test harness captures `eprintln!` of a test that
    // passes, and a skip must be seen.
    require_with(
        program,
        locate(program),
        test,
        required,
        &mut std::io::stderr(),
    )
    .unwrap_or_else(|failure| panic!("{failure}"))
}

/// [`require`], given where the program was found and whether servers are required: the
/// failure's message when it is missing and required; a skip is said on `loud`.
fn require_with(
    program: Program,
    found: Option<PathBuf>,
    test: &str,
    required: bool,
    loud: &mut dyn std::io::Write,
) -> Result<Option<PathBuf>, String> {
    if let Some(found) = found {
        return Ok(Some(found));
    }
    let message = format!(
        "`{}` is not installed: install the Debian package `{}` (`apt-get install -y {}`, or \
         run `cargo xtask test`, which installs it)",
        program.binary, program.package, program.package
    );
    if required {
        return Err(format!("{test}: {message} ({REQUIRE_SERVERS}=1)"));
    }
    let _ = writeln!(
        loud,
        "\n=================================================================\n\
         SKIPPED {test}: {message}\n\
         ================================================================="
    );
    Ok(None)
}

/// A loopback port nobody listens on now (bound to port 0 and closed again: another process could
/// take it in between, which on a test machine is rare).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// A fresh, empty directory for one server.
fn scratch_dir(name: &str) -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "tower-http-retry-interop-{}-{name}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create the server's directory");
    dir
}

/// `template` with each `{{KEY}}` replaced by its value; a placeholder left over is a bug.
pub fn render(template: &str, vars: &BTreeMap<&str, String>) -> String {
    let mut text = template.to_owned();
    for (key, value) in vars {
        text = text.replace(&format!("{{{{{key}}}}}"), value);
    }
    assert!(!text.contains("{{"), "an unfilled placeholder in:\n{text}");
    text
}

/// A server process, stopped and its directory removed when dropped.
pub struct Server {
    pub dir: PathBuf,
    child: Child,
    stop: Option<Command>,
    name: &'static str,
}

impl Server {
    /// nginx with `template` (rendered with `vars` plus `DIR`), listening on every port in
    /// `ports`. Its logs, pid file and temp paths are in its directory.
    pub fn nginx(
        binary: &Path,
        template: &str,
        mut vars: BTreeMap<&str, String>,
        ports: &[u16],
    ) -> Server {
        let dir = scratch_dir("nginx");
        vars.insert("DIR", dir.display().to_string());
        let conf = dir.join("nginx.conf");
        fs::write(&conf, render(template, &vars)).expect("write nginx.conf");
        let args = |command: &mut Command| {
            command
                .arg("-p")
                .arg(&dir)
                .arg("-c")
                .arg(&conf)
                .arg("-e")
                .arg(dir.join("error.log"))
                .arg("-g")
                .arg("daemon off;");
        };
        let mut command = Command::new(binary);
        args(&mut command);
        let child = command.stdin(Stdio::null()).spawn().expect("start nginx");
        // The master forwards a stop to its workers (a SIGKILL of the master would leave them).
        let mut stop = Command::new(binary);
        args(&mut stop);
        stop.arg("-s").arg("stop");
        Server::started(dir, child, Some(stop), "nginx", ports)
    }

    /// HAProxy with `template` (rendered with `vars` plus `DIR`), in the foreground (`-db`).
    pub fn haproxy(
        binary: &Path,
        template: &str,
        mut vars: BTreeMap<&str, String>,
        ports: &[u16],
    ) -> Server {
        let dir = scratch_dir("haproxy");
        vars.insert("DIR", dir.display().to_string());
        let conf = dir.join("haproxy.cfg");
        fs::write(&conf, render(template, &vars)).expect("write haproxy.cfg");
        let child = Command::new(binary)
            .arg("-db")
            .arg("-f")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start haproxy");
        Server::started(dir, child, None, "haproxy", ports)
    }

    /// Redis on `127.0.0.1:port`, in the foreground, with nothing saved to disk (`--save ''
    /// --appendonly no`); its log is the directory's `error.log`. Redis cannot listen on port 0:
    /// take one from [`free_port`], and the same one to start it again once the first is dropped.
    pub fn redis(binary: &Path, port: u16) -> Server {
        let dir = scratch_dir("redis");
        let child = Command::new(binary)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(dir.join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start redis-server");
        Server::started(dir, child, None, "redis", &[port])
    }

    /// Postgres on `127.0.0.1:port` (no Unix socket), a cluster made by `initdb` in the
    /// directory (user `postgres`, trusted on loopback, database `postgres`); its log is the
    /// directory's `error.log`. `binary` is the `postgres` that [`locate`] found. Postgres refuses
    /// to run as root: as root, both run as the `postgres` user Debian's package creates. Like
    /// Redis it cannot listen on port 0: take one from [`free_port`].
    pub fn postgres(binary: &Path, port: u16) -> Server {
        use std::os::unix::fs::MetadataExt;
        use std::os::unix::process::CommandExt;
        let dir = scratch_dir("postgres");
        let data = dir.join("data");
        fs::create_dir_all(&data).expect("create the cluster's directory");
        let owner = (fs::metadata("/proc/self").map(|m| m.uid()).ok() == Some(0)).then(|| {
            let (uid, gid) = system_user("postgres").expect(
                "running as root, Postgres needs the `postgres` user (Debian's `postgresql` \
                 package creates it)",
            );
            std::os::unix::fs::chown(&data, Some(uid), Some(gid)).expect("chown the cluster");
            (uid, gid)
        });
        let as_owner = |command: &mut Command| {
            if let Some((uid, gid)) = owner {
                command.uid(uid).gid(gid);
            }
        };
        let log = || fs::File::create(dir.join("error.log")).expect("create the log");
        let mut initdb = Command::new(binary.with_file_name("initdb"));
        as_owner(&mut initdb);
        let status = initdb
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log())
            .status()
            .expect("run initdb");
        assert!(
            status.success(),
            "initdb failed ({status}):\n{}",
            fs::read_to_string(dir.join("error.log")).unwrap_or_default()
        );
        let mut command = Command::new(binary);
        as_owner(&mut command);
        let child = command
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string()])
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "unix_socket_directories=",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log())
            .spawn()
            .expect("start postgres");
        // A fast shutdown (SIGINT): the postmaster stops its backends; a SIGKILL of it would
        // leave them running.
        let mut stop = Command::new("kill");
        stop.args(["-INT", &child.id().to_string()]);
        let server = Server::started(dir, child, Some(stop), "postgres", &[port]);
        // It listens before it accepts: a connection in between is refused as "starting up".
        let until = Instant::now() + Duration::from_secs(10);
        while !server.error_log().contains("ready to accept connections") {
            assert!(
                Instant::now() < until,
                "postgres was not ready within 10 s; its log:\n{}",
                server.error_log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// The server's process id (to stop it with a signal, as a test of a stalled server does).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn started(
        dir: PathBuf,
        child: Child,
        stop: Option<Command>,
        name: &'static str,
        ports: &[u16],
    ) -> Server {
        let mut server = Server {
            dir,
            child,
            stop,
            name,
        };
        let until = Instant::now() + Duration::from_secs(10);
        for &port in ports {
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            while TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_err() {
                if let Ok(Some(status)) = server.child.try_wait() {
                    panic!(
                        "{name} exited at start ({status}); its error log:\n{}",
                        server.error_log()
                    );
                }
                assert!(
                    Instant::now() < until,
                    "{name} did not listen on {addr} within 10 s; its error log:\n{}",
                    server.error_log()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        server
    }

    /// The error log, if the server writes one in its directory.
    pub fn error_log(&self) -> String {
        fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }

    /// The access log, one entry per line.
    pub fn access_log(&self) -> String {
        fs::read_to_string(self.dir.join("access.log")).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = &mut self.stop {
            let _ = stop.stdout(Stdio::null()).stderr(Stdio::null()).status();
            let until = Instant::now() + Duration::from_secs(5);
            while Instant::now() < until {
                if let Ok(Some(_)) = self.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("{}: kept {} for inspection", self.name, self.dir.display());
        }
    }
}

/// The uid and gid of the system user `name`, from `/etc/passwd`.
fn system_user(name: &str) -> Option<(u32, u32)> {
    let passwd = fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&name) && fields.len() > 3)
            .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))?
    })
}

/// What a server's log (or an upstream) saw: per request id, how many times it was applied.
#[derive(Debug, Default)]
pub struct Applied {
    pub per_id: BTreeMap<String, u32>,
    /// Responses by status, every line counted.
    pub statuses: BTreeMap<u16, u32>,
}

impl Applied {
    /// Reads an access log whose lines start with `<request id> <status>`: a request counts as
    /// applied when it was answered with `applied_status`.
    pub fn from_access_log(log: &str, applied_status: u16) -> Applied {
        let mut applied = Applied::default();
        for line in log.lines() {
            let mut fields = line.split_whitespace();
            let (Some(id), Some(status)) = (fields.next(), fields.next()) else {
                continue;
            };
            let Ok(status) = status.parse::<u16>() else {
                continue;
            };
            *applied.statuses.entry(status).or_default() += 1;
            if status == applied_status {
                *applied.per_id.entry(id.to_owned()).or_default() += 1;
            }
        }
        applied
    }

    /// How many times `id` was applied.
    pub fn count(&self, id: &str) -> u32 {
        self.per_id.get(id).copied().unwrap_or(0)
    }

    /// The ids among `ids` applied more than once.
    pub fn twice<'a>(&self, ids: impl IntoIterator<Item = &'a String>) -> Vec<String> {
        ids.into_iter()
            .filter(|id| self.count(id) > 1)
            .cloned()
            .collect()
    }

    /// A one-line summary for the test output.
    pub fn summary<'a>(&self, ids: impl IntoIterator<Item = &'a String> + Clone) -> String {
        let mut histogram: BTreeMap<u32, u32> = BTreeMap::new();
        for id in ids {
            *histogram.entry(self.count(id)).or_default() += 1;
        }
        let mut line = String::from("ids applied n times:");
        for (times, ids) in &histogram {
            let _ = write!(line, " {times}x={ids}");
        }
        let _ = write!(line, "; statuses:");
        for (status, n) in &self.statuses {
            let _ = write!(line, " {status}={n}");
        }
        line
    }
}

#[test]
fn a_missing_server_skips_the_test_unless_servers_are_required() {
    const ABSENT: Program = Program {
        binary: "tower-http-retry-no-such-server",
        package: "no-such-package",
    };
    assert_eq!(locate(ABSENT), None);
    let mut said = Vec::new();
    assert_eq!(
        require_with(ABSENT, None, "a test", false, &mut said),
        Ok(None)
    );
    let said = String::from_utf8(said).unwrap();
    assert!(
        said.contains("SKIPPED a test") && said.contains("no-such-package"),
        "{said}"
    );
    let failure = require_with(ABSENT, None, "a test", true, &mut std::io::sink())
        .expect_err("required: a failure");
    assert!(failure.contains("no-such-package"), "{failure}");
    let found = Some(PathBuf::from("/usr/sbin/nginx"));
    assert_eq!(
        require_with(NGINX, found.clone(), "a test", true, &mut std::io::sink()),
        Ok(found)
    );
}

//! The fleet-shared pacing store against a real Redis (`redis-server` from Debian), started by
//! each test on its own loopback port (`test-support/src/servers.rs`: a missing binary is a loud
//! SKIPPED, or a failure with `TOWER_HTTP_RETRY_REQUIRE_SERVERS=1`, which `cargo xtask test` sets
//! after installing the package).
//!
//! Every process of a fleet is a [`RedisStore`] on a connection of its own. Real Redis means
//! real time: the store tests run for at most a couple of seconds each, the fleets of worker
//! processes (`processes.rs`) for 15–20 s together; they assert on what the stores answered and
//! the endpoint saw, with bounds wide enough for a loaded machine.

mod differential;
mod endpoint;
mod failure;
mod open;
mod processes;
mod shared;

use test_support::servers;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use servers::{Server, REDIS};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use tower_http_retry::pacing::store::{Applied, Event, PacingStore};
use tower_http_retry::Pacing;
use tower_http_retry_redis::{RedisStore, RedisStoreBuilder};

pub const MS: Duration = Duration::from_millis(1);

/// A redis-server of one test, which the test may kill, restart on the same port, or stall.
pub struct Redis {
    binary: PathBuf,
    port: u16,
    server: Option<Server>,
}

impl Redis {
    /// A server for `test`, or `None` (after a loud SKIPPED) when redis-server is missing.
    pub fn start(test: &str) -> Option<Redis> {
        let binary = servers::require(REDIS, test)?;
        let port = servers::free_port();
        let server = Server::redis(&binary, port);
        Some(Redis {
            binary,
            port,
            server: Some(server),
        })
    }

    /// A connection of its own (a process of the fleet), reconnecting quickly.
    pub async fn connection(&self) -> ConnectionManager {
        let client =
            redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).expect("a valid URL");
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(200)))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(10));
        ConnectionManager::new_with_config(client, config)
            .await
            .expect("connect to the test's redis-server")
    }

    /// A store of the fleet `prefix` on a connection of its own, as `tune` sets it up.
    pub async fn store(
        &self,
        prefix: &str,
        tune: impl FnOnce(RedisStoreBuilder<ConnectionManager>) -> RedisStoreBuilder<ConnectionManager>,
    ) -> RedisStore {
        // Loopback on a shared, loaded test machine: a generous timeout, except where a test
        // is about the timeout.
        let builder = RedisStore::builder(self.connection().await)
            .prefix(prefix)
            .call_timeout(Duration::from_millis(250));
        tune(builder).build().expect("a valid store")
    }

    /// Kills the server (its data is gone: nothing was saved).
    pub fn kill(&mut self) {
        self.server = None;
    }

    /// Starts it again, empty, on the same port.
    pub fn restart(&mut self) {
        assert!(self.server.is_none(), "kill it first");
        self.server = Some(Server::redis(&self.binary, self.port));
    }

    /// Stops (`SIGSTOP`) or resumes (`SIGCONT`) the server's process: a stalled server.
    pub fn signal(&self, signal: &str) {
        let pid = self.server.as_ref().expect("running").pid();
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {pid}");
    }
}

/// The pacing every test's fleet uses: probes every 100 ms (±50 %), one in flight.
pub fn pacing() -> Pacing {
    Pacing::builder()
        .probe_interval(100 * MS)
        .probes_in_flight(1)
        .build()
        .expect("valid pacing")
}

/// One call of `store` at tokio's now.
pub async fn call(store: &impl PacingStore, pacing: &Pacing, events: &[Event]) -> Applied {
    store
        .apply(
            pacing.rules(),
            "api.example.test",
            events,
            tokio::time::Instant::now(),
        )
        .await
}

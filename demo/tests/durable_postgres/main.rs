//! The crash test on Postgres (a server of the test's own, made by `initdb` in a temporary
//! directory; the claim is about worker processes, not the server's): see `../durable/crash.rs`.
//! A test binary of its own, so that it never runs beside the SQLite or Redis one (each keeps 4
//! processes busy).

#![cfg(feature = "postgres")]

#[path = "../durable/crash.rs"]
mod crash;

use test_support::servers::{self, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_delivery_is_lost_when_workers_are_killed_on_postgres() {
    let Some(binary) = servers::require(
        servers::POSTGRES,
        "durable_postgres::no_delivery_is_lost_when_workers_are_killed_on_postgres",
    ) else {
        return;
    };
    let port = servers::free_port();
    let _server = Server::postgres(&binary, port);
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let outbox = demo::durable::open_postgres(&url).await;
    crash::no_delivery_is_lost_when_workers_are_killed(
        demo::durable::Engine::Postgres(url),
        outbox,
    )
    .await;
}

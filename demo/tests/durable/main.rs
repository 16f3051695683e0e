//! The crash test on the embedded engine (a SQLite file): see `crash.rs`.

mod crash;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_delivery_is_lost_when_workers_are_killed() {
    let dir = std::env::temp_dir().join(format!("durable-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let database = dir.join("deliveries.db");
    let outbox = demo::durable::open(&database).await;
    crash::no_delivery_is_lost_when_workers_are_killed(
        demo::durable::Engine::Sqlite(database),
        outbox,
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

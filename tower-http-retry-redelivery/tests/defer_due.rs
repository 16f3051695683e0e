//! `Outbox::defer_due` on SQLite: one write moves an endpoint's due deliveries past its pause,
//! and no other endpoint's.
#![cfg(feature = "sqlite")]

use bytes::Bytes;
use std::time::{Duration, SystemTime};
use tower_http_retry_redelivery::sqlite::{self, SqliteOptions};
use tower_http_retry_redelivery::{Delivery, Outbox, RecordRules};

fn delivery(id: &str, uri: &str) -> Delivery {
    let request = http::Request::post(uri).body(Bytes::from("{}")).unwrap();
    RecordRules::new().record(id, request).unwrap()
}

#[tokio::test]
async fn an_endpoints_due_deliveries_move_past_its_pause_in_one_write_and_no_other_endpoints() {
    let dir = std::env::temp_dir().join(format!("defer-due-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let outbox = sqlite::open(dir.join("deliveries.db"), SqliteOptions::default())
        .await
        .unwrap();
    for i in 0..5 {
        let down = delivery(&format!("down-{i}"), "http://127.0.0.1:9/hook");
        outbox.store(down).await.unwrap();
    }
    for i in 0..3 {
        let up = delivery(&format!("up-{i}"), "http://127.0.0.1:10/hook");
        outbox.store(up).await.unwrap();
    }
    let pause_ends = SystemTime::now() + Duration::from_secs(60);
    let down = "http://127.0.0.1:9";
    assert_eq!(outbox.defer_due(down, pause_ends).await.unwrap(), 5);
    // None of them is due before then any more.
    assert_eq!(outbox.defer_due(down, pause_ends).await.unwrap(), 0);
    // A later pause moves them again.
    let later = pause_ends + Duration::from_secs(60);
    assert_eq!(outbox.defer_due(down, later).await.unwrap(), 5);
    // The other endpoint's deliveries were not moved by any of it.
    let up = "http://127.0.0.1:10";
    assert_eq!(outbox.defer_due(up, pause_ends).await.unwrap(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

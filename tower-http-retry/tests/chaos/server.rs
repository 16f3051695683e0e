//! The chaos server's script: what it does with each attempt, decided by a seeded hash of the
//! request number and the attempt's arrival number, so a run is reproducible whatever the order
//! in which requests interleave.

use crate::support::{Hit, Reply};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the server did with one hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Did {
    /// Answered with this status.
    Answered(u16),
    /// Closed the connection without answering.
    HungUp,
    /// Stalled past the client's per-attempt timeout, then answered (to nobody).
    Stalled,
}

/// Every hit per request id, in arrival order.
pub type ServerLog = Arc<Mutex<HashMap<String, Vec<Did>>>>;

/// SplitMix64: a well-mixed 64-bit hash of `x`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// `Retry-After` values the server sends with its 429s: small, huge, malformed.
const RETRY_AFTER: [&str; 6] = ["0", "1", "2", "-1", "soon", "99999999999999999999"];

/// The script. Requests numbered in `outage` only ever fail, so that the breaker trips.
pub fn script(
    seed: u64,
    outage: std::ops::Range<u64>,
    stall: Duration,
    log: ServerLog,
) -> impl Fn(&Hit) -> Reply + Send + Sync + 'static {
    move |hit: &Hit| {
        let number: u64 = hit.id.trim_start_matches('r').parse().unwrap_or(0);
        let roll = mix(seed ^ (number << 8) ^ u64::from(hit.nth));
        let mut pick = roll % 100;
        if outage.contains(&number) {
            pick = 60 + pick % 26; // 500, 503, 429 and hang-ups only
        }
        let (reply, did) = match pick {
            0..=49 => (Reply::status(200), Did::Answered(200)),
            50..=57 => (Reply::status(400), Did::Answered(400)),
            58..=59 => (Reply::status(404), Did::Answered(404)),
            60..=67 => (Reply::status(500), Did::Answered(500)),
            68..=75 => (Reply::status(503), Did::Answered(503)),
            76..=81 => {
                let value = RETRY_AFTER[(roll >> 32) as usize % RETRY_AFTER.len()];
                (
                    Reply::status(429).header("retry-after", value),
                    Did::Answered(429),
                )
            }
            82..=85 => (Reply::Hangup, Did::HungUp),
            86..=89 => (Reply::status(200).after(stall), Did::Stalled),
            // A slow but timely answer: it overlaps other attempts on other connections.
            _ => (
                Reply::status(200).after(Duration::from_millis(roll >> 40 & 15)),
                Did::Answered(200),
            ),
        };
        log.lock()
            .unwrap()
            .entry(hit.id.clone())
            .or_default()
            .push(did);
        reply
    }
}

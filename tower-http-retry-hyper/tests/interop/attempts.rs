//! Attempts as the client sent them and as the server applied them: an [`ATTEMPT`] header is
//! stamped on each attempt under the retry layer (1 for the first), and the servers log it
//! beside the request id (nginx's and HAProxy's access logs, `tests/interop/conf/`; the
//! upstream behind HAProxy keeps its own record). A POST sent again after an attempt the server
//! applied is what must never happen.

use crate::{Body, Ended};
use http::{HeaderValue, Method, Request};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// The header that numbers a request's attempts, as the retry layer sends them.
pub const ATTEMPT: &str = "x-attempt";

/// What happened under the retry layer: each request id's attempts, and why attempts failed.
#[derive(Clone, Default)]
pub struct Attempts(Arc<Mutex<Seen>>);

#[derive(Default)]
struct Seen {
    /// Attempts sent per request id.
    sent: BTreeMap<String, u32>,
    /// Failed attempts by reason (a label for the printout; the layer never reads text).
    errors: BTreeMap<String, u32>,
}

impl Attempts {
    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Numbers `request`'s attempt: one more than its id had.
    pub fn stamp(&self, mut request: Request<Body>) -> Request<Body> {
        let id = request
            .headers()
            .get(crate::REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let attempt = {
            let mut seen = self.seen();
            let sent = seen.sent.entry(id).or_default();
            *sent += 1;
            *sent
        };
        request
            .headers_mut()
            .insert(ATTEMPT, HeaderValue::from(attempt));
        request
    }

    /// Counts a failed attempt under `label`.
    pub fn failed(&self, label: &str) {
        *self.seen().errors.entry(label.to_owned()).or_default() += 1;
    }

    /// Failed attempts by reason.
    pub fn errors(&self) -> BTreeMap<String, u32> {
        self.seen().errors.clone()
    }

    /// Attempts sent for `id`.
    pub fn sent(&self, id: &str) -> u32 {
        self.seen().sent.get(id).copied().unwrap_or(0)
    }
}

/// Per request id, the attempts a server applied.
#[derive(Debug, Default)]
pub struct AppliedAttempts(pub BTreeMap<String, Vec<u32>>);

impl AppliedAttempts {
    /// Reads an access log whose lines are `<request id> <status> <method> <x> <y> <attempt>`
    /// (the format of `conf/nginx-h2c.conf` and `conf/haproxy.cfg`): an attempt counts as
    /// applied when it was answered with `applied_status`.
    pub fn from_access_log(log: &str, applied_status: u16) -> Self {
        let mut applied = Self::default();
        for line in log.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [id, status, _, _, _, attempt, ..] = fields[..] else {
                continue;
            };
            let (Ok(status), Ok(attempt)) = (status.parse::<u16>(), attempt.parse::<u32>()) else {
                continue;
            };
            if status == applied_status {
                applied.record(id, attempt);
            }
        }
        applied
    }

    /// Records that attempt `attempt` of `id` was applied.
    pub fn record(&mut self, id: &str, attempt: u32) {
        self.0.entry(id.to_owned()).or_default().push(attempt);
    }

    /// The requests of `method` among `ended` that were sent again after an attempt the server
    /// applied (so applied more than once, or at the risk of it), with their applied attempts
    /// and how many were sent.
    pub fn resent_after_applied(
        &self,
        ended: &[Ended],
        attempts: &Attempts,
        method: &Method,
    ) -> Vec<(String, Vec<u32>, u32)> {
        ended
            .iter()
            .filter(|e| e.method == *method)
            .filter_map(|e| {
                let applied = self.0.get(&e.id)?;
                let sent = attempts.sent(&e.id);
                (applied.len() > 1 || applied.iter().any(|&attempt| attempt < sent))
                    .then(|| (e.id.clone(), applied.clone(), sent))
            })
            .collect()
    }

    /// The ids among `ended` not applied exactly once.
    pub fn not_once(&self, ended: &[Ended]) -> Vec<(String, usize)> {
        ended
            .iter()
            .map(|e| (e.id.clone(), self.0.get(&e.id).map_or(0, Vec::len)))
            .filter(|(_, applied)| *applied != 1)
            .collect()
    }
}

/// No POST among `ended` was sent again after an attempt the server applied.
pub fn assert_no_post_resent_after_applied(
    ended: &[Ended],
    attempts: &Attempts,
    applied: &AppliedAttempts,
) {
    let resent = applied.resent_after_applied(ended, attempts, &Method::POST);
    assert!(
        resent.is_empty(),
        "POSTs sent again after an applied attempt (id, applied attempts, sent): {resent:?}"
    );
}

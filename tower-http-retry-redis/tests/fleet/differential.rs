//! The in-process store and the Redis store run one transition function: given the same events
//! at the same instants, two processes on each answer alike, reply for reply.

use crate::{pacing, Redis};
use std::time::Duration;
use tokio::time::Instant;
use tower_http_retry::pacing::store::{
    Applied, Event, InProcessStore, Lease, PacingStore, Release, Reply,
};
use tower_http_retry::Pacing;

/// An answer as text with its instants and gaps taken out, the instants in microseconds after
/// `base`, and the gaps of its slots in microseconds. Two processes map Redis's clock each with
/// an offset of its own, measured to within half a round trip: the instants of two Redis
/// processes agree to within a round trip (a fraction of a millisecond on an idle machine), not
/// to the microsecond, so the script keeps its times a few ms away from the state's own (a probe
/// due at 100 ms is asked for at 103 ms).
fn normal(applied: &Applied, base: Instant) -> (String, Vec<f64>, Vec<f64>, f64) {
    let mut times = Vec::new();
    let mut gaps = Vec::new();
    let mut at = |t: Instant| times.push((t - base).as_secs_f64() * 1e6);
    let replies: Vec<String> = applied
        .replies
        .iter()
        .map(|reply| match reply {
            Reply::Release(Release::Probe(lease)) => {
                at(lease.expires());
                "probe".to_owned()
            }
            Reply::Release(Release::Slots { first, gap, count }) => {
                at(*first);
                // The gap apart: slots that span the end of a measuring interval are spaced
                // by where it falls, which two clocks a fraction of a millisecond apart place
                // a few tens of microseconds apart.
                gaps.push(gap.as_secs_f64() * 1e6);
                format!("{count} slots")
            }
            Reply::Release(Release::At(t)) => {
                at(*t);
                "at".to_owned()
            }
            Reply::Release(Release::Blocked { until }) => {
                at(*until);
                "blocked".to_owned()
            }
            other => format!("{other:?}"),
        })
        .collect();
    let view = &applied.view;
    if let Some(until) = view.paused_until {
        at(until);
    }
    let text = format!(
        "{replies:?} {:?} peers {} probes {} fallback {:?}",
        view.mode, view.peers, view.probes, applied.fallback
    );
    (text, times, gaps, view.rate)
}

/// One event of the script: as is, or made from what the process holds and the script's base.
#[derive(Clone, Copy, Debug)]
enum Step {
    Send(Event),
    /// Ends the probe the process was granted.
    ProbeDone {
        success: bool,
    },
    /// A pause until `base + ms`.
    PauseUntil(u64),
}

struct Pair<S> {
    stores: [S; 2],
    leases: [Option<Lease>; 2],
    /// The longest call so far, as this test measured it: each process maps Redis's clock to
    /// within half a round trip, so two processes' instants agree to within one.
    longest_call: Duration,
}

impl<S: PacingStore> Pair<S> {
    /// Process `who` sends `steps` at `base + ms`.
    async fn send(
        &mut self,
        pacing: &Pacing,
        base: Instant,
        (ms, who, steps): &(u64, usize, Vec<Step>),
    ) -> (String, Vec<f64>, Vec<f64>, f64) {
        let events: Vec<Event> = steps
            .iter()
            .map(|step| match *step {
                Step::Send(event) => event,
                Step::ProbeDone { success } => Event::ProbeDone {
                    lease: self.leases[*who].take().expect("a probe was granted"),
                    success,
                },
                Step::PauseUntil(ms) => Event::Pause {
                    until: base + Duration::from_millis(ms),
                },
            })
            .collect();
        let now = base + Duration::from_millis(*ms);
        let called = std::time::Instant::now();
        let applied = self.stores[*who]
            .apply(pacing.rules(), "differential", &events, now)
            .await;
        self.longest_call = self.longest_call.max(called.elapsed());
        if let Some(Release::Probe(lease)) = applied.release() {
            self.leases[*who] = Some(lease);
        }
        normal(&applied, base)
    }
}

#[tokio::test]
async fn the_in_process_and_redis_stores_answer_alike() {
    let Some(redis) = Redis::start("the_in_process_and_redis_stores_answer_alike") else {
        return;
    };
    let pacing = pacing();
    let memory = InProcessStore::new();
    let mut local = Pair {
        stores: [memory.clone(), memory.peer()],
        leases: [None, None],
        longest_call: Duration::ZERO,
    };
    let mut remote = Pair {
        stores: [
            redis.store("differential", |b| b).await,
            redis.store("differential", |b| b).await,
        ],
        leases: [None, None],
        longest_call: Duration::ZERO,
    };
    // Both Redis clocks measured before the script.
    for store in &remote.stores {
        for _ in 0..3 {
            let called = std::time::Instant::now();
            crate::call(store, &pacing, &[Event::Refresh]).await;
            remote.longest_call = remote.longest_call.max(called.elapsed());
        }
    }
    let ask = |want| Step::Send(Event::Release { want, jitter: 0.3 });
    let report = |successes, losses| {
        Step::Send(Event::Report {
            successes,
            losses,
            over: Duration::ZERO,
        })
    };
    let refresh = Step::Send(Event::Refresh);
    // Probes are due 100 ms after the down report (jitter 0.5 of a 100 ms interval); the ramp
    // starts at 153 ms with one slot every 100 ms (10/s), and grows with the reports.
    let script: Vec<(u64, usize, Vec<Step>)> = vec![
        (0, 0, vec![Step::Send(Event::Down { jitter: 0.5 })]),
        (10, 1, vec![ask(3)]),
        (103, 1, vec![ask(3)]),
        (108, 0, vec![ask(1)]),
        (153, 1, vec![Step::ProbeDone { success: true }, ask(2)]),
        (163, 0, vec![report(30, 0), ask(50)]),
        (307, 1, vec![ask(50)]),
        (313, 0, vec![report(20, 10)]),
        (421, 1, vec![ask(50)]),
        (507, 0, vec![ask(50)]),
        (553, 1, vec![Step::PauseUntil(2000)]),
        (603, 0, vec![ask(1)]),
        (2005, 1, vec![ask(10)]),
        (2107, 0, vec![refresh]),
        (4003, 1, vec![refresh]),
    ];
    let base = Instant::now();
    // The largest share by which the two stores' rates have differed so far.
    let mut drift: f64 = 0.0;
    for step in &script {
        let (text, times, gaps, rate) = local.send(&pacing, base, step).await;
        let (remote_text, remote_times, remote_gaps, remote_rate) =
            remote.send(&pacing, base, step).await;
        let context = format!("at +{} ms, process {}, {:?}", step.0, step.1, step.2);
        assert_eq!(text, remote_text, "{context}");
        // 2 ms, or more on a loaded machine whose calls took longer (the clocks' bound).
        let within = (remote.longest_call.as_secs_f64() * 1e6).max(2000.0);
        // A slow start cut at its first loss event counts the successes over the part of the
        // interval measured so far (here 60 ms of its 100), whose length the two
        // clocks see up to `within` apart. The release gaps are the rate's inverse, so they
        // may differ by the same share.
        let share = (within / 50_000.0).max(0.01);
        assert!(
            (rate - remote_rate).abs() <= rate * share,
            "{context}: rate {rate} against {remote_rate}"
        );
        drift = drift.max((rate - remote_rate).abs() / rate);
        assert_eq!(gaps.len(), remote_gaps.len(), "{context}");
        for (a, b) in gaps.iter().zip(&remote_gaps) {
            assert!(
                (a - b).abs() <= a * share,
                "{context}: {gaps:?} {remote_gaps:?} (within {:.1} %)",
                share * 100.0
            );
        }
        // A slot's instant is where the fleet's slot clock reaches it, and the clock ran at
        // each store's rate: rates `drift` apart place it up to that share of its time apart
        // (at +507 ms, 2.09 ms apart in a CI run whose calls took under 2 ms).
        assert_eq!(times.len(), remote_times.len(), "{context}");
        for (a, b) in times.iter().zip(&remote_times) {
            let bound = within + drift * a.abs();
            assert!(
                (a - b).abs() <= bound,
                "{context}: {times:?} {remote_times:?} (within {bound:.0} us)"
            );
        }
        println!(
            "+{:>4} ms p{}: {text} rate {rate} ({remote_rate}) {times:?} ({remote_times:?}) {gaps:?}",
            step.0, step.1
        );
    }
}

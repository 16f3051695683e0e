//! [`supervise`]: a worker that outlives its engine's failures, restarted under its name.

use crate::engine::{check_name, start_run, EngineError, Reclaim};
use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::watch;

/// The pause before a new run after one that ended on an error.
const FIRST_PAUSE: Duration = Duration::from_millis(500);

/// The longest pause: the pause doubles while runs keep failing at once, up to this.
const LONGEST_PAUSE: Duration = Duration::from_secs(30);

/// Runs the worker `name` until `stop` resolves, as a supervisor would: each run starts with
/// [`start_run`] (the deliveries of the name's earlier runs taken back) and is made by `run`,
/// which builds the apalis worker on the run's name and runs it until the [`Stopping`] it is
/// given resolves (apalis's `run_until`, which returns before it only on an error). A run that
/// ends before the stop is followed by a new one after a pause (half a second, doubled while
/// runs keep failing within 30 s of their start, at most 30 s), and so is a `start_run` the
/// engine refuses; `failed` is told of each ([`RunEnded`]), to log it. The stop ends a pause, or
/// a `start_run` that waits on the engine, at once.
///
/// apalis 1.0 ends a worker's run on the first fetch that fails: a Redis or Postgres server
/// restarted, failed over or slow past the connection's response timeout (500 ms on Redis), and
/// every worker of the fleet would stop for good while its process stays up.
///
/// Returns once `stop` has resolved and the run in progress ended; an error only for a `name`
/// that cannot be a worker's (empty, or holding the run separator `~`). Call it within a tokio
/// runtime (it watches `stop` from a task of its own).
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// # use bytes::Bytes;
/// # use tower::Layer;
/// use tower_http_retry_redelivery::{sqlite, supervise, Redelivery, Schedule};
///
/// let outbox = sqlite::open("deliveries.db", sqlite::SqliteOptions::default()).await?;
/// # let schedule = Schedule::standard_webhooks();
/// # let transport = tower::service_fn(|_: http::Request<Bytes>| async {
/// #     Ok::<_, tower::BoxError>(http::Response::new(()))
/// # });
/// # let client = schedule.retry_layer().build()?.layer(transport);
/// let redelivery: Redelivery<_, _> = Redelivery::new(client, outbox.clone(), schedule);
/// // Until the process ends; a shutdown signal stops it gracefully.
/// let stop = std::future::pending();
/// let run = |run, stopping| {
///     let redelivery = redelivery.clone();
///     let worker = outbox.worker(run).build(move |delivery| {
///         let redelivery = redelivery.clone();
///         async move { redelivery.handle(delivery).await }
///     });
///     worker.run_until(stopping)
/// };
/// supervise(&outbox, "worker-1", run, |ended| eprintln!("{ended}"), stop).await?;
/// # Ok(())
/// # }
/// ```
pub async fn supervise<O, R, Ran, E>(
    outbox: &O,
    name: &str,
    mut run: R,
    mut failed: impl FnMut(RunEnded<'_, E>),
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), EngineError>
where
    O: Reclaim,
    R: FnMut(String, Stopping) -> Ran,
    Ran: Future<Output = Result<(), E>>,
{
    check_name(name)?;
    let (tell, told) = watch::channel(false);
    let _watch = AbortOnDrop(tokio::spawn(async move {
        stop.await;
        let _ = tell.send(true);
    }));
    // Told, or the watching task gone (`stop` panicked, the runtime shuts down).
    let stopped = |told: &watch::Receiver<bool>| *told.borrow() || told.has_changed().is_err();
    let stopping = || Stopping::new(told.clone());
    let mut pause = FIRST_PAUSE;
    loop {
        let started = tokio::time::Instant::now();
        match unless(stopping(), start_run(outbox, name)).await {
            None => return Ok(()),
            Some(Err(error)) => failed(RunEnded::StartRefused {
                name,
                error: &error,
            }),
            Some(Ok(run_name)) => {
                let ended = run(run_name.clone(), stopping()).await;
                if stopped(&told) {
                    return Ok(());
                }
                failed(match &ended {
                    Ok(()) => RunEnded::Returned { run: &run_name },
                    Err(error) => RunEnded::Failed {
                        run: &run_name,
                        error,
                    },
                });
            }
        }
        if started.elapsed() > LONGEST_PAUSE {
            pause = FIRST_PAUSE;
        }
        if unless(stopping(), tokio::time::sleep(pause))
            .await
            .is_none()
        {
            return Ok(());
        }
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// `work`'s output, or none if `stopping` resolves first.
async fn unless<T>(stopping: Stopping, work: impl Future<Output = T>) -> Option<T> {
    let (mut stopping, mut work) = (stopping, pin!(work));
    poll_fn(|cx| {
        if let Poll::Ready(output) = work.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        Pin::new(&mut stopping).poll(cx).map(|_| None)
    })
    .await
}

/// How a run of [`supervise`] ended before the stop, or why none started; a new one follows
/// after a pause.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunEnded<'a, E> {
    /// [`start_run`] failed: the engine did not answer, or refused.
    StartRefused {
        /// The worker's name.
        name: &'a str,
        /// The engine's error.
        error: &'a EngineError,
    },
    /// The run ended on an error (apalis's: a fetch that failed, most often).
    Failed {
        /// The run's name.
        run: &'a str,
        /// Its error.
        error: &'a E,
    },
    /// The run returned without an error, though no stop was asked for (a `run` of one's own:
    /// apalis's `run_until` waits for the stop).
    Returned {
        /// The run's name.
        run: &'a str,
    },
}

impl<E: fmt::Display> fmt::Display for RunEnded<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunEnded::StartRefused { name, error } => {
                write!(f, "worker {name} did not start a run: {error}")
            }
            RunEnded::Failed { run, error } => write!(f, "worker run {run} ended: {error}"),
            RunEnded::Returned { run } => write!(f, "worker run {run} returned before a stop"),
        }
    }
}

/// Aborts the task that watches the stop signal.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Resolves when [`supervise`] is told to stop: the signal a run's worker stops on
/// (`run_until(stopping)`).
pub struct Stopping(Pin<Box<dyn Future<Output = Result<(), std::io::Error>> + Send>>);

impl Stopping {
    fn new(mut told: watch::Receiver<bool>) -> Self {
        Stopping(Box::pin(async move {
            // A closed channel: the supervisor is gone, and so is every reason to run.
            let _ = told.wait_for(|stop| *stop).await;
            Ok(())
        }))
    }
}

impl Future for Stopping {
    type Output = Result<(), std::io::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx)
    }
}

impl fmt::Debug for Stopping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stopping").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};

    /// An engine whose first `refusals` starts fail, and whose starts take `start_takes`.
    #[derive(Clone, Default)]
    struct Engine {
        starts: Arc<AtomicU32>,
        refusals: u32,
        start_takes: Duration,
    }

    impl Reclaim for Engine {
        async fn reclaim(&self, _name: &str) -> Result<u64, EngineError> {
            tokio::time::sleep(self.start_takes).await;
            if self.starts.fetch_add(1, Ordering::Relaxed) < self.refusals {
                return Err(EngineError::new("the engine is away"));
            }
            Ok(0)
        }
    }

    /// What `failed` was told, one word each.
    type Told = Arc<Mutex<Vec<String>>>;

    /// What `failed` was told, and a `failed` that tells it.
    fn telling() -> (Told, impl FnMut(RunEnded<'_, &'static str>)) {
        let told = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&told);
        (told, move |ended: RunEnded<'_, &'static str>| {
            let kind = match ended {
                RunEnded::StartRefused { .. } => "refused",
                RunEnded::Failed { .. } => "failed",
                RunEnded::Returned { .. } => "returned",
            };
            record.lock().unwrap().push(kind.to_owned());
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_that_ends_before_the_stop_is_followed_by_another_after_a_pause() {
        let engine = Engine::default();
        let (told, failed) = telling();
        let runs = Arc::new(Mutex::new(Vec::new()));
        let started = tokio::time::Instant::now();
        let record = Arc::clone(&runs);
        let run = move |run: String, stopping: Stopping| {
            let mut runs = record.lock().unwrap();
            runs.push((run, started.elapsed()));
            let n = runs.len();
            async move {
                match n {
                    1 => Err("a fetch failed"),
                    2 => Err("a fetch failed again"),
                    3 => Ok(()),
                    _ => stopping.await.map_err(|_| "unreachable"),
                }
            }
        };
        let stop = tokio::time::sleep(Duration::from_secs(10));
        supervise(&engine, "w", run, failed, stop).await.unwrap();
        let runs = runs.lock().unwrap();
        let at: Vec<_> = runs.iter().map(|(_, at)| at.as_millis()).collect();
        // Half a second, then a second (doubled), then two seconds: a returned run is followed
        // by another all the same.
        assert_eq!(at, [0, 500, 1_500, 3_500]);
        assert!(runs.iter().all(|(run, _)| run.starts_with("w~")));
        assert_eq!(*told.lock().unwrap(), ["failed", "failed", "returned"]);
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_start_is_tried_again_and_a_stop_ends_a_waiting_start_or_a_pause() {
        let engine = Engine {
            refusals: u32::MAX,
            start_takes: Duration::from_secs(60),
            ..Engine::default()
        };
        let (told, failed) = telling();
        let started = tokio::time::Instant::now();
        let run = |_: String, _: Stopping| async { Ok::<(), &'static str>(()) };
        // The first start waits 60 s on the engine: the stop at 1 s ends it.
        let stop = tokio::time::sleep(Duration::from_secs(1));
        supervise(&engine, "w", run, failed, stop).await.unwrap();
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        assert!(told.lock().unwrap().is_empty());

        let engine = Engine {
            refusals: 2,
            ..Engine::default()
        };
        let (told, failed) = telling();
        let started = tokio::time::Instant::now();
        let run = |_: String, stopping: Stopping| async move {
            stopping.await.map_err(|_| "unreachable")
        };
        let stop = tokio::time::sleep(Duration::from_secs(5));
        supervise(&engine, "w", run, failed, stop).await.unwrap();
        assert_eq!(engine.starts.load(Ordering::Relaxed), 3);
        assert_eq!(*told.lock().unwrap(), ["refused", "refused"]);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_name_that_cannot_be_a_workers_is_an_error() {
        let run = |_: String, _: Stopping| async { Ok::<(), &'static str>(()) };
        let ended = supervise(&Engine::default(), "a~b", run, |_| {}, async {}).await;
        assert!(ended.is_err());
    }
}

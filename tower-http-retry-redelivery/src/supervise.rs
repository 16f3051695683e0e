//! [`supervise`]: a worker that outlives its engine's failures, restarted under its name.

use crate::engine::{check_name, start_run, EngineError, Reclaim};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
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
/// given resolves (apalis's `run_until`). A run that ends on an error is followed by a new one
/// after a pause (half a second, doubled while runs keep failing at once, at most 30 s), and so
/// is a `start_run` the engine refuses.
///
/// apalis 1.0 ends a worker's run on the first fetch that fails: a Redis or Postgres server
/// restarted, failed over or slow past the connection's response timeout (500 ms on Redis), and
/// every worker of the fleet would stop for good while its process stays up. `run` sees each
/// run's result first, to log it.
///
/// Returns when `stop` has resolved and the run ended; an error only for a `name` that cannot
/// be a worker's (empty, or holding the run separator `~`).
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
/// supervise(&outbox, "worker-1", |run, stopping| {
///     let redelivery = redelivery.clone();
///     let worker = outbox.worker(run.clone()).build(move |delivery| {
///         let redelivery = redelivery.clone();
///         async move { redelivery.handle(delivery).await }
///     });
///     async move {
///         let ended = worker.run_until(stopping).await;
///         if let Err(error) = &ended {
///             eprintln!("worker {run} stopped: {error}");
///         }
///         ended
///     }
/// }, stop)
/// .await?;
/// # Ok(())
/// # }
/// ```
pub async fn supervise<O, R, Ran, E>(
    outbox: &O,
    name: &str,
    mut run: R,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), EngineError>
where
    O: Reclaim,
    R: FnMut(String, Stopping) -> Ran,
    Ran: Future<Output = Result<(), E>>,
{
    check_name(name)?;
    let (stopped, stopping) = watch::channel(false);
    let _watch = StopOnDrop(tokio::spawn(async move {
        stop.await;
        let _ = stopped.send(true);
    }));
    let mut pause = FIRST_PAUSE;
    loop {
        let started = tokio::time::Instant::now();
        let ended = match start_run(outbox, name).await {
            Ok(run_name) => run(run_name, Stopping::new(stopping.clone())).await.is_ok(),
            Err(_) => false,
        };
        if ended || *stopping.borrow() {
            return Ok(());
        }
        if started.elapsed() > LONGEST_PAUSE {
            pause = FIRST_PAUSE;
        }
        if Stopping::new(stopping.clone()).within(pause).await {
            return Ok(());
        }
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// Aborts the task that watches the stop signal.
struct StopOnDrop(tokio::task::JoinHandle<()>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Resolves when [`supervise`] is told to stop: the signal a run's worker stops on
/// (`run_until(stopping)`).
pub struct Stopping(Pin<Box<dyn Future<Output = Result<(), std::io::Error>> + Send>>);

impl Stopping {
    fn new(mut stopping: watch::Receiver<bool>) -> Self {
        Stopping(Box::pin(async move {
            // A closed channel: the supervisor is gone, and so is every reason to run.
            let _ = stopping.wait_for(|stop| *stop).await;
            Ok(())
        }))
    }

    /// Whether it resolves within `pause`.
    async fn within(self, pause: Duration) -> bool {
        tokio::time::timeout(pause, self).await.is_ok()
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

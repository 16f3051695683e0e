//! The executor of a [`rotation_safe_client`](super::rotation_safe_client): one thread, one task
//! at a time.

use std::fmt;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower_http_retry::InvalidConfig;

/// Runs the futures hyper and hyper-util spawn (connection tasks, the HTTP/2 client task, each
/// request's response task, background connects), and the requests of a
/// [`RotationSafeClient`](super::RotationSafeClient), on a tokio current-thread runtime: one at a
/// time, on the one thread that drives it.
///
/// Serial execution is what makes an HTTP/2 `GOAWAY` that hyper delivers to a request proof that
/// the server did not process it (see the [module](super) docs); only a client built with
/// [`rotation_safe_client`](super::rotation_safe_client) says so to the classifier.
///
/// Either the executor starts its own thread ([`start`](Self::start)), which runs until the
/// executor and every clone of it (the clients built on it and their connections hold one) are
/// gone, or it spawns onto a current-thread runtime the caller drives
/// ([`with_handle`](Self::with_handle)). Either way, one thread does the HTTP/2 framing of every
/// client built on it: give a client that needs more than a core's worth its own executor.
///
/// ```
/// use tower_http_retry_hyper::SerialExecutor;
///
/// let executor = SerialExecutor::start()?;
/// let shared = executor.clone(); // the same thread
/// # let _ = shared;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct SerialExecutor {
    handle: Handle,
    /// The executor's own thread, while a clone exists; `None` for a runtime the caller drives.
    _thread: Option<Arc<Thread>>,
}

/// Ends the executor's own thread when dropped (with the last clone of the executor).
struct Thread {
    _stop: oneshot::Sender<()>,
}

impl SerialExecutor {
    /// The name of the thread [`start`](Self::start) starts.
    pub const THREAD_NAME: &'static str = "tower-http-retry-serial";

    /// Starts a thread that drives a current-thread runtime (I/O and time enabled) until the
    /// executor and all its clones are dropped; then the runtime's remaining tasks are dropped
    /// with it.
    ///
    /// # Errors
    ///
    /// The runtime could not be built, or the thread not started (the system's limits).
    pub fn start() -> io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        // Shared, so that a thread that could not be started hands the runtime back: dropping a
        // runtime inside an async context (where this may be called) panics, shutting it down
        // in the background does not.
        let slot = Arc::new(Mutex::new(Some(runtime)));
        let theirs = Arc::clone(&slot);
        let started = std::thread::Builder::new()
            .name(Self::THREAD_NAME.into())
            .spawn(move || {
                let runtime = theirs.lock().unwrap_or_else(PoisonError::into_inner).take();
                if let Some(runtime) = runtime {
                    // Ends when the last clone of the executor drops the sender.
                    runtime.block_on(async move {
                        let _ = stopped.await;
                    });
                }
            });
        match started {
            Ok(_) => Ok(Self {
                handle,
                _thread: Some(Arc::new(Thread { _stop: stop })),
            }),
            Err(error) => {
                let runtime = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
                if let Some(runtime) = runtime {
                    runtime.shutdown_background();
                }
                Err(error)
            }
        }
    }

    /// Spawns onto the runtime of `handle`, which must be a current-thread runtime, with I/O and
    /// time enabled (hyper-util connects and times on it), that the caller drives on one thread
    /// for as long as the clients built on the executor are used. A task spawned after the
    /// runtime shut down is dropped (its requests fail), never run in parallel.
    ///
    /// ```
    /// use tower_http_retry_hyper::SerialExecutor;
    ///
    /// let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// let executor = SerialExecutor::with_handle(runtime.handle().clone())?;
    /// std::thread::spawn(move || runtime.block_on(std::future::pending::<()>()));
    /// # let _ = executor;
    ///
    /// let parallel = tokio::runtime::Builder::new_multi_thread().build()?;
    /// let refused = SerialExecutor::with_handle(parallel.handle().clone()).unwrap_err();
    /// assert_eq!(refused.field(), "handle");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// `handle` is not a current-thread runtime's: a multi-thread runtime runs tasks in parallel.
    pub fn with_handle(handle: Handle) -> Result<Self, InvalidConfig> {
        match handle.runtime_flavor() {
            RuntimeFlavor::CurrentThread => Ok(Self {
                handle,
                _thread: None,
            }),
            _ => Err(InvalidConfig::new(
                "handle",
                "must be a current-thread runtime's (`Builder::new_current_thread`): another \
                 flavor runs hyper's tasks in parallel",
            )),
        }
    }

    /// The handle of the runtime the executor spawns onto.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Spawns `future` onto the runtime; a runtime that shut down drops it (the handle then
    /// reports it cancelled), and it never runs elsewhere.
    pub(super) fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(future)
    }
}

impl<F> hyper::rt::Executor<F> for SerialExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        drop(self.spawn(future));
    }
}

impl fmt::Debug for SerialExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SerialExecutor")
            .field("own_thread", &self._thread.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn tasks_run_one_at_a_time_on_the_executors_own_thread() {
        let executor = SerialExecutor::start().unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        let running = Arc::new(AtomicUsize::new(0));
        for _ in 0..8 {
            let (running, done) = (Arc::clone(&running), done.clone());
            executor.execute(async move {
                assert_eq!(running.fetch_add(1, Ordering::SeqCst), 0, "alone");
                std::thread::sleep(Duration::from_millis(2));
                running.fetch_sub(1, Ordering::SeqCst);
                let name = std::thread::current().name().map(str::to_owned);
                done.send(name).unwrap();
            });
        }
        for _ in 0..8 {
            let name = finished.recv_timeout(Duration::from_secs(10)).unwrap();
            assert_eq!(name.as_deref(), Some(SerialExecutor::THREAD_NAME));
        }
    }

    #[test]
    fn the_thread_ends_with_the_last_clone() {
        let executor = SerialExecutor::start().unwrap();
        let (ended, on_end) = std::sync::mpsc::channel::<()>();
        // A task that never finishes: dropped with the runtime, which drops its sender.
        executor.execute(async move {
            let _ended = ended;
            std::future::pending::<()>().await;
        });
        let clone = executor.clone();
        drop(executor);
        assert_eq!(
            on_end.recv_timeout(Duration::from_millis(50)),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout),
            "a clone keeps it running"
        );
        drop(clone);
        assert_eq!(
            on_end.recv_timeout(Duration::from_secs(10)),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected)
        );
    }

    #[tokio::test]
    async fn starting_inside_a_runtime_is_fine_and_a_multi_thread_handle_is_refused() {
        let executor = SerialExecutor::start().unwrap();
        assert_eq!(
            executor.handle().runtime_flavor(),
            RuntimeFlavor::CurrentThread
        );
        let parallel = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let refused = SerialExecutor::with_handle(parallel.handle().clone()).unwrap_err();
        assert_eq!(refused.field(), "handle");
        parallel.shutdown_background();
    }
}

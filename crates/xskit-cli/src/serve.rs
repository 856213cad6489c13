//! The event loop a command's network endpoints share: one thread, one tokio runtime on it.
//! The metrics endpoint runs there; anything else a command serves (a control socket) can be
//! spawned onto the same loop instead of taking threads of its own.

use std::future::Future;
use std::thread::JoinHandle;

use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

/// A thread running a single-threaded tokio runtime until dropped. Dropping it ends every
/// task at once: no connection a client holds open delays the command's exit.
pub(crate) struct EventLoop {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl EventLoop {
    /// Starts the loop on a thread named `name`.
    pub(crate) fn start(name: &str) -> std::io::Result<EventLoop> {
        // Few blocking threads: only a control socket's applies wait on them.
        let runtime = Builder::new_current_thread()
            .max_blocking_threads(2)
            .enable_io()
            .enable_time()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let _ = runtime.block_on(stopped);
                // Dropping the runtime drops every task, closing their sockets, without
                // waiting for any of them.
                drop(runtime);
            })?;
        Ok(EventLoop {
            handle,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Runs `f` where tokio's I/O types can be made (inside the runtime's context).
    pub(crate) fn enter<T>(&self, f: impl FnOnce() -> T) -> T {
        let _guard = self.handle.enter();
        f()
    }

    /// Runs `task` on the loop.
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.handle.spawn(task);
    }
}

impl std::fmt::Debug for EventLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventLoop").finish_non_exhaustive()
    }
}

impl Drop for EventLoop {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

//! The waker a lease drives its connection with: the task's, less the wakes the task
//! causes itself.
//!
//! hyper's client connection and what it hands over wake each other through channels:
//! a request queued on the connection wakes it, the response head (a oneshot) and each
//! body chunk (a one-slot channel) wake their receiver when the connection reads them,
//! and taking a chunk wakes the connection for the next one. Here both ends are polled
//! by the one client connection's task, one right after the other, so every such wake
//! comes while the task is running and only schedules it once more for nothing: a
//! keep-alive request cost the task 3.95 polls where 2 (the request arriving, the
//! response arriving) do the work (bench/README.md, levers).
//!
//! So the lease hands its connection and the futures fed by it [`OwnWakes`]' waker and
//! does its work in windows ([`OwnWakes::poll`], [`OwnWakes::quietly`]), one at a time,
//! from the one task that polls the lease. Outside a window (the connection's socket
//! became ready) a wake goes to the task. Inside one it is held, and dropped only when
//! the window's work got what it waited for. That is safe because everything the waker
//! is registered with (socket readiness, hyper's channels) keeps its state until it is
//! polled again, and because the lease's caller then polls on without being woken:
//! after the response head hyper's server asks the body for its first chunk, after a
//! chunk for the next one (or waits for the client's socket, with the task's own
//! waker), and an exchange that ended gives the connection back. A window whose work is
//! still pending passes a held wake on: hyper's yield after 16 rounds of its dispatch
//! loop, tokio-rustls's wake of itself, a wake from the I/O driver of another thread.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU8, Ordering},
    },
    task::{Context, Poll, Wake, Waker},
};

/// No window open: wakes go to the task.
const OPEN: u8 = 0;
/// A window is open: wakes are held.
const HOLDING: u8 = 1;
/// A window is open and a wake came.
const HELD: u8 = 2;

struct Relay {
    state: AtomicU8,
    /// The task's waker, from the last window.
    task: Mutex<Option<Waker>>,
}

impl Relay {
    fn task(&self) -> std::sync::MutexGuard<'_, Option<Waker>> {
        self.task.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // One atomic step, so that a wake from another thread (the I/O driver of a
        // multi-thread runtime) as a window closes is either seen by the close or sent.
        match (self.state).compare_exchange(HOLDING, HELD, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) | Err(HELD) => {}
            Err(_) => {
                let task = self.task().clone();
                if let Some(task) = task {
                    task.wake();
                }
            }
        }
    }
}

/// One per lease (so per client connection), made once.
pub struct OwnWakes {
    relay: Arc<Relay>,
    waker: Waker,
}

impl OwnWakes {
    pub fn new() -> Self {
        let relay = Arc::new(Relay {
            state: AtomicU8::new(OPEN),
            task: Mutex::new(None),
        });
        Self {
            waker: Waker::from(relay.clone()),
            relay,
        }
    }

    /// Runs `work` (driving the connection, polling what it handed over) with the
    /// lease's waker, for the task that `cx` polls. The wakes that come meanwhile are
    /// dropped if `work` is ready, passed on to `cx` if not.
    pub fn poll<T>(
        &self,
        cx: &mut Context<'_>,
        work: impl FnOnce(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        {
            let mut task = self.relay.task();
            if !task.as_ref().is_some_and(|task| task.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
        }
        let (polled, woken) = self.window(|| work(&mut Context::from_waker(&self.waker)));
        if woken && polled.is_pending() {
            cx.waker().wake_by_ref();
        }
        polled
    }

    /// Runs `work` and drops the wakes it causes: only for work after which the task
    /// drives the connection before it next waits (queuing a request on it).
    pub fn quietly<T>(&self, work: impl FnOnce() -> T) -> T {
        self.window(work).0
    }

    /// `work`'s result, and whether a wake came while it ran.
    fn window<T>(&self, work: impl FnOnce() -> T) -> (T, bool) {
        let window = Window::open(&self.relay);
        let done = work();
        (done, window.close())
    }
}

/// An open window; closed again if the work panics, so that wakes reach the task.
struct Window<'a>(&'a Relay);

impl<'a> Window<'a> {
    fn open(relay: &'a Relay) -> Self {
        let before = relay.state.swap(HOLDING, Ordering::AcqRel);
        debug_assert_eq!(before, OPEN, "a lease's windows do not nest");
        Self(relay)
    }

    /// Whether a wake came while it was open.
    fn close(self) -> bool {
        self.0.state.swap(OPEN, Ordering::AcqRel) == HELD
    }
}

impl Drop for Window<'_> {
    fn drop(&mut self) {
        self.0.state.store(OPEN, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// A task's waker that counts its wakes.
    #[derive(Default)]
    struct Task(AtomicUsize);

    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn task() -> (Arc<Task>, Waker) {
        let task = Arc::new(Task::default());
        (task.clone(), Waker::from(task))
    }

    #[test]
    fn wakes_between_windows_reach_the_task_and_wakes_inside_one_only_if_it_waits() {
        let own = OwnWakes::new();
        let (task, waker) = task();
        let mut cx = Context::from_waker(&waker);
        // What the work registers, as a channel or a socket would.
        let mut registered = None;
        let waiting = own.poll(&mut cx, |own| {
            registered = Some(own.waker().clone());
            Poll::<()>::Pending
        });
        assert!(waiting.is_pending());
        assert_eq!(task.0.load(Ordering::Relaxed), 0);
        let registered = registered.unwrap();
        // The socket became ready: the task is woken.
        registered.wake_by_ref();
        assert_eq!(task.0.load(Ordering::Relaxed), 1);
        // Woken while the work runs, the work done: the task polls on anyway.
        let done = own.poll(&mut cx, |_| {
            registered.wake_by_ref();
            Poll::Ready(())
        });
        assert!(done.is_ready());
        assert_eq!(task.0.load(Ordering::Relaxed), 1, "dropped");
        // Woken while the work runs, the work still waiting (hyper yielding after 16
        // rounds of its dispatch loop, say).
        let yielded = own.poll(&mut cx, |_| {
            registered.wake_by_ref();
            registered.wake_by_ref();
            Poll::<()>::Pending
        });
        assert!(yielded.is_pending());
        assert_eq!(task.0.load(Ordering::Relaxed), 2, "passed on, once");
        own.quietly(|| registered.wake_by_ref());
        assert_eq!(task.0.load(Ordering::Relaxed), 2, "dropped");
        registered.wake_by_ref();
        assert_eq!(task.0.load(Ordering::Relaxed), 3, "windows close");
    }

    #[test]
    fn wakes_go_to_the_waker_of_the_last_window() {
        let own = OwnWakes::new();
        let (first, first_waker) = task();
        let (second, second_waker) = task();
        let mut registered = None;
        let _ = own.poll(&mut Context::from_waker(&first_waker), |own| {
            registered = Some(own.waker().clone());
            Poll::<()>::Pending
        });
        let _ = own.poll(&mut Context::from_waker(&second_waker), |_| {
            Poll::<()>::Pending
        });
        registered.unwrap().wake();
        assert_eq!(first.0.load(Ordering::Relaxed), 0);
        assert_eq!(second.0.load(Ordering::Relaxed), 1);
    }
}

//! A future polled only after something it waits on woke the task.
//!
//! A connection's task runs its work and, beside it in one `select!`, watchers that
//! almost never fire (the agent's shutdown, the Backend's change, the idle timeout). A
//! task has one waker, so every wake of the work (each read or write that was ready)
//! polled every watcher as well: two cancellation tokens, each a mutex taken twice, and
//! a timer, about 1% of the agent's CPU per HTTP keep-alive request (perf). Behind
//! [`PolledOnWake`] the watchers are polled with a waker of their own and skipped while
//! it has not been woken.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll, Wake, Waker},
};

use atomic_waker::AtomicWaker;

/// `inner`, polled on the first poll and then only after its own waker was woken. Pin
/// a future that is not `Unpin` first (`std::pin::pin!`).
pub struct PolledOnWake<F> {
    inner: F,
    flag: Arc<WakeFlag>,
    /// The waker `inner` is polled with: it raises `flag`.
    waker: Waker,
}

/// Whether the inner future's waker was woken since it was last polled, and the task to
/// wake when it is.
struct WakeFlag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for WakeFlag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<F: Future + Unpin> PolledOnWake<F> {
    /// Wraps `inner`, which the first poll polls.
    pub fn new(inner: F) -> Self {
        let flag = Arc::new(WakeFlag {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(flag.clone());
        Self { inner, flag, waker }
    }
}

impl<F: Future + Unpin> Future for PolledOnWake<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        // Registered before the flag is read, so a wake that comes after the read
        // reaches the task (the waker's own state orders the two).
        this.flag.task.register(cx.waker());
        if !this.flag.woken.swap(false, Ordering::Acquire) {
            return Poll::Pending;
        }
        // A wake while `inner` runs (tokio's cooperative budget, for one) raises the
        // flag again, so the next poll polls it.
        Pin::new(&mut this.inner).poll(&mut Context::from_waker(&this.waker))
    }
}

#[cfg(test)]
mod tests {
    use std::{
        future::poll_fn,
        sync::{Mutex, atomic::AtomicUsize},
    };

    use super::*;

    /// A task's waker that counts its wakes.
    #[derive(Default)]
    struct Counted(AtomicUsize);

    impl Wake for Counted {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn task() -> (Arc<Counted>, Waker) {
        let counted = Arc::new(Counted::default());
        (counted.clone(), Waker::from(counted))
    }

    /// What the inner future saw: its polls, the waker of its last poll, and whether it
    /// may finish.
    #[derive(Default)]
    struct Inner {
        polls: AtomicUsize,
        waker: Mutex<Option<Waker>>,
        done: AtomicBool,
    }

    impl Inner {
        fn future(&self) -> impl Future<Output = ()> + Unpin + '_ {
            poll_fn(|cx| {
                self.polls.fetch_add(1, Ordering::Relaxed);
                *self.waker.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx.waker().clone());
                match self.done.load(Ordering::Relaxed) {
                    true => Poll::Ready(()),
                    false => Poll::Pending,
                }
            })
        }

        fn polls(&self) -> usize {
            self.polls.load(Ordering::Relaxed)
        }

        fn wake(&self) {
            let waker = self.waker.lock().unwrap_or_else(|p| p.into_inner()).take();
            waker.expect("the inner future was polled").wake();
        }
    }

    #[test]
    fn the_inner_future_is_polled_again_only_after_its_own_wake() {
        let inner = Inner::default();
        let mut watched = PolledOnWake::new(inner.future());
        let (woken, waker) = task();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut watched).poll(&mut cx).is_pending());
        assert_eq!(inner.polls(), 1);
        // The task is polled for its other work: the inner future is not.
        for _ in 0..3 {
            assert!(Pin::new(&mut watched).poll(&mut cx).is_pending());
        }
        assert_eq!(inner.polls(), 1);
        // Its own wake, from another thread, wakes the task, and the next poll polls it.
        inner.done.store(true, Ordering::Relaxed);
        std::thread::scope(|s| s.spawn(|| inner.wake()).join()).expect("no panic");
        assert_eq!(woken.0.load(Ordering::Relaxed), 1);
        assert!(Pin::new(&mut watched).poll(&mut cx).is_ready());
        assert_eq!(inner.polls(), 2);
    }

    #[test]
    fn a_wake_during_the_inner_poll_leads_to_another() {
        let polls = AtomicUsize::new(0);
        // Pending once, waking itself as tokio's cooperative budget does.
        let mut watched =
            PolledOnWake::new(poll_fn(|cx| match polls.fetch_add(1, Ordering::Relaxed) {
                0 => {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
                _ => Poll::Ready(()),
            }));
        let (woken, waker) = task();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut watched).poll(&mut cx).is_pending());
        assert_eq!(woken.0.load(Ordering::Relaxed), 1);
        assert!(Pin::new(&mut watched).poll(&mut cx).is_ready());
    }

    #[test]
    fn a_wake_goes_to_the_waker_of_the_last_poll() {
        let inner = Inner::default();
        let mut watched = PolledOnWake::new(inner.future());
        let (first, first_waker) = task();
        let (second, second_waker) = task();
        assert!(
            Pin::new(&mut watched)
                .poll(&mut Context::from_waker(&first_waker))
                .is_pending()
        );
        assert!(
            Pin::new(&mut watched)
                .poll(&mut Context::from_waker(&second_waker))
                .is_pending()
        );
        inner.wake();
        assert_eq!(first.0.load(Ordering::Relaxed), 0);
        assert_eq!(second.0.load(Ordering::Relaxed), 1);
    }
}

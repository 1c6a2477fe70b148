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
    flag: Arc<Flag>,
    waker: Waker,
}

/// Whether the inner future's waker was woken since it was last polled, and the task to
/// wake then.
struct Flag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<F: Future + Unpin> PolledOnWake<F> {
    pub fn new(inner: F) -> Self {
        let flag = Arc::new(Flag {
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
        // reaches the task.
        this.flag.task.register(cx.waker());
        if !this.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        Pin::new(&mut this.inner).poll(&mut Context::from_waker(&this.waker))
    }
}

#[cfg(test)]
mod tests {
    use std::{future::poll_fn, sync::atomic::AtomicUsize};

    use tokio_util::sync::CancellationToken;

    use super::*;

    /// A future that counts its polls and waits for `token`.
    async fn counted(polls: &AtomicUsize, token: &CancellationToken) {
        let mut cancelled = std::pin::pin!(token.cancelled());
        poll_fn(|cx| {
            polls.fetch_add(1, Ordering::Relaxed);
            cancelled.as_mut().poll(cx)
        })
        .await;
    }

    #[tokio::test]
    async fn the_inner_future_is_polled_only_after_its_own_wake() {
        let (polls, token) = (AtomicUsize::new(0), CancellationToken::new());
        let counted = std::pin::pin!(counted(&polls, &token));
        let mut watched = std::pin::pin!(PolledOnWake::new(counted));
        let mut outer_polls = 0;
        poll_fn(|cx| {
            outer_polls += 1;
            if outer_polls <= 3 {
                // The task is woken by something else: the watcher is not polled.
                cx.waker().wake_by_ref();
            }
            if outer_polls == 4 {
                token.cancel();
            }
            watched.as_mut().poll(cx)
        })
        .await;
        // Polled once at first, then once after the cancellation woke it: not in the
        // two polls between, which only the task's other work woke.
        assert_eq!(polls.load(Ordering::Relaxed), 2);
        assert_eq!(outer_polls, 4);
    }

    #[tokio::test]
    async fn a_wake_from_another_thread_reaches_the_task() {
        let (polls, token) = (AtomicUsize::new(0), CancellationToken::new());
        let (polled, first_poll) = std::sync::mpsc::channel();
        let cancel = token.clone();
        let thread = std::thread::spawn(move || {
            if first_poll.recv().is_ok() {
                cancel.cancel();
            }
        });
        let counted = std::pin::pin!(counted(&polls, &token));
        let mut watched = std::pin::pin!(PolledOnWake::new(counted));
        poll_fn(|cx| {
            let poll = watched.as_mut().poll(cx);
            // Pending the first time: the other thread cancels only now.
            let _ = polled.send(());
            poll
        })
        .await;
        assert!(thread.join().is_ok());
        assert_eq!(polls.load(Ordering::Relaxed), 2);
    }
}

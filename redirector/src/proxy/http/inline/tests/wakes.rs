//! Which wakes a request on a lease causes: only its sockets', none handed over between
//! the request and the upstream connection.

use super::*;

/// Counts the wakes of a task that come while it is being polled: each schedules it
/// once more as soon as the poll ends.
#[derive(Default)]
struct SelfWakes {
    polling: std::sync::atomic::AtomicBool,
    counted: AtomicUsize,
    task: Mutex<Option<Waker>>,
}

impl std::task::Wake for SelfWakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.polling.load(Ordering::Relaxed) {
            self.counted.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(task) = self.task.lock().unwrap().as_ref() {
            task.wake_by_ref();
        }
    }
}

/// Runs `future`, and says how many times it woke its own task while being polled.
async fn self_wakes<T>(future: impl Future<Output = T>) -> (T, usize) {
    let wakes = Arc::new(SelfWakes::default());
    let waker = Waker::from(wakes.clone());
    let mut future = std::pin::pin!(future);
    let done = poll_fn(|cx| {
        *wakes.task.lock().unwrap() = Some(cx.waker().clone());
        wakes.polling.store(true, Ordering::Relaxed);
        let polled = future.as_mut().poll(&mut Context::from_waker(&waker));
        wakes.polling.store(false, Ordering::Relaxed);
        polled
    })
    .await;
    (done, wakes.counted.load(Ordering::Relaxed))
}

#[tokio::test]
async fn a_request_and_its_response_wake_the_task_only_from_the_sockets() {
    let (dial, _) = server(true).await;
    let idle = idle(Duration::from_secs(60));
    let lease = lease(&idle);
    // Only the sockets wake the task: nothing between the request and the upstream
    // connection hands anything over (as hyper's client connection does, through
    // channels that each wake the other end).
    let (reused, woken) = self_wakes(get(&lease, &dial)).await;
    assert!(!reused);
    assert_eq!(woken, 0, "a new connection");
    let (reused, woken) = self_wakes(get(&lease, &dial)).await;
    assert!(reused);
    assert_eq!(woken, 0, "a connection lent again");
}

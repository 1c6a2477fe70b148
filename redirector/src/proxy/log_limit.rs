//! Refused-connection log lines, rate-limited per reason so that a flood of bad
//! connections cannot fill a disk. Suppressed lines are counted and the count is
//! reported on the next line that gets through; metrics still count every refusal.

use std::{collections::HashMap, sync::Mutex, time::Duration};

use tokio::time::Instant;

/// Lines per reason and window.
const LINES_PER_WINDOW: u32 = 10;
const WINDOW: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct Window {
    started: Instant,
    lines: u32,
    suppressed: u64,
}

#[derive(Debug, Default)]
pub struct LogLimiter {
    windows: Mutex<HashMap<&'static str, Window>>,
}

impl LogLimiter {
    /// `Some(n)`: log this line, after `n` suppressed ones; `None`: suppress it.
    pub fn allow(&self, reason: &'static str) -> Option<u64> {
        let now = Instant::now();
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let window = windows.entry(reason).or_insert(Window {
            started: now,
            lines: 0,
            suppressed: 0,
        });
        if now.duration_since(window.started) >= WINDOW {
            window.started = now;
            window.lines = 0;
        }
        if window.lines >= LINES_PER_WINDOW {
            window.suppressed += 1;
            return None;
        }
        window.lines += 1;
        Some(std::mem::take(&mut window.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn floods_are_cut_and_counted() {
        let limiter = LogLimiter::default();
        for _ in 0..LINES_PER_WINDOW {
            assert_eq!(limiter.allow("a"), Some(0));
        }
        assert_eq!(limiter.allow("a"), None);
        assert_eq!(limiter.allow("a"), None);
        // Other reasons have their own budget.
        assert_eq!(limiter.allow("b"), Some(0));
        tokio::time::advance(WINDOW).await;
        assert_eq!(limiter.allow("a"), Some(2));
        assert_eq!(limiter.allow("a"), Some(0));
    }
}

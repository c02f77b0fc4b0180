//! Waiting for a condition, with a deadline.

use std::time::{Duration, Instant};

/// How often a condition is checked again.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Calls `f` until it returns `Some`, every 20 ms; panics naming `what`
/// after `timeout`.
pub fn poll<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Polls `cond` until it holds; panics naming `what` after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    poll(what, timeout, || cond().then_some(()))
}

/// Retries `f` while it fails, until `timeout`; returns its last result.
/// For servers that are starting, recovering or restarting.
pub fn retry<T, E>(timeout: Duration, mut f: impl FnMut() -> Result<T, E>) -> Result<T, E> {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            result => return result,
        }
    }
}

//! Waiting for a condition that other threads make true: spin, then yield, then park.
//!
//! A thread that finished its share of an epoch waits here for the epoch's last chunks
//! (or an INIT it needs). Unlike a barrier, nobody waits for a *thread*: the condition is
//! about work done, so a peer that was preempted while holding no chunk delays nobody.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use super::spin::spin_while;

pub(crate) struct Signal {
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Signal {
    pub(crate) fn new() -> Signal {
        Signal {
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        }
    }

    /// Returns once `ready()` holds. `ready` must read the state it tests with `SeqCst` (or
    /// `Acquire` after a `SeqCst` update by the notifier): a thread that makes it true calls
    /// [`Signal::notify`] afterwards.
    pub(crate) fn wait_until(&self, n_threads: usize, ready: impl Fn() -> bool) {
        if ready() || spin_while(n_threads, || !ready()) {
            return;
        }
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        while !ready() {
            guard = self.cv.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
        drop(guard);
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Wakes the parked waiters (if any) to test their conditions again. Call it after a
    /// `SeqCst` update of the state they wait on.
    pub(crate) fn notify(&self) {
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.cv.notify_all();
        }
    }
}

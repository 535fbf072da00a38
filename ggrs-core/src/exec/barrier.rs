//! A reusable barrier whose last arriving thread runs an action before releasing the others.
//! Waiting threads spin, then yield, then park on a condition variable (see `spin`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use crossbeam_utils::CachePadded;

use super::spin::spin_while;

pub(crate) struct Barrier {
    n: usize,
    arrived: CachePadded<AtomicUsize>,
    generation: CachePadded<AtomicUsize>,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Barrier {
    pub(crate) fn new(n: usize) -> Barrier {
        Barrier {
            n,
            arrived: CachePadded::new(AtomicUsize::new(0)),
            generation: CachePadded::new(AtomicUsize::new(0)),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        }
    }

    /// Waits until all `n` threads arrived; the last one runs `leader` first. Everything a
    /// thread wrote before arriving is visible to every thread after the barrier.
    pub(crate) fn wait(&self, leader: impl FnOnce()) {
        let gen = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            leader();
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::SeqCst);
            if self.sleepers.load(Ordering::SeqCst) > 0 {
                let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
                self.cv.notify_all();
            }
            return;
        }
        while self.generation.load(Ordering::Acquire) == gen {
            if spin_while(self.n, || self.generation.load(Ordering::Acquire) == gen) {
                break;
            }
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            while self.generation.load(Ordering::SeqCst) == gen {
                guard = self.cv.wait(guard).unwrap_or_else(|e| e.into_inner());
            }
            drop(guard);
            self.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

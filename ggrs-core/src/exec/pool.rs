//! The persistent worker pool: threads started once and reused for every graph.
//!
//! The calling thread is worker 0; `n - 1` background threads wait for jobs (spinning
//! briefly, then parking) and run the same closure with their own index.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crossbeam_utils::{Backoff, CachePadded};

use super::spin::spin_while;

/// A job as the workers see it: a type-erased `&(dyn Fn(usize) + Sync)`.
type JobRef = *const (dyn Fn(usize) + Sync);

struct Shared {
    job: AtomicPtr<JobSlot>,
    generation: CachePadded<AtomicUsize>,
    done: CachePadded<AtomicUsize>,
    shutdown: AtomicBool,
    panicked: AtomicBool,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
}

struct JobSlot {
    f: JobRef,
}

pub(crate) struct Pool {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
}

impl Pool {
    /// Starts `n_threads - 1` workers.
    pub(crate) fn new(n_threads: usize) -> Pool {
        let shared = Arc::new(Shared {
            job: AtomicPtr::new(std::ptr::null_mut()),
            generation: CachePadded::new(AtomicUsize::new(0)),
            done: CachePadded::new(AtomicUsize::new(0)),
            shutdown: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        });
        let n = n_threads.max(1);
        let handles = (1..n)
            .map(|ith| {
                let s = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("ggrs-worker-{ith}"))
                    .spawn(move || worker(s, ith, n))
                    .expect("spawning a worker thread failed (out of threads or memory)")
            })
            .collect();
        Pool { shared, handles }
    }

    /// Runs `f(ith)` on every thread of the pool (this one as 0) and returns when all are done.
    pub(crate) fn run(&self, f: &(dyn Fn(usize) + Sync)) {
        let n_workers = self.handles.len();
        if n_workers == 0 {
            f(0);
            return;
        }
        let slot = JobSlot {
            // SAFETY: the lifetime is erased only for the duration of this call: `run` does
            // not return before every worker has finished with the job (`done` below), so the
            // reference never outlives `f`.
            f: unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), JobRef>(f) },
        };
        let s = &self.shared;
        s.done.store(0, Ordering::Relaxed);
        s.job
            .store(&slot as *const JobSlot as *mut JobSlot, Ordering::Relaxed);
        s.generation.fetch_add(1, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.cv.notify_all();
        }
        // Even if the caller's share panics, wait for the workers before unwinding: they
        // still hold the job.
        let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(0)));
        let backoff = Backoff::new();
        while s.done.load(Ordering::Acquire) < n_workers {
            backoff.snooze();
        }
        s.job.store(std::ptr::null_mut(), Ordering::Relaxed);
        let worker_panicked = s.panicked.swap(false, Ordering::AcqRel);
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if worker_panicked {
            panic!("a ggrs worker thread panicked while computing a graph");
        }
    }
}

fn worker(s: Arc<Shared>, ith: usize, n_threads: usize) {
    let mut seen = 0usize;
    loop {
        loop {
            if s.shutdown.load(Ordering::Acquire) {
                return;
            }
            if s.generation.load(Ordering::Acquire) != seen {
                break;
            }
            if spin_while(n_threads, || {
                s.generation.load(Ordering::Acquire) == seen && !s.shutdown.load(Ordering::Acquire)
            }) {
                continue;
            }
            s.sleepers.fetch_add(1, Ordering::SeqCst);
            let mut g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            while s.generation.load(Ordering::SeqCst) == seen && !s.shutdown.load(Ordering::SeqCst)
            {
                g = s.cv.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            drop(g);
            s.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
        seen = s.generation.load(Ordering::Acquire);
        let slot = s.job.load(Ordering::Acquire);
        // SAFETY: `run` published the slot before bumping the generation (SeqCst) and keeps it
        // and the closure alive until every worker has incremented `done`.
        let f = unsafe { &*(*slot).f };
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(ith))).is_err() {
            s.panicked.store(true, Ordering::Release);
        }
        s.done.fetch_add(1, Ordering::Release);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _g = self.shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.cv.notify_all();
        }
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

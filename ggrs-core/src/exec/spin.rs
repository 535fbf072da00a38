//! How a thread waits for its peers: spin, then yield, then park.
//!
//! Nodes of a decoding step last a few microseconds to a few hundred, so a thread that has
//! finished its share is best spinning (a futex wake-up costs more than many such nodes).
//! It spins for up to [`SPIN_BUDGET`], yields its core for up to [`YIELD_BUDGET`], and only
//! then parks. When the pool has more threads than the machine has cores, spinning steals
//! time from the peers being waited for, so the budgets shrink to almost nothing.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Spinning time before yielding, when threads ≤ cores.
pub(crate) const SPIN_BUDGET: Duration = Duration::from_micros(200);
/// Yielding time before parking, when threads ≤ cores.
pub(crate) const YIELD_BUDGET: Duration = Duration::from_micros(2000);

fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    })
}

/// Waits while `pending()` holds, spinning then yielding; returns true if `pending()` became
/// false, false if the budget ran out (the caller should park).
#[inline]
pub(crate) fn spin_while(n_threads: usize, pending: impl Fn() -> bool) -> bool {
    let oversubscribed = n_threads > cores();
    let (spin, yld) = if oversubscribed {
        (Duration::from_micros(2), Duration::from_micros(50))
    } else {
        (SPIN_BUDGET, YIELD_BUDGET)
    };
    let start = Instant::now();
    let mut i = 0u32;
    loop {
        if !pending() {
            return true;
        }
        i = i.wrapping_add(1);
        if i.is_multiple_of(64) {
            let t = start.elapsed();
            if t > spin + yld {
                return false;
            }
            if t > spin {
                std::thread::yield_now();
                continue;
            }
        }
        std::hint::spin_loop();
    }
}

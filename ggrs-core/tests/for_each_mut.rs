//! `Executor::for_each_mut`: every item exactly once, from one caller or from several
//! threads sharing the executor at once, and a panic in the closure reaches the caller.

use ggrs_core::Executor;

#[test]
fn every_item_is_visited_once() {
    for threads in [1, 2, 3] {
        let exec = Executor::new(threads);
        for n in [0, 1, 2, 7, 100] {
            let mut items: Vec<(usize, u32)> = (0..n).map(|i| (i, 0)).collect();
            exec.for_each_mut(&mut items, |(i, seen)| {
                *seen += 1;
                *i *= 3;
            });
            for (k, &(i, seen)) in items.iter().enumerate() {
                assert_eq!((i, seen), (3 * k, 1), "threads {threads}, n {n}, item {k}");
            }
        }
    }
}

#[test]
fn callers_sharing_an_executor_each_get_all_their_items() {
    let exec = Executor::new(2);
    std::thread::scope(|s| {
        for t in 0..3u32 {
            let exec = &exec;
            s.spawn(move || {
                for round in 0..200u32 {
                    let mut items = vec![0u32; 17];
                    exec.for_each_mut(&mut items, |x| *x += t + round);
                    assert!(items.iter().all(|&x| x == t + round), "caller {t}");
                }
            });
        }
    });
}

#[test]
fn a_panic_in_the_closure_reaches_the_caller_and_the_pool_still_works() {
    let exec = Executor::new(2);
    let mut items = vec![0u32; 64];
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        exec.for_each_mut(&mut items, |x| {
            *x += 1;
            assert!(*x < 1, "item failed");
        })
    }));
    assert!(r.is_err());
    let mut items = vec![1u32; 64];
    exec.for_each_mut(&mut items, |x| *x *= 2);
    assert!(items.iter().all(|&x| x == 2));
}

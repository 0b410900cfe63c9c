//! An allocation budget for third-party decoders that have no bound of their
//! own.
//!
//! preflate-rs 0.7.6 (the newest on crates.io) loops forever on some forged
//! reconstruction data: once the data runs out its arithmetic decoder reads
//! zeros, which say "an empty block, not the last one", and every round
//! pushes one more block (unbounded time and memory; found by densefs'
//! fuzzer, `codec_decode_deflate`). densefs cannot change that loop without
//! copying the crate, so it bounds the call from outside instead:
//!
//! - `run` executes a closure on a fresh thread whose allocations (every
//!   byte requested, frees not subtracted) are counted by this crate's
//!   global allocator against a budget;
//! - when the budget is exhausted the allocator never returns to the
//!   decoder: it reports the overrun to the waiting caller and parks the
//!   thread for good (a global allocator may not unwind and a null return
//!   aborts the process). The caller gets an error at once; the parked
//!   thread keeps at most `budget` bytes;
//! - at most `MAX_ABANDONED` threads are ever parked; after that, `run`
//!   refuses at once, so a store full of forged payloads costs bounded
//!   memory, never the process.
//!
//! The count is a pure function of the input and the code (no clock), so a
//! payload that passed verification at write time always decodes at read
//! time with the same binary. Allocations of threads outside `run` pass
//! straight to the system allocator after one thread-local read.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// Threads parked after an overrun, for the life of the process.
const MAX_ABANDONED: usize = 4;
static ABANDONED: AtomicUsize = AtomicUsize::new(0);

pub struct BudgetAllocator;

#[global_allocator]
static GLOBAL: BudgetAllocator = BudgetAllocator;

struct Budget {
    /// Bytes this thread may still request.
    left: Cell<usize>,
    /// Bytes it requested since `run` started it (for measurements).
    charged: Cell<usize>,
    /// The caller's wait state, set only on threads started by `run`.
    shared: Cell<*const Shared>,
}

thread_local! {
    static BUDGET: Budget = const {
        Budget {
            left: Cell::new(usize::MAX),
            charged: Cell::new(0),
            shared: Cell::new(std::ptr::null()),
        }
    };
}

enum State<T> {
    Running,
    /// The closure's result and the bytes it requested.
    Done(std::thread::Result<T>, usize),
    Overrun,
}

/// What the allocator touches on overrun: no allocation, only a futex.
struct Shared {
    overrun: Mutex<bool>,
    wake: Condvar,
}

impl BudgetAllocator {
    /// Charges `size` bytes to the current thread; on overrun, never
    /// returns.
    #[inline]
    fn charge(size: usize) {
        // try_with: during thread teardown the slot may be gone; such late
        // allocations are not the decoder's.
        let _ = BUDGET.try_with(|b| {
            let left = b.left.get();
            if left == usize::MAX {
                return; // not a budgeted thread
            }
            if size <= left {
                b.left.set(left - size);
                b.charged.set(b.charged.get().saturating_add(size));
                return;
            }
            // A panic's own work (its message, a backtrace, the hook) runs
            // under std's locks: parking there would block every other
            // thread that panics or prints. It is bounded, and the thread
            // is on its way out.
            if std::thread::panicking() {
                return;
            }
            let shared = b.shared.get();
            if !shared.is_null() {
                // SAFETY: `run` keeps an Arc of Shared alive in this
                // thread's closure for as long as the thread exists.
                let shared = unsafe { &*shared };
                if let Ok(mut overrun) = shared.overrun.lock() {
                    *overrun = true;
                }
                shared.wake.notify_all();
            }
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        });
    }
}

// SAFETY: every method forwards to the system allocator with the same
// layout; `charge` only reads and writes this thread's counter (and on
// overrun blocks forever without returning a pointer).
unsafe impl GlobalAlloc for BudgetAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::charge(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::charge(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::charge(new_size.saturating_sub(layout.size()));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Why `run` gave no result.
pub enum Refused {
    /// The closure asked for more than `budget` bytes in total.
    Overrun,
    /// Earlier overruns parked `MAX_ABANDONED` threads: nothing more runs.
    TooManyAbandoned,
    /// The thread could not be started.
    Spawn(std::io::Error),
}

/// What `run` returns: the closure's result (a panic in it comes back as
/// `Err(payload)`, like `catch_unwind`) and the bytes it requested.
pub struct Finished<T> {
    pub result: std::thread::Result<T>,
    pub allocated: usize,
}

/// Gives the current thread, if `run` started it, `bytes` to request from
/// now on in place of what it had left: a closure that runs several
/// independent steps bounds each one on its own (a stuck step then holds at
/// most what its own allowance and the earlier steps' live memory add up to).
pub fn refill(bytes: usize) {
    let _ = BUDGET.try_with(|b| {
        if b.left.get() != usize::MAX {
            b.left.set(bytes.min(usize::MAX - 1));
        }
    });
}

/// Runs `f` on a new thread allowed to allocate `budget` bytes in total.
pub fn run<T: Send + 'static>(
    budget: usize,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<Finished<T>, Refused> {
    if ABANDONED.load(Ordering::Relaxed) >= MAX_ABANDONED {
        return Err(Refused::TooManyAbandoned);
    }
    let shared = Arc::new(Shared {
        overrun: Mutex::new(false),
        wake: Condvar::new(),
    });
    let result: Arc<Mutex<State<T>>> = Arc::new(Mutex::new(State::Running));
    let (thread_shared, thread_result) = (Arc::clone(&shared), Arc::clone(&result));
    let handle = std::thread::Builder::new()
        .name("densefs-budget".into())
        .spawn(move || {
            BUDGET.with(|b| {
                b.shared.set(Arc::as_ptr(&thread_shared));
                b.left.set(budget.min(usize::MAX - 1));
            });
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            // Off budget before storing: dropping and storing may allocate.
            let charged = BUDGET.with(|b| {
                b.left.set(usize::MAX);
                b.charged.get()
            });
            if let Ok(mut slot) = thread_result.lock() {
                *slot = State::Done(r, charged);
            }
            // Wake the caller under the same lock it waits with.
            let _guard = thread_shared.overrun.lock();
            thread_shared.wake.notify_all();
        })
        .map_err(Refused::Spawn)?;

    let mut overrun = shared.overrun.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if *overrun {
            drop(overrun);
            drop(handle); // detached: it stays parked
            ABANDONED.fetch_add(1, Ordering::Relaxed);
            return Err(Refused::Overrun);
        }
        {
            let mut slot = result.lock().unwrap_or_else(|e| e.into_inner());
            if let State::Done(..) = &*slot {
                let State::Done(result, allocated) = std::mem::replace(&mut *slot, State::Overrun)
                else {
                    unreachable!()
                };
                drop(slot);
                drop(overrun);
                let _ = handle.join();
                return Ok(Finished { result, allocated });
            }
        }
        overrun = shared.wake.wait(overrun).unwrap_or_else(|e| e.into_inner());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_the_result_within_budget() {
        let r = run(1 << 20, || vec![7u8; 1000].len()).ok().unwrap();
        assert!(matches!(r.result, Ok(1000)));
        assert!(r.allocated >= 1000 && r.allocated < 4096, "{}", r.allocated);
    }

    #[test]
    fn panics_come_back() {
        let r = run(1 << 20, || -> usize { panic!("boom") }).ok().unwrap();
        assert!(r.result.is_err());
    }

    #[test]
    fn refill_bounds_each_step() {
        let r = run(1 << 20, || {
            for _ in 0..8 {
                refill(600 << 10);
                drop(vec![0u8; 500 << 10]); // 4 MiB in all, 500 KiB a step
            }
        })
        .ok()
        .unwrap();
        assert!(r.result.is_ok());
        assert!(r.allocated >= 4000 << 10);
    }

    #[test]
    fn an_unbounded_loop_is_stopped_and_the_caller_returns() {
        let r = run(1 << 20, || {
            let mut v: Vec<Vec<u8>> = Vec::new();
            loop {
                v.push(vec![0u8; 100]);
            }
        });
        assert!(matches!(r, Err(Refused::Overrun)));
        // Other threads still allocate freely.
        assert_eq!(vec![1u8; 4 << 20].len(), 4 << 20);
    }
}

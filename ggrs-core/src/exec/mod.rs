//! The executor: plans a graph and runs it on a persistent thread pool.
//!
//! Every thread walks the graph's nodes in order. For each node that moves data:
//! INIT (if the op has one) on all threads, a barrier, then COMPUTE chunks taken from an
//! atomic counter, then a barrier whose last arriving thread runs FINALIZE (if any), records
//! the node's time, and checks the abort callback. Nodes that move no data (views) are
//! skipped without a barrier. With one thread there are no barriers at all.

mod barrier;
mod pool;
mod spin;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::context::{Context, ARENA_ALIGN};
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::kernels::{self, RawTensor, Task, TaskPlan, Work};
use crate::op::Op;
use crate::tensor::{DataLoc, MAX_SRC};

use barrier::Barrier;
use pool::Pool;

/// How a graph will run: per-node plans and the work buffer they need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Threads the plan is for.
    pub n_threads: usize,
    /// One entry per graph node, in order.
    pub nodes: Vec<TaskPlan>,
    /// Bytes of work buffer needed: the largest shared part of any node plus every
    /// thread's private scratch.
    pub work_size: usize,
}

/// Time spent in one node of a computed graph (with profiling on).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeTiming {
    /// Index of the node in the graph.
    pub node: usize,
    /// The op's name.
    pub op: &'static str,
    /// Output shape.
    pub ne: [usize; 4],
    /// Wall time from the end of the previous data-moving node to the end of this one.
    pub time: Duration,
}

type AbortFn = Box<dyn Fn() -> bool + Send + Sync>;

/// Runs graphs on a pool of threads started once and reused.
pub struct Executor {
    n_threads: usize,
    pool: Pool,
    work: Vec<WorkLine>,
    abort: Option<AbortFn>,
    profiling: bool,
    profile: Vec<NodeTiming>,
}

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct WorkLine([u8; ARENA_ALIGN]);

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("n_threads", &self.n_threads)
            .field("work_bytes", &(self.work.len() * ARENA_ALIGN))
            .field("profiling", &self.profiling)
            .finish()
    }
}

/// The number of threads used when 0 is asked for: the physical core count.
pub fn default_threads() -> usize {
    num_cpus::get_physical().max(1)
}

impl Executor {
    /// An executor with `n_threads` threads (0: one per physical core). The threads start now
    /// and live as long as the executor.
    pub fn new(n_threads: usize) -> Executor {
        let n = if n_threads == 0 {
            default_threads()
        } else {
            n_threads
        };
        Executor {
            n_threads: n,
            pool: Pool::new(n),
            work: Vec::new(),
            abort: None,
            profiling: false,
            profile: Vec::new(),
        }
    }

    /// Threads this executor runs on (the caller's included).
    pub fn n_threads(&self) -> usize {
        self.n_threads
    }

    /// Sets a callback checked between nodes; when it returns true the computation stops
    /// with [`Error::Aborted`].
    pub fn set_abort_callback(&mut self, f: impl Fn() -> bool + Send + Sync + 'static) {
        self.abort = Some(Box::new(f));
    }

    /// Removes the abort callback.
    pub fn clear_abort_callback(&mut self) {
        self.abort = None;
    }

    /// Turns per-node timing on or off (see [`Executor::profile`]).
    pub fn set_profiling(&mut self, on: bool) {
        self.profiling = on;
    }

    /// Per-node times of the last computation, when profiling was on.
    pub fn profile(&self) -> &[NodeTiming] {
        &self.profile
    }

    /// Plans `graph` for this executor's thread count.
    pub fn plan(&self, ctx: &Context, graph: &Graph) -> Result<Plan> {
        plan_graph(ctx, graph, self.n_threads)
    }

    /// Computes every node of `graph`, whose tensors live in `ctx`.
    pub fn compute(&mut self, ctx: &mut Context, graph: &Graph) -> Result<()> {
        let plan = self.plan(ctx, graph)?;
        let tasks = resolve(ctx, graph, &plan)?;
        let lines = plan.work_size.div_ceil(ARENA_ALIGN);
        if self.work.len() < lines {
            self.work.resize(lines, WorkLine([0; ARENA_ALIGN]));
        }
        let shared_size = plan.nodes.iter().map(|p| p.work_shared).max().unwrap_or(0);
        let shared_size = shared_size.div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        let scratch_f32 = scratch_per_thread(&plan);
        let work_ptr = WorkPtr(self.work.as_mut_ptr() as *mut u8);
        let nth = self.n_threads;
        let job = Job {
            tasks: &tasks,
            counters: tasks.iter().map(|_| AtomicUsize::new(0)).collect(),
            barrier: Barrier::new(nth),
            n_threads: nth,
            work: work_ptr,
            shared_size,
            scratch_f32,
            abort: self.abort.as_deref(),
            stop: AtomicBool::new(false),
            error: Mutex::new(None),
            completed: AtomicUsize::new(0),
            timing: if self.profiling {
                Some(Mutex::new((Instant::now(), Vec::new())))
            } else {
                None
            },
        };
        self.pool.run(&|ith| job.run(ith));
        if let Some(t) = &job.timing {
            self.profile = std::mem::take(&mut t.lock().unwrap_or_else(|e| e.into_inner()).1);
        }
        if let Some(e) = job.error.lock().unwrap_or_else(|e| e.into_inner()).take() {
            return Err(e);
        }
        Ok(())
    }
}

/// Computes `graph` once on a temporary executor of `n_threads` threads (0: one per core).
/// Keep an [`Executor`] instead when computing more than once: it reuses its threads.
pub fn compute_graph(ctx: &mut Context, graph: &Graph, n_threads: usize) -> Result<()> {
    Executor::new(n_threads).compute(ctx, graph)
}

fn scratch_per_thread(plan: &Plan) -> usize {
    let s = plan.nodes.iter().map(|p| p.scratch_f32).max().unwrap_or(0);
    // Keep each thread's scratch 64-byte aligned.
    s.div_ceil(16) * 16
}

/// Plans every node of `graph` for `n_threads` threads.
pub fn plan_graph(ctx: &Context, graph: &Graph, n_threads: usize) -> Result<Plan> {
    let nth = n_threads.max(1);
    let mut nodes = Vec::with_capacity(graph.nodes().len());
    for &t in graph.nodes() {
        let m = ctx.meta(t)?;
        let mut src = [None; MAX_SRC];
        for (i, s) in m.src.iter().enumerate() {
            if let Some(s) = s {
                src[i] = Some(ctx.meta(*s)?);
            }
        }
        nodes.push(kernels::plan(&m.op, m, &src, nth));
    }
    let mut plan = Plan {
        n_threads: nth,
        nodes,
        work_size: 0,
    };
    let shared = plan.nodes.iter().map(|p| p.work_shared).max().unwrap_or(0);
    let shared = shared.div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
    plan.work_size = shared + nth * scratch_per_thread(&plan) * std::mem::size_of::<f32>();
    Ok(plan)
}

/// Resolves each node to raw pointers into the context's arena and external buffers.
fn resolve(ctx: &mut Context, graph: &Graph, plan: &Plan) -> Result<Vec<Task>> {
    // External data is only ever read: the builders refuse ops that write into it.
    let ext_ptr = |ctx: &Context, buf: usize| ctx.external_bytes(buf).as_ptr() as *mut u8;
    let mut ext: Vec<*mut u8> = Vec::new();
    let mut resolved = Vec::with_capacity(graph.nodes().len());
    let arena = ctx.arena_bytes_mut().as_mut_ptr();
    let ptr_of =
        |ctx: &Context, ext: &mut Vec<*mut u8>, loc: DataLoc, name: &dyn Fn() -> String| {
            match loc {
                DataLoc::None => Err(Error::NoData { name: name() }),
                // SAFETY: offsets were checked against the arena size when the tensor was made.
                DataLoc::Arena(o) => Ok(unsafe { arena.add(o) }),
                DataLoc::External { buf, offset } => {
                    while ext.len() <= buf {
                        let i = ext.len();
                        ext.push(ext_ptr(ctx, i));
                    }
                    // SAFETY: offsets were checked against the buffer's length when the tensor
                    // was made.
                    Ok(unsafe { ext[buf].add(offset) })
                }
            }
        };
    for (i, &t) in graph.nodes().iter().enumerate() {
        let m = ctx.meta(t)?;
        let p = plan.nodes[i];
        if p.is_noop() {
            resolved.push(Task {
                op: m.op,
                dst: RawTensor::new(m, std::ptr::null_mut()),
                src: [None; MAX_SRC],
                plan: p,
            });
            continue;
        }
        let dst = RawTensor::new(m, ptr_of(ctx, &mut ext, m.data, &|| ctx.display_name(t))?);
        let mut src = [None; MAX_SRC];
        for (k, s) in m.src.iter().enumerate() {
            if let Some(s) = *s {
                let sm = ctx.meta(s)?;
                src[k] = Some(RawTensor::new(
                    sm,
                    ptr_of(ctx, &mut ext, sm.data, &|| ctx.display_name(s))?,
                ));
            }
        }
        resolved.push(Task {
            op: m.op,
            dst,
            src,
            plan: p,
        });
    }
    Ok(resolved)
}

#[derive(Clone, Copy)]
struct WorkPtr(*mut u8);
// SAFETY: the work buffer is owned by the executor, which is exclusively borrowed for the
// computation; threads write disjoint parts of it (their own scratch, or their own slots of
// the shared part) between barriers.
unsafe impl Send for WorkPtr {}
// SAFETY: as above.
unsafe impl Sync for WorkPtr {}

struct Job<'a> {
    tasks: &'a [Task],
    counters: Vec<AtomicUsize>,
    barrier: Barrier,
    n_threads: usize,
    work: WorkPtr,
    shared_size: usize,
    scratch_f32: usize,
    abort: Option<&'a (dyn Fn() -> bool + Send + Sync)>,
    stop: AtomicBool,
    error: Mutex<Option<Error>>,
    completed: AtomicUsize,
    timing: Option<Mutex<(Instant, Vec<NodeTiming>)>>,
}

impl Job<'_> {
    fn fail(&self, e: Error) {
        let mut slot = self.error.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(e);
        }
        self.stop.store(true, Ordering::Release);
    }

    /// Bookkeeping after node `i`: FINALIZE, timing, abort check. Runs on one thread while
    /// the others wait.
    fn after_node(&self, i: usize, work: &mut Work) {
        let task = &self.tasks[i];
        if task.plan.finalize && !self.stop.load(Ordering::Acquire) {
            // SAFETY: every chunk of the node has run (we are past its barrier) and no other
            // thread runs until this returns.
            unsafe { kernels::finalize(task, work) };
        }
        if let Some(t) = &self.timing {
            let mut g = t.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            let time = now - g.0;
            g.0 = now;
            g.1.push(NodeTiming {
                node: i,
                op: task.op.name(),
                ne: task.dst.ne,
                time,
            });
        }
        self.completed.store(i + 1, Ordering::Relaxed);
        if let Some(f) = self.abort {
            if !self.stop.load(Ordering::Acquire) && f() {
                let next_real = self.tasks[i + 1..].iter().any(|t| !t.plan.is_noop());
                if next_real {
                    self.fail(Error::Aborted {
                        completed: i + 1,
                        total: self.tasks.len(),
                    });
                }
            }
        }
    }

    fn run(&self, ith: usize) {
        let nth = self.n_threads;
        // SAFETY: the work buffer spans shared_size + nth * scratch_f32 * 4 bytes (see
        // plan_graph); this thread's scratch is its own slice of it, 64-byte aligned.
        let scratch = unsafe {
            std::slice::from_raw_parts_mut(
                self.work
                    .0
                    .add(self.shared_size + ith * self.scratch_f32 * 4) as *mut f32,
                self.scratch_f32,
            )
        };
        let mut work = Work {
            shared: self.work.0,
            scratch,
        };
        for (i, task) in self.tasks.iter().enumerate() {
            if task.plan.is_noop() || matches!(task.op, Op::None) {
                continue;
            }
            if task.plan.init {
                // SAFETY: the task was resolved for this computation; each thread converts
                // its own rows.
                unsafe { kernels::init(task, ith, nth, &mut work) };
                if nth > 1 {
                    self.barrier.wait(|| {});
                }
            }
            loop {
                let c = self.counters[i].fetch_add(1, Ordering::Relaxed);
                if c >= task.plan.n_chunks {
                    break;
                }
                // SAFETY: chunk c is taken by this thread only (atomic counter); INIT is done.
                if let Err(e) = unsafe { kernels::compute_chunk(task, c, &mut work) } {
                    self.fail(e);
                }
            }
            if nth > 1 {
                self.barrier.wait(|| self.after_node(i, &mut work));
            } else {
                self.after_node(i, &mut work);
            }
            if self.stop.load(Ordering::Acquire) {
                break;
            }
        }
    }
}

//! The executor: plans a graph and runs it on a persistent thread pool.
//!
//! The data-moving nodes are grouped into epochs (see `schedule`): runs of consecutive
//! nodes that touch memory independently. Every thread walks the epochs in order; within
//! one it takes INIT pieces (if a node has INIT) and then COMPUTE chunks of each node from
//! atomic counters. The thread that finishes a node's last chunk runs its FINALIZE (if any),
//! records its time and checks the abort callback. A thread moves to the next epoch once
//! every node of this one is complete: it waits for *work* to be done, never for a peer to
//! arrive, so a peer that was preempted while holding no chunk delays nobody (it catches up
//! by finding every counter exhausted). Nodes that move no data (views) are skipped.
//!
//! Results do not depend on the thread count: each output element is computed by one chunk
//! in a fixed order, whichever thread takes it.
//!
//! Planning, resolving the nodes to raw pointers and scheduling are done once per graph: an
//! executor given the same graph (same contents, `Graph`'s id) of the same context with no
//! tensor metadata changed since (a rewind or any metadata update changes the context's
//! layout key) reuses them, so a graph computed once per generated token costs its
//! preparation once.

mod pool;
mod schedule;
mod signal;
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

use crossbeam_utils::CachePadded;
use pool::Pool;
use schedule::Schedule;
use signal::Signal;

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
    /// The weight (first operand) type of a matrix product (`MUL_MAT`, `MUL_MAT_ID`), so
    /// that a profile can tell the kernels apart; `None` for other ops.
    pub weight: Option<crate::dtype::DType>,
    /// Wall time from the end of the previous data-moving node to the end of this one.
    pub time: Duration,
}

type AbortFn = Box<dyn Fn() -> bool + Send + Sync>;

/// The items of [`Executor::for_each_mut`], shared by its threads.
struct ItemsPtr<T>(*mut T);

// SAFETY: the threads of `for_each_mut` reach disjoint items only (each index is handed
// out once) and `T: Send`, so sharing the pointer among them is sound.
unsafe impl<T: Send> Sync for ItemsPtr<T> {}

/// A matrix product as a [`MatMulObserver`] sees it, after the node is computed: the name
/// and shape of its weight operand (`src0`) and its input operand (`src1`), rows of f32.
/// Only products whose input is f32 with contiguous rows are shown (ggml's `cb_eval` as
/// llama-imatrix uses it).
pub struct MatMulView<'a> {
    /// Index of the node in the graph.
    pub node: usize,
    /// `mul_mat_id`: each input column goes through the matrix `ids` names for its slot.
    pub indirect: bool,
    /// The weight operand's name in its context (its view source's when it has none).
    pub weight: &'a str,
    /// The weight operand's shape.
    pub weight_ne: [usize; 4],
    /// The input operand's shape.
    pub input_ne: [usize; 4],
    input: RawTensor,
    ids: Option<RawTensor>,
}

impl MatMulView<'_> {
    /// Row `(i1, i2, i3)` of the input: `input_ne[0]` values.
    ///
    /// Panics if an index is out of the input's shape.
    pub fn input_row(&self, i1: usize, i2: usize, i3: usize) -> &[f32] {
        let (ne, nb) = (self.input.ne, self.input.nb);
        assert!(
            i1 < ne[1] && i2 < ne[2] && i3 < ne[3],
            "input row out of range"
        );
        let off = i1 * nb[1] + i2 * nb[2] + i3 * nb[3];
        // SAFETY: the input is an f32 tensor with contiguous, 4-byte aligned rows (checked
        // before the view is made) whose data the executor keeps alive and unwritten while
        // the observer runs: its producer finished in an earlier epoch, and no node of this
        // node's epoch writes memory this node reads (see `schedule`).
        unsafe { std::slice::from_raw_parts(self.input.data.add(off) as *const f32, ne[0]) }
    }

    /// For `mul_mat_id`: the slots per token (`ids`' first axis); 0 for `mul_mat`.
    pub fn id_slots(&self) -> usize {
        self.ids.as_ref().map_or(0, |t| t.ne[0])
    }

    /// For `mul_mat_id`: the matrix slot `slot` of token `token` uses (`ids[slot, token]`).
    pub fn id(&self, slot: usize, token: usize) -> Option<i32> {
        let ids = self.ids.as_ref()?;
        if slot >= ids.ne[0] || token >= ids.ne[1] {
            return None;
        }
        let off = slot * ids.nb[0] + token * ids.nb[1];
        // SAFETY: an i32 tensor (checked before the view is made), in range (just above),
        // alive and unwritten while the observer runs (as for `input_row`); read unaligned.
        Some(unsafe { std::ptr::read_unaligned(ids.data.add(off) as *const i32) })
    }
}

/// A callback shown every matrix product of a graph after it is computed (see
/// [`Executor::set_matmul_observer`]).
pub type MatMulObserver = Box<ObserverFn>;

/// The function behind a [`MatMulObserver`].
pub type ObserverFn = dyn Fn(&MatMulView<'_>) + Send + Sync;

/// Runs graphs on a pool of threads started once and reused.
pub struct Executor {
    n_threads: usize,
    pool: Pool,
    /// Whether a [`Executor::for_each_mut`] runs on the pool now.
    pool_lent: AtomicBool,
    work: Vec<WorkLine>,
    abort: Option<AbortFn>,
    matmul_observer: Option<MatMulObserver>,
    profiling: bool,
    profile: Vec<NodeTiming>,
    /// What the last computations resolved (the most recent first, at most
    /// [`PREPARED_KEPT`]), reused when the same graph comes again with its tensors unchanged
    /// (token generation computes one graph many times; speculative decoding alternates
    /// between a one-token graph and a wider one).
    prepared: Vec<Prepared>,
}

/// How many resolved graphs an [`Executor`] keeps.
const PREPARED_KEPT: usize = 2;

/// A graph resolved and scheduled for this executor.
struct Prepared {
    /// Graph id, the context's layout key of the tensors up to the graph's last one (`upto`),
    /// profiling, observing: what the rest was made for.
    key: PreparedKey,
    /// One past the index of the graph's last tensor (its nodes and leaves; every tensor
    /// a node reads was made before it).
    upto: usize,
    /// With a matmul observer: the weight name of each `mul_mat`/`mul_mat_id` node.
    weight_names: Vec<Option<String>>,
    work_size: usize,
    shared_size: usize,
    scratch_f32: usize,
    tasks: Vec<Task>,
    /// Keeps the packed weight copies the tasks point at alive.
    _packed: Vec<kernels::matmul::PackedKeep>,
    sched: Schedule,
    pos: Vec<usize>,
}

type PreparedKey = (u64, (u32, u64), bool, bool);

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
            pool_lent: AtomicBool::new(false),
            work: Vec::new(),
            abort: None,
            matmul_observer: None,
            profiling: false,
            profile: Vec::new(),
            prepared: Vec::new(),
        }
    }

    /// Threads this executor runs on (the caller's included).
    pub fn n_threads(&self) -> usize {
        self.n_threads
    }

    /// Runs `f` on every item of `items` on this executor's threads (the caller's included),
    /// for work between graphs that the compute threads would otherwise idle through, e.g.
    /// sampling each row of a batch's logits. Each item goes to exactly one thread; which
    /// one, and in what order, is not fixed, so `f`'s result for an item must depend on
    /// that item only. A panic in `f` reaches the caller once every thread has stopped.
    ///
    /// ```
    /// let exec = ggrs_core::Executor::new(2);
    /// let mut rows = vec![vec![1.0f32, 2.0], vec![3.0, 4.0], vec![5.0, 6.0]];
    /// exec.for_each_mut(&mut rows, |r| r.iter_mut().for_each(|x| *x *= 2.0));
    /// assert_eq!(rows, [vec![2.0, 4.0], vec![6.0, 8.0], vec![10.0, 12.0]]);
    /// ```
    pub fn for_each_mut<T: Send>(&self, items: &mut [T], f: impl Fn(&mut T) + Sync) {
        // `&self` may be shared by threads: only one of them at a time gets the pool (two
        // jobs at once would overwrite each other's); the others do their items alone.
        if self.n_threads == 1
            || items.len() <= 1
            || self
                .pool_lent
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            items.iter_mut().for_each(f);
            return;
        }
        // Returns the pool even if `f` panics.
        struct Lent<'a>(&'a AtomicBool);
        impl Drop for Lent<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _lent = Lent(&self.pool_lent);
        let next = AtomicUsize::new(0);
        let base = ItemsPtr(items.as_mut_ptr());
        let n = items.len();
        let base = &base;
        self.pool.run(&|_| loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                break;
            }
            // SAFETY: `i < n` lies inside `items`, which `run` outlives, and the counter
            // hands every index out once, so this is the only reference to item `i`;
            // `T: Send` lets it be used on this thread.
            f(unsafe { &mut *base.0.add(i) });
        });
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

    /// Sets (`Some`) or removes (`None`) a callback shown each `mul_mat`/`mul_mat_id` node
    /// with an f32 input after it is computed ([`MatMulView`]), as ggml's `cb_eval` lets
    /// llama-imatrix see them. It runs on the thread that finished the node, possibly
    /// concurrently for two nodes of one epoch. Without one the executor does no extra work.
    pub fn set_matmul_observer(&mut self, f: Option<MatMulObserver>) {
        self.matmul_observer = f;
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
        let key_of = |ctx: &Context, upto: usize| {
            (
                graph.id(),
                ctx.layout_key_upto(upto),
                self.profiling,
                self.matmul_observer.is_some(),
            )
        };
        let hit = self
            .prepared
            .iter()
            .position(|p| p.key == key_of(ctx, p.upto));
        match hit {
            Some(0) => {}
            Some(i) => {
                let p = self.prepared.remove(i);
                self.prepared.insert(0, p);
            }
            None => {
                let upto = graph
                    .nodes()
                    .iter()
                    .chain(graph.leafs())
                    .map(|t| t.id as usize + 1)
                    .max()
                    .unwrap_or(0);
                let prep = self.prepare(ctx, graph, key_of(ctx, upto), upto)?;
                self.prepared.insert(0, prep);
                self.prepared.truncate(PREPARED_KEPT);
            }
        }
        let prep = &self.prepared[0];
        let lines = prep.work_size.div_ceil(ARENA_ALIGN);
        if self.work.len() < lines {
            self.work.resize(lines, WorkLine([0; ARENA_ALIGN]));
        }
        let (tasks, sched, pos) = (&prep.tasks, &prep.sched, &prep.pos);
        let (shared_size, scratch_f32) = (prep.shared_size, prep.scratch_f32);
        let work_ptr = WorkPtr(self.work.as_mut_ptr() as *mut u8);
        let nth = self.n_threads;
        let job = Job {
            tasks,
            sched,
            state: sched.nodes.iter().map(|_| NodeState::default()).collect(),
            pos,
            epoch_done: sched
                .epochs
                .iter()
                .map(|_| CachePadded::new(AtomicUsize::new(0)))
                .collect(),
            signal: Signal::new(),
            n_threads: nth,
            work: work_ptr,
            shared_size,
            scratch_f32,
            abort: self.abort.as_deref(),
            observer: self
                .matmul_observer
                .as_deref()
                .map(|f| (f, prep.weight_names.as_slice())),
            stop: AtomicBool::new(false),
            error: Mutex::new(None),
            completed: AtomicUsize::new(0),
            timing: self
                .profiling
                .then(|| Mutex::new((Instant::now(), Vec::new()))),
        };
        self.pool.run(&|ith| job.run(ith));
        if let Some(t) = &job.timing {
            self.profile = std::mem::take(&mut t.lock().unwrap_or_else(|e| e.into_inner()).1);
            self.profile.sort_by_key(|t| t.node);
        }
        if let Some(e) = job.error.lock().unwrap_or_else(|e| e.into_inner()).take() {
            return Err(e);
        }
        Ok(())
    }
}

impl Executor {
    /// Plans, resolves and schedules `graph` (whose tensors live in `ctx`) for this executor.
    fn prepare(
        &self,
        ctx: &mut Context,
        graph: &Graph,
        key: PreparedKey,
        upto: usize,
    ) -> Result<Prepared> {
        let plan = self.plan(ctx, graph)?;
        let (tasks, packed) = resolve(ctx, graph, &plan)?;
        let shared_size = plan.nodes.iter().map(|p| p.work_shared).max().unwrap_or(0);
        let shared_size = shared_size.div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        let scratch_f32 = scratch_per_thread(&plan);
        let sched = schedule::schedule(&tasks, self.n_threads, self.profiling);
        let mut pos = vec![usize::MAX; tasks.len()];
        for (k, n) in sched.nodes.iter().enumerate() {
            pos[n.node] = k;
        }
        let mut weight_names = Vec::new();
        if self.matmul_observer.is_some() {
            for &t in graph.nodes() {
                let m = ctx.meta(t)?;
                let name = match (m.op, m.src[0]) {
                    (Op::MulMat { .. } | Op::MulMatId, Some(w)) => {
                        let wm = ctx.meta(w)?;
                        match (wm.name.is_empty(), wm.view_src) {
                            (true, Some(v)) => Some(ctx.meta(v)?.name.clone()),
                            _ => Some(wm.name.clone()),
                        }
                    }
                    _ => None,
                };
                weight_names.push(name);
            }
        }
        Ok(Prepared {
            key,
            upto,
            weight_names,
            work_size: plan.work_size,
            shared_size,
            scratch_f32,
            tasks,
            _packed: packed,
            sched,
            pos,
        })
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
/// Also returns what keeps the packed weight copies that `mul_mat` tasks point at alive.
fn resolve(
    ctx: &mut Context,
    graph: &Graph,
    plan: &Plan,
) -> Result<(Vec<Task>, Vec<kernels::matmul::PackedKeep>)> {
    let mut keep = Vec::new();
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
                packed: std::ptr::null(),
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
        let mut task = Task {
            op: m.op,
            dst,
            src,
            plan: p,
            packed: std::ptr::null(),
        };
        if matches!(m.op, Op::MulMat { .. } | Op::MulMatId) {
            // The weight's packed copy is part of its data (`Context::set_packed`).
            if let Some(p) = m.src[0].and_then(|w| ctx.packed(w)) {
                keep.extend(kernels::matmul::attach_packed(&mut task, p));
            }
        }
        resolved.push(task);
    }
    Ok((resolved, keep))
}

/// Shows node `i` (`task`) to a matmul observer when it is a product with an f32 input of
/// contiguous rows.
fn observe(f: &ObserverFn, i: usize, task: &Task, names: &[Option<String>]) {
    let indirect = match task.op {
        Op::MulMat { .. } => false,
        Op::MulMatId => true,
        _ => return,
    };
    let (Some(w), Some(input)) = (task.src[0], task.src[1]) else {
        return;
    };
    let rows_ok = input.dtype == crate::dtype::DType::F32
        && input.nb[0] == 4
        && (input.data as usize).is_multiple_of(4)
        && input.nb[1..].iter().all(|&b| b.is_multiple_of(4));
    let ids = task.src[2].filter(|t| t.dtype == crate::dtype::DType::I32);
    if !rows_ok || input.data.is_null() || (indirect && ids.is_none()) {
        return;
    }
    f(&MatMulView {
        node: i,
        indirect,
        weight: names.get(i).and_then(|n| n.as_deref()).unwrap_or(""),
        weight_ne: w.ne,
        input_ne: input.ne,
        input,
        ids,
    });
}

#[derive(Clone, Copy)]
struct WorkPtr(*mut u8);
// SAFETY: the work buffer is owned by the executor, which is exclusively borrowed for the
// computation; threads write disjoint parts of it (their own scratch, or their own slots of
// the shared part) and the schedule orders every other access (see `schedule`).
unsafe impl Send for WorkPtr {}
// SAFETY: as above.
unsafe impl Sync for WorkPtr {}

/// Progress counters of one scheduled node (one cache line per node).
#[derive(Default)]
#[repr(align(64))]
struct NodeState {
    /// INIT pieces taken / finished.
    init_taken: AtomicUsize,
    init_done: AtomicUsize,
    /// COMPUTE chunks taken / finished.
    taken: AtomicUsize,
    done: AtomicUsize,
}

struct Job<'a> {
    tasks: &'a [Task],
    sched: &'a Schedule,
    /// Per scheduled node (indexed like `sched.nodes`).
    state: Vec<NodeState>,
    /// Position in `sched.nodes` of each graph node (only meaningful for scheduled ones).
    pos: &'a [usize],
    /// Nodes of each epoch completed.
    epoch_done: Vec<CachePadded<AtomicUsize>>,
    signal: Signal,
    n_threads: usize,
    work: WorkPtr,
    shared_size: usize,
    scratch_f32: usize,
    abort: Option<&'a (dyn Fn() -> bool + Send + Sync)>,
    /// The matmul observer and the weight names of the nodes.
    observer: Option<(&'a ObserverFn, &'a [Option<String>])>,
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
        self.stop.store(true, Ordering::SeqCst);
        drop(slot);
        self.signal.notify();
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Bookkeeping after every chunk of scheduled node `k` (in epoch `e`) finished: FINALIZE,
    /// timing, abort check, then the node counts as complete. Runs on the thread that
    /// finished the last chunk.
    fn complete(&self, k: usize, e: usize, work: &mut Work) {
        let i = self.sched.nodes[k].node;
        let task = &self.tasks[i];
        if task.plan.finalize && !self.stopped() {
            // SAFETY: every chunk of the node has finished (this thread finished the last
            // one and the counter's read-modify-write chain orders the others before it);
            // no node that touches the same memory or the shared buffer runs in this epoch.
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
                weight: matches!(task.op, Op::MulMat { .. } | Op::MulMatId)
                    .then(|| task.src[0].as_ref().map(|a| a.dtype))
                    .flatten(),
                time,
            });
        }
        if let Some((f, names)) = self.observer {
            if !self.stopped() {
                observe(f, i, task, names);
            }
        }
        let completed = self.completed.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(f) = self.abort {
            if !self.stopped() && f() && completed < self.sched.nodes.len() {
                self.fail(Error::Aborted {
                    completed,
                    total: self.sched.nodes.len(),
                });
            }
        }
        self.epoch_done[e].fetch_add(1, Ordering::SeqCst);
        self.signal.notify();
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
        for (e, range) in self.sched.epochs.iter().enumerate() {
            if e > 0 {
                // Epoch e - 1 complete implies every earlier one is: each of its nodes
                // started only after the epoch before it completed.
                let prev = &self.epoch_done[e - 1];
                let want = self.sched.epochs[e - 1].len();
                self.signal.wait_until(nth, || {
                    prev.load(Ordering::SeqCst) == want || self.stopped()
                });
            }
            if self.stopped() {
                break;
            }
            for k in range.clone() {
                let ns = self.sched.nodes[k];
                let st = &self.state[k];
                let task = &self.tasks[ns.node];
                // INIT pieces of this node, taken from a counter like chunks.
                loop {
                    let c = st.init_taken.fetch_add(1, Ordering::Relaxed);
                    if c >= ns.n_init {
                        break;
                    }
                    // SAFETY: piece c of n_init is this thread's only (atomic counter); it
                    // writes its own rows of the shared buffer, which no other node of the
                    // epoch touches (see `schedule`).
                    unsafe { kernels::init(task, c, ns.n_init, &mut work) };
                    st.init_done.fetch_add(1, Ordering::SeqCst);
                    self.signal.notify();
                }
                if st.taken.load(Ordering::Relaxed) >= task.plan.n_chunks {
                    continue;
                }
                if let Some(from) = ns.init_from {
                    let kf = self.pos[from];
                    let (done, want) = (&self.state[kf].init_done, self.sched.nodes[kf].n_init);
                    self.signal.wait_until(nth, || {
                        done.load(Ordering::SeqCst) == want || self.stopped()
                    });
                }
                loop {
                    if self.stopped() {
                        break;
                    }
                    let c = st.taken.fetch_add(1, Ordering::Relaxed);
                    if c >= task.plan.n_chunks {
                        break;
                    }
                    // SAFETY: chunk c is taken by this thread only (atomic counter); the
                    // node's INIT is done and its sources were completed in earlier epochs.
                    if let Err(e) = unsafe { kernels::compute_chunk(task, c, &mut work) } {
                        self.fail(e);
                    }
                    if st.done.fetch_add(1, Ordering::AcqRel) + 1 == task.plan.n_chunks {
                        self.complete(k, e, &mut work);
                    }
                }
            }
        }
    }
}

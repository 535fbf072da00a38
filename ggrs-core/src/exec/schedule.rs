//! Which nodes may run at the same time: the graph's data-moving nodes grouped into
//! *epochs*.
//!
//! An epoch is a run of consecutive nodes that touch memory independently: no node of it
//! reads or writes bytes another node of it writes (in arena or external memory, compared
//! as address ranges, so views and reused graph-allocator memory are seen for what they are),
//! and at most one of them writes the shared work buffer. Threads may take chunks of any node
//! of the current epoch; a node of the next epoch starts only when every node of this one is
//! complete. So a chain of dependent element-wise nodes costs one wait per node, while
//! `mul_mat`s reading the same activations (Q, K and V; gate and up) run as one step.
//!
//! A `mul_mat` whose INIT would convert the same activations to the same `vec_dot_type` as
//! the `mul_mat` whose conversion is still in the shared buffer reuses it instead of
//! converting again.

use crate::kernels::matmul::ActivationForm;
use crate::kernels::{RawTensor, Task};
use crate::op::Op;
use crate::tensor::MAX_SRC;

/// How the executor runs one data-moving node.
#[derive(Debug, Clone, Copy)]
pub(super) struct NodeSched {
    /// Index of the node in the graph (and in the task list).
    pub node: usize,
    /// INIT pieces this node runs itself (0: no INIT, or it reuses another node's).
    pub n_init: usize,
    /// The node whose INIT output this node's COMPUTE reads (itself, or the node whose
    /// conversion it reuses); `None` without INIT.
    pub init_from: Option<usize>,
}

/// Epochs in order; each a list of nodes in graph order.
#[derive(Debug, Default)]
pub(super) struct Schedule {
    pub nodes: Vec<NodeSched>,
    /// `epochs[e]` is the range of `nodes` forming epoch `e`.
    pub epochs: Vec<std::ops::Range<usize>>,
}

/// Byte range `[start, end)` a tensor's elements lie in (empty for empty tensors).
fn span(t: &RawTensor) -> (usize, usize) {
    if t.ne.contains(&0) || t.data.is_null() {
        return (0, 0);
    }
    let start = t.data as usize;
    let first = if t.dtype.is_quantized() {
        // Block types: dimension 0 is a dense row of blocks.
        t.dtype.row_size(t.ne[0])
    } else {
        t.dtype.type_size() + (t.ne[0] - 1) * t.nb[0]
    };
    let rest: usize = (1..4).map(|d| (t.ne[d] - 1) * t.nb[d]).sum();
    (start, start + first + rest)
}

fn overlaps(a: (usize, usize), b: (usize, usize)) -> bool {
    a.0 < a.1 && b.0 < b.1 && a.0 < b.1 && b.0 < a.1
}

/// What a node of the current epoch touches.
struct Access {
    reads: [(usize, usize); MAX_SRC],
    /// Its result, and the states an in-place op updates (empty for the others).
    writes: [(usize, usize); 2],
}

/// The span of the source an op updates in place besides writing its result (the states of
/// the in-place recurrent ops), or an empty span.
fn in_place_write(t: &Task) -> (usize, usize) {
    let states = match t.op {
        Op::SsmScan { in_place: true } => t.src[0],
        Op::GatedDeltaNet { in_place: true } => t.src[5],
        _ => None,
    };
    states.map_or((0, 0), |s| span(&s))
}

/// The identity of a `mul_mat` INIT's output: the activations' place, shape and strides,
/// and the form its plan converts them to (the converted type and any side data its kernel
/// reads: see `kernels::matmul::ActivationForm`).
type InitKey = (usize, [usize; 4], [usize; 4], ActivationForm);

/// What a `mul_mat_id`'s INIT also writes after the converted activations: its columns
/// grouped by matrix, which depend on its ids (place, shape, strides) and matrix count.
type GroupKey = (usize, [usize; 4], [usize; 4], usize);

/// The [`GroupKey`] of `t`, if it is a `mul_mat_id`.
fn group_key(t: &Task) -> Option<GroupKey> {
    match (t.op, t.src[0], t.src[2]) {
        (Op::MulMatId, Some(a), Some(ids)) => Some((ids.data as usize, ids.ne, ids.nb, a.ne[2])),
        _ => None,
    }
}

/// The [`InitKey`] of `t`, if it is a `mul_mat` or `mul_mat_id` with INIT (both convert
/// `src1`'s rows into the same slots, so either may reuse the other's conversion).
fn init_key(t: &Task) -> Option<InitKey> {
    match (t.op, t.plan.init, t.plan.activation(), t.src[1]) {
        (Op::MulMat { .. } | Op::MulMatId, true, Some(form), Some(b)) => {
            Some((b.data as usize, b.ne, b.nb, form))
        }
        _ => None,
    }
}

/// The `mul_mat` (or `mul_mat_id`) whose INIT output is in the shared buffer.
#[derive(Clone, Copy)]
struct InitOwner {
    /// Its index in the task list.
    node: usize,
    key: InitKey,
    /// Its activations' span.
    src: (usize, usize),
    /// For a `mul_mat_id`: its grouping's key and its ids' span.
    group: Option<GroupKey>,
    ids: (usize, usize),
}

/// Groups the data-moving tasks into epochs. With `serial` every node is an epoch of its
/// own (used while profiling, so that each node's time is its own).
pub(super) fn schedule(tasks: &[Task], n_threads: usize, serial: bool) -> Schedule {
    let mut s = Schedule::default();
    let mut cur: Vec<Access> = Vec::new();
    let mut epoch_start = 0;
    // Whether a node of the current epoch writes or reads the shared work buffer.
    let mut shared_busy = false;
    // The mul_mat whose INIT output is in the shared buffer.
    let mut owner: Option<InitOwner> = None;
    for (i, t) in tasks.iter().enumerate() {
        if t.plan.is_noop() || matches!(t.op, Op::None) {
            continue;
        }
        let key = init_key(t);
        // A mul_mat reads only the converted rows; a mul_mat_id also the grouping, which
        // only a mul_mat_id with the same ids and matrix count wrote.
        let group = group_key(t);
        let reuse = match (key, owner) {
            (Some(k), Some(o)) if k == o.key && (group.is_none() || group == o.group) => {
                Some(o.node)
            }
            _ => None,
        };
        let uses_shared = reuse.is_none() && t.plan.work_shared > 0;
        let writes = [span(&t.dst), in_place_write(t)];
        let reads = t.src.map(|r| r.map_or((0, 0), |r| span(&r)));
        let conflict = serial
            || (uses_shared && shared_busy)
            || cur.iter().any(|a| {
                writes.iter().any(|&w| {
                    a.writes.iter().any(|&aw| overlaps(w, aw))
                        || a.reads.iter().any(|&r| overlaps(w, r))
                }) || reads
                    .iter()
                    .any(|&r| a.writes.iter().any(|&aw| overlaps(r, aw)))
            });
        if conflict && !cur.is_empty() {
            s.epochs.push(epoch_start..s.nodes.len());
            epoch_start = s.nodes.len();
            cur.clear();
            shared_busy = false;
        }
        shared_busy |= uses_shared || reuse.is_some();
        let (n_init, init_from) = match (key, reuse) {
            (Some(_), Some(p)) => (0, Some(p)),
            (Some(_), None) => {
                let rows = t.src[1].map_or(1, |b| b.nrows());
                (rows.clamp(1, 4 * n_threads), Some(i))
            }
            (None, _) => (0, None),
        };
        if uses_shared {
            let src = |s: usize| t.src[s].map_or((0, 0), |b| span(&b));
            owner = key.map(|key| InitOwner {
                node: i,
                key,
                src: src(1),
                group,
                ids: src(2),
            });
        }
        // Writing the converted activations' source (or a grouping's ids) makes the
        // conversion stale.
        if let Some(o) = owner {
            let stale = |w| overlaps(w, o.src) || (o.group.is_some() && overlaps(w, o.ids));
            if writes.iter().any(|&w| stale(w)) {
                owner = None;
            }
        }
        s.nodes.push(NodeSched {
            node: i,
            n_init,
            init_from,
        });
        cur.push(Access { reads, writes });
    }
    if s.nodes.len() > epoch_start {
        s.epochs.push(epoch_start..s.nodes.len());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Context, DType, Graph, Tensor};

    /// The schedule of the graph ending in `outs`, on 2 threads, with each scheduled node
    /// named by its tensor.
    fn sched_of(ctx: &mut Context, outs: &[Tensor]) -> (Schedule, Vec<Tensor>) {
        let mut g = Graph::new();
        for &t in outs {
            g.build_forward_expand(ctx, t).expect("a valid graph");
        }
        let plan = super::super::plan_graph(ctx, &g, 2).expect("plannable");
        let (tasks, _packed) = super::super::resolve(ctx, &g, &plan).expect("resolvable");
        (schedule(&tasks, 2, false), g.nodes().to_vec())
    }

    /// Epochs as lists of tensors.
    fn epochs(s: &Schedule, nodes: &[Tensor]) -> Vec<Vec<Tensor>> {
        s.epochs
            .iter()
            .map(|r| s.nodes[r.clone()].iter().map(|n| nodes[n.node]).collect())
            .collect()
    }

    fn ctx() -> Context {
        Context::with_mem_size(4 << 20)
    }

    #[test]
    fn dependent_chain_is_one_node_per_epoch() {
        let mut c = ctx();
        let x = c.new_tensor_1d(DType::F32, 8).unwrap();
        let a = c.scale(x, 2.0).unwrap();
        let b = c.scale(a, 2.0).unwrap();
        let d = c.scale(b, 2.0).unwrap();
        let (s, nodes) = sched_of(&mut c, &[d]);
        assert_eq!(epochs(&s, &nodes), vec![vec![a], vec![b], vec![d]]);
    }

    #[test]
    fn independent_nodes_share_an_epoch_and_their_consumer_waits() {
        let mut c = ctx();
        let x = c.new_tensor_1d(DType::F32, 8).unwrap();
        let y = c.new_tensor_1d(DType::F32, 8).unwrap();
        let a = c.scale(x, 2.0).unwrap();
        let b = c.scale(y, 3.0).unwrap();
        let sum = c.add(a, b).unwrap();
        let (s, nodes) = sched_of(&mut c, &[sum]);
        assert_eq!(epochs(&s, &nodes), vec![vec![a, b], vec![sum]]);
    }

    #[test]
    fn writing_what_a_node_of_the_epoch_reads_starts_a_new_epoch() {
        let mut c = ctx();
        let cache = c.new_tensor_2d(DType::F32, 8, 4).unwrap();
        let src = c.new_tensor_2d(DType::F32, 8, 1).unwrap();
        let ids = c.new_tensor_1d(DType::I32, 1).unwrap();
        // r reads the cache; set_rows then writes it (write after read).
        let r = c.scale(cache, 2.0).unwrap();
        let w = c.set_rows(cache, src, ids).unwrap();
        let (s, nodes) = sched_of(&mut c, &[r, w]);
        assert_eq!(epochs(&s, &nodes), vec![vec![r], vec![w]]);
    }

    #[test]
    fn an_in_place_state_update_is_not_in_an_epoch_with_a_reader_of_the_states() {
        let mut c = ctx();
        // Delta-rule states of 2 rows (8 × 8 per head, 1 head), one sequence.
        let states = c.new_tensor_4d(DType::F32, 8, 8, 1, 2).unwrap();
        let q = c.new_tensor_4d(DType::F32, 8, 1, 1, 1).unwrap();
        let g = c.new_tensor_4d(DType::F32, 1, 1, 1, 1).unwrap();
        let ids = c.new_tensor_1d(DType::I32, 1).unwrap();
        let other = c.new_tensor_1d(DType::F32, 8).unwrap();
        // The update writes the states but its result is elsewhere: a node reading the
        // states, and one independent of them, come after it.
        let o = c
            .gated_delta_net_in_place(q, q, q, g, g, states, ids)
            .unwrap();
        let r = c.scale(states, 2.0).unwrap();
        let free = c.scale(other, 2.0).unwrap();
        let (s, nodes) = sched_of(&mut c, &[o, free, r]);
        assert_eq!(epochs(&s, &nodes), vec![vec![o, free], vec![r]]);
    }

    #[test]
    fn mul_mats_of_the_same_activations_share_one_conversion() {
        let mut c = ctx();
        let h = c.new_tensor_2d(DType::F32, 64, 1).unwrap();
        let wq = c.new_tensor_2d(DType::F16, 64, 16).unwrap();
        let wk = c.new_tensor_2d(DType::F16, 64, 8).unwrap();
        let wv = c.new_tensor_2d(DType::F16, 64, 8).unwrap();
        let q = c.mul_mat(wq, h).unwrap();
        let k = c.mul_mat(wk, h).unwrap();
        let v = c.mul_mat(wv, h).unwrap();
        let (s, nodes) = sched_of(&mut c, &[q, k, v]);
        assert_eq!(epochs(&s, &nodes), vec![vec![q, k, v]]);
        let first = s.nodes[0];
        assert_eq!(first.n_init, 1, "one activation row: one INIT piece");
        assert_eq!(first.init_from, Some(first.node));
        for n in &s.nodes[1..] {
            assert_eq!(n.n_init, 0, "k and v reuse q's conversion");
            assert_eq!(n.init_from, Some(first.node));
        }
    }

    #[test]
    fn a_conversion_is_not_reused_after_its_source_changed() {
        let mut c = ctx();
        let h = c.new_tensor_2d(DType::F32, 64, 2).unwrap();
        let src = c.new_tensor_2d(DType::F32, 64, 1).unwrap();
        let ids = c.new_tensor_1d(DType::I32, 1).unwrap();
        let w1 = c.new_tensor_2d(DType::F16, 64, 4).unwrap();
        let w2 = c.new_tensor_2d(DType::F16, 64, 4).unwrap();
        let m1 = c.mul_mat(w1, h).unwrap();
        // A view of h with h's place, shape and strides, written after m1 converted h.
        let h2 = c.set_rows(h, src, ids).unwrap();
        let m2 = c.mul_mat(w2, h2).unwrap();
        let (s, nodes) = sched_of(&mut c, &[m1, m2]);
        assert_eq!(epochs(&s, &nodes), vec![vec![m1], vec![h2], vec![m2]]);
        let last = s.nodes[2];
        assert_eq!(last.init_from, Some(last.node), "m2 converts h again");
        assert_eq!(last.n_init, 2);
    }

    #[test]
    fn two_conversions_never_share_an_epoch() {
        let mut c = ctx();
        let h = c.new_tensor_2d(DType::F32, 64, 1).unwrap();
        let g = c.new_tensor_2d(DType::F32, 64, 1).unwrap();
        let w = c.new_tensor_2d(DType::F16, 64, 4).unwrap();
        let a = c.mul_mat(w, h).unwrap();
        let b = c.mul_mat(w, g).unwrap();
        let (s, nodes) = sched_of(&mut c, &[a, b]);
        assert_eq!(epochs(&s, &nodes), vec![vec![a], vec![b]]);
    }
}

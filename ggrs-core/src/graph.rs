//! Computation graphs: tensors reachable from outputs, in topological order.
//!
//! [`Graph::build_forward_expand`] walks source links depth-first from a tensor, visiting
//! each tensor once (shared subgraphs appear once), and appends tensors after all their
//! sources: tensors without an op become *leaves*, the others *nodes*. Expanding several
//! outputs into one graph keeps the order of the calls, which is how a write into a cache
//! (`cpy`, `set_rows`) is made to run before the nodes that read the cache.

use std::collections::HashSet;
use std::fmt::Write;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::op::Op;
use crate::tensor::{Tensor, TensorHash};

/// Default node limit of a graph (ggml's `GGML_DEFAULT_GRAPH_SIZE`).
pub const DEFAULT_GRAPH_SIZE: usize = 2048;

/// Tensors of a computation in topological order.
#[derive(Debug, Clone)]
pub struct Graph {
    nodes: Vec<Tensor>,
    leafs: Vec<Tensor>,
    visited: HashSet<Tensor, TensorHash>,
    max_nodes: usize,
    /// Identifies this graph's contents: new for every graph and after every change (a
    /// clone keeps it, having the same contents). The executor keys its prepared tasks on it.
    id: u64,
}

/// The next [`Graph::id`].
static NEXT_GRAPH_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_graph_id() -> u64 {
    NEXT_GRAPH_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Default for Graph {
    fn default() -> Self {
        Graph::new()
    }
}

impl Graph {
    /// An empty graph with room for [`DEFAULT_GRAPH_SIZE`] nodes.
    pub fn new() -> Graph {
        Graph::with_capacity(DEFAULT_GRAPH_SIZE)
    }

    /// An empty graph that accepts at most `max_nodes` nodes (and as many leaves).
    pub fn with_capacity(max_nodes: usize) -> Graph {
        Graph {
            nodes: Vec::new(),
            leafs: Vec::new(),
            visited: HashSet::default(),
            max_nodes,
            id: next_graph_id(),
        }
    }

    /// A graph computing `out`, with no node limit.
    pub fn build(ctx: &Context, out: Tensor) -> Result<Graph> {
        let mut g = Graph::with_capacity(usize::MAX);
        g.build_forward_expand(ctx, out)?;
        Ok(g)
    }

    /// Adds `t` and everything it depends on that is not in the graph yet.
    pub fn build_forward_expand(&mut self, ctx: &Context, t: Tensor) -> Result<()> {
        if self.visited.contains(&t) {
            return Ok(());
        }
        self.id = next_graph_id();
        ctx.meta(t)?;
        // Iterative post-order walk: (tensor, index of the next source to visit).
        let mut stack: Vec<(Tensor, usize)> = vec![(t, 0)];
        self.visited.insert(t);
        while let Some(&mut (cur, ref mut next)) = stack.last_mut() {
            let meta = ctx.meta(cur)?;
            if let Some(src) = meta.src.get(*next) {
                *next += 1;
                if let Some(s) = *src {
                    if self.visited.insert(s) {
                        ctx.meta(s)?;
                        stack.push((s, 0));
                    }
                }
                continue;
            }
            stack.pop();
            if meta.op == Op::None {
                if self.leafs.len() >= self.max_nodes {
                    return Err(Error::GraphTooLarge {
                        limit: self.max_nodes,
                    });
                }
                self.leafs.push(cur);
            } else {
                if self.nodes.len() >= self.max_nodes {
                    return Err(Error::GraphTooLarge {
                        limit: self.max_nodes,
                    });
                }
                self.nodes.push(cur);
            }
        }
        Ok(())
    }

    /// What identifies the graph's contents (see the field).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Nodes (tensors with an op), in the order they are computed.
    pub fn nodes(&self) -> &[Tensor] {
        &self.nodes
    }

    /// Leaves (tensors without an op: inputs, weights, constants).
    pub fn leafs(&self) -> &[Tensor] {
        &self.leafs
    }

    /// The last node (the output of the last expand), if any.
    pub fn output(&self) -> Option<Tensor> {
        self.nodes.last().copied()
    }

    /// Removes every node and leaf.
    pub fn clear(&mut self) {
        self.id = next_graph_id();
        self.nodes.clear();
        self.leafs.clear();
        self.visited.clear();
    }

    /// The graph as text: one line per node (index, op, type, shape, params, sources) and
    /// per leaf.
    pub fn display(&self, ctx: &Context) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "=== graph: {} nodes, {} leafs ===",
            self.nodes.len(),
            self.leafs.len()
        );
        for (i, &t) in self.nodes.iter().enumerate() {
            let Ok(m) = ctx.meta(t) else { continue };
            let srcs: Vec<String> = m
                .src
                .iter()
                .flatten()
                .map(|&x| ctx.display_name(x))
                .collect();
            let p = m.op.params_string();
            let _ = writeln!(
                s,
                " - {i:3}: {:<14} {:<5} {:>22} {:<16}{}{} <- [{}]",
                m.op.name(),
                m.dtype.name(),
                format!("{:?}", m.ne),
                ctx.display_name(t),
                if p.is_empty() { "" } else { " " },
                p,
                srcs.join(", ")
            );
        }
        for (i, &t) in self.leafs.iter().enumerate() {
            let Ok(m) = ctx.meta(t) else { continue };
            let _ = writeln!(
                s,
                " - leaf {i:3}: {:<5} {:>22} {}",
                m.dtype.name(),
                format!("{:?}", m.ne),
                ctx.display_name(t)
            );
        }
        s
    }

    /// The graph in Graphviz DOT: nodes as boxes with op, type and shape, leaves as
    /// ellipses, an edge from each source to its consumer.
    pub fn to_dot(&self, ctx: &Context) -> String {
        let mut s =
            String::from("digraph G {\n  rankdir = TB;\n  node [fontname=\"monospace\"];\n");
        let esc = |x: &str| x.replace('\\', "\\\\").replace('"', "\\\"");
        for &t in &self.leafs {
            let Ok(m) = ctx.meta(t) else { continue };
            let _ = writeln!(
                s,
                "  t{} [shape=ellipse, label=\"{}\\n{} {:?}\"];",
                t.id,
                esc(&ctx.display_name(t)),
                m.dtype,
                m.ne
            );
        }
        for &t in &self.nodes {
            let Ok(m) = ctx.meta(t) else { continue };
            let p = m.op.params_string();
            let _ = writeln!(
                s,
                "  t{} [shape=box, style={}, label=\"{}\\n{}{}\\n{} {:?}\"];",
                t.id,
                if m.op.is_view() { "dashed" } else { "solid" },
                esc(&ctx.display_name(t)),
                m.op.name(),
                if p.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", esc(&p))
                },
                m.dtype,
                m.ne
            );
            for src in m.src.iter().flatten() {
                let _ = writeln!(s, "  t{} -> t{};", src.id, t.id);
            }
        }
        s.push_str("}\n");
        s
    }
}

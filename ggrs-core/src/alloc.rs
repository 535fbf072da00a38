//! Graph allocation: placing a graph's intermediate tensors in the arena with memory reuse.
//!
//! In a context with deferred allocation ([`Context::set_deferred_alloc`]) op results are
//! made without data. [`Context::alloc_graph`] then walks the graph in execution order, as
//! ggml's graph allocator does: before a node runs, its result gets a block of memory; after
//! it runs, every source whose consumers have all run gives its block back, so later nodes
//! reuse it. Views take their data from the tensor they view; leaves and graph outputs
//! (the last node and tensors flagged `output`) are never reused. The arena grows by the
//! peak of this simulation only, which bounds the memory of a step by its widest point
//! instead of the sum of all its intermediates.

use std::collections::HashMap;

use crate::context::{Context, ARENA_ALIGN};
use crate::error::Result;
use crate::graph::Graph;
use crate::tensor::{DataLoc, Tensor, TensorHash};

/// Free blocks over an address range that grows on demand (offsets relative to its start).
#[derive(Default)]
struct FreeList {
    /// Free blocks `(offset, size)`, sorted by offset, never adjacent.
    free: Vec<(usize, usize)>,
    /// End of the highest block handed out so far (the range in use).
    top: usize,
    /// Highest `top` seen.
    peak: usize,
}

impl FreeList {
    fn alloc(&mut self, size: usize) -> usize {
        let size = size.div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        // Best fit among the free blocks.
        let best = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, &(_, s))| s >= size)
            .min_by_key(|(_, &(_, s))| s)
            .map(|(i, _)| i);
        if let Some(i) = best {
            let (off, s) = self.free[i];
            if s == size {
                self.free.remove(i);
            } else {
                self.free[i] = (off + size, s - size);
            }
            return off;
        }
        // Extend the top; a free block ending at the top is used first.
        if let Some(&(off, s)) = self.free.last() {
            if off + s == self.top {
                self.free.pop();
                self.top = off + size;
                self.peak = self.peak.max(self.top);
                return off;
            }
        }
        let off = self.top;
        self.top += size;
        self.peak = self.peak.max(self.top);
        off
    }

    fn release(&mut self, off: usize, size: usize) {
        let size = size.div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        let i = self.free.partition_point(|&(o, _)| o < off);
        self.free.insert(i, (off, size));
        // Merge with the next block, then with the previous one.
        if i + 1 < self.free.len() && self.free[i].0 + self.free[i].1 == self.free[i + 1].0 {
            self.free[i].1 += self.free[i + 1].1;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == self.free[i].0 {
            self.free[i - 1].1 += self.free[i].1;
            self.free.remove(i);
        }
        // A block that ends at the top shrinks the range in use.
        if let Some(&(o, s)) = self.free.last() {
            if o + s == self.top {
                self.top = o;
                self.free.pop();
            }
        }
    }
}

impl Context {
    /// Gives data to every node of `graph` that has none, reusing memory of intermediates
    /// whose consumers have all run (see the [module docs](self)). Returns the bytes the
    /// graph's intermediates take (their peak), which the arena grows by. In a `no_alloc`
    /// (measure) context only the size is counted.
    ///
    /// Call it after the graph is complete and before computing it. Tensors made after
    /// this call get no memory from it.
    pub fn alloc_graph(&mut self, graph: &Graph) -> Result<usize> {
        let root_of =
            |ctx: &Context, t: Tensor| -> Result<Tensor> { Ok(ctx.meta(t)?.view_src.unwrap_or(t)) };
        // Which tensors this call places: nodes without data that are not views.
        let mut placed: HashMap<Tensor, (usize, usize), TensorHash> = HashMap::default();
        let mut uses: HashMap<Tensor, usize, TensorHash> = HashMap::default();
        for &n in graph.nodes() {
            for s in self.meta(n)?.src.iter().flatten() {
                *uses.entry(root_of(self, *s)?).or_default() += 1;
            }
        }
        let keep = |ctx: &Context, t: Tensor| -> bool {
            graph.output() == Some(t) || ctx.meta(t).is_ok_and(|m| m.flags.output)
        };
        let mut fl = FreeList::default();
        for &n in graph.nodes() {
            let m = self.meta(n)?;
            if m.view_src.is_none() && !m.has_data() && !self.is_placed_leafless(m) {
                let size = m.nbytes();
                let off = fl.alloc(size);
                placed.insert(n, (off, size));
            }
            for s in self.meta(n)?.src.iter().flatten() {
                let r = root_of(self, *s)?;
                let left = uses.get_mut(&r).map(|u| {
                    *u -= 1;
                    *u
                });
                if left == Some(0) && !keep(self, r) {
                    if let Some(&(off, size)) = placed.get(&r) {
                        fl.release(off, size);
                    }
                }
            }
        }
        let peak = fl.peak;
        let base = self.alloc(peak, &|| format!("graph of {} nodes", graph.nodes().len()))?;
        if !self.is_no_alloc() {
            for (&t, &(off, _)) in &placed {
                self.meta_mut(t)?.data = DataLoc::Arena(base + off);
            }
            // Views of tensors placed now take their data from them.
            for &n in graph.nodes() {
                if let Some(r) = self.meta(n)?.view_src {
                    if let Some(&(off, _)) = placed.get(&r) {
                        let vo = self.meta(n)?.view_offs;
                        self.meta_mut(n)?.data = DataLoc::Arena(base + off + vo);
                    }
                }
            }
        }
        Ok(peak)
    }

    /// Zero-sized tensors need no memory.
    fn is_placed_leafless(&self, m: &crate::tensor::TensorMeta) -> bool {
        m.nbytes() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_list_reuses_and_merges() {
        let mut fl = FreeList::default();
        let a = fl.alloc(100);
        let b = fl.alloc(64);
        let c = fl.alloc(10);
        assert_eq!((a, b, c), (0, 128, 192));
        fl.release(b, 64);
        assert_eq!(fl.alloc(60), 128);
        fl.release(a, 100);
        fl.release(128, 60);
        // a and b merged into one block of 192 bytes.
        assert_eq!(fl.free, vec![(0, 192)]);
        fl.release(c, 10);
        assert_eq!(fl.top, 0);
        assert_eq!(fl.peak, 256);
    }
}

//! What the IQ1 writers (ggml's `quantize_row_iq1_s_impl` and `quantize_row_iq1_m_impl`)
//! share: the IQ1 grid's search (ggml's `iq2xs_init_impl(GGML_TYPE_IQ1_S)`: the 2048 points
//! of `iq1s_grid`, coordinates −1, 0, 1 as levels 0–2, three neighbour distances), the
//! shifted level values, the sorted order the exhaustive split search walks, and the fit of
//! a sub-block's levels to the grid.
//!
//! All float arithmetic follows ggml-quants.c as libggml-base compiles it (x86-64 baseline,
//! no FMA contraction): same operations, same order, f32 throughout.

use std::sync::OnceLock;

use super::iq_grids::IQ1S_GRID;
use super::iq_search::{grid8_search, GridSearch, Lookup};

/// ggml's `IQ1S_DELTA` / `IQ1M_DELTA`: the shift of the three levels.
const DELTA: f32 = 0.125;

/// The level values with a positive shift (ggml's `x_p`).
pub(crate) const X_P: [f32; 3] = [-1.0 + DELTA, DELTA, 1.0 + DELTA];
/// The level values with a negative shift (ggml's `x_m`).
pub(crate) const X_M: [f32; 3] = [-1.0 - DELTA, -DELTA, 1.0 - DELTA];

/// The IQ1 grid's search, built once.
pub(crate) fn search() -> &'static GridSearch<8> {
    static CELL: OnceLock<GridSearch<8>> = OnceLock::new();
    grid8_search(&CELL, &IQ1S_GRID, &[0xff, 0x00, 0x01], 3)
}

/// The positions of `xb` in ascending order of value, equal values in position order (ggml
/// sorts `(x, index)` pairs on `x` with glibc's `qsort`, a stable merge sort at these sizes).
pub(crate) fn ascending(xb: &[f32], order: &mut [usize]) {
    for (i, o) in order.iter_mut().enumerate() {
        *o = i;
    }
    order.sort_by(|&a, &b| {
        xb[a]
            .partial_cmp(&xb[b])
            .unwrap_or(std::cmp::Ordering::Equal)
    });
}

/// The levels of a split of the sorted values — level 0 below sorted position `i1`, 1 from
/// `i1` to `i2`, 2 from `i2` on — and its scale made positive: with a negative `scale` the
/// levels are mirrored (`2 − l`) and the returned flag asks the caller to flip its shift.
pub(crate) fn split_levels(
    order: &[usize],
    (i1, i2): (usize, usize),
    scale: f32,
    l: &mut [i8],
) -> (f32, bool) {
    let flip = scale < 0.0;
    for (j, &i) in order.iter().enumerate() {
        let v = if j < i1 {
            0
        } else if j < i2 {
            1
        } else {
            2
        };
        l[i] = if flip { 2 - v } else { v };
    }
    (if flip { -scale } else { scale }, flip)
}

/// Fits the levels `l` of a sub-block `xb` (weights `weight`) to the grid, group of 8 by
/// group of 8, group `k`'s level values being `xx(k)`: a group on the grid keeps its point;
/// one off it takes the neighbour nearest at `scale` (its levels rewritten). If any group
/// was off the grid, the scale is refitted to the chosen points (`Σ w·q·x / Σ w·q²` when
/// both are positive). Writes the grid indices to `index` and returns the scale.
pub(crate) fn fit_to_grid(
    xb: &[f32],
    weight: &[f32],
    xx: impl Fn(usize) -> &'static [f32; 3],
    mut scale: f32,
    l: &mut [i8],
    index: &mut [u16],
) -> f32 {
    let grid = search();
    let mut all_on_grid = true;
    for (k, ix) in index.iter_mut().enumerate() {
        let g = 8 * k..8 * k + 8;
        let u = GridSearch::<8>::index_of(&l[g.clone()], 2);
        *ix = match grid.lookup(u) {
            Lookup::On(gi) => gi as u16,
            Lookup::Near(c) => {
                all_on_grid = false;
                let v = xx(k);
                let value = |p: i8| v[((p - 1) / 2) as usize];
                let (xv, w) = (&xb[g.clone()], &weight[g.clone()]);
                grid.best_neighbour_by(c, xv, w, scale, value, &mut l[g]) as u16
            }
        };
    }
    if !all_on_grid {
        let (mut sumqx, mut sumq2) = (0f32, 0f32);
        for (k, &ix) in index.iter().enumerate() {
            let v = xx(k);
            for (j, &p) in grid.point(ix as usize).iter().enumerate() {
                let w = weight[8 * k + j];
                let q = v[((p - 1) / 2) as usize];
                sumqx += w * q * xb[8 * k + j];
                sumq2 += w * q * q;
            }
        }
        if sumqx > 0.0 && sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_keep_their_positions() {
        let mut order = [0usize; 6];
        ascending(&[0.5, -1.0, 0.5, 0.0, -0.0, -1.0], &mut order);
        assert_eq!(order, [1, 5, 3, 4, 0, 2]);
        let mut l = [9i8; 6];
        assert_eq!(split_levels(&order, (2, 4), 0.5, &mut l), (0.5, false));
        assert_eq!(l, [2, 0, 2, 1, 1, 0]);
        assert_eq!(split_levels(&order, (2, 4), -0.5, &mut l), (0.5, true));
        assert_eq!(l, [0, 2, 0, 1, 1, 2]);
    }
}

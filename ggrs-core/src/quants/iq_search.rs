//! What the grid i-quant writers (ggml's `quantize_row_iq*_impl`) share: each grid as a
//! lattice of odd positions with a map from every point of the code cube to its grid index,
//! or to the list of grid points nearest it (ggml's `kmap` and `kneighbors`, built by
//! `iq2xs_init_impl` / `iq3xs_init_impl` at first use; here built once per grid on first
//! use too), the weighted nearest-neighbour search over such a list, and the sign folding of
//! groups of 8 values (an even number of negatives, the cheapest value flipped).
//!
//! All float arithmetic follows ggml-quants.c as libggml-base compiles it (x86-64 baseline,
//! no FMA contraction): same operations, same order, f32 throughout.

use std::sync::OnceLock;

/// A grid of `D`-value points, with its code-cube map and neighbour lists.
///
/// A grid point has coordinates `2l + 1` for levels `l` (`bits` bits each); a point of the
/// cube with levels `l_0 … l_{D-1}` has the index `u = Σ l_i << (bits·i)`.
#[derive(Debug)]
pub(crate) struct GridSearch<const D: usize> {
    /// The grid points, `2l + 1` per coordinate.
    points: Vec<[i8; D]>,
    /// Per cube index: the grid index (≥ 0), or `-(offset + 1)` of its neighbour list in
    /// `neighbours` (a count, then that many grid indices).
    map: Vec<i32>,
    /// The neighbour lists.
    neighbours: Vec<u16>,
}

/// Where a cube point is: on the grid, or near these grid points (ggml's order).
pub(crate) enum Lookup<'a> {
    /// The grid index of the point.
    On(usize),
    /// The candidates (grid indices) of a point off the grid.
    Near(&'a [u16]),
}

impl<const D: usize> GridSearch<D> {
    /// Builds the search of a grid of `n` points whose point `k` has levels `levels(k)`
    /// (`bits` bits each), keeping for each cube point off the grid the grid points at its
    /// `nwant` smallest distinct squared distances, ordered by distance then grid index (the
    /// order of ggml's `qsort` on `(d2, index)` pairs). `map_size` is ggml's `kmap_size`.
    pub(crate) fn build(
        n: usize,
        levels: impl Fn(usize) -> [u8; D],
        bits: u32,
        map_size: usize,
        nwant: usize,
    ) -> Self {
        let points: Vec<[i8; D]> = (0..n).map(|k| levels(k).map(|l| 2 * l as i8 + 1)).collect();
        let mut map = vec![-1i32; map_size];
        for (k, p) in points.iter().enumerate() {
            let u = cube_index(p.map(|v| ((v - 1) / 2) as u8), bits);
            map[u] = k as i32;
        }
        let mask = (1usize << bits) - 1;
        let mut neighbours = Vec::new();
        let mut d2 = vec![0i32; n];
        for (i, m) in map.iter_mut().enumerate() {
            if *m >= 0 {
                continue;
            }
            let pos: [i32; D] =
                std::array::from_fn(|k| 2 * ((i >> (bits as usize * k)) & mask) as i32 + 1);
            for (d, p) in d2.iter_mut().zip(&points) {
                *d = (0..D).map(|k| (p[k] as i32 - pos[k]).pow(2)).sum();
            }
            // The `nwant` smallest distinct distances, ascending.
            let mut wanted: Vec<i32> = Vec::with_capacity(nwant);
            for _ in 0..nwant {
                let floor = wanted.last().copied().unwrap_or(i32::MIN);
                match d2.iter().copied().filter(|&d| d > floor).min() {
                    Some(d) => wanted.push(d),
                    None => break,
                }
            }
            *m = -(neighbours.len() as i32 + 1);
            let start = neighbours.len();
            neighbours.push(0);
            for &w in &wanted {
                neighbours.extend((0..n).filter(|&j| d2[j] == w).map(|j| j as u16));
            }
            neighbours[start] = (neighbours.len() - start - 1) as u16;
        }
        GridSearch {
            points,
            map,
            neighbours,
        }
    }

    /// Where cube point `u` is. A `u` outside the cube (ggml reads past its map there, in a
    /// state its searches never reach) counts as near grid point 0.
    #[inline]
    pub(crate) fn lookup(&self, u: usize) -> Lookup<'_> {
        match self.map.get(u) {
            Some(&m) if m >= 0 => Lookup::On(m as usize),
            Some(&m) => {
                let at = (-(m + 1)) as usize;
                let count = self.neighbours[at] as usize;
                Lookup::Near(&self.neighbours[at + 1..at + 1 + count])
            }
            None => Lookup::Near(&[0]),
        }
    }

    /// The grid index of cube point `u`, if it is on the grid.
    #[inline]
    pub(crate) fn on_grid(&self, u: usize) -> Option<usize> {
        match self.lookup(u) {
            Lookup::On(g) => Some(g),
            Lookup::Near(_) => None,
        }
    }

    /// Grid point `g` (`2l + 1` per coordinate).
    #[inline]
    pub(crate) fn point(&self, g: usize) -> &[i8; D] {
        &self.points[g]
    }

    /// Writes the levels of grid point `g` to `l`.
    #[inline]
    pub(crate) fn levels_into(&self, g: usize, l: &mut [i8]) {
        for (l, &p) in l.iter_mut().zip(self.point(g)) {
            *l = (p - 1) / 2;
        }
    }

    /// ggml's `iq*_find_best_neighbour`: the candidate minimising `Σ w·(scale·q − x)²` (the
    /// first of equals), `q` the grid point's coordinate, its levels written to `l`.
    pub(crate) fn best_neighbour(
        &self,
        candidates: &[u16],
        xval: &[f32],
        weight: &[f32],
        scale: f32,
        l: &mut [i8],
    ) -> usize {
        self.best_neighbour_by(candidates, xval, weight, scale, |p| p as f32, l)
    }

    /// [`GridSearch::best_neighbour`] with `q = value(coordinate)` (IQ1's
    /// `iq1_find_best_neighbour2` reads the shifted level values).
    pub(crate) fn best_neighbour_by(
        &self,
        candidates: &[u16],
        xval: &[f32],
        weight: &[f32],
        scale: f32,
        value: impl Fn(i8) -> f32,
        l: &mut [i8],
    ) -> usize {
        let mut best_d2 = f32::MAX;
        // ggml asserts that a candidate wins; with NaN distances none does, and the first
        // stands in.
        let mut best = candidates[0] as usize;
        for &c in candidates {
            let pg = self.point(c as usize);
            let mut d2 = 0f32;
            for i in 0..D {
                let diff = scale * value(pg[i]) - xval[i];
                d2 += weight[i] * diff * diff;
            }
            if d2 < best_d2 {
                best_d2 = d2;
                best = c as usize;
            }
        }
        self.levels_into(best, l);
        best
    }

    /// The cube index of the levels `l` (each `bits` bits, as ggml's `u |= l << bits·i`
    /// into a `uint16_t`).
    #[inline]
    pub(crate) fn index_of(l: &[i8], bits: u32) -> usize {
        let mut u = 0i32;
        for (i, &v) in l.iter().enumerate() {
            u |= (v as i32) << (bits as usize * i);
        }
        u as u16 as usize
    }
}

fn cube_index<const D: usize>(l: [u8; D], bits: u32) -> usize {
    l.iter()
        .enumerate()
        .map(|(i, &v)| (v as usize) << (bits as usize * i))
        .sum()
}

/// The search of a grid given as ggml's decoded grid table (`grid[k]` holds point `k`'s `D`
/// magnitudes, one byte each), each byte's level its rank in `bytes` (the grid's distinct
/// magnitudes, ascending), built once.
pub(crate) fn grid_search<const D: usize>(
    cell: &'static OnceLock<GridSearch<D>>,
    grid: impl Fn(usize) -> u64 + Sync,
    n: usize,
    bytes: &[u8],
    bits: u32,
    map_size: usize,
    nwant: usize,
) -> &'static GridSearch<D> {
    cell.get_or_init(|| {
        let level = |b: u8| bytes.iter().position(|&v| v == b).unwrap_or(0) as u8;
        GridSearch::build(
            n,
            |k| {
                let g = grid(k);
                std::array::from_fn(|i| level((g >> (8 * i)) as u8))
            },
            bits,
            map_size,
            nwant,
        )
    })
}

/// The search of a grid of 8-value points with 2-bit levels (the IQ2 and IQ1 grids: ggml's
/// `iq2xs_init_impl`, map size 43692), `bytes` the grid's byte per level, `nwant` neighbour
/// distances.
pub(crate) fn grid8_search(
    cell: &'static OnceLock<GridSearch<8>>,
    grid: &'static [u64],
    bytes: &[u8],
    nwant: usize,
) -> &'static GridSearch<8> {
    grid_search(cell, |k| grid[k], grid.len(), bytes, 2, 43692, nwant)
}

/// The block scale of ggml's grid writers, `d = max_scale / (2n − 1)`, and each sub-block
/// scale `s` as a level on it, `nearest_int(0.5·(s/d − 1))` clamped to `0..n`; `None` when
/// `max_scale` is 0 (every sub-block zero: the block stays as it is).
pub(crate) fn sub_block_scales<const N: usize>(
    scales: &[f32; N],
    max_scale: f32,
    n: i32,
) -> Option<(f32, [u8; N])> {
    if max_scale == 0.0 {
        return None;
    }
    let d = max_scale / (2 * n - 1) as f32;
    let id = 1.0 / d;
    let levels =
        scales.map(|s| super::k_quants::nearest_int(0.5 * (id * s - 1.0)).clamp(0, n - 1) as u8);
    Some((d, levels))
}

/// The IQ2 grids' magnitudes 8, 25, 43 (levels 0–2).
pub(crate) const IQ2_BYTES: [u8; 3] = [0x08, 0x19, 0x2b];

/// The IQ2 grids' largest level (ggml's `kMaxQ − 1`).
pub(crate) const IQ2_MAX_LEVEL: i32 = 2;

/// The sign folding of a sub-block `xb` of 16 or 32 values with weights `weight`: `xval`
/// gets the magnitudes, and each group of 8 an even number of negatives — with an odd count, the
/// value of least `w·x²` (the first of equals) keeps its sign, i.e. enters `xval` negated.
/// Returns the 7 stored sign bits of each group (bit `i` set where value `i` is negative;
/// entries past the sub-block's groups 0).
pub(crate) fn fold_signs(xb: &[f32], weight: &[f32], xval: &mut [f32]) -> [u8; 4] {
    let mut signs = [0u8; 4];
    for k in 0..xb.len() / 8 {
        let mut nflip = 0;
        let mut s = 0u8;
        for i in 0..8 {
            let v = xb[8 * k + i];
            if v >= 0.0 {
                xval[8 * k + i] = v;
            } else {
                xval[8 * k + i] = -v;
                nflip += 1;
                s |= 1 << i;
            }
        }
        if nflip % 2 == 1 {
            let cost = |i: usize| weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
            let mut imin = 0;
            let mut min = cost(0);
            for i in 1..8 {
                let ax = cost(i);
                if ax < min {
                    min = ax;
                    imin = i;
                }
            }
            xval[8 * k + imin] = -xval[8 * k + imin];
            s ^= 1 << imin;
        }
        signs[k] = s & 127;
    }
    signs
}

/// The magnitudes of a sub-block `xb` of up to 32 values into `xval`, and its sign bits (bit
/// `i % 8` of byte `i / 8` set where value `i` is negative), as ggml's unfolded writers
/// (IQ2_S, IQ3_S) split them: `x ≥ 0` keeps `x` (−0 too).
pub(crate) fn split_signs(xb: &[f32], xval: &mut [f32]) -> [u8; 4] {
    let mut signs = [0u8; 4];
    for (i, &v) in xb.iter().enumerate() {
        if v >= 0.0 {
            xval[i] = v;
        } else {
            xval[i] = -v;
            signs[i / 8] |= 1 << (i % 8);
        }
    }
    signs
}

/// The search weights of a sub-block `xb`: `qw·√(σ² + x²)` with importance weights `qw`
/// (the sub-block's own), else `x²`.
pub(crate) fn sub_block_weights(qw: Option<&[f32]>, xb: &[f32], sigma2: f32, w: &mut [f32]) {
    match qw {
        Some(qw) => super::k_quants::sigma_weights(qw, xb, sigma2, w),
        None => {
            for (w, &v) in w.iter_mut().zip(xb) {
                *w = v * v;
            }
        }
    }
}

/// `Σ w·x·q` and `Σ w·q²` with `q = 2l + 1`, in value order (ggml's `sumqx`, `sumq2`).
#[inline]
pub(crate) fn odd_level_sums(weight: &[f32], xval: &[f32], l: &[i8]) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for i in 0..weight.len() {
        let w = weight[i];
        let q = (2 * l[i] as i32 + 1) as f32;
        sumqx += w * xval[i] * q;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// ggml's level of a value: `nearest_int(0.5·(id·x − 1))` clamped to `0..=max`.
#[inline]
pub(crate) fn odd_level(id: f32, x: f32, max: i32) -> i8 {
    let l = super::k_quants::nearest_int(0.5 * (id * x - 1.0));
    l.clamp(0, max) as i8
}

/// Group `g` of `l` re-rounded at `scale` (`id` = 1 / `scale`): the odd levels of `xval`
/// when they are a grid point, else the grid point nearest to them (ggml's final pass after
/// the scale search), written as levels.
#[allow(clippy::too_many_arguments)]
pub(crate) fn round_group<const D: usize>(
    grid: &GridSearch<D>,
    (id, scale): (f32, f32),
    max_level: i32,
    bits: u32,
    g: std::ops::Range<usize>,
    xval: &[f32],
    waux: &[f32],
    l: &mut [i8],
) {
    let mut lk = [0i8; D];
    for (lv, &xv) in lk.iter_mut().zip(&xval[g.clone()]) {
        *lv = odd_level(id, xv, max_level);
    }
    let u = GridSearch::<D>::index_of(&lk, bits);
    let gi = match grid.lookup(u) {
        Lookup::On(gi) => gi,
        Lookup::Near(c) => {
            let (xv, wa) = (&xval[g.clone()], &waux[g.clone()]);
            grid.best_neighbour(c, xv, wa, scale, &mut l[g.clone()])
        }
    };
    grid.levels_into(gi, &mut l[g]);
}

/// What [`fit_sub_block`] found for a sub-block.
pub(crate) struct SubBlockFit {
    /// The sub-block's scale (not negative).
    pub scale: f32,
    /// Whether the least-squares scale came out negative: ggml's guard then negates it, and
    /// the caller flips the sub-block's signs.
    pub flipped: bool,
    /// The grid index of each group of `D` values.
    pub index: [u16; 8],
}

/// One sub-block of the IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S writers (magnitudes `xval`,
/// weights `weight`): `None` when its largest magnitude is below `eps` or zero (the
/// sub-block stays zero); else [`search_on_grid`] over the inverse scales
/// `(2·max_level + 1 + is·step) / max`, `is` in `-n..=n`, from the scale
/// `max / (2·max_level + 1)`, and each group's grid point.
#[allow(clippy::too_many_arguments)]
pub(crate) fn fit_sub_block<const D: usize>(
    grid: &GridSearch<D>,
    bits: u32,
    max_level: i32,
    xval: &[f32],
    weight: &[f32],
    eps: f32,
    (n, step): (i32, f32),
    all: bool,
) -> Option<SubBlockFit> {
    let max = xval[1..].iter().fold(xval[0], |m, &v| super::c_max(m, v));
    if max < eps || max == 0.0 {
        return None;
    }
    let len = xval.len();
    let mut waux = [0f32; 32];
    for (a, &w) in waux.iter_mut().zip(weight) {
        *a = w.sqrt();
    }
    let top = (2 * max_level + 1) as f32;
    let trials = (-n..=n).map(|is| (top + is as f32 * step) / max);
    let mut l = [0i8; 32];
    let scale = search_on_grid(
        grid,
        bits,
        max_level,
        xval,
        weight,
        &waux[..len],
        max / top,
        trials,
        all,
        &mut l,
    );
    let mut index = [0u16; 8];
    for (k, ix) in index[..len / D].iter_mut().enumerate() {
        let u = GridSearch::<D>::index_of(&l[D * k..D * (k + 1)], bits);
        // Every level set the search leaves is a grid point's (ggml aborts otherwise).
        *ix = grid.on_grid(u).unwrap_or(0) as u16;
    }
    let flipped = scale < 0.0;
    Some(SubBlockFit {
        scale: if flipped { -scale } else { scale },
        flipped,
        index,
    })
}

/// The scale search of one sub-block of `n = xval.len()` magnitudes in groups of `D` with
/// "on grid" tracking (ggml's IQ2_XS and IQ3_XXS/IQ3_S searches): for each inverse scale
/// `id` of `trials`, levels `nearest_int(0.5·(id·x − 1))` clamped to `0..=max_level`, off-grid
/// groups replaced by their best neighbour at scale `1/id`; the trial of greatest
/// `sumqx²/sumq2` (strictly greater, from `best = 0`) gives the scale `sumqx/sumq2` and the
/// levels (else `scale0` and all-zero levels). Groups that were off the grid are then
/// re-rounded at that scale (their neighbours searched again) and the scale refitted —
/// with `all` (IQ3_S), every group once any was off the grid, a trial that never won
/// counting as off the grid. Returns the scale; the levels are in `l`.
#[allow(clippy::too_many_arguments)]
fn search_on_grid<const D: usize>(
    grid: &GridSearch<D>,
    bits: u32,
    max_level: i32,
    xval: &[f32],
    weight: &[f32],
    waux: &[f32],
    scale0: f32,
    trials: impl Iterator<Item = f32>,
    all: bool,
    l: &mut [i8],
) -> f32 {
    let n = xval.len();
    let groups = n / D;
    let mut best = 0f32;
    let mut scale = scale0;
    let mut on_grid = [!all; 8];
    let mut laux = [0i8; 32];
    let mut on_grid_aux = [true; 8];
    l[..n].fill(0);
    for id in trials {
        let this_scale = 1.0 / id;
        for (k, on) in on_grid_aux[..groups].iter_mut().enumerate() {
            let g = D * k..D * k + D;
            for i in g.clone() {
                laux[i] = odd_level(id, xval[i], max_level);
            }
            let u = GridSearch::<D>::index_of(&laux[g.clone()], bits);
            *on = true;
            if let Lookup::Near(c) = grid.lookup(u) {
                *on = false;
                let (xv, wa) = (&xval[g.clone()], &waux[g.clone()]);
                grid.best_neighbour(c, xv, wa, this_scale, &mut laux[g]);
            }
        }
        let (sumqx, sumq2) = odd_level_sums(weight, xval, &laux[..n]);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            l[..n].copy_from_slice(&laux[..n]);
            on_grid = on_grid_aux;
        }
    }
    if on_grid[..groups].contains(&false) && scale > 0.0 {
        let id = 1.0 / scale;
        for k in (0..groups).filter(|&k| all || !on_grid[k]) {
            let g = D * k..D * k + D;
            round_group(grid, (id, scale), max_level, bits, g, xval, waux, l);
        }
        let (sumqx, sumq2) = odd_level_sums(weight, xval, &l[..n]);
        if sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbour_lists_follow_distance_then_index() {
        // A 1-D toy grid with levels 0 and 3 (points 1 and 7), 2 bits: level 1 (point 3) is
        // nearest 1, level 2 (point 5) nearest 7; with two distances, both.
        let g = GridSearch::<1>::build(2, |k| [[0u8], [3u8]][k], 2, 4, 2);
        assert!(matches!(g.lookup(0), Lookup::On(0)));
        assert!(matches!(g.lookup(3), Lookup::On(1)));
        match g.lookup(1) {
            Lookup::Near(c) => assert_eq!(c, &[0, 1]),
            Lookup::On(_) => panic!("level 1 is off the grid"),
        }
        match g.lookup(2) {
            Lookup::Near(c) => assert_eq!(c, &[1, 0]),
            Lookup::On(_) => panic!("level 2 is off the grid"),
        }
    }
}

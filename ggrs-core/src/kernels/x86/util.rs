//! Small helpers shared by the AVX2 and AVX-512 kernels. All are `#[inline(always)]`, so they
//! compile with the target features of the kernel they are inlined into.

use std::arch::x86_64::*;

/// Reads a little-endian `u16` at `p` (any alignment).
///
/// # Safety
/// Two bytes are readable at `p`.
#[inline(always)]
pub(super) unsafe fn read_u16(p: *const u8) -> u16 {
    // SAFETY: the caller guarantees two readable bytes; `read_unaligned` accepts any address.
    // x86-64 is little-endian, as the file format is.
    unsafe { p.cast::<u16>().read_unaligned() }
}

/// Reads a little-endian `u32` at `p` (any alignment).
///
/// # Safety
/// Four bytes are readable at `p`.
#[inline(always)]
pub(super) unsafe fn read_u32(p: *const u8) -> u32 {
    // SAFETY: as `read_u16`, four bytes.
    unsafe { p.cast::<u32>().read_unaligned() }
}

/// Reads a little-endian `f32` at `p` (any alignment).
///
/// # Safety
/// Four bytes are readable at `p`.
#[inline(always)]
pub(super) unsafe fn read_f32(p: *const u8) -> f32 {
    // SAFETY: as `read_u32`.
    f32::from_bits(unsafe { read_u32(p) })
}

/// The f16 at `p` as f32 (exact), converted by F16C.
///
/// # Safety
/// Two bytes are readable at `p`; the CPU supports F16C.
#[inline(always)]
pub(super) unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees the bytes and the CPU feature.
    unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(read_u16(p) as i32))) }
}

/// `Σ` of the 8 lanes, in a fixed tree: halves, then pairs of 64 bits, then the last two.
///
/// # Safety
/// The CPU supports AVX.
#[inline(always)]
pub(super) unsafe fn hsum256(v: __m256) -> f32 {
    // SAFETY: the caller guarantees AVX; register-only operations.
    unsafe {
        let s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
        _mm_cvtss_f32(s1)
    }
}

/// `Σ` of the eight i32 lanes (exact, so any order).
///
/// # Safety
/// The CPU supports AVX2.
#[inline(always)]
pub(super) unsafe fn hsum_i32(v: __m256i) -> i32 {
    // SAFETY: register-only AVX2 operations; the caller guarantees AVX2.
    unsafe {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        _mm_cvtsi128_si32(s)
    }
}

/// `Σ` of the 16 lanes: the two 256-bit halves added, then [`hsum256`].
///
/// # Safety
/// The CPU supports AVX-512 F.
#[inline(always)]
pub(super) unsafe fn hsum512(v: __m512) -> f32 {
    // SAFETY: the caller guarantees AVX-512 F; register-only operations.
    unsafe {
        let lo = _mm512_castps512_ps256(v);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
        hsum256(_mm256_add_ps(lo, hi))
    }
}

/// Unpacks Q4_K's 12 scale bytes into eight 6-bit scales (bytes 0..8 of the result) and eight
/// 6-bit minimums (bytes 8..16), as `k_quants::get_scale_min_k4` reads them one at a time:
/// sub-blocks 0–3 keep theirs in the low 6 bits of bytes 0–3 (scales) and 4–7 (minimums);
/// sub-blocks 4–7 their low 4 bits in bytes 8–11 (scale low nibble, minimum high nibble) and
/// their top 2 bits in the top bits of bytes 0–3 (scales) and 4–7 (minimums).
#[inline(always)]
pub(super) fn q4k_scales_mins(s: &[u8; 12]) -> [u8; 16] {
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const LOW2: u32 = 0x0303_0303;
    let w = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (w0, w1, w2) = (w(0), w(1), w(2));
    let sc_lo = w0 & LOW6;
    let sc_hi = (w2 & LOW4) | (((w0 >> 6) & LOW2) << 4);
    let m_lo = w1 & LOW6;
    let m_hi = ((w2 >> 4) & LOW4) | (((w1 >> 6) & LOW2) << 4);
    let mut out = [0u8; 16];
    out[0..4].copy_from_slice(&sc_lo.to_le_bytes());
    out[4..8].copy_from_slice(&sc_hi.to_le_bytes());
    out[8..12].copy_from_slice(&m_lo.to_le_bytes());
    out[12..16].copy_from_slice(&m_hi.to_le_bytes());
    out
}

/// Each tile element's eight lanes reduced by [`hsum256`] (the AVX2 dot kernels' last step).
///
/// # Safety
/// The CPU supports AVX.
#[inline(always)]
pub(super) unsafe fn finish<const R: usize, const C: usize>(
    acc: [[__m256; C]; R],
) -> [[f32; C]; R] {
    let mut out = [[0f32; C]; R];
    for r in 0..R {
        for c in 0..C {
            // SAFETY: the caller guarantees AVX.
            out[r][c] = unsafe { hsum256(acc[r][c]) };
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quants::k_quants::get_scale_min_k4;

    #[test]
    fn q4k_unpack_matches_reference() {
        let mut s = 0x1234_5678u32;
        for _ in 0..2000 {
            let mut b = [0u8; 12];
            for v in b.iter_mut() {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                *v = (s >> 24) as u8;
            }
            let got = q4k_scales_mins(&b);
            for j in 0..8 {
                let (sc, m) = get_scale_min_k4(j, &b);
                assert_eq!((got[j], got[8 + j]), (sc, m), "{b:?} sub-block {j}");
            }
        }
    }
}

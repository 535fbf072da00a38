// Reference values from llama.cpp's ggml (0c1e570) for ggrs's grid i-quant tests
// (`tests/quants_iq.rs`): for seeded random blocks of IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
// IQ1_S and IQ1_M (any bytes, with moderate f16 scales) and seeded Q8_K activation blocks
// (random codes including -128, consistent bsums), `dequantize_row_*` (FNV-1a of the f32
// bits) and the bits of `ggml_vec_dot_*_q8_K` (AVX2) and `ggml_vec_dot_*_q8_K_generic` over
// runs of whole blocks. ggml-cpu's `quants.c` files are compiled here with -mtune=generic as
// in `lowbit-ggml.c` (GCC then contracts the C `sumf += d * sum` as the build behind
// llama.cpp's reference outputs did). From llama.cpp's `ggml/src`, with BIN its build/bin:
//   F="-O3 -march=native -mtune=generic -std=gnu11 -DNDEBUG -D_GNU_SOURCE -fPIC -I../include -I. -Iggml-cpu"
//   gcc $F -c ggml-cpu/quants.c -o q.o && gcc $F -c ggml-cpu/arch/x86/quants.c -o qx.o
//   gcc -O2 -mf16c iquants-ggml.c q.o qx.o -L$BIN -lggml-cpu -lggml-base -Wl,-rpath,$BIN -o iquants-ggml
#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

typedef void (*deq_fn)(const void *x, float *y, int64_t k);
typedef void (*dot_fn)(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by, int nrc);
#define DECL(t) void dequantize_row_##t(const void *, float *, int64_t); \
    void ggml_vec_dot_##t##_q8_K(int, float *, size_t, const void *, size_t, const void *, size_t, int); \
    void ggml_vec_dot_##t##_q8_K_generic(int, float *, size_t, const void *, size_t, const void *, size_t, int);
DECL(iq2_xxs) DECL(iq2_xs) DECL(iq2_s) DECL(iq3_xxs) DECL(iq3_s) DECL(iq1_s) DECL(iq1_m)
void ggml_cpu_init(void);

// splitmix64, as `common::mix`.
static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static uint64_t fnv(const uint8_t *p, size_t n) {
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ULL; }
    return h;
}
static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
// f16 bits of (m % 2000) / 1000 - 1, rounded to nearest even.
static uint16_t half_of(uint64_t m) {
    float f = (float)(m % 2000) / 1000.0f - 1.0f;
    return (uint16_t)_cvtss_sh(f, 0);
}

#define NB 6
struct ty { const char *name; int bs; deq_fn dq; dot_fn x86, gen; };

int main(void) {
    ggml_cpu_init();
    struct ty types[7] = {
        {"iq2_xxs", 66, (deq_fn)dequantize_row_iq2_xxs, ggml_vec_dot_iq2_xxs_q8_K, ggml_vec_dot_iq2_xxs_q8_K_generic},
        {"iq2_xs", 74, (deq_fn)dequantize_row_iq2_xs, ggml_vec_dot_iq2_xs_q8_K, ggml_vec_dot_iq2_xs_q8_K_generic},
        {"iq2_s", 82, (deq_fn)dequantize_row_iq2_s, ggml_vec_dot_iq2_s_q8_K, ggml_vec_dot_iq2_s_q8_K_generic},
        {"iq3_xxs", 98, (deq_fn)dequantize_row_iq3_xxs, ggml_vec_dot_iq3_xxs_q8_K, ggml_vec_dot_iq3_xxs_q8_K_generic},
        {"iq3_s", 110, (deq_fn)dequantize_row_iq3_s, ggml_vec_dot_iq3_s_q8_K, ggml_vec_dot_iq3_s_q8_K_generic},
        {"iq1_s", 50, (deq_fn)dequantize_row_iq1_s, ggml_vec_dot_iq1_s_q8_K, ggml_vec_dot_iq1_s_q8_K_generic},
        {"iq1_m", 56, (deq_fn)dequantize_row_iq1_m, ggml_vec_dot_iq1_m_q8_K, ggml_vec_dot_iq1_m_q8_K_generic},
    };
    // Q8_K blocks (292 bytes: f32 d, 256 codes, 16 bsums): activation column c.
    static uint8_t ya[3][NB * 292];
    for (int c = 0; c < 3; c++) {
        uint64_t s = 100 + c;
        for (int b = 0; b < NB; b++) {
            uint8_t *blk = ya[c] + b * 292;
            float d = 0.01f * (float)(b + 1 + c);
            memcpy(blk, &d, 4);
            int8_t *q = (int8_t *)(blk + 4);
            for (int i = 0; i < 256; i++) q[i] = (c == 1 && b % 2 == 0) ? -128 : (int8_t)mix(&s);
            for (int j = 0; j < 16; j++) {
                int16_t sum = 0;
                for (int i = 0; i < 16; i++) sum += q[16 * j + i];
                memcpy(blk + 260 + 2 * j, &sum, 2);
            }
        }
    }
    static uint8_t w[NB * 110];
    static float dq[NB * 256];
    for (int t = 0; t < 7; t++) {
        struct ty *T = &types[t];
        uint64_t s = 1 + t;
        for (int i = 0; i < NB * T->bs; i++) w[i] = (uint8_t)mix(&s);
        for (int b = 0; b < NB; b++) {
            uint16_t h = half_of(mix(&s));
            uint8_t *blk = w + b * T->bs;
            if (t == 6) {
                for (int k = 0; k < 4; k++)
                    blk[48 + 2 * k + 1] = (uint8_t)((blk[48 + 2 * k + 1] & 0x0f) | (((h >> (4 * k)) & 15) << 4));
            } else {
                memcpy(blk, &h, 2);
            }
        }
        T->dq(w, dq, NB * 256);
        printf("dequant %s %016llx\n", T->name, (unsigned long long)fnv((uint8_t *)dq, sizeof dq));
        for (int c = 0; c < 3; c++)
            for (int k = 1; k <= NB; k++) {
                float x, g;
                T->x86(k * 256, &x, 0, w, 0, ya[c], 0, 1);
                T->gen(k * 256, &g, 0, w, 0, ya[c], 0, 1);
                printf("dot %s %d %d %08x %08x\n", T->name, c, k, bits(x), bits(g));
            }
    }
    return 0;
}

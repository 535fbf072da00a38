// Reference bytes and dot products from llama.cpp's ggml (0c1e570) for ggrs's MXFP4, NVFP4,
// Q1_0 and Q2_0 tests (`tests/quants_lowbit.rs`). ggml-cpu's two `quants.c` files are compiled
// here with `-mtune=generic`, under which GCC 12 contracts their C `sumf += d * sumi` into
// FMAs as the build behind llama.cpp's reference outputs did (with `-march=native` on an AMD
// EPYC, GCC tunes for znver3 and avoids those FMA chains); their definitions take precedence
// over the library's. From llama.cpp's `ggml/src`, with BIN its build/bin:
//   F="-O3 -march=native -mtune=generic -std=gnu11 -DNDEBUG -D_GNU_SOURCE -fPIC -I../include -I. -Iggml-cpu"
//   gcc $F -c ggml-cpu/quants.c -o q.o && gcc $F -c ggml-cpu/arch/x86/quants.c -o qx.o
//   gcc -O2 lowbit-ggml.c q.o qx.o -L$BIN -lggml-cpu -lggml-base -Wl,-rpath,$BIN -o lowbit-ggml
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>

typedef void (*quant_fn)(const float *x, void *y, int64_t k);
typedef void (*deq_fn)(const void *x, float *y, int64_t k);
typedef void (*dot_fn)(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by, int nrc);
#define DECL(t) void quantize_row_##t##_ref(const float *, void *, int64_t); \
    void dequantize_row_##t(const void *, float *, int64_t); \
    void ggml_vec_dot_##t##_q8_0(int, float *, size_t, const void *, size_t, const void *, size_t, int);
DECL(mxfp4) DECL(nvfp4) DECL(q1_0) DECL(q2_0)
void ggml_vec_dot_mxfp4_q8_0_generic(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_vec_dot_nvfp4_q8_0_generic(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_vec_dot_q1_0_q8_0_generic(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_gemv_mxfp4_8x8_q8_0(int n, float *s, size_t bs, const void *vx, const void *vy, int nr, int nc);
void quantize_row_q8_0(const float *x, void *y, int64_t k);
void ggml_cpu_init(void);

static uint64_t seed;
static float rnd(void) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((seed >> 40) & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f;
}
#define N 1024
// Eight segments of 128 values: the patterns the Rust test rebuilds.
static void weights(float *x) {
    seed = 1;
    for (int i = 0; i < N; i++) {
        float r = rnd();
        int s = i / 128, j = i % 128;
        switch (s) {
        case 0: x[i] = r; break;                                          // uniform
        case 1: x[i] = 0.0f; break;                                       // all zero
        case 2: x[i] = (j == 7) ? 2.0f : (float)((j % 5) - 2) * 0.5f; break; // ties
        case 3: x[i] = r * 1.0e5f; break;                                 // large
        case 4: x[i] = (j == 72) ? -100.0f : r * 1.0e-3f; break;          // one spike
        case 5: x[i] = r * 1.0e-39f; break;                               // subnormal
        case 6: x[i] = (j % 3 == 0) ? 0.0f : r * 3.0f; break;             // sparse
        default: {                                                        // log2 edges
            uint32_t u = j == 0 ? 0x40FFFFFFu : j == 32 ? 0x40800000u : j == 64 ? 0x407FFFFFu : 0;
            if (u) memcpy(&x[i], &u, 4); else x[i] = r * 0.9f;
        }
        }
    }
}
static void acts(float *y, int c) {
    seed = 1000 + c;
    for (int i = 0; i < N; i++) {
        float r = rnd();
        y[i] = c == 2 ? (i % 16 == 0 ? 50.0f : r) : r * (float)(c + 1);
    }
}
static void hex(const char *tag, const uint8_t *p, size_t n) {
    printf("%s ", tag);
    for (size_t i = 0; i < n; i++) printf("%02x", p[i]);
    printf("\n");
}
static uint64_t fnv(const uint8_t *p, size_t n) {
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ULL; }
    return h;
}
static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

struct ty { const char *name; int qk, bs; quant_fn q; deq_fn dq; dot_fn x86, gen; };

int main(void) {
    ggml_cpu_init();
    static float x[N], yf[N], dq[N];
    static uint8_t w[N * 2], ya[3][N / 32 * 34];
    struct ty types[4] = {
        {"mxfp4", 32, 17, (quant_fn)quantize_row_mxfp4_ref, (deq_fn)dequantize_row_mxfp4, ggml_vec_dot_mxfp4_q8_0, ggml_vec_dot_mxfp4_q8_0_generic},
        {"nvfp4", 64, 36, (quant_fn)quantize_row_nvfp4_ref, (deq_fn)dequantize_row_nvfp4, ggml_vec_dot_nvfp4_q8_0, ggml_vec_dot_nvfp4_q8_0_generic},
        {"q1_0", 128, 18, (quant_fn)quantize_row_q1_0_ref, (deq_fn)dequantize_row_q1_0, ggml_vec_dot_q1_0_q8_0, ggml_vec_dot_q1_0_q8_0_generic},
        // No x86 kernel: llama.cpp's `ggml_vec_dot_q2_0_q8_0` is the generic C.
        {"q2_0", 64, 18, (quant_fn)quantize_row_q2_0_ref, (deq_fn)dequantize_row_q2_0, ggml_vec_dot_q2_0_q8_0, ggml_vec_dot_q2_0_q8_0},
    };
    weights(x);
    for (int c = 0; c < 3; c++) {
        acts(yf, c);
        quantize_row_q8_0(yf, ya[c], N);
        char tag[16]; snprintf(tag, sizeof tag, "q8_0 %d", c);
        hex(tag, ya[c], sizeof ya[c]);
    }
    for (int t = 0; t < 4; t++) {
        struct ty *T = &types[t];
        int nb = N / T->qk;
        T->q(x, w, N);
        hex(T->name, w, (size_t)nb * T->bs);
        T->dq(w, dq, N);
        printf("dequant %s %016llx\n", T->name, (unsigned long long)fnv((uint8_t *)dq, sizeof dq));
        int ks[8] = {1, 2, 3, 4, 5, 7, 8, 0};
        for (int c = 0; c < 3; c++)
            for (int o = 0; o < 4 && o < nb; o++) {
                ks[7] = nb - o;
                for (int ki = 0; ki < 8; ki++) {
                    int k = ks[ki];
                    if (o + k > nb || (ki == 7 && k <= 8)) continue;
                    float s, g;
                    T->x86(k * T->qk, &s, 0, w + o * T->bs, 0, ya[c], 0, 1);
                    T->gen(k * T->qk, &g, 0, w + o * T->bs, 0, ya[c], 0, 1);
                    printf("dot %s %d %d %d %08x %08x\n", T->name, c, o, k, bits(s), bits(g));
                }
            }
        if (t == 0) {
            // The repacked GEMV: 8 rows of 8 blocks, row r = blocks 3r..3r+8, interleaved as
            // llama.cpp's `make_block_mxfp4x8` does (exponents, then 8-byte chunks by row).
            static uint8_t rp[8][136];
            for (int b = 0; b < 8; b++) {
                for (int r = 0; r < 8; r++) rp[b][r] = w[(3 * r + b) * 17];
                for (int i = 0; i < 16; i++)
                    memcpy(&rp[b][8 + 8 * i], &w[(3 * (i % 8) + b) * 17 + 1 + (i / 8) * 8], 8);
            }
            for (int c = 0; c < 3; c++) {
                float s[8];
                ggml_gemv_mxfp4_8x8_q8_0(256, s, 0, rp, ya[c], 1, 8);
                printf("gemv mxfp4 %d", c);
                for (int r = 0; r < 8; r++) printf(" %08x", bits(s[r]));
                printf("\n");
            }
        }
    }
    return 0;
}

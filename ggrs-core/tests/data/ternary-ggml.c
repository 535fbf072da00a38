// Reference bytes and dot products from llama.cpp's ggml (0c1e570) for ggrs's ternary tests.
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <stdlib.h>
void quantize_row_tq1_0_ref(const float *x, void *y, int64_t k);
void quantize_row_tq2_0_ref(const float *x, void *y, int64_t k);
void dequantize_row_tq1_0(const void *x, float *y, int64_t k);
void dequantize_row_tq2_0(const void *x, float *y, int64_t k);
void quantize_row_q8_K(const float *x, void *y, int64_t k);
void ggml_vec_dot_tq1_0_q8_K(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by, int nrc);
void ggml_vec_dot_tq2_0_q8_K(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by, int nrc);
void ggml_vec_dot_tq1_0_q8_K_generic(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by, int nrc);
void ggml_vec_dot_tq2_0_q8_K_generic(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by, int nrc);
void ggml_cpu_init(void);

static uint64_t seed;
static float rnd(void) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((seed >> 40) & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f;
}
#define NB 8
#define QK 256
// Block b of the weight rows: the patterns the Rust test rebuilds.
static void weights(float *x) {
    seed = 1;
    for (int b = 0; b < NB; b++) {
        float *v = x + b * QK;
        for (int i = 0; i < QK; i++) {
            float r = rnd();
            switch (b) {
            case 0: v[i] = r; break;                              // uniform
            case 1: v[i] = 0.0f; break;                           // all zero
            case 2: v[i] = (i == 7) ? 2.0f : (float)((i % 5) - 2) * 0.5f; break; // ties at ±0.5
            case 3: v[i] = r * 1.0e5f; break;                     // scale overflows f16
            case 4: v[i] = (i == 200) ? -100.0f : r * 1.0e-3f; break; // one negative spike
            case 5: v[i] = r * 1.0e-39f; break;                   // subnormal
            case 6: v[i] = (i % 3 == 0) ? 0.0f : r * 3.0f; break;
            default: v[i] = (i == 255) ? -1.0f : (r > 0 ? 1.0f : -1.0f) * 0.49f; break;
            }
        }
    }
}
static void acts(float *y, int c) {
    seed = 1000 + c;
    for (int i = 0; i < NB * QK; i++) {
        float r = rnd();
        y[i] = c == 2 ? (i % 16 == 0 ? 50.0f : r) : r * (float)(c + 1);
    }
}
static void hex(const char *tag, const uint8_t *p, size_t n) {
    printf("%s ", tag);
    for (size_t i = 0; i < n; i++) printf("%02x", p[i]);
    printf("\n");
}
int main(void) {
    ggml_cpu_init();
    static float x[NB * QK], yf[NB * QK], dq[NB * QK];
    static uint8_t w[2][NB * 66], ya[3][NB * 292];
    weights(x);
    quantize_row_tq1_0_ref(x, w[0], NB * QK);
    quantize_row_tq2_0_ref(x, w[1], NB * QK);
    hex("tq1_0", w[0], NB * 54);
    hex("tq2_0", w[1], NB * 66);
    for (int t = 0; t < 2; t++) {
        if (t == 0) dequantize_row_tq1_0(w[0], dq, NB * QK); else dequantize_row_tq2_0(w[1], dq, NB * QK);
        uint64_t h = 14695981039346656037ULL;
        for (int i = 0; i < NB * QK; i++) { uint32_t u; memcpy(&u, &dq[i], 4); for (int k = 0; k < 4; k++) { h ^= (u >> (8*k)) & 0xFF; h *= 1099511628211ULL; } }
        printf("dequant %s %016llx\n", t ? "tq2_0" : "tq1_0", (unsigned long long)h);
    }
    for (int c = 0; c < 3; c++) {
        acts(yf, c);
        quantize_row_q8_K(yf, ya[c], NB * QK);
        uint64_t h = 14695981039346656037ULL;
        for (int i = 0; i < NB * 292; i++) { h ^= ya[c][i]; h *= 1099511628211ULL; }
        printf("q8_K %d %016llx\n", c, (unsigned long long)h);
    }
    // Dots over the first k blocks, every weight-block offset o (rows start at block o).
    for (int t = 0; t < 2; t++) {
        size_t bs = t ? 66 : 54;
        for (int c = 0; c < 3; c++)
            for (int o = 0; o < NB; o++)
                for (int k = 1; o + k <= NB; k++) {
                    float s, g;
                    if (t) { ggml_vec_dot_tq2_0_q8_K(k * QK, &s, 0, w[1] + o * bs, 0, ya[c], 0, 1);
                             ggml_vec_dot_tq2_0_q8_K_generic(k * QK, &g, 0, w[1] + o * bs, 0, ya[c], 0, 1); }
                    else   { ggml_vec_dot_tq1_0_q8_K(k * QK, &s, 0, w[0] + o * bs, 0, ya[c], 0, 1);
                             ggml_vec_dot_tq1_0_q8_K_generic(k * QK, &g, 0, w[0] + o * bs, 0, ya[c], 0, 1); }
                    uint32_t us, ug; memcpy(&us, &s, 4); memcpy(&ug, &g, 4);
                    printf("dot %s %d %d %d %08x %08x\n", t ? "tq2_0" : "tq1_0", c, o, k, us, ug);
                }
    }
    return 0;
}

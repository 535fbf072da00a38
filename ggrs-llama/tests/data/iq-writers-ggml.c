// Reference bytes for ggrs's i-quant writers (`ggrs-llama/tests/imatrix_quants.rs`):
// seeded rows and importance weights (the test's generator), quantized with llama.cpp
// 0c1e570's `ggml_quantize_chunk` (libggml-base), printed as sha256 input: the raw bytes go
// to files NAME.bin, one per type, and without weights to NAME-noimat.bin for the types that
// ggml writes without them. Build from llama.cpp's build/bin (BIN):
//   gcc -O2 iq-writers-ggml.c -I../../ggml/include -L$BIN -lggml-base -Wl,-rpath,$BIN
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "ggml.h"

#define N 512
#define NROW 10
static uint32_t s = 12345;
static float next(void) {
    s = s * 1664525u + 1013904223u;
    return (float)(s >> 8) / 16777216.0f;
}
int main(void) {
    static float x[N * NROW], w[N];
    for (int r = 0; r < NROW; r++) {
        for (int j = 0; j < N; j++) {
            float v = 2.0f * next() - 1.0f;
            switch (r) {
                case 1: v *= 0.001f; break;
                case 2: if (j % 97 == 0) v *= 40.0f; break;
                case 3: if (j >= 256 && j < 320) v = 0.0f; break;
                case 4: v = v > 0.0f ? v : 0.0f; break;
                case 5: v = j % 2 == 1 ? 0.5f : -0.25f; break;
                case 6: if (j < 256) v = 0.0f; break;
                case 7: v *= 1.0e4f; break;
                case 8: v = v < 0.0f ? v : -v; break;
                case 9: v *= 1.0e-9f; break;
            }
            x[r * N + j] = v;
        }
    }
    for (int j = 0; j < N; j++) {
        float u = next();
        w[j] = j % 61 == 0 ? 0.0f : u * u * 8.0f + 1e-4f;
    }
    enum ggml_type types[] = {GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S, GGML_TYPE_IQ3_XXS,
                              GGML_TYPE_IQ3_S, GGML_TYPE_IQ1_S, GGML_TYPE_IQ1_M};
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        size_t row = ggml_row_size(types[t], N);
        uint8_t *out = calloc(row, NROW);
        ggml_quantize_init(types[t]);
        // Row by row, each with the same weights, as the Rust test does; then, for the
        // types ggml writes without an importance matrix, the same rows without weights
        // (NAME-noimat.bin).
        for (int weighted = 1; weighted >= 0; weighted--) {
            if (!weighted && ggml_quantize_requires_imatrix(types[t])) break;
            for (int r = 0; r < NROW; r++)
                ggml_quantize_chunk(types[t], x + r * N, out + r * row, 0, 1, N, weighted ? w : NULL);
            char name[64];
            snprintf(name, sizeof name, weighted ? "%s.bin" : "%s-noimat.bin", ggml_type_name(types[t]));
            FILE *f = fopen(name, "wb");
            fwrite(out, row, NROW, f);
            fclose(f);
        }
        free(out);
    }
    return 0;
}

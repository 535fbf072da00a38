// Writes llama.cpp's logits for prompts given as token ids, in the `.public.jsonl` format of
// shared/reference (one JSON object per prompt: `tokens`, `prompt_topk` = the top-10
// [id, logit] pairs at every prompt position with the whole prompt in one batch, `greedy` =
// N greedy tokens decoded one per call, `greedy_topk` = the top-10 of the logits that chose
// each of them). Used for tiny models made here (ggrs-llama/tests/tiny_gemma4_moe.rs), whose
// references are committed beside the tests.
//
// usage: llamacpp-dump-logits MODEL.gguf IDS N_GREEDY > OUT.jsonl
// IDS holds one prompt per line, its token ids separated by spaces. 2 threads, context
// n_prompt + N_GREEDY + 8, as the reference dumper of shared/reference/tiny.
// To reproduce another tool's settings: DUMP_N_CTX=N (the context; the KV cache's size changes
// ggml's sums over it), DUMP_FA=0|1 (flash attention off/on; default: llama.cpp's auto),
// DUMP_REPACK=0 (no repacked weight layouts).
//
// Build (llama.cpp's tree at $LLAMA, built in $LLAMA/build):
//   c++ -O1 -std=c++17 scripts/llamacpp-dump-logits.cpp -I$LLAMA/include -I$LLAMA/ggml/include \
//       -L$LLAMA/build/bin -lllama -lggml -lggml-base -Wl,-rpath,$LLAMA/build/bin -o dump-logits
#include "llama.h"

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

static void print_topk(const float * logits, int n_vocab) {
    std::vector<int> idx(n_vocab);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + 10, idx.end(),
                      [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    printf("[");
    for (int i = 0; i < 10; i++) {
        printf(i == 0 ? "[%d,%.5f]" : ",[%d,%.5f]", idx[i], logits[idx[i]]);
    }
    printf("]");
}

static int argmax(const float * logits, int n_vocab) {
    int best = 0;
    for (int i = 1; i < n_vocab; i++) {
        if (logits[i] > logits[best]) {
            best = i;
        }
    }
    return best;
}

int main(int argc, char ** argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL.gguf IDS N_GREEDY\n", argv[0]);
        return 2;
    }
    const int n_greedy = std::stoi(argv[3]);
    llama_backend_init();
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    llama_model_params mp = llama_model_default_params();
    // DUMP_REPACK=0: no repacked weight layouts (llama-cli's --no-repack).
    if (const char * r = getenv("DUMP_REPACK")) {
        mp.use_extra_bufts = atoi(r) != 0;
    }
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (model == nullptr) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    std::ifstream file(argv[2]);
    std::string line;
    while (std::getline(file, line)) {
        std::istringstream ss(line);
        std::vector<llama_token> ids;
        for (llama_token t; ss >> t;) {
            ids.push_back(t);
        }
        if (ids.empty()) {
            continue;
        }
        const int n = (int) ids.size();
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = n + n_greedy + 8;
        // DUMP_N_CTX / DUMP_FA (0 or 1) reproduce another tool's settings: the KV cache's
        // size changes ggml's sums over it (llama-server's -c, flash attention on or off).
        if (const char * c = getenv("DUMP_N_CTX")) {
            cp.n_ctx = (uint32_t) atoi(c);
        }
        if (const char * f = getenv("DUMP_FA")) {
            cp.flash_attn_type = atoi(f) ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
        }
        cp.n_batch = std::max(n, 64);
        cp.n_ubatch = cp.n_batch;
        cp.n_threads = 2;
        cp.n_threads_batch = 2;
        llama_context * ctx = llama_init_from_model(model, cp);
        if (ctx == nullptr) {
            fprintf(stderr, "cannot make a context\n");
            return 1;
        }
        llama_batch batch = llama_batch_init(n, 0, 1);
        for (int i = 0; i < n; i++) {
            batch.token[i] = ids[i];
            batch.pos[i] = i;
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = 0;
            batch.logits[i] = 1;
        }
        batch.n_tokens = n;
        if (llama_decode(ctx, batch) != 0) {
            fprintf(stderr, "decoding the prompt failed\n");
            return 1;
        }
        printf("{\"tokens\":[");
        for (int i = 0; i < n; i++) {
            printf(i == 0 ? "%d" : ",%d", ids[i]);
        }
        printf("],\"prompt_topk\":[");
        for (int i = 0; i < n; i++) {
            printf(i == 0 ? "" : ",");
            print_topk(llama_get_logits_ith(ctx, i), n_vocab);
        }
        printf("]");
        std::vector<int> greedy;
        std::string topk;
        std::vector<float> last(llama_get_logits_ith(ctx, n - 1), llama_get_logits_ith(ctx, n - 1) + n_vocab);
        printf(",\"greedy_topk\":[");
        for (int s = 0; s < n_greedy; s++) {
            printf(s == 0 ? "" : ",");
            print_topk(last.data(), n_vocab);
            llama_token t = argmax(last.data(), n_vocab);
            greedy.push_back(t);
            if (s + 1 == n_greedy) {
                break;
            }
            llama_batch one = llama_batch_get_one(&t, 1);
            if (llama_decode(ctx, one) != 0) {
                fprintf(stderr, "decoding a greedy token failed\n");
                return 1;
            }
            const float * l = llama_get_logits_ith(ctx, -1);
            last.assign(l, l + n_vocab);
        }
        printf("],\"greedy\":[");
        for (size_t i = 0; i < greedy.size(); i++) {
            printf(i == 0 ? "%d" : ",%d", greedy[i]);
        }
        printf("]}\n");
        llama_batch_free(batch);
        llama_free(ctx);
    }
    llama_model_free(model);
    return 0;
}

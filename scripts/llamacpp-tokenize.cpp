// Tokenizes test strings with llama.cpp, for scripts/check-pretokenizers-vs-llamacpp.sh.
//
// usage: llamacpp-tokenize VOCAB.gguf CASES
// CASES holds strings separated by "\n__ggml_vocab_test__\n" (llama.cpp's vocabulary test
// format); each is tokenized with add_special = false and parse_special = false, and its ids
// are printed on one line, separated by spaces.
#include "llama.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char ** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s VOCAB.gguf CASES\n", argv[0]);
        return 2;
    }
    llama_backend_init();
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    llama_model_params params = llama_model_default_params();
    params.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[1], params);
    if (model == nullptr) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);

    std::ifstream file(argv[2], std::ios::binary);
    std::stringstream buffer;
    buffer << file.rdbuf();
    const std::string text = buffer.str();
    const std::string sep = "\n__ggml_vocab_test__\n";

    size_t start = 0;
    while (start < text.size()) {
        size_t end = text.find(sep, start);
        const std::string item = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
        std::vector<llama_token> ids(item.size() + 16);
        int n = llama_tokenize(vocab, item.data(), (int32_t) item.size(), ids.data(), (int32_t) ids.size(), false, false);
        if (n < 0) {
            ids.resize(-n);
            n = llama_tokenize(vocab, item.data(), (int32_t) item.size(), ids.data(), (int32_t) ids.size(), false, false);
        }
        if (n < 0) {
            fprintf(stderr, "tokenizing failed\n");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            printf(i == 0 ? "%d" : " %d", ids[i]);
        }
        printf("\n");
        if (end == std::string::npos) {
            break;
        }
        start = end + sep.size();
    }
    llama_model_free(model);
    return 0;
}

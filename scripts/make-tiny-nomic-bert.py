#!/usr/bin/env python3
"""Writes a tiny random-weight `nomic-bert` GGUF (the layout of nomic-embed-text v1.5, scaled
down) with llama.cpp's own gguf-py, and llama.cpp's embeddings of it with `llama-embedding`.

    PYTHONPATH=$LLAMA/gguf-py python3 scripts/make-tiny-nomic-bert.py OUT_DIR [LLAMA_EMBEDDING]

Writes OUT_DIR/tiny-nomic-bert-f16.gguf (about 0.2 MB, the same bytes every run: seeded weights)
and, given llama.cpp's `llama-embedding`, OUT_DIR/tiny-nomic-bert-f16.llama-embedding.jsonl: one
JSON object per prompt of shared/reference/prompts.txt with `prompt`, `embedding` (mean pooled,
not normalised: `--embd-normalize -1`) and `embedding_norm` (L2: `--embd-normalize 2`), as
llama-embedding prints them (`%1.7f`). Each prompt is run on its own (one sequence per context,
as the other tiny references), with 2 threads.

The model (GGUF keys without the `nomic-bert.` prefix): embedding_length 64, block_count 2,
attention.head_count 4 (head_dim 16), feed_forward_length 128, context_length 128,
attention.layer_norm_epsilon 1e-12, attention.causal false, pooling_type 1 (mean),
rope.freq_base 1000. Tensors as llama.cpp's converter writes nomic-embed-text: token_embd (F16),
token_types (F32, 2 rows; row 0 is added to every token), token_embd_norm (weight + bias, F32),
and per block a fused attn_qkv (F16, no bias), attn_output (F16), attn_output_norm, ffn_up,
ffn_gate, ffn_down (F16, no biases), layer_output_norm. No position embeddings: NEOX rotary over
the whole head. Vocabulary: WordPiece (`tokenizer.ggml.model` "bert", pre "bert-bge") with 5
special tokens, the printable ASCII characters as word starts and as continuations, and the
words of the prompts (and BERT's [unusedN] fillers up to the special ids): 350-odd tokens, so the file stays small.
"""

import json
import os
import subprocess
import sys

import numpy as np

import gguf

ARCH = "nomic-bert"
N_EMBD, N_LAYER, N_HEAD, N_FF, N_CTX = 64, 2, 4, 128, 128
SEED = 3535
HERE = os.path.dirname(os.path.abspath(__file__))


def reference_dir():
    """GGRS_REFERENCE_DIR, else the first shared/reference above the checkout."""
    if os.environ.get("GGRS_REFERENCE_DIR"):
        return os.environ["GGRS_REFERENCE_DIR"]
    d = HERE
    while d != "/" and not os.path.isdir(os.path.join(d, "shared", "reference")):
        d = os.path.dirname(d)
    return os.path.join(d, "shared", "reference")


def vocab():
    """Tokens in llama.cpp's phantom-space form (`▁word` starts a word, a bare piece goes on
    one: WordPiece's `##piece`) and the special tokens' ids, which are BERT's (as in
    bert-base-uncased: [PAD] 0, [unused0..98] 1-99, [UNK] 100, [CLS] 101, [SEP] 102,
    [MASK] 103)."""
    toks = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    ids = {t: i for i, t in enumerate(toks) if not t.startswith("[unused")}
    chars = [chr(c) for c in range(33, 127) if not chr(c).isupper()]
    words = """the capital of france is def fibonacci return th number once upon a time in
    small village by sea there lived im start end system you are helpful assistant user write
    rust function that reverses string el gato esta durmiendo en n""".split()
    toks += ["\u2581" + c for c in chars]
    toks += chars
    for w in words:
        if "\u2581" + w not in toks:
            toks.append("\u2581" + w)
    for piece in ["ing", "er", "ed", "es", "ci", "ona"]:
        if piece not in toks:
            toks.append(piece)
    return toks, ids


def model(path):
    rng = np.random.default_rng(SEED)
    toks, ids = vocab()
    w = gguf.GGUFWriter(path, ARCH)
    w.add_name("tiny-nomic-bert-random")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_layer_norm_eps(1e-12)
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.MEAN)
    w.add_rope_freq_base(1000.0)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_token_type_count(2)
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("bert-bge")
    w.add_token_list(toks)
    w.add_token_types([gguf.TokenType.CONTROL if t in ids else gguf.TokenType.NORMAL for t in toks])
    w.add_bos_token_id(ids["[CLS]"])
    w.add_uint32("tokenizer.ggml.cls_token_id", ids["[CLS]"])
    w.add_unk_token_id(ids["[UNK]"])
    w.add_sep_token_id(ids["[SEP]"])
    w.add_pad_token_id(ids["[PAD]"])
    w.add_mask_token_id(ids["[MASK]"])

    e, f = N_EMBD, N_FF

    def mat(rows, cols, gain=1.0):
        # numpy shape (rows, cols) is GGUF ne [cols, rows]: `cols` inputs, `rows` outputs.
        return (rng.standard_normal((rows, cols)) * gain / np.sqrt(cols)).astype(np.float16)

    def vec(n, mean, std):
        return (mean + std * rng.standard_normal(n)).astype(np.float32)

    w.add_tensor("token_embd.weight", (rng.standard_normal((len(toks), e)) * 0.5).astype(np.float16))
    w.add_tensor("token_types.weight", (rng.standard_normal((2, e)) * 0.1).astype(np.float32))
    w.add_tensor("token_embd_norm.weight", vec(e, 1.0, 0.1))
    w.add_tensor("token_embd_norm.bias", vec(e, 0.0, 0.1))
    for i in range(N_LAYER):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_qkv.weight", mat(3 * e, e, 2.0))
        w.add_tensor(b + "attn_output.weight", mat(e, e))
        w.add_tensor(b + "attn_output_norm.weight", vec(e, 1.0, 0.1))
        w.add_tensor(b + "attn_output_norm.bias", vec(e, 0.0, 0.1))
        w.add_tensor(b + "ffn_up.weight", mat(f, e))
        w.add_tensor(b + "ffn_gate.weight", mat(f, e, 2.0))
        w.add_tensor(b + "ffn_down.weight", mat(e, f))
        w.add_tensor(b + "layer_output_norm.weight", vec(e, 1.0, 0.1))
        w.add_tensor(b + "layer_output_norm.bias", vec(e, 0.0, 0.1))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def prompts():
    with open(os.path.join(reference_dir(), "prompts.txt"), encoding="utf-8") as f:
        return [l.rstrip("\n").replace("\\n", "\n") for l in f if l.strip()]


def llama_embeddings(exe, path, prompt, normalize):
    args = [
        # One prompt (newlines in it are not separators), taken as it is (no escapes).
        exe, "-m", path, "-p", prompt, "--embd-separator", "<|no separator|>", "--no-escape",
        "-t", "2", "--embd-output-format", "array", "--embd-normalize", str(normalize),
        "--no-warmup",
    ]
    # llama-embedding prints through an asynchronous logger that now and then loses its last
    # line, or cuts it, at exit: run again until the whole `[[x, ...]]` line is there.
    for _ in range(20):
        out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
        lines = [l for l in out.splitlines() if l.startswith("[[") and l.endswith("]]")]
        if lines:
            v = json.loads(lines[0])[0]
            if len(v) == N_EMBD:
                return v
    sys.exit(f"llama-embedding printed no embedding for {prompt!r} in 20 runs")


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    out = sys.argv[1]
    path = os.path.join(out, "tiny-nomic-bert-f16.gguf")
    model(path)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    if len(sys.argv) == 3:
        ref = os.path.join(out, "tiny-nomic-bert-f16.llama-embedding.jsonl")
        with open(ref, "w", encoding="utf-8") as f:
            for p in prompts():
                raw = llama_embeddings(sys.argv[2], path, p, -1)
                norm = llama_embeddings(sys.argv[2], path, p, 2)
                f.write(json.dumps({"prompt": p, "embedding": raw, "embedding_norm": norm}) + "\n")
        print(f"wrote {ref}")


if __name__ == "__main__":
    main()

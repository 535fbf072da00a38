#!/usr/bin/env python3
"""Writes ggrs-llama/tests/data/tiny-hybrids.llama-embedding.jsonl: llama.cpp's embeddings of the
tiny recurrent hybrids (shared/reference/tiny/tiny-{qwen35,lfm2,granite-hybrid}-f16.gguf), the
reference of `ggrs-llama/tests/embed_hybrids.rs`.

    python3 scripts/make-hybrid-embedding-references.py LLAMA_EMBEDDING

One JSON object per (model, pooling, prompt): `model` (the file's name), `pooling` (`last` or
`mean`), `prompt`, `embedding` (not normalised: `--embd-normalize -1`), as `llama-embedding`
prints it (`%1.7f`). Each prompt of shared/reference/prompts.txt runs on its own (a fresh context:
the recurrent state starts at zero), with 2 threads. The file is written as it comes from
llama.cpp (commit 0c1e570 here, an AVX2 build: its sums run in another order than ggrs's, which
follows ggml's AVX-512 build; the test's tolerance says by how much).
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "ggrs-llama", "tests", "data", "tiny-hybrids.llama-embedding.jsonl")
MODELS = ["tiny-qwen35-f16.gguf", "tiny-lfm2-f16.gguf", "tiny-granite-hybrid-f16.gguf"]
POOLINGS = ["last", "mean"]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    tiny = os.path.join(reference_dir(), "tiny")
    with open(OUT, "w", encoding="utf-8") as f:
        for m in MODELS:
            for pooling in POOLINGS:
                for p in prompts():
                    v = embedding(sys.argv[1], os.path.join(tiny, m), p, pooling)
                    row = {"model": m, "pooling": pooling, "prompt": p, "embedding": v}
                    f.write(json.dumps(row) + "\n")
    print(f"wrote {OUT}")


def reference_dir():
    """GGRS_REFERENCE_DIR, else the first shared/reference above the checkout."""
    if os.environ.get("GGRS_REFERENCE_DIR"):
        return os.environ["GGRS_REFERENCE_DIR"]
    d = HERE
    while d != "/" and not os.path.isdir(os.path.join(d, "shared", "reference")):
        d = os.path.dirname(d)
    return os.path.join(d, "shared", "reference")


def prompts():
    """The prompts of shared/reference/prompts.txt (`\\n` in a line is a newline)."""
    with open(os.path.join(reference_dir(), "prompts.txt"), encoding="utf-8") as f:
        return [l.rstrip("\n").replace("\\n", "\n") for l in f if l.strip()]


def embedding(exe, path, prompt, pooling):
    args = [
        # One prompt (newlines in it are not separators), taken as it is (no escapes).
        exe, "-m", path, "-p", prompt, "--embd-separator", "<|no separator|>", "--no-escape",
        "-t", "2", "--embd-output-format", "array", "--embd-normalize", "-1",
        "--pooling", pooling, "--no-warmup",
    ]
    # llama-embedding's asynchronous logger now and then loses or cuts its last line at exit:
    # run again until the whole `[[x, ...]]` line is there.
    for _ in range(20):
        out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
        lines = [l for l in out.splitlines() if l.startswith("[[") and l.endswith("]]")]
        if lines:
            return json.loads(lines[0])[0]
    sys.exit(f"llama-embedding printed no embedding for {prompt!r} in 20 runs")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes the references of ggrs-convert's all-MiniLM-L6-v2 test
(`all_minilm_l6_v2_converts_as_llama_cpp_and_embeds_as_it`) into ggrs-convert/tests/data:

- minilm-f16.llama-convert.json: name, type, shape (ne) and sha256 of every tensor of the F16
  GGUF that llama.cpp's `convert_hf_to_gguf.py --outtype f16` writes;
- minilm-f16.llama-convert-tokenizer.json: every `tokenizer.*` key of that file, arrays as their
  length and the sha256 of their items joined by newlines (numbers in decimal);
- minilm-f16.llama-embedding.jsonl: `llama-embedding`'s embeddings, raw (`--embd-normalize -1`)
  and L2-normalised (`2`), of the six prompts of shared/reference/prompts.txt, each prompt run
  alone, on the F16 GGUF that `ggrs convert` writes;
- minilm.sentence-transformers.jsonl: sentence-transformers' own normalised embeddings of the
  same prompts (PyTorch on the CPU).

    PYTHON=... python scripts/make-minilm-references.py GGRS_BIN LLAMA_CPP_DIR

The Python running it needs numpy, torch, transformers and sentence-transformers (PyPI);
LLAMA_CPP_DIR is llama.cpp's source tree with `build/bin/llama-embedding` built (its gguf-py and
converter are used from there). The checkpoint is the one `scripts/fetch-embed-model.sh` caches.
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "ggrs-convert", "tests", "data")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ggrs, llama = sys.argv[1], sys.argv[2]
    sys.path.insert(0, os.path.join(llama, "gguf-py"))
    sys.path.insert(0, HERE)
    import gguf  # llama.cpp's own reader
    from importlib import import_module

    nomic = import_module("make-tiny-nomic-bert")  # prompts and llama-embedding's runner
    hf = subprocess.run(["bash", os.path.join(HERE, "fetch-embed-model.sh")], capture_output=True,
                        text=True, check=True).stdout.strip()
    prompts = nomic.prompts()
    with tempfile.TemporaryDirectory() as tmp:
        theirs = os.path.join(tmp, "llama.gguf")
        env = dict(os.environ, PYTHONPATH=os.path.join(llama, "gguf-py"))
        subprocess.run([sys.executable, os.path.join(llama, "convert_hf_to_gguf.py"), hf, "--outtype", "f16",
                        "--outfile", theirs], check=True, env=env, capture_output=True)
        r = gguf.GGUFReader(theirs)
        with open(os.path.join(OUT, "minilm-f16.llama-convert.json"), "w") as f:
            rows = []
            for t in sorted(r.tensors, key=lambda t: t.name):
                v = {"ne": [int(x) for x in t.shape], "sha256": hashlib.sha256(t.data.tobytes()).hexdigest(),
                     "type": t.tensor_type.name}
                rows.append(f"  {json.dumps(t.name)}: {json.dumps(v, sort_keys=True)}")
            f.write("{\n" + ",\n".join(rows) + "\n}\n")
        keys = {}
        for field in r.fields.values():
            if not field.name.startswith("tokenizer."):
                continue
            t = field.types[0]
            if t == gguf.GGUFValueType.ARRAY:
                if field.types[-1] == gguf.GGUFValueType.STRING:
                    items = [bytes(field.parts[i]).decode() for i in field.data]
                else:
                    items = [str(field.parts[i].tolist()[0]) for i in field.data]
                keys[field.name] = {"len": len(items),
                                    "sha256_lines": hashlib.sha256("\n".join(items).encode()).hexdigest()}
            elif t == gguf.GGUFValueType.STRING:
                keys[field.name] = bytes(field.parts[field.data[0]]).decode()
            else:
                keys[field.name] = field.parts[field.data[0]].tolist()[0]
        with open(os.path.join(OUT, "minilm-f16.llama-convert-tokenizer.json"), "w") as f:
            f.write(json.dumps(keys, indent=1, sort_keys=True) + "\n")

        ours = os.path.join(tmp, "ggrs.gguf")
        subprocess.run([ggrs, "convert", hf, ours, "--outtype", "f16"], check=True, capture_output=True)
        exe = os.path.join(llama, "build", "bin", "llama-embedding")
        nomic.N_EMBD = 384
        with open(os.path.join(OUT, "minilm-f16.llama-embedding.jsonl"), "w") as f:
            for p in prompts:
                raw = nomic.llama_embeddings(exe, ours, p, -1)
                norm = nomic.llama_embeddings(exe, ours, p, 2)
                f.write(json.dumps({"prompt": p, "embedding": raw, "embedding_norm": norm}) + "\n")

    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(2)
    m = SentenceTransformer(hf, device="cpu")
    v = m.encode(prompts, normalize_embeddings=True)
    with open(os.path.join(OUT, "minilm.sentence-transformers.jsonl"), "w") as f:
        for p, e in zip(prompts, v):
            f.write(json.dumps({"prompt": p, "embedding": [round(float(x), 7) for x in e]}) + "\n")
    print(f"wrote the references into {OUT}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes tiny-gemma4-moe-f16.gguf: shared/reference/tiny/tiny-gemma4-f16.gguf with Gemma 4
26B-A4B's mixture-of-experts blocks added to layers 0, 1 and 3 (layer 2 stays dense), as
llama.cpp 0c1e570 reads them (src/models/gemma4.cpp): a router (`ffn_gate_inp.weight` and its
`.scale`), 4 experts of width 32 with 2 used per token, the extra norms `pre_ffw_norm_2`,
`post_ffw_norm_1`, `post_ffw_norm_2`, and a scale per expert (`ffn_down_exps.scale`). Layers 0
and 3 store the experts' gate and up projections fused (`ffn_gate_up_exps`), layer 1 apart.

    PYTHONPATH=$LLAMA/gguf-py python3 scripts/make-tiny-gemma4-moe.py SRC.gguf OUT.gguf

The references beside the test (ggrs-llama/tests/data/tiny-gemma4-moe-f16.llama.jsonl) are
llama.cpp's outputs on the six prompts of the source model's reference, by
scripts/llamacpp-dump-logits.cpp (16 greedy tokens):

    dump-logits OUT.gguf IDS 16 > ggrs-llama/tests/data/tiny-gemma4-moe-f16.llama.jsonl

where IDS holds the `tokens` of shared/reference/tiny/tiny-gemma4-f16.public.jsonl, a line each.
Needs numpy and llama.cpp's gguf-py. The weights are seeded: the file is the same every run.
"""

import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

MOE_LAYERS = (0, 1, 3)
FUSED = (0, 3)
N_EXPERT, N_USED, N_FF_EXP = 4, 2, 32


def main(src: str, out: str) -> None:
    r = GGUFReader(src)
    arch = "gemma4"
    w = GGUFWriter(out, arch)
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        t = f.types[0]
        if t == GGUFValueType.ARRAY:
            sub = f.types[-1]
            if sub == GGUFValueType.STRING:
                vals = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
            else:
                vals = [f.parts[i].tolist()[0] for i in f.data]
            w.add_key_value(f.name, vals, t, sub_type=sub)
        elif t == GGUFValueType.STRING:
            w.add_key_value(f.name, bytes(f.parts[f.data[0]]).decode("utf-8"), t)
        else:
            w.add_key_value(f.name, f.parts[f.data[0]].tolist()[0], t)
    w.add_uint32(f"{arch}.expert_count", N_EXPERT)
    w.add_uint32(f"{arch}.expert_used_count", N_USED)
    w.add_uint32(f"{arch}.expert_feed_forward_length", N_FF_EXP)

    n_embd = None
    for t in r.tensors:
        data = np.array(t.data)
        if t.name == "token_embd.weight":
            n_embd = int(t.shape[0])
        w.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    assert n_embd is not None

    rng = np.random.default_rng(20261129)
    e, x, f = n_embd, N_EXPERT, N_FF_EXP

    def normal(shape, std, dtype=np.float32):
        return (rng.standard_normal(shape) * std).astype(dtype)

    for il in MOE_LAYERS:
        b = f"blk.{il}."
        # numpy shapes are ggml's ne reversed: ne [e, x] is (x, e).
        w.add_tensor(b + "ffn_gate_inp.weight", normal((x, e), 1.0))
        w.add_tensor(b + "ffn_gate_inp.scale", (1.0 + normal((e,), 0.2)))
        w.add_tensor(b + "pre_ffw_norm_2.weight", (1.0 + normal((e,), 0.2)))
        w.add_tensor(b + "post_ffw_norm_1.weight", (1.0 + normal((e,), 0.2)))
        w.add_tensor(b + "post_ffw_norm_2.weight", (1.0 + normal((e,), 0.2)))
        if il in FUSED:
            w.add_tensor(b + "ffn_gate_up_exps.weight", normal((x, 2 * f, e), 0.15, np.float16))
        else:
            w.add_tensor(b + "ffn_gate_exps.weight", normal((x, f, e), 0.15, np.float16))
            w.add_tensor(b + "ffn_up_exps.weight", normal((x, f, e), 0.15, np.float16))
        w.add_tensor(b + "ffn_down_exps.weight", normal((x, e, f), 0.15, np.float16))
        w.add_tensor(b + "ffn_down_exps.scale", (1.0 + normal((x,), 0.3)))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])

#!/usr/bin/env python3
"""Writes the fuzz seed corpora under fuzz/seeds/<target>/ (small files, committed).

Run from anywhere: python3 fuzz/make-seeds.py [SHARED_REFERENCE_DIR]
The GGUF seeds are built here byte by byte from the format (GGUF v3, little-endian);
`vocab-head` is the first 2 KiB of a real vocab-only file from shared/reference/vocab.
"""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REF = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "shared", "reference")
SEEDS = os.path.join(HERE, "seeds")

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
F32_T = 0  # tensor type id of f32


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == STR:
        return gstr(v)
    if t == ARR:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        for it in items:
            out += value(et, it)
        return out
    fmt = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
           BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}[t]
    return struct.pack(fmt, v)


def gguf(kvs, tensors, alignment=32):
    """kvs: [(key, type, value)]; tensors: [(name, ne list, f32 values or (type id, bytes))]."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += gstr(k) + struct.pack("<I", t) + value(t, v)
    offset = 0
    datas = []
    for name, ne, vals in tensors:
        out += gstr(name) + struct.pack("<I", len(ne))
        for n in ne:
            out += struct.pack("<Q", n)
        if isinstance(vals, tuple):
            ty, d = vals
        else:
            ty, d = F32_T, struct.pack("<%df" % len(vals), *vals)
        out += struct.pack("<IQ", ty, offset)
        datas.append(d)
        offset += (len(d) + alignment - 1) // alignment * alignment
    out += b"\0" * ((-len(out)) % alignment)
    for d in datas:
        out += d + b"\0" * ((-len(d)) % alignment)
    return out


def write(target, name, data):
    d = os.path.join(SEEDS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def vals(n, scale=0.1):
    # Small deterministic values, finite and varied.
    return [((i * 37 % 17) - 8) * scale / 8 for i in range(n)]


def tiny_llama():
    """A whole llama model ggrs loads: 1 layer, width 8, 2 heads, FFN 16, 10 tokens."""
    e, ff, nv = 8, 16, 10
    tokens = ["<unk>", "<s>", "</s>", "\u2581", "a", "b", "\u2581a", "\u2581b", "ab", "<0x0A>"]
    types = [2, 3, 3, 1, 1, 1, 1, 1, 1, 6]
    kvs = [
        ("general.architecture", STR, "llama"),
        ("general.name", STR, "fuzz-seed"),
        ("llama.context_length", U32, 64),
        ("llama.embedding_length", U32, e),
        ("llama.block_count", U32, 1),
        ("llama.feed_forward_length", U32, ff),
        ("llama.attention.head_count", U32, 2),
        ("llama.attention.head_count_kv", U32, 2),
        ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
        ("llama.rope.dimension_count", U32, 4),
        ("tokenizer.ggml.model", STR, "llama"),
        ("tokenizer.ggml.tokens", ARR, (STR, tokens)),
        ("tokenizer.ggml.scores", ARR, (F32, [0.0, 0.0, 0.0, -1.0, -2.0, -2.0, -1.5, -1.5, -3.0, 0.0])),
        ("tokenizer.ggml.token_type", ARR, (I32, types)),
        ("tokenizer.ggml.bos_token_id", U32, 1),
        ("tokenizer.ggml.eos_token_id", U32, 2),
        ("tokenizer.ggml.unknown_token_id", U32, 0),
    ]
    t = [
        ("token_embd.weight", [e, nv], vals(e * nv)),
        ("output_norm.weight", [e], [1.0] * e),
        ("output.weight", [e, nv], vals(e * nv, 0.2)),
        ("blk.0.attn_norm.weight", [e], [1.0] * e),
        ("blk.0.attn_q.weight", [e, e], vals(e * e)),
        ("blk.0.attn_k.weight", [e, e], vals(e * e, 0.05)),
        ("blk.0.attn_v.weight", [e, e], vals(e * e, 0.07)),
        ("blk.0.attn_output.weight", [e, e], vals(e * e)),
        ("blk.0.ffn_norm.weight", [e], [1.0] * e),
        ("blk.0.ffn_gate.weight", [e, ff], vals(e * ff)),
        ("blk.0.ffn_up.weight", [e, ff], vals(e * ff, 0.05)),
        ("blk.0.ffn_down.weight", [ff, e], vals(e * ff)),
    ]
    return gguf(kvs, t)


def main():
    # gguf_read: two tensors; every value type with alignment 64; a real file's head.
    write("gguf_read", "two-tensors", gguf(
        [("general.architecture", STR, "test")],
        [("a", [4], vals(4)), ("b", [3, 2], vals(6))]))
    every = [
        ("general.alignment", U32, 64),
        ("u8", U8, 200), ("i8", I8, -5), ("u16", U16, 60000), ("i16", I16, -300),
        ("u32", U32, 1 << 31), ("i32", I32, -(1 << 30)), ("f32", F32, 1.5), ("bool", BOOL, True),
        ("str", STR, "h\u00e9llo"), ("u64", U64, 1 << 40), ("i64", I64, -(1 << 40)), ("f64", F64, 2.25),
        ("arr", ARR, (U32, [1, 2, 3])),
        ("nested", ARR, (ARR, [(STR, ["x", "y"]), (STR, [])])),
    ]
    write("gguf_read", "every-type", gguf(every, [
        ("t0", [2], vals(2)), ("t1", [5, 3], vals(15)), ("t2", [1, 1, 2, 2], vals(4))], 64))
    # Block types with bytes of every kind (all codes, all scale bytes): the low-bit
    # decoders — TQ1_0, TQ2_0, MXFP4, NVFP4, Q1_0, Q2_0 (ggml types 34, 35, 39–42) as
    # (id, values per block, bytes per block).
    blocks = []
    for tid, qk, bs in [(34, 256, 54), (35, 256, 66), (39, 32, 17), (40, 64, 36),
                        (41, 128, 18), (42, 64, 18)]:
        raw = bytes((i * 151 + tid * 7) % 256 for i in range(2 * bs))
        blocks.append(("t%d" % tid, [2 * qk], (tid, raw)))
    write("gguf_read", "low-bit-blocks", gguf([("general.architecture", STR, "test")], blocks))
    with open(os.path.join(REF, "vocab", "ggml-vocab-llama-spm.gguf"), "rb") as f:
        write("gguf_read", "vocab-head", f.read(2048))

    model = tiny_llama()
    write("model_load", "tiny-llama", model)
    write("gguf_read", "tiny-llama", model)

    # tokenizer: a selector byte (which vocabulary), then text.
    texts = ["Hello, world!", " leading space and  two", "\u4f60\u597d\uff0c\u4e16\u754c",
             "<|im_start|>user\nhi<|im_end|>", "emoji \U0001f600 and tabs\t\n\n",
             "1234567890 3.14 x=y+z", "\u00e9\u00e8\u00ea \u0627\u0644\u0639\u0631\u0628\u064a\u0629"]
    for i, t in enumerate(texts):
        write("tokenizer", "text-%d" % i, bytes([i % 3]) + t.encode())

    # chat_template: head field (flags, optional template), then messages (role byte + text).
    sep = b"\xff\xfe"
    def msgs(*ms):
        return sep.join(bytes([r]) + c.encode() for r, c in ms)
    write("chat_template", "two-turns", b"\x01" + sep + msgs((0, "You are helpful."), (1, "Hi!"), (2, "Hello."), (1, "Bye")))
    write("chat_template", "user-only", b"\x00" + sep + msgs((1, "What is 2+2?")))
    write("chat_template", "own-template",
          b"\x01{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}" + sep + msgs((1, "x")))

    # convert_dir: config.json, then model.safetensors.
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "intermediate_size": 16,
           "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
           "vocab_size": 10, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "tie_word_embeddings": False}
    shapes = {
        "model.embed_tokens.weight": [10, 8], "model.norm.weight": [8], "lm_head.weight": [10, 8],
        "model.layers.0.input_layernorm.weight": [8],
        "model.layers.0.post_attention_layernorm.weight": [8],
        "model.layers.0.self_attn.q_proj.weight": [8, 8],
        "model.layers.0.self_attn.k_proj.weight": [8, 8],
        "model.layers.0.self_attn.v_proj.weight": [8, 8],
        "model.layers.0.self_attn.o_proj.weight": [8, 8],
        "model.layers.0.mlp.gate_proj.weight": [16, 8],
        "model.layers.0.mlp.up_proj.weight": [16, 8],
        "model.layers.0.mlp.down_proj.weight": [8, 16],
    }
    header, data, off = {}, b"", 0
    for name, shape in shapes.items():
        n = 1
        for s in shape:
            n *= s
        d = struct.pack("<%df" % n, *vals(n))
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(d)]}
        data += d
        off += len(d)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    st = struct.pack("<Q", len(h)) + h + data
    write("convert_dir", "tiny-llama", json.dumps(cfg).encode() + sep + st)
    write("convert_dir", "bad-header", json.dumps(cfg).encode() + sep + struct.pack("<Q", 1 << 62) + b"{}")

    # server_request: a path selector byte, header lines, a JSON body.
    def req(sel, headers, body):
        return bytes([sel]) + sep + headers.encode() + sep + body.encode()
    chat = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
            "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "n": 2, "stop": ["\n", ""], "seed": 3,
            "logit_bias": {"5": -1.5, "6": False}, "logprobs": True, "top_logprobs": 3,
            "stream": True, "stream_options": {"include_usage": True}, "response_format": {"type": "text"}}
    write("server_request", "chat", req(0, "Host: localhost:8080\nAuthorization: bearer k1\nOrigin: http://localhost:8080", json.dumps(chat)))
    write("server_request", "chat-bad", req(0, "Host: evil.example", json.dumps({"messages": [], "n": 99, "max_tokens": -5, "n_predict": "x"})))
    write("server_request", "completions", req(1, "Host: 127.0.0.1", json.dumps(
        {"prompt": ["abc", [1, 2, 3]], "n": 3, "max_completion_tokens": -1, "logprobs": 2,
         "logit_bias": [[1, 2.0], [2, False]], "min_p": 0.1, "repeat_last_n": -1, "tools": []})))
    write("server_request", "tokenize", req(2, "Host: [::1]:8080", json.dumps({"content": "Hello <|im_end|>", "with_pieces": True, "add_special": True})))
    write("server_request", "detokenize", req(3, "X-Api-Key: k", json.dumps({"tokens": [1, 2, 4294967295]})))
    write("server_request", "not-json", req(1, "", "{\"prompt\": [1, 2"))
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    write("server_request", "chat-tools", req(0, "Host: localhost", json.dumps(
        {"messages": [{"role": "user", "content": "Weather in Paris?"},
                      {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                      {"role": "tool", "tool_call_id": "c1", "content": "18 C"}],
         "tools": tools, "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
         "parallel_tool_calls": True, "chat_template_kwargs": {"enable_thinking": False}, "reasoning_format": "auto"})))
    write("server_request", "chat-schema", req(0, "", json.dumps(
        {"messages": [{"role": "user", "content": "A number"}], "max_tokens": 4,
         "response_format": {"type": "json_schema", "json_schema": {"name": "n", "strict": True,
                             "schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}}})))
    write("server_request", "chat-grammar", req(0, "", json.dumps(
        {"messages": [{"role": "user", "content": "yes or no"}], "grammar": "root ::= \"yes\" | \"no\"",
         "json_schema": {"type": "string"}})))
    write("server_request", "messages", req(5, "x-api-key: k", json.dumps(
        {"model": "m", "max_tokens": 16, "system": [{"type": "text", "text": "Be brief."}],
         "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                      {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Oslo"}}]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "3 C"}]}],
         "tools": [{"name": "get_weather", "description": "w", "input_schema": tools[0]["function"]["parameters"]}],
         "tool_choice": {"type": "any", "disable_parallel_tool_use": True}, "thinking": {"type": "enabled"},
         "stop_sequences": ["END"], "stream": True})))
    write("server_request", "count-tokens", req(6, "", json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "Hello"}], "tool_choice": {"type": "tool", "name": "x"}})))
    write("server_request", "responses", req(7, "", json.dumps(
        {"model": "m", "instructions": "Be brief.", "max_output_tokens": 16, "stream": False,
         "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
                   {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
                   {"type": "function_call_output", "call_id": "c1", "output": "3 C"}],
         "tools": [{"type": "function", "name": "get_weather", "parameters": tools[0]["function"]["parameters"]}],
         "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}})))
    write("server_request", "v1-embeddings", req(8, "", json.dumps(
        {"input": ["hello", [1, 2, 3]], "encoding_format": "base64", "dimensions": 32, "embd_normalize": -1})))
    write("server_request", "embedding", req(9, "", json.dumps({"content": [[1, 2], "ab"], "embd_normalize": 2})))
    write("server_request", "rerank", req(10, "", json.dumps(
        {"query": "q", "documents": ["a", {"text": "b"}], "top_n": 1, "return_documents": True})))


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Checks every BPE pre-tokenizer of ggrs against llama.cpp itself, on far more text than
# llama.cpp's vocabulary test vectors (which tell few pre-tokenizers apart).
#
# For each vocabulary of BASES and each `tokenizer.ggml.pre` name of ggrs's table, the
# vocabulary file is copied with its `tokenizer.ggml.pre` set to that name, llama.cpp
# tokenizes a set of test strings with it (scripts/llamacpp-tokenize.cpp, built here against
# the given llama.cpp), and the ignored test `pretokenizers_match_llama_cpp` of
# ggrs-llama/tests/tokenizer.rs compares ggrs's ids with llama.cpp's. The test strings mix
# every character class, scripts, numbers, runs of whitespace of many lengths (for the
# cascades of `jais-2`), code and prose; Gemma 4's own file is checked too.
#
# usage: scripts/check-pretokenizers-vs-llamacpp.sh LLAMA_CPP_DIR
#   LLAMA_CPP_DIR  a llama.cpp source tree built with CMake in LLAMA_CPP_DIR/build
#                  (libllama.so in build/bin); llama.cpp is not part of this repository
#   env: OUT (work directory, default a new temporary one), BASES (vocabularies whose tokens
#        and merges are used, default "gpt-2 qwen2"), CXX (default c++), PYTHON (python3)
# The vocabularies come from scripts/fetch-vocab-vectors.sh (GGRS_VOCAB_DIR is honoured).
set -euo pipefail
llama=${1:?usage: $0 LLAMA_CPP_DIR}
here="$(cd "$(dirname "$0")" && pwd)"
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/ggrs-pretok-check.XXXXXX")}
BASES=${BASES:-gpt-2 qwen2}
CXX=${CXX:-c++}
PYTHON=${PYTHON:-python3}
[ -f "$llama/include/llama.h" ] || { echo "$llama/include/llama.h not found" >&2; exit 2; }
[ -d "$llama/build/bin" ] || { echo "build llama.cpp first (cmake -B build)" >&2; exit 2; }

vocab="$("$here/fetch-vocab-vectors.sh")"
mkdir -p "$OUT/out"
echo "work directory $OUT" >&2

"$CXX" -O1 -std=c++17 "$here/llamacpp-tokenize.cpp" -I"$llama/include" -I"$llama/ggml/include" \
    -L"$llama/build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$llama/build/bin" \
    -o "$OUT/llamacpp-tokenize"

# The test strings, and one vocabulary file per (base, name) with llama.cpp's ids for them.
"$PYTHON" - "$here/../ggrs-llama/src/tokenizer/pretokenize/table.rs" "$vocab" "$OUT" \
    "$BASES" <<'PY'
import os, random, re, struct, subprocess, sys

table, vocab, out, bases = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split()
sep = "\n__ggml_vocab_test__\n"

src = open(table, encoding="utf-8").read()
entries = src[src.index("static PRE_TOKENIZERS"):]
entries = entries[:entries.index("];")]
names = re.findall(r'\(\s*"([^"]+)",\s*pre\(', entries)
# llama.cpp's `whitespace` pre-type only works with its `whitespace` tokenizer model.
names = [n for n in names if n != "whitespace"]

random.seed(12345)
pool = [
    "a", "Z", "q", "7", "0", " ", " ", " ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", "\r",
    ".", ",", "!", "?", "$", "+", "<", "=", "^", "`", "|", "~", "(", ")", "[", "]", "{", "}",
    "_", "-", "'", '"', "/", "\\", "#", "@", "%", "&", "*", ";", ":", "'s", "'T", "'re",
    "'LL", "'ve", "'d", "'M", "é", "Ä", "ß", "ñ", "\u0301", "\u17b7", "\u0928\u093f",
    "\u0e01\u0e34", "½", "²", "٣", "Ⅻ", "১", "\u3000", "\u00a0", "\u0085", "\u2028",
    "\u2009", "\u1680", "我", "们", "的", "中文", "한", "국어", "あ", "カタカナ", "ｶﾀ", "，",
    "。", "！", "、", "：", "「", "」", "—", "…", "“", "”", "‘", "’", "€", "£", "©", "🦙",
    "👍🏽", "👨‍👩‍👧", "\u200b", "\u200d", "\u00ad", "\ufeff", "\u0378", "\ue000",
    "\x01", "\x7f", "Ω", "Ω", "K", "K", "ℌ", "ﬀ", "Ｚ", "ｚ", "０１２", "x1", "123", "4567",
    "1234567890", "3.14", "1,000", "HTTPServer", "getURL", "camelCase", "snake_case",
    "ALLCAPS", "Straße", "Ελληνικά", "Русский", "עברית", "العربية", "हिन्दी", "ไทย",
    "ქართული", "Ⴀ", "ᏸ", "ᲐᲑ", "𐐀𐐨", "𞤀", "𑢠", "ǅ", "ʰ", "ˆ", "ꙮ", "\U0001D400",
    "\U00020000", "㐀", "豈", " fn main() {", "    return x;", "}\n", "<|im_start|>",
    "<sentinel:12>", "IMGIMGABZ", "    ", "  ",
]
cases = open(os.path.join(vocab, "ggml-vocab-llama-bpe.gguf.inp"), encoding="utf-8").read()
cases = cases.split(sep)[:-1]
cases += ["".join(random.choice(pool) for _ in range(random.randint(1, 30))) for _ in range(700)]
for n in [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 65, 127, 129, 255, 257, 511, 513, 600, 1100]:
    cases += ["a" + " " * n + "b", "x" + " " * n, "\t" * n + "y", "q" + " \u3000" * (n // 2 + 1) + "z"]
for n in range(1, 14):
    cases.append("".join(str((i * 7 + 3) % 10) for i in range(n)))
    cases.append("v" + "".join(str((i * 3 + 1) % 10) for i in range(n)) + "x")
    cases.append("٠١٢٣٤٥٦٧٨٩"[:n] + " " + "１２３４５６７８９０"[:n])
if os.path.exists("/usr/share/common-licenses/GPL-3"):
    gpl = open("/usr/share/common-licenses/GPL-3", encoding="utf-8").read()
    cases += [gpl[i:i + 2000] for i in range(0, len(gpl), 2000)]
with open(os.path.join(out, "cases.inp"), "w", encoding="utf-8", newline="") as f:
    f.write("".join(c + sep for c in cases if sep not in c))

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

def skip_value(b, o, t):
    if t == 8:
        return o + 8 + struct.unpack_from("<Q", b, o)[0]
    if t == 9:
        et, n = struct.unpack_from("<IQ", b, o)
        o += 12
        if et != 8:
            return o + SIZES[et] * n
        for _ in range(n):
            o += 8 + struct.unpack_from("<Q", b, o)[0]
        return o
    return o + SIZES[t]

def with_pre(src, dst, pre):
    """Copies a vocabulary-only GGUF (no tensors) with `tokenizer.ggml.pre` set to `pre`."""
    b = open(src, "rb").read()
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", b, 0)
    assert magic == b"GGUF" and n_tensors == 0
    o, kvs = 24, []
    for _ in range(n_kv):
        start = o
        n = struct.unpack_from("<Q", b, o)[0]
        key = b[o + 8:o + 8 + n].decode()
        o = skip_value(b, o + 8 + n + 4, struct.unpack_from("<I", b, o + 8 + n)[0])
        if key != "tokenizer.ggml.pre":
            kvs.append(b[start:o])
    k, v = b"tokenizer.ggml.pre", pre.encode()
    kvs.append(struct.pack("<Q", len(k)) + k + struct.pack("<IQ", 8, len(v)) + v)
    data = struct.pack("<4sIQQ", b"GGUF", version, 0, len(kvs)) + b"".join(kvs)
    open(dst, "wb").write(data + b"\0" * (-len(data) % 32))

tool, inp = os.path.join(out, "llamacpp-tokenize"), os.path.join(out, "cases.inp")
def run(gguf, result):
    with open(os.path.join(out, "out", result), "w") as f:
        subprocess.run([tool, gguf, inp], stdout=f, check=True)

for base in bases:
    for name in names:
        tmp = os.path.join(out, "vocab.gguf")
        with_pre(os.path.join(vocab, f"ggml-vocab-{base}.gguf"), tmp, name)
        run(tmp, f"{base}.{name}.out")
        os.remove(tmp)
    print(f"{base}: {len(names)} pre-tokenizers", file=sys.stderr)
# Gemma 4's own file (its tokenizer model forces the `gemma4` pre-tokenizer).
run(os.path.join(vocab, "ggml-vocab-gemma-4.gguf"), "gemma-4.gemma4.out")
PY

cd "$here/.."
GGRS_PRETOK_CHECK_DIR="$OUT" GGRS_VOCAB_DIR="$vocab" \
    cargo test -p ggrs-llama --test integration -- --ignored --nocapture tokenizer::pretokenizers_match_llama_cpp

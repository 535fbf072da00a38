#!/usr/bin/env bash
# Embedding throughput: `ggrs embed` against llama.cpp's `llama-embedding` on the same GGUF, the
# same sentences and the same threads, in alternating rounds of one run (medians and the ratio);
# then the servers, `ggrs serve --embeddings` against `llama-server --embeddings` with one
# client (scripts/bench-embed-serve.py: throughput and the latency of one short query).
#
#   scripts/bench-embed.sh [-r ROUNDS] [-t THREADS] [-n SENTENCES] [-a ALONE] MODEL.gguf...
#
# Each round runs both programs once per model on SENTENCES sentences of mixed length (3 to 60
# words, made here from a fixed seed: the same file every run), one per line, and times the
# whole process (load included, as a user runs it); embeddings per second = SENTENCES / time.
# The outputs of the last round are compared (largest |difference| and smallest cosine per
# sentence, both L2-normalised). llama.cpp's vector for a text depends on the other texts in its
# batch (its attention runs over the packed batch: up to 4.3e-3 on MiniLM q8_0 between a text
# alone and the same text among 50), while ggrs's does not; so the first ALONE sentences
# (default 20, 0: none) are also run through llama-embedding one process per sentence, which is
# the figure to hold ggrs to.
#
# Environment:
#   GGRS_BIN             the ggrs binary (default: target/release/ggrs, built if missing)
#   LLAMA_EMBEDDING      llama.cpp's llama-embedding (default: the llama-cpp-python 0.3.36 build
#                        under /work/llamacpp)
#   LLAMA_SERVER         llama.cpp's llama-server (default: beside LLAMA_EMBEDDING)
#   ST_PYTHON, ST_MODEL  a Python with sentence-transformers (and torch) and the model's Hugging
#                        Face directory: sentence-transformers on PyTorch's CPU joins the server
#                        rounds (optional)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

rounds=5 threads=2 n=1000 alone=20
while getopts "r:t:n:a:" o; do
    case $o in
        r) rounds=$OPTARG ;;
        t) threads=$OPTARG ;;
        n) n=$OPTARG ;;
        a) alone=$OPTARG ;;
        *) sed -n '2,28p' "$0" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[[ $# -ge 1 ]] || { sed -n '2,28p' "$0" >&2; exit 2; }

GGRS=${GGRS_BIN:-target/release/ggrs}
LLAMA=${LLAMA_EMBEDDING:-/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-embedding}
if [[ ! -x $GGRS ]]; then cargo build --release -p ggrs-cli; fi
[[ -x $LLAMA ]] || { echo "bench-embed: no llama-embedding at $LLAMA (set LLAMA_EMBEDDING)" >&2; exit 1; }
SERVER=${LLAMA_SERVER:-$(dirname "$LLAMA")/llama-server}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$n" >"$work/sentences.txt" <<'EOF'
import random, sys
words = ("the a of to and in is it that for on was with as by at from this be are or an "
         "not have has but which were all their there can will more one about when time "
         "model embedding search query document vector retrieval local server paris france "
         "river mountain city language computer network memory python rust graph tensor "
         "quick brown fox jumps over lazy dog small village sea lived old fisherman").split()
rng = random.Random(2026)
for _ in range(int(sys.argv[1])):
    k = rng.choice([3, 5, 8, 12, 16, 24, 32, 48, 60])
    print(" ".join(rng.choice(words) for _ in range(k)).capitalize() + ".")
EOF

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

for model in "$@"; do
    : >"$work/ggrs.t"
    : >"$work/llama.t"
    for ((r = 1; r <= rounds; r++)); do
        t0=$(now)
        "$GGRS" embed -m "$model" -f "$work/sentences.txt" -t "$threads" --format array \
            >"$work/ggrs.out" 2>/dev/null
        t1=$(now)
        "$LLAMA" -m "$model" -f "$work/sentences.txt" -t "$threads" --embd-output-format array \
            --embd-normalize 2 -b 8192 -ub 8192 -c 8192 --no-warmup \
            >"$work/llama.out" 2>"$work/llama.err"
        t2=$(now)
        echo "$t1 - $t0" | bc -l >>"$work/ggrs.t"
        echo "$t2 - $t1" | bc -l >>"$work/llama.t"
    done
    g=$(median <"$work/ggrs.t")
    l=$(median <"$work/llama.t")
    printf '%s: %d sentences, %d threads, median of %d rounds\n' "$(basename "$model")" "$n" "$threads" "$rounds"
    printf '  ggrs embed       %7.3f s  %8.1f embeddings/s\n' "$g" "$(echo "$n / $g" | bc -l)"
    printf '  llama-embedding  %7.3f s  %8.1f embeddings/s\n' "$l" "$(echo "$n / $l" | bc -l)"
    printf '  ggrs / llama.cpp throughput: %.2fx\n' "$(echo "$l / $g" | bc -l)"
    python3 - "$work/ggrs.out" "$work/llama.out" <<'EOF'
import json, math, sys
a = json.load(open(sys.argv[1]))
try:
    b = json.load(open(sys.argv[2]))
except ValueError:
    # llama-embedding's asynchronous logger now and then cuts its output at exit.
    print("  outputs: llama-embedding's output was cut off this round (not compared)")
    sys.exit(0)
assert len(a) == len(b), (len(a), len(b))
dmax = max(max(abs(x - y) for x, y in zip(u, v)) for u, v in zip(a, b))
def cos(u, v):
    return sum(x * y for x, y in zip(u, v)) / math.sqrt(sum(x * x for x in u) * sum(y * y for y in v))
cmin = min(cos(u, v) for u, v in zip(a, b))
print(f"  outputs: max |ggrs - llama.cpp| {dmax:.2e}, min cosine {cmin:.9f} ({len(a)} sentences)")
EOF
    if ((alone > 0)); then
        python3 - "$work/ggrs.out" "$LLAMA" "$model" "$work/sentences.txt" "$alone" "$threads" <<'EOF'
import json, subprocess, sys
ours, llama, model, sentences, k, threads = sys.argv[1:]
a = json.load(open(ours))
lines = open(sentences).read().splitlines()[: int(k)]
dmax = 0.0
for i, line in enumerate(lines):
    v = None
    for _ in range(5):  # llama-embedding's asynchronous logger now and then cuts its output
        p = subprocess.run([llama, "-m", model, "-p", line, "-t", threads, "--no-warmup",
                            "--embd-output-format", "array", "--embd-normalize", "2"],
                           capture_output=True, text=True)
        try:
            v = json.loads(p.stdout)[0]
            break
        except (ValueError, IndexError):
            v = None
    if v is None:
        sys.exit(f"  llama-embedding gave no output for sentence {i}")
    dmax = max(dmax, max(abs(x - y) for x, y in zip(a[i], v)))
print(f"  outputs: max |ggrs - llama.cpp| {dmax:.2e} with llama-embedding run on each of the "
      f"first {len(lines)} sentences alone")
EOF
    fi
    st=()
    if [[ -n ${ST_PYTHON:-} ]]; then st=(--st-python "$ST_PYTHON" --st-model "$ST_MODEL"); fi
    python3 scripts/bench-embed-serve.py --ggrs "$GGRS" --llama-server "$SERVER" --model "$model" \
        --sentences "$work/sentences.txt" --rounds "$rounds" --threads "$threads" "${st[@]}"
done

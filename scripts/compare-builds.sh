#!/usr/bin/env bash
# Are two ggrs builds bit for bit the same on every reference model? For refactors that must
# not change a bit (issue 31's check): logits and greedy tokens of every reference file, with
# SIMD and with GGRS_FORCE_SCALAR=1, and the bytes `ggrs quantize` writes for every file type.
#
# Usage:  scripts/compare-builds.sh OLD_DIR NEW_DIR [OUT_DIR]
#   OLD_DIR, NEW_DIR: each holds a `ggrs` binary and the `refcheck` example of one build, e.g.
#     cargo build --release -p ggrs-cli -p ggrs-llama --bin ggrs --example refcheck
#     mkdir -p /tmp/new && cp target/release/ggrs target/release/examples/refcheck /tmp/new/
#   OUT_DIR (default /tmp/ggrs-compare): the dumps and quantized files, kept for inspection.
# Env: GGRS_REFERENCE_DIR (default ../shared/reference), GGRS_MODEL_DIR (default
#   ~/.cache/ggrs/models, where scripts/default-model.sh puts the qwen05b files),
#   COMPARE_SCALAR=0 skips the GGRS_FORCE_SCALAR runs, COMPARE_SIMD=0 the SIMD ones, COMPARE_QUANTIZE=0 the quantizer,
#   SCALAR_PROMPTS=N (default 2) runs the portable kernels on the first N prompts of the
#   full-size models only (they take minutes per prompt there; the tiny models run them all),
#   SCALAR_ONLY=REGEX limits the portable runs to the labels it matches (e.g. 'tiny|q4_0'),
#   QUANT_TYPES="q4_0 q4_k_m …" limits the quantizer check (default: the 12 types below).
# All SIMD runs come first, then the portable ones, then the quantizer.
# Prints one line per check (same / DIFFERENT / skipped and why) and exits 1 if any differs.
# A model the old build cannot load (an architecture it lacks) is skipped, not failed.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
old="${1:?usage: compare-builds.sh OLD_DIR NEW_DIR [OUT_DIR]}"
new="${2:?usage: compare-builds.sh OLD_DIR NEW_DIR [OUT_DIR]}"
out="${3:-/tmp/ggrs-compare}"
ref="${GGRS_REFERENCE_DIR:-$here/../../shared/reference}"
models="${GGRS_MODEL_DIR:-$HOME/.cache/ggrs/models}"
for d in "$old" "$new"; do
    for b in ggrs refcheck; do
        [[ -x "$d/$b" ]] || { echo "compare-builds: $d/$b is missing (see usage)" >&2; exit 2; }
    done
done
[[ -d "$ref" ]] || { echo "compare-builds: no reference folder at $ref (set GGRS_REFERENCE_DIR)" >&2; exit 2; }
mkdir -p "$out/old" "$out/new"
differ=0

# model.gguf reference.jsonl label
pairs=()
for t in f16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k_m q4_k_m q5_k_m q6_k iq4_nl iq4_xs tq1_0 tq2_0; do
    pairs+=("$models/derived/qwen05b-$t.gguf|$ref/qwen05b/$t.public.jsonl|qwen05b-$t")
done
pairs+=("$models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf|$ref/qwen05b/source-q4_k_m.public.jsonl|qwen05b-source-q4_k_m")
pairs+=("$models/gemma-3-270m-q4_k_m.gguf|$ref/gemma3-270m/q4_k_m.public.jsonl|gemma3-270m-q4_k_m")
for f in "$ref"/tiny/tiny-*.gguf; do
    pairs+=("$f|${f%.gguf}.public.jsonl|$(basename "${f%.gguf}")")
done

modes=(simd)
[[ "${COMPARE_SCALAR:-1}" != 0 ]] && modes+=(scalar)
[[ "${COMPARE_SIMD:-1}" == 0 ]] && modes=(scalar)

for mode in "${modes[@]}"; do
    scalar=0
    [[ $mode == scalar ]] && scalar=1
    for p in "${pairs[@]}"; do
        IFS='|' read -r model jsonl label <<<"$p"
        if [[ ! -f "$model" || ! -f "$jsonl" ]]; then
            echo "skipped    $label $mode (no $( [[ -f "$model" ]] && echo "$jsonl" || echo "$model"))"
            continue
        fi
        if head -c 4096 "$jsonl" | grep -q '"embedding"'; then
            echo "skipped    $label $mode (an embedding reference: refcheck compares logits; tiny_bert and the embedding tests cover it)"
            continue
        fi
        if [[ $scalar == 1 && -n "${SCALAR_ONLY:-}" && ! $label =~ ${SCALAR_ONLY} ]]; then
            continue
        fi
        if [[ $scalar == 1 && $label != tiny-* ]]; then
            head -n "${SCALAR_PROMPTS:-2}" "$jsonl" >"$out/$label.scalar-prompts.jsonl"
            jsonl="$out/$label.scalar-prompts.jsonl"
        fi
        ok=1
        for side in old new; do
            dir=$old
            [[ $side == new ]] && dir=$new
            if ! GGRS_FORCE_SCALAR=$scalar REFCHECK_DUMP="$out/$side/$label.$mode.jsonl" \
                "$dir/refcheck" "$model" "$jsonl" 2 >"$out/$side/$label.$mode.log" 2>&1; then
                ok=0
                echo "skipped    $label $mode: the $side build failed ($(tail -1 "$out/$side/$label.$mode.log"))"
                break
            fi
        done
        [[ $ok == 1 ]] || continue
        if cmp -s "$out/old/$label.$mode.jsonl" "$out/new/$label.$mode.jsonl"; then
            echo "same       $label $mode (logits and tokens, $(wc -l <"$out/new/$label.$mode.jsonl") prompts)"
        else
            echo "DIFFERENT  $label $mode: diff $out/old/$label.$mode.jsonl $out/new/$label.$mode.jsonl"
            differ=1
        fi
    done
done

if [[ "${COMPARE_QUANTIZE:-1}" != 0 ]]; then
    f16="$models/derived/qwen05b-f16.gguf"
    if [[ ! -f "$f16" ]]; then
        echo "skipped    quantize (no $f16; run scripts/default-model.sh)"
    else
        for t in ${QUANT_TYPES:-q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k_m q4_k_m q5_k_m q6_k iq4_nl iq4_xs}; do
            pure=()
            [[ $t == q8_0 || $t == q4_0 ]] && pure=(--pure)
            for side in old new; do
                dir=$old
                [[ $side == new ]] && dir=$new
                "$dir/ggrs" quantize "$f16" "$out/$side/q-$t.gguf" "$t" "${pure[@]}" >/dev/null 2>&1 ||
                    echo "quantize $t failed in the $side build"
            done
            if cmp -s "$out/old/q-$t.gguf" "$out/new/q-$t.gguf"; then
                echo "same       quantize f16 -> $t ($(sha256sum <"$out/new/q-$t.gguf" | cut -c1-16)…)"
            else
                echo "DIFFERENT  quantize f16 -> $t"
                differ=1
            fi
            rm -f "$out/old/q-$t.gguf" "$out/new/q-$t.gguf"
        done
    fi
fi
exit $differ

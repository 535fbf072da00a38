#!/usr/bin/env bash
# Tests of the Python package (ggrs-py): runs its pytest suite (ggrs-py/tests) against llama.cpp's
# reference outputs, the `ggrs` command line and the real model (fetched and converted when
# missing, as the Rust tests do), on either
# - the extension module of a cargo build (`GGRS_PY_EXTENSION=path/to/lib_ggrs.so`, which
#   `cargo test` passes: ggrs-py/tests/python_package.rs), put beside ggrs-py/python/ggrs in a
#   temporary package directory; or
# - the package installed as users install it, `pip install ./ggrs-py` (a release build of its
#   own in target/python; minutes on a fresh checkout): without GGRS_PY_EXTENSION.
#
# The venv (default ~/.cache/ggrs/venv-package) is made once and holds pinned numpy and pytest
# (and maturin, to build the package); the package is rebuilt on every run (cargo only
# recompiles what changed).
#
# Environment:
#   GGRS_PY_EXTENSION     an extension module built by cargo (skips `pip install`)
#   GGRS_PY_VENV          venv directory (default ~/.cache/ggrs/venv-package)
#   GGRS_BIN              the ggrs binary to compare with (default: build target/release/ggrs)
#   GGRS_REFERENCE_DIR    reference files (default: shared/reference in a parent directory)
#   GGRS_SKIP_MODEL_TESTS=1  skip the tests on the real model
#   PYTEST_ARGS           extra pytest arguments (e.g. "-k tiny")
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV=${GGRS_PY_VENV:-$HOME/.cache/ggrs/venv-package}
PINS=(numpy==2.4.6 pytest==9.2.0)
# maturin only to build the package here (not for an extension built by cargo).
[[ -n ${GGRS_PY_EXTENSION:-} ]] || PINS=(maturin==1.16.0 "${PINS[@]}")

if [[ ! -x $VENV/bin/python ]]; then
    python3 -m venv "$VENV"
fi
# Installed once (the marker lists what was installed; a subset needs nothing new).
installed=" $(cat "$VENV/.ggrs-pins" 2>/dev/null || true) "
missing=()
for p in "${PINS[@]}"; do [[ $installed == *" $p "* ]] || missing+=("$p"); done
if ((${#missing[@]})); then
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PINS[@]}"
    echo "${PINS[*]}" >"$VENV/.ggrs-pins"
fi

if [[ -z ${GGRS_BIN:-} ]]; then
    cargo build --release -p ggrs-cli
    export GGRS_BIN=$PWD/target/release/ggrs
fi

if [[ -n ${GGRS_PY_EXTENSION:-} ]]; then
    # The package's Python half with the cargo-built extension as `ggrs._ggrs`, first on the path.
    pkg=$(mktemp -d)
    trap 'rm -rf "$pkg"' EXIT
    cp -r ggrs-py/python/ggrs "$pkg/ggrs"
    cp "$GGRS_PY_EXTENSION" "$pkg/ggrs/_ggrs.abi3.so"
    export PYTHONPATH=$pkg${PYTHONPATH:+:$PYTHONPATH}
    echo "test-python-package: ggrs-py/python/ggrs with $GGRS_PY_EXTENSION"
else
    echo "test-python-package: pip install ./ggrs-py"
    # The venv's bin first, as `activate` would: maturin's build backend runs the `maturin` command.
    export PATH=$VENV/bin:$PATH
    # The pinned maturin of the venv builds it (no download per run); otherwise exactly what a user runs.
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps ./ggrs-py
fi

# From another directory, so that `import ggrs` finds the installed package, not the sources.
cd ggrs-py/tests
# shellcheck disable=SC2086
"$VENV/bin/python" -m pytest -q ${PYTEST_ARGS:-} .

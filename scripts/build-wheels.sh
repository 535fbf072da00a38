#!/usr/bin/env bash
# Builds the release wheels of the Python package `ggrs` (ggrs-py/, built by maturin) on an
# x86-64 Debian 12 (bookworm) machine:
#   * Linux x86-64  - native `maturin build --release`;
#   * Linux aarch64 - cross-compiled with Debian's rustc-web (it ships the aarch64 standard
#                     library; rustup's toolchain cannot be given targets offline) and the
#                     aarch64-linux-gnu-gcc linker.
# Both are abi3 wheels (pyo3 feature abi3-py39): one wheel per platform serves every
# CPython >= 3.9, so no target Python interpreter is needed, not even for the cross build.
# Each wheel is checked afterwards: its tag (cp39-abi3, the platform) and `file` on the
# extension module inside it (the right machine).
#
# Wheel platform tags: no --compatibility is passed. maturin then audits the extension module
# itself (its built-in auditwheel, which also works on the cross-built aarch64 module) and tags
# the wheel with the oldest manylinux policy whose symbol versions it satisfies; the module
# links only libc, libm and libgcc_s, which every policy allows, so nothing is bundled. Linked
# against bookworm's glibc 2.36 that is manylinux_2_34 for both wheels (glibc 2.34 moved
# pthread_* etc. into libc under new symbol versions): they install on glibc >= 2.34 (Debian 12,
# Ubuntu 22.04, RHEL 9 and newer) and pip refuses them on older systems (a build in a
# manylinux2014 image would widen that; not needed here). An honest manylinux tag beats
# `--manylinux off` (plain linux_* tags, which PyPI refuses) and beats demanding
# manylinux_2_36 (true but needlessly narrow). MANYLINUX=<policy|off> overrides it (maturin
# fails if the module breaks a demanded policy).
#
# One-time setup (root):
#   dpkg --add-architecture arm64 && apt-get update
#   apt-get install --no-install-recommends rustc-web libstd-rust-web-dev:arm64 \
#       gcc-aarch64-linux-gnu libc6-dev-arm64-cross file python3-venv
# plus rustup's stable toolchain (x86-64) for the native build, and PyPI access the first time
# (the venv with the pinned maturin is made once).
#
# Optional: import the aarch64 wheel under qemu-user (QEMU_ARM64_ROOT below). An arm64 root with
# Python and numpy, made once without running any arm64 code (about 1 minute, 240 MB):
#   apt-get install --no-install-recommends qemu-user debootstrap
#   R=/var/tmp/ggrs-qemu/root
#   debootstrap --foreign --arch=arm64 --variant=minbase --include=python3,python3-numpy \
#       bookworm $R http://deb.debian.org/debian
#   # --foreign unpacks only the base; unpack the rest and make the BLAS/LAPACK
#   # alternatives links that the (never run) second stage would have made:
#   (cd $R/var/cache/apt/archives && for p in $(cat $R/debootstrap/base); do
#       dpkg -x "$(ls "$p"_*_arm64.deb "$p"_*_all.deb 2>/dev/null | head -n 1)" $R; done)
#   ln -sf blas/libblas.so.3 $R/usr/lib/aarch64-linux-gnu/libblas.so.3
#   ln -sf lapack/liblapack.so.3 $R/usr/lib/aarch64-linux-gnu/liblapack.so.3
#
# Environment:
#   OUT_DIR          where the wheels go (default: dist/ in the repository)
#   WHEEL_TARGETS    which wheels to build (default "x86_64 aarch64")
#   GGRS_WHEEL_VENV  venv holding maturin (default ~/.cache/ggrs/venv-wheels)
#   AARCH64_RUSTC    rustc with the aarch64 std (default /usr/bin/rustc: Debian's, not rustup's)
#   CARGO_TARGET_DIR_X86_64 / CARGO_TARGET_DIR_AARCH64
#                    cargo target dirs (default target/wheels-x86_64, target/wheels-aarch64:
#                    separate from target/release, so the wheel builds (which set pyo3's
#                    abi3/cross environment) neither wait for nor invalidate other builds)
#   MANYLINUX        maturin --compatibility value (default: maturin's audit picks it; see above)
#   NICE             priority of the compilers (default 19: the builds take minutes of all cores)
#   QEMU_ARM64_ROOT  an arm64 root with python3 and numpy (see above): if set, the aarch64 wheel
#                    is unpacked and `import ggrs` runs under qemu-aarch64 -L $QEMU_ARM64_ROOT
#
# Usage: scripts/build-wheels.sh            (from anywhere in the repository)
#        WHEEL_TARGETS=aarch64 OUT_DIR=/tmp/w scripts/build-wheels.sh
# Install one: pip install dist/ggrs-*-cp39-abi3-manylinux_*_x86_64.whl
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

OUT_DIR=${OUT_DIR:-$ROOT/dist}
WHEEL_TARGETS=${WHEEL_TARGETS:-"x86_64 aarch64"}
VENV=${GGRS_WHEEL_VENV:-$HOME/.cache/ggrs/venv-wheels}
AARCH64_RUSTC=${AARCH64_RUSTC:-/usr/bin/rustc}
NICE=${NICE:-19}
PINS=(maturin==1.16.0)
SETUP="dpkg --add-architecture arm64 && apt-get update && apt-get install --no-install-recommends rustc-web libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu libc6-dev-arm64-cross file python3-venv"

step() { echo "build-wheels: $*" >&2; }
die() {
    echo "build-wheels: error: $*" >&2
    exit 2
}

# --- tools -----------------------------------------------------------------------------------
want_x86=0 want_arm=0
for t in $WHEEL_TARGETS; do
    case $t in
    x86_64 | x86-64 | amd64) want_x86=1 ;;
    aarch64 | arm64) want_arm=1 ;;
    *) die "unknown target '$t' in WHEEL_TARGETS (x86_64, aarch64)" ;;
    esac
done
missing=()
command -v cargo >/dev/null || missing+=("cargo (rustup: https://rustup.rs)")
command -v python3 >/dev/null || missing+=("python3 (apt-get install python3 python3-venv)")
command -v file >/dev/null || missing+=("file (apt-get install file)")
if [[ $want_arm == 1 ]]; then
    [[ -x $AARCH64_RUSTC ]] || missing+=("rustc-web ($AARCH64_RUSTC)")
    command -v aarch64-linux-gnu-gcc >/dev/null ||
        missing+=("aarch64-linux-gnu-gcc (gcc-aarch64-linux-gnu, libc6-dev-arm64-cross)")
fi
if [[ ${#missing[@]} -gt 0 ]]; then
    printf 'build-wheels: missing: %s\n' "${missing[@]}" >&2
    die "one-time setup (root): $SETUP"
fi
if [[ $want_arm == 1 ]] &&
    [[ ! -d $("$AARCH64_RUSTC" --print sysroot)/lib/rustlib/aarch64-unknown-linux-gnu ]]; then
    die "no aarch64-unknown-linux-gnu standard library for $AARCH64_RUSTC" \
        "(apt-get install libstd-rust-web-dev:arm64; first: dpkg --add-architecture arm64 && apt-get update)"
fi

# --- maturin ---------------------------------------------------------------------------------
if [[ ! -x $VENV/bin/python ]]; then
    step "making the venv $VENV"
    python3 -m venv "$VENV" || die "python3 -m venv failed (apt-get install python3-venv)"
fi
if [[ $(cat "$VENV/.ggrs-pins" 2>/dev/null) != "${PINS[*]}" ]]; then
    step "pip install ${PINS[*]} (PyPI)"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PINS[@]}"
    echo "${PINS[*]}" >"$VENV/.ggrs-pins"
fi
MATURIN=$VENV/bin/maturin
step "$("$MATURIN" --version), output $OUT_DIR"
mkdir -p "$OUT_DIR"

compat=()
[[ -n ${MANYLINUX:-} ]] && compat=(--compatibility "$MANYLINUX")
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)

# Builds one wheel into a fresh temporary directory and moves it to OUT_DIR; prints its path.
# $1: rust target triple, rest: environment assignments for maturin/cargo.
build_wheel() {
    local triple=$1 tmp start wheel
    shift
    tmp=$(mktemp -d "$OUT_DIR/.build.XXXXXX")
    start=$SECONDS
    step "$triple: maturin build --release ($*)"
    env "$@" nice -n "$NICE" "$MATURIN" build --release --manifest-path ggrs-py/Cargo.toml \
        --target "$triple" "${compat[@]}" --out "$tmp" >&2
    wheel=$(find "$tmp" -name 'ggrs-*.whl' | head -n 1)
    [[ -n $wheel ]] || die "$triple: maturin made no wheel"
    rm -f "$OUT_DIR/$(basename "$wheel")"
    mv "$wheel" "$OUT_DIR/"
    rm -rf "$tmp"
    step "$triple: built $(basename "$wheel") in $((SECONDS - start)) s"
    echo "$OUT_DIR/$(basename "$wheel")"
}

# Checks a wheel's name (cp39-abi3, platform $2) and `file` of its extension module ($3: a
# pattern the `file` output must match).
check_wheel() {
    local wheel=$1 arch=$2 machine=$3 name so tmp
    name=$(basename "$wheel")
    [[ $name == ggrs-"$version"-cp39-abi3-*"$arch".whl ]] ||
        die "$name: expected ggrs-$version-cp39-abi3-<platform>_$arch.whl"
    tmp=$(mktemp -d)
    "$VENV/bin/python" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
        "$wheel" "$tmp"
    so=$(find "$tmp/ggrs" -name '_ggrs*.so' | head -n 1)
    [[ -n $so ]] || die "$name: no ggrs/_ggrs*.so inside"
    local desc
    desc=$(file -b "$so")
    rm -rf "$tmp"
    step "$name: $(basename "$so"): $desc"
    [[ $desc == *"$machine"* ]] || die "$name: the extension module is not $machine"
    step "$name: ok ($(du -h "$wheel" | cut -f1))"
}

built=()
if [[ $want_x86 == 1 ]]; then
    w=$(build_wheel x86_64-unknown-linux-gnu \
        CARGO_TARGET_DIR="${CARGO_TARGET_DIR_X86_64:-$ROOT/target/wheels-x86_64}")
    check_wheel "$w" x86_64 "x86-64"
    built+=("$w")
fi
if [[ $want_arm == 1 ]]; then
    # RUSTC: Debian's rustc-web, which has the aarch64 std (cargo stays rustup's).
    # PYO3_CROSS=1: tell pyo3 it is a cross build (it would also infer that from host !=
    # target); with abi3 and no PYO3_CROSS_LIB_DIR it needs no aarch64 Python: the module
    # links no libpython, the stable-ABI symbols resolve when the interpreter loads it.
    w=$(build_wheel aarch64-unknown-linux-gnu \
        RUSTC="$AARCH64_RUSTC" \
        CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
        PYO3_CROSS=1 \
        CARGO_TARGET_DIR="${CARGO_TARGET_DIR_AARCH64:-$ROOT/target/wheels-aarch64}")
    check_wheel "$w" aarch64 "ARM aarch64"
    built+=("$w")
    if [[ -n ${QEMU_ARM64_ROOT:-} ]]; then
        command -v qemu-aarch64 >/dev/null || die "QEMU_ARM64_ROOT is set: apt-get install qemu-user"
        [[ -x $QEMU_ARM64_ROOT/usr/bin/python3 ]] ||
            die "no $QEMU_ARM64_ROOT/usr/bin/python3 (see the header for making the arm64 root)"
        site=$(mktemp -d)
        "$VENV/bin/python" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
            "$w" "$site"
        step "$(basename "$w"): import ggrs under qemu-aarch64 (arm64 root $QEMU_ARM64_ROOT)"
        # -L: the arm64 dynamic loader, libraries and Python's stdlib come from the root.
        (cd / && timeout 300 qemu-aarch64 -L "$QEMU_ARM64_ROOT" -E PYTHONPATH="$site" \
            "$QEMU_ARM64_ROOT/usr/bin/python3" -c '
import platform, ggrs
assert platform.machine() == "aarch64", platform.machine()
assert ggrs._ggrs.__file__.startswith(ggrs.__path__[0]), ggrs._ggrs.__file__
print("build-wheels: qemu-aarch64:", platform.machine(), "ggrs", ggrs.__version__,
      "from", ggrs._ggrs.__file__)
' >&2) || { rm -rf "$site"; die "$(basename "$w"): import under qemu-aarch64 failed"; }
        rm -rf "$site"
    fi
fi

step "done:"
for w in "${built[@]}"; do
    echo "$w"
done

#!/usr/bin/env bash
# Builds ggrs-core's tests for aarch64 and runs the NEON kernel tests under qemu-aarch64, on
# an x86-64 Debian 12 (bookworm) machine. Not part of CI (CI has no aarch64 tools).
#
# What it runs (exits non-zero on the first failure):
#   1. tests/quants_neon.rs on an emulated CPU with `dotprod` (qemu -cpu max: both the NEON
#      and the NEON+dotprod builds are tested and the dotprod one is chosen), on one without
#      (-cpu cortex-a53: base NEON only), and with GGRS_FORCE_SCALAR=1 (scalar chosen);
#   2. the lib unit test kernels::dot_builds::tests (the ggml-order builds against
#      kernels::ggml_arith, bit for bit), on both CPUs.
#
# One-time setup (root; Debian's rustc-web 1.96 ships the aarch64 standard library, rustup's
# toolchains cannot be extended with targets offline):
#   dpkg --add-architecture arm64 && apt-get update
#   apt-get install --no-install-recommends rustc-web libstd-rust-web-dev:arm64 \
#       gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
#
# Usage: scripts/check-neon.sh            (from anywhere in the repository)
#
# Clippy for aarch64 (not run here; needs `apt-get install rust-web-clippy`):
#   RUSTC=/usr/bin/rustc RUSTC_WORKSPACE_WRAPPER=/usr/bin/clippy-driver \
#   CARGO_TARGET_DIR=target/aarch64-clippy \
#   cargo check -p ggrs-core --all-targets --target aarch64-unknown-linux-gnu
# Environment: AARCH64_RUSTC (default /usr/bin/rustc: Debian's, not rustup's proxy),
#   CARGO_TARGET_DIR (default target/aarch64-neon), QEMU_CPUS (default "max cortex-a53").
set -euo pipefail

cd "$(dirname "$0")/.."
RUSTC_AARCH64=${AARCH64_RUSTC:-/usr/bin/rustc}
TARGET=aarch64-unknown-linux-gnu
SYSROOT=/usr/aarch64-linux-gnu
CPUS=${QEMU_CPUS:-"max cortex-a53"}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target/aarch64-neon}

missing=()
[ -x "$RUSTC_AARCH64" ] || missing+=("rustc-web ($RUSTC_AARCH64)")
command -v aarch64-linux-gnu-gcc >/dev/null || missing+=(gcc-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || missing+=(qemu-user)
if [ ${#missing[@]} -gt 0 ]; then
    echo "check-neon: missing: ${missing[*]} (see the setup in this script's header)" >&2
    exit 2
fi
if ! "$RUSTC_AARCH64" --print sysroot >/dev/null ||
    [ ! -d "$("$RUSTC_AARCH64" --print sysroot)/lib/rustlib/$TARGET" ]; then
    echo "check-neon: no $TARGET standard library for $RUSTC_AARCH64" \
        "(apt-get install libstd-rust-web-dev:arm64)" >&2
    exit 2
fi

export RUSTC=$RUSTC_AARCH64
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
# Static executables: under bookworm's qemu-user 7.2, a dynamically linked aarch64 program
# hangs in its first pthread_create (the test harness spawns threads); static ones run.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static"
echo "check-neon: $("$RUSTC" --version), target $TARGET, CARGO_TARGET_DIR=$CARGO_TARGET_DIR"

# Builds one test target and prints the path of its executable.
build() {
    cargo test -p ggrs-core --target "$TARGET" "$@" --no-run --message-format=json \
        2>/dev/null |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1
}
# Show the compiler's messages once (the JSON build above swallows them).
cargo test -p ggrs-core --target "$TARGET" --test quants_neon --lib --no-run
neon_test=$(build --test quants_neon)
lib_test=$(build --lib)
if [ -z "$neon_test" ] || [ -z "$lib_test" ]; then
    echo "check-neon: could not find the test executables" >&2
    exit 1
fi

run() {
    local cpu=$1
    shift
    echo "--- qemu-aarch64 -cpu $cpu $(basename "$1") ${*:2}"
    qemu-aarch64 -cpu "$cpu" -L "$SYSROOT" "$@"
}

for cpu in $CPUS; do
    run "$cpu" "$neon_test" --nocapture --test-threads 1
    GGRS_FORCE_SCALAR=1 run "$cpu" "$neon_test" selection --nocapture
    run "$cpu" "$lib_test" kernels::dot_builds::tests
done
echo "check-neon: all aarch64 runs passed"

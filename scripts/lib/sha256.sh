# Sourced by the fetch scripts: `sha256_of FILE` prints FILE's sha256, hex only (sha256sum
# where there is one, the Python of $PYTHON's hashlib otherwise).
sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    else
        "${PYTHON:-python3}" -c '
import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
print(h.hexdigest())' "$1"
    fi
}

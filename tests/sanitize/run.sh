#!/usr/bin/env bash
# The C parts under AddressSanitizer and UBSan (`make sanitize`; CI runs it after `make test`).
#
# Copies the tracked tree to a temporary directory, compiles the three extensions there in
# place with -fsanitize=address,undefined, and runs, with that copy alone on PYTHONPATH, the
# native parity tests, the hostile-input corpus and a bounded fuzz of the scanner. Any
# sanitizer report aborts the interpreter, so the step fails.
#
# Leak detection is off: the interpreter keeps its own allocations alive until exit by design.
# PYTHONMALLOC=malloc sends Python's small objects through malloc too, so ASan sees them.
# Usage: tests/sanitize/run.sh [PYTHON]   (env: TRACEKIT_FUZZ_SECONDS, default 60)
set -euo pipefail
PY=${1:-python3}
case $PY in */*) PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY") ;; esac  # (the tests run from a copy)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ASAN=$(gcc -print-file-name=libasan.so)
if [ "$ASAN" = libasan.so ] || [ ! -e "$ASAN" ]; then
  echo "sanitize: gcc's libasan is missing (Debian: apt-get install gcc libasan8 libubsan1)" >&2
  exit 3
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | grep -zv '^tests/.hypothesis-db/' | xargs -0 cp --parents -t "$WORK")
INCLUDE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
SUFFIX=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
FLAGS=(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -O1 -g
       -std=c11 -Wall -Wextra -Wno-unused-parameter -fPIC -shared)
for module in tracekit/native/_scan tracekit/native/_paths tracekit/native/_slices; do
  gcc "${FLAGS[@]}" -I"$INCLUDE" -I"$WORK/tracekit/native" "$WORK/$module.c" -o "$WORK/$module$SUFFIX"
done

export PYTHONPATH=$WORK PYTHONMALLOC=malloc PYTHONDONTWRITEBYTECODE=1
export LD_PRELOAD=$ASAN
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TRACEKIT_FUZZ_SECONDS=${TRACEKIT_FUZZ_SECONDS:-60} TRACEKIT_FUZZ_EXAMPLES=${TRACEKIT_FUZZ_EXAMPLES:-100}
cd "$WORK"
"$PY" - <<'PY'  # the extensions imported are the sanitized ones
import os
from tracekit.native import _paths, _scan, _slices
for m in (_scan, _paths, _slices):
    assert m.__file__.startswith(os.environ["PYTHONPATH"] + "/"), m.__file__
    print("sanitize: using", m.__file__)
PY
"$PY" -m pytest -q -p no:cacheprovider -m "not browser" -n 2 \
  tests/test_native.py tests/test_native_passes.py tests/test_slices.py tests/test_longest.py tests/test_pixel_runs.py \
  tests/test_hostile.py tests/test_scan_fuzz.py

#!/usr/bin/env bash
# Regenerate the example traces under examples/traces/cpu/ (CPU only, a few seconds).
# Needs the capture extra: pip install torch==2.13.0 && pip install -e '.[capture]'
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=examples/traces/cpu

# tiny-llama, eager and sdpa attention: tiny-llama-eager.json.gz, tiny-llama-sdpa.json.gz, index.json
"$PY" -m capture --device cpu --out-dir "$OUT" --variants eager,sdpa --prompt-len 32 --new-tokens 8 \
    --repeats 1 --threads 1

# one causal attention forward per implementation, 3 repeats each, on one pinned thread so the
# table does not depend on the machine's other load (efficient and cuDNN SDPA are skipped on CPU)
"$PY" -m capture --scenario attention-variants --device cpu --out-dir "$OUT/attention-variants" \
    --threads 1 --repeats 3

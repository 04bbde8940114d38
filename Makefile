# tracekit — `make help` lists the targets.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# the demo's trace: real H100 transformer inference, SDPA flash (examples/traces/gpu/README.md)
TRACE  ?= examples/traces/gpu/h100-qwen1.5-0.5b-sdpa.json.gz
OUT    ?= tracekit-report.html

.DEFAULT_GOAL := help
.PHONY: help setup setup-dev demo test test-fast sanitize bench wheel clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 14

$(VENV)/.base: pyproject.toml setup.py $(wildcard tracekit/native/_*.c tracekit/native/_*.h)  # the C parts are compiled by the install
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	$(BIN)/python -m compileall -q tracekit capture >/dev/null  # bytecode now: with PYTHONDONTWRITEBYTECODE set, every command would compile every module it imports
	touch $@

$(VENV)/.dev: $(VENV)/.base
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev,capture]'
	touch $@

setup: $(VENV)/.base  ## create .venv and install tracekit (analysis only: no torch)

setup-dev: $(VENV)/.dev  ## also install the test tools and the capture extra (torch 2.13.0, transformers)

demo: setup  ## the main job: analyse the shipped H100 inference trace and write an HTML report
	$(BIN)/tracekit summary $(TRACE) --top 5
	$(BIN)/tracekit report $(TRACE) -o $(OUT)
	@echo "report written to $(OUT): open it in a browser"

test: setup-dev  ## run the whole test suite
	$(BIN)/python -m pytest -q -n 2

test-fast: setup-dev  ## the suite without browser and real-trace tests
	$(BIN)/python -m pytest -q -n 2 -m "not browser and not real"

sanitize: setup-dev  ## the C parts under ASan/UBSan: parity tests, hostile corpus, fuzz (tests/sanitize/run.sh)
	tests/sanitize/run.sh $(BIN)/python

bench: setup  ## speed and memory benchmarks (needs ../shared/traces)
	$(BIN)/python benchmarks/load.py

wheel: setup  ## build a wheel into dist/
	$(BIN)/python -m pip wheel --no-deps -w dist .

clean:  ## remove build outputs (keeps .venv)
	rm -rf build dist *.egg-info .pytest_cache test-output

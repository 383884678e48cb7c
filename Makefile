# make demo: set up (venv, package, lavapipe if no GPU, Chromium, Deno, Node's webgpu) and run the examples with
# the report, then the engines table.
# make test: set up and run the test suite.
# make dist: build the sdist and the wheel into dist/ and check them with twine.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test bench dist

setup:
	./scripts/setup.sh

demo: setup
	$(PY) -m pytest examples --dispatch-report  # native and page tests: the report has a part per GPU
	$(VENV)/bin/pytest-dispatch engines  # one workload in every engine found: wgpu-native, Dawn, Chromium, Deno, Node

PYTEST_ARGS ?=

test: setup
	$(PY) -m pytest tests -n 2 $(PYTEST_ARGS)

bench: setup
	$(PY) benchmarks/recorder_overhead.py
	$(PY) benchmarks/startup_overhead.py

dist: setup
	rm -rf dist
	$(PY) -m pip install -q build twine
	$(PY) -m build --outdir dist .
	$(PY) -m twine check --strict dist/*

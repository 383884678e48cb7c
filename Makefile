# make demo: set up (venv, package, lavapipe if no GPU, Chromium) and run the examples with the report.
# make test: set up and run the test suite.
# make dist: build the sdist and the wheel into dist/ and check them with twine.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test bench dist

setup:
	./scripts/setup.sh

demo: setup
	$(PY) -m pytest examples --dispatch-report  # native and page tests: the report has a part per GPU

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

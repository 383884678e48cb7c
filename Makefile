# make demo: set up (venv, package, lavapipe if no GPU) and run the examples with the report.
# make test: set up and run the test suite.
VENV ?= .venv
PY := $(VENV)/bin/python
export XDG_RUNTIME_DIR ?= $(shell mktemp -d)

.PHONY: setup demo test bench

setup:
	./scripts/setup.sh

demo: setup
	$(PY) -m pytest examples --dispatch-report

test: setup
	$(PY) -m pytest tests -n 2

bench: setup
	$(PY) benchmarks/recorder_overhead.py

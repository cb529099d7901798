# Targets the README names.  `make test` is exactly the CI command.
PY ?= python3

.PHONY: install main test test-fast lint bench

install:
	$(PY) -m pip install -e ".[dev]"

main:
	$(PY) -m pip install -e . && $(PY) -m training main

test:
	$(PY) -m pip install -q -e ".[dev]" && $(PY) -m pytest -q

test-fast:
	$(PY) -m pytest -q -m "not slow"

lint:
	ruff check keras_transformer training export cli tests benchmarks

bench:
	$(PY) -m pip install -e ".[bench]" && for b in benchmarks/bench_*.py; do $(PY) $$b; done

# Everything runs from the project's own virtual environment.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: install test lint serve demo bench

install:
	python3 -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e ".[test]"

test:
	$(PY) -m pytest $(PYTEST_ARGS)

lint:
	$(PY) -m ruff check python tests
	$(PY) -m ruff format --check python tests

serve:
	launch/tiny-cpu.sh

demo:
	@echo "make demo: not yet (lands with the embedded tiny pair issue)"

bench:
	@echo "make bench: not yet (lands with the benchmark issue)"

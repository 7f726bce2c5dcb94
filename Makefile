# imagekit's commands. Every target sets up what it needs; a fresh clone needs only Python.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.imagekit-installed
GOLDEN := tests/golden

.PHONY: venv lint types unit test goldens schema check clean

$(STAMP): pyproject.toml scripts/ensure-venv.sh
	PYTHON=$(PYTHON) VENV=$(VENV) scripts/ensure-venv.sh

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

types: $(STAMP)
	$(BIN)/mypy imagekit

unit: $(STAMP)
	$(BIN)/pytest -m "not integration and not gpu"

## make test: lint, types and the whole test suite.
test: lint types
	$(BIN)/pytest

## make check: validate matrix.yaml and lint every rendered Dockerfile.
check: $(STAMP)
	$(BIN)/imagekit check

## make goldens: re-render the golden Dockerfiles after an intended template change.
goldens: $(STAMP)
	$(BIN)/imagekit render --matrix $(GOLDEN)/matrix.yaml --out $(GOLDEN)/docker --no-ca-cert
	$(BIN)/imagekit render --matrix $(GOLDEN)/matrix.yaml --out $(GOLDEN)/buildkit --no-ca-cert --buildkit

## make schema: regenerate the JSON Schema of matrix.yaml.
schema: $(STAMP)
	$(BIN)/imagekit schema --out imagekit/data/matrix.schema.json

clean:
	rm -rf $(VENV) out results .mypy_cache .ruff_cache .pytest_cache .hypothesis

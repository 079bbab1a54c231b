# Quick start: `make demo` and `make test`. Everything lives in .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DEV := $(VENV)/.dev-installed

.PHONY: install demo test lint unit integration e2e chaos chaos-long images protos bench clean compose-env

# What the tests and the demo need: the package (editable) with its dev extra.
$(DEV): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,serve]'
	touch $(DEV)

# Every extra, torch (pinned CPU-compatible 2.13.0) included.
install: $(DEV)
	$(PY) -m pip install -q -e '.[all]'

demo: $(DEV)
	$(PY) examples/seed_demo.py

# With a Docker engine, the images are (re)built first (cached) so the e2e tests run on this tree;
# without one the e2e tests skip, saying so.
test: lint
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory images; fi
	$(PY) -m pytest -q tests

# Lint gates, one line per area (configured in pyproject.toml): the kit and the services; the
# core worker's pure state machines and drivers (ruff for the rest of client/ember runs in
# tests/unit/test_lint.py).
LINT_SVC_PATHS := common/ember_common services
LINT_SVC_PACKAGES := -p ember_common -p ember_gcs -p ember_raylet -p ember_objmgr -p ember_serve_proxy -p ember_dashboard
LINT_CORE_MODULES := $(foreach m,memory_store reference_table missed_frees lineage reconstruction task_queue task_queue_types task_durations actor_queue result_pipeline \
	references task_submitter actor_submitter object_ref core_worker object_api object_transfer executor \
	executor_effects worker generator fork_server \
	task_stream wire wire_server plasma serialization function_manager core_worker_server worker_main \
	runtime_context options scheduling remote_function signatures task_errors blocking actor_pools actor_options,-m ember._private.$(m)) -m ember.actor
lint: $(DEV)
	$(VENV)/bin/ruff check $(LINT_SVC_PATHS)
	$(VENV)/bin/mypy $(LINT_SVC_PACKAGES)
	$(VENV)/bin/mypy $(LINT_CORE_MODULES)

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

# The compose cluster's auth token: appended to .env (mode 0600) when .env has none.
compose-env:
	@grep -qs '^EMBER_AUTH_TOKEN=' .env || { umask 077; \
	  echo "EMBER_AUTH_TOKEN=$$(python3 -c 'import secrets; print(secrets.token_hex(32))')" >> .env; \
	  echo "wrote a new EMBER_AUTH_TOKEN to .env"; }

# Quick start: `make demo` and `make test`. Everything lives in .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DEV := $(VENV)/.dev-installed

.PHONY: install demo test unit integration protos bench clean

# What the tests and the demo need: the package (editable) with its dev extra.
$(DEV): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(DEV)

# Every extra, torch (pinned CPU-compatible 2.13.0) included.
install: $(DEV)
	$(PY) -m pip install -q -e '.[all]'

demo: $(DEV)
	$(PY) examples/seed_demo.py

test: $(DEV)
	@command -v etcd >/dev/null || { echo "etcd is not on PATH: apt-get install -y etcd-server"; exit 1; }
	$(PY) -m pytest -q tests

unit: $(DEV)
	$(PY) -m pytest -q tests/unit

integration: $(DEV)
	$(PY) -m pytest -q tests/integration

protos: $(DEV)
	$(PY) scripts/gen_protos.py

bench: $(DEV)
	$(VENV)/bin/ember microbenchmark

clean:
	rm -rf $(VENV) build *.egg-info client/*.egg-info

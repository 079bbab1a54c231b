# Quick start: `make demo` and `make test`. Everything lives in .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test unit integration protos bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[all]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) examples/seed_demo.py

test: $(STAMP)
	@command -v etcd >/dev/null || echo "note: etcd not on PATH; etcd tests will fail (apt-get install -y etcd-server)"
	$(PY) -m pytest -q tests

unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

integration: $(STAMP)
	$(PY) -m pytest -q tests/integration

protos: $(STAMP)
	$(PY) scripts/gen_protos.py

bench: $(STAMP)
	$(VENV)/bin/ember microbenchmark

clean:
	rm -rf $(VENV) build *.egg-info client/*.egg-info

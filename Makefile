# One-command set-up for tff_radiomap. `make demo` and `make test` work on a fresh machine:
# they create .venv in the checkout, install the locked dependency set, then TFF with --no-deps
# (see README, "Install"), then this package in editable mode. A stamp file makes a
# re-run with unchanged requirements take seconds.

PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TFF    := tensorflow-federated==0.87.0
PYTEST_ARGS ?=
# Test processes (pytest-xdist), one file each at a time: most of a file's time is program
# start-ups and TFF compilation on one core, so two share a 2-core machine well (each gets its
# share of the thread pools, tests/conftest.py). 0: one process.
TEST_WORKERS ?= 2
DEMO_ARGS ?=

.PHONY: venv demo test bench clean-venv

venv: $(STAMP)

$(STAMP): requirements.lock setup.py
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; TFF 0.87 needs Python 3.11 (set PYTHON=...)" >&2; exit 2; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install -q --disable-pip-version-check --no-deps $(TFF)
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(PY) -c "import tensorflow_federated, tff_radiomap"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m programs.demo $(DEMO_ARGS)

test: $(STAMP)
	$(VENV)/bin/ruff check --no-cache .
	$(VENV)/bin/ruff format --check --no-cache .
	$(PY) -m pytest -q tests -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) -m bench.synthetic_speed

clean-venv:
	rm -rf $(VENV)

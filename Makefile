# Two entry points: `make quickstart` and `make test`. Both set up .venv from nothing.
# The quickstart trains RNNsearch on the toy corpus short sentences first
# (experiments/toy/curriculum.yaml).
# torch is installed only when none is importable in the venv; TORCH_SPEC / TORCH_INDEX choose
# the build (e.g. TORCH_INDEX=https://download.pytorch.org/whl/cpu for a CPU-only machine).
# The quickstart installs the core only; the tests add the extras they exercise. The project and
# its dependencies go in with uv, which resolves and downloads in parallel (pip's own resolver is
# most of a fresh install's time); INSTALLER=pip uses pip instead, e.g. where only pip's
# configuration reaches the package index.
VENV ?= .venv
PYTHON ?= python3
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
TEST_EXTRAS ?= dev,sweeps,tensorboard,slurm
# pytest-xdist workers: much of the suite is subprocesses starting up and trainings too small
# to keep two cores busy.
TEST_WORKERS ?= 2
BIN = $(VENV)/bin
INSTALLER ?= uv
PIP = $(BIN)/python -m pip install -q --disable-pip-version-check
ifeq ($(INSTALLER),uv)
INSTALL = $(BIN)/uv pip install -q --python $(BIN)/python
INSTALLER_BIN = $(BIN)/uv
else
INSTALL = $(PIP)
endif

.PHONY: install install-test quickstart test lint clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.torch: $(BIN)/activate
	$(BIN)/python -c "import torch" 2>/dev/null || \
		$(PIP) $(TORCH_SPEC) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	touch $@

$(BIN)/uv: $(BIN)/activate
	$(PIP) uv

$(VENV)/.installed: $(VENV)/.torch $(INSTALLER_BIN) pyproject.toml
	$(INSTALL) -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(INSTALL) -e ".[$(TEST_EXTRAS)]"
	touch $@

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

quickstart: install
	$(BIN)/alignmt-train experiment=toy/curriculum

lint: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/pytest -q -n $(TEST_WORKERS)

clean:
	rm -rf $(VENV)

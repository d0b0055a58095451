# Two entry points: `make quickstart` and `make test`. Both set up .venv from nothing.
# torch is installed only when none is importable in the venv; TORCH_SPEC / TORCH_INDEX choose
# the build (e.g. TORCH_INDEX=https://download.pytorch.org/whl/cpu for a CPU-only machine).
VENV ?= .venv
PYTHON ?= python3
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
BIN = $(VENV)/bin

.PHONY: install quickstart test lint clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/activate pyproject.toml
	$(BIN)/python -c "import torch" 2>/dev/null || \
		$(BIN)/python -m pip install -q $(TORCH_SPEC) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $@

install: $(VENV)/.installed

quickstart: install
	$(BIN)/alignmt-train

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/pytest -q

clean:
	rm -rf $(VENV)

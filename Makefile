# The two commands a newcomer types: `make plan` and `make test`. Everything installs from here.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
ARGS   ?= --model qwen-72b --gpus 128

.PHONY: plan test test-fast bench clean

# Core install: planning needs numpy, pandas, scikit-learn and optuna only (no torch).
$(VENV)/.core: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

# Everything: torch 2.9.0 + torch_xla 2.9.0 (the CUDA build runs on CPU), report and test tools.
$(VENV)/.all: pyproject.toml $(VENV)/.core
	$(BIN)/python -m pip install -q -e '.[all]'
	touch $@

# The training frameworks the exports are checked against (test-only; DeepSpeed without its CUDA ops).
$(VENV)/.export-test: pyproject.toml $(VENV)/.all
	DS_BUILD_OPS=0 $(BIN)/python -m pip install -q -e '.[export-test]'
	touch $@

plan: $(VENV)/.core
	$(BIN)/autoplan search $(ARGS)

test: $(VENV)/.all $(VENV)/.export-test
	$(BIN)/python -m pytest -q -p no:cacheprovider

test-fast: $(VENV)/.all
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not slow"

bench: $(VENV)/.core
	$(BIN)/python benchmarks/search_speed.py
	$(BIN)/python benchmarks/validate_accuracy.py

clean:
	rm -rf $(VENV) build *.egg-info

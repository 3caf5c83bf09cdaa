# The two commands a newcomer types: `make plan` and `make test`. Everything installs from here.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
ARGS   ?= --model qwen-72b --gpus 128

.PHONY: plan test test-fast bench clean browser

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
# torchtitan 0.3.0 (target `torchtitan`) goes to a side directory, without dependencies (its config
# code imports on torch 2.9.0, its trainer needs a newer torch): tests/torchtitan03_check.py reads it
# in a subprocess, apart from the venv's torchtitan 0.2.0 (target `torchtitan-0.2`). About 18 MB.
TORCHTITAN_03 := torchtitan==0.3.0 tyro==1.0.17 spmd_types==0.2.3 torch_checkpointing==0.1.1 \
                 docstring-parser==0.18.0 typeguard==4.6.0 shtab==1.13.0
$(VENV)/.export-test: pyproject.toml $(VENV)/.all $(VENV)/torchtitan-0.3/.installed
	DS_BUILD_OPS=0 $(BIN)/python -m pip install -q -e '.[export-test]'
	touch $@

$(VENV)/torchtitan-0.3/.installed: Makefile $(VENV)/.core
	$(BIN)/python -m pip install -q --no-deps --upgrade --target $(VENV)/torchtitan-0.3 $(TORCHTITAN_03)
	touch $@

plan: $(VENV)/.core
	$(BIN)/autoplan search $(ARGS)

# The report test renders the HTML in headless Chromium (Debian's package). As root on Debian it is
# installed here; elsewhere the test skips and says so loudly.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	{ if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	  else echo "make test: chromium missing (not root on Debian): the browser report test will SKIP;" \
	            "install it with: sudo apt-get install -y chromium"; fi; }

test: $(VENV)/.all $(VENV)/.export-test browser
	$(BIN)/python -m pytest -q -p no:cacheprovider

test-fast: $(VENV)/.all
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not slow"

bench: $(VENV)/.core
	$(BIN)/python benchmarks/search_speed.py
	$(BIN)/python benchmarks/validate_accuracy.py

clean:
	rm -rf $(VENV) build *.egg-info

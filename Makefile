# The two commands a newcomer types: `make plan` and `make test`. Everything installs from here.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
ARGS   ?= --model qwen-72b --gpus 128

.PHONY: plan test test-fast bench clean browser torchtitan-0.3 megatron-core-0.19 bytecode notebooks

# Core install: planning needs numpy, pandas, scikit-learn and optuna only (no torch).
$(VENV)/.core: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

# Everything: torch 2.9.0 + torch_xla 2.9.0 (the CUDA build runs on CPU; the torch backend runs on it too),
# report and test tools. A GPU cluster installs '.[torch]' instead (the newest torch, with torchao).
$(VENV)/.all: pyproject.toml $(VENV)/.core
	$(BIN)/python -m pip install -q -e '.[all]'
	touch $@

# The training frameworks the exports are checked against (test-only; DeepSpeed without its CUDA ops).
$(VENV)/.export-test: pyproject.toml $(VENV)/.all
	DS_BUILD_OPS=0 $(BIN)/python -m pip install -q -e '.[export-test]'
	touch $@

# The real torchtitan 0.3.0 (target `torchtitan`) needs a newer torch than the venv's 2.9.0, so it gets a
# venv of its own outside the repository: torch 2.13.0+cpu (pip takes the CPU wheel on this machine's
# disk), torchao and triton, which its modules import. tests/torchtitan03_check.py runs in it, in a
# subprocess (tests/test_export_acceptance.py), and so does tests/fp8_check.py (tests/test_fp8.py): the
# torch backend's fp8 plans with torchao's float8 training, and its parity on this newer torch
# (measured: ~50 s of CPU for both launches). Measured on the 2-core machine: 2 min 9 s without a pip
# cache (about 1 min with one), 2.5 GB; its check of every torchtitan export (parallelized on a fake
# process group) and the SelectiveAC trace take about 26 s of CPU.
TT03_VENV ?= $(abspath $(CURDIR)/..)/side-venvs/tt03
TORCHTITAN_03 := torchtitan==0.3.0 torchao==0.18.0 triton==3.9.0 tyro==1.0.17
$(TT03_VENV)/.installed: Makefile
	test -x $(TT03_VENV)/bin/python || $(PYTHON) -m venv $(TT03_VENV)
	$(TT03_VENV)/bin/python -m pip install -q torch==2.13.0
	$(TT03_VENV)/bin/python -m pip install -q $(TORCHTITAN_03)
	touch $@

torchtitan-0.3: $(TT03_VENV)/.installed

# megatron-core 0.19.2 (the registry's newest) beside the venv's 0.16.1, for tests/test_megatron_core_019.py: a
# folder put first on the path of its subprocess. It declares Python >= 3.12; its pure-Python package runs the
# checks on the venv's 3.11 and torch 2.9.0 (a 3.12 venv would need a second torch), so it is installed without
# its dependencies and that pin. Measured: about 10 s, 21 MB.
MCORE019_DIR ?= $(abspath $(CURDIR)/..)/side-venvs/mcore019
$(MCORE019_DIR)/.installed: Makefile $(VENV)/.export-test
	$(BIN)/python -m pip install -q --target $(MCORE019_DIR) --no-deps --ignore-requires-python megatron-core==0.19.2
	touch $@

megatron-core-0.19: $(MCORE019_DIR)/.installed

# The project's bytecode, as pip writes it for a regular install (an editable one does not): where
# PYTHONDONTWRITEBYTECODE=1 is set (this machine), Python would otherwise compile every module it
# imports at every start, ~0.2 s of each `autoplan` command's 2-core wall time (benchmarks/search_speed.py).
# Up-to-date files are skipped; a file edited since is compiled in memory again, never run stale.
bytecode: $(VENV)/.core
	$(BIN)/python -m compileall -q -j 0 autoplan cost_model profiler executor > /dev/null

plan: $(VENV)/.core bytecode
	$(BIN)/autoplan search $(ARGS)

# The report test renders the HTML in headless Chromium (Debian's package). As root on Debian it is
# installed here; elsewhere the test skips and says so loudly.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	{ if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	  else echo "make test: chromium missing (not root on Debian): the browser report test will SKIP;" \
	            "install it with: sudo apt-get install -y chromium"; fi; }

# Two pytest-xdist workers, a test file each at a time (its module fixtures built once): on the 2-core
# machine CI runs on, 1,414 tests took 13 min 20 s this way against 18-19 min in one process (2026-11-30).
# PYTEST_WORKERS=0 runs them in one process.
PYTEST_WORKERS ?= 2
PYTEST_PARALLEL = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile)

test: $(VENV)/.all $(VENV)/.export-test $(TT03_VENV)/.installed $(MCORE019_DIR)/.installed browser bytecode
	AUTOPLAN_TORCHTITAN_03_VENV=$(TT03_VENV) AUTOPLAN_MCORE_019=$(MCORE019_DIR) $(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_PARALLEL)

# The notebooks run top to bottom and saved with their outputs (the slow test does it too, in `make test`).
notebooks: $(VENV)/.all
	$(BIN)/python notebooks/execute.py

test-fast: $(VENV)/.all bytecode
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not slow" $(PYTEST_PARALLEL)

bench: $(VENV)/.core bytecode
	$(BIN)/python benchmarks/search_speed.py
	$(BIN)/python benchmarks/validate_accuracy.py

clean:
	rm -rf $(VENV) build *.egg-info

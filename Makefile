# The two commands of the README:
#   make train   set up .venv and run the main job on the built-in default data set
#   make test    set up .venv and run the test suite (CPU; no GPU, no DGL needed)
PY      ?= python3
VENV    ?= .venv
VPY     := $(VENV)/bin/python
# CPU build of torch, pinned here only (the package itself declares a range).
TORCH_PIN ?= torch==2.13.0
PYTEST_ARGS ?=

.PHONY: venv test train bench gpu-check clean

$(VENV)/.installed: pyproject.toml Makefile
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q "$(TORCH_PIN)"
	$(VPY) -m pip install -q -e ".[dev]"
	touch $@

venv: $(VENV)/.installed

test: venv
	$(VPY) -m pytest -m "not gpu and not dgl" $(PYTEST_ARGS)

train: venv
	$(VENV)/bin/ibp-graph train --config configs/default.yaml

bench: venv
	$(VPY) scripts/bench_codec.py

gpu-check:
	bash scripts/gpu_check.sh

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis

# The two commands of the README:
#   make train   set up .venv and run the main job on the built-in default data set
#   make test    set up .venv and run the test suite (CPU; no GPU, no DGL needed)
# and, for the DGL front-end (its own environment; DGL 2.1 runs only with torch 2.2.1):
#   make test-dgl  set up .venv-dgl and run the dgl-marked tests
PY      ?= python3
VENV    ?= .venv
VPY     := $(VENV)/bin/python
# CPU build of torch, pinned here only (the package itself declares a range).
TORCH_PIN ?= torch==2.13.0
PYTEST_ARGS ?=

.PHONY: venv test train bench gpu-check clean venv-dgl test-dgl

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

# DGL 2.1.0 (the newest Linux wheel in the index) loads only with torch 2.0-2.2.1 and numpy 1.x;
# torch 2.2.1 from the index is a ~2.7 GB CUDA build that runs on the CPU. The package goes in
# without its dependencies (its ranges admit these older releases); everything is pinned here.
DGL_VENV ?= .venv-dgl
DGL_PY   := $(DGL_VENV)/bin/python
DGL_PINS ?= torch==2.2.1 "numpy<2" dgl==2.1.0 torchdata==0.7.1 pandas pydantic pyyaml \
            numba==0.60.0 tqdm xxhash pytest hypothesis

$(DGL_VENV)/.installed: pyproject.toml Makefile
	$(PY) -m venv $(DGL_VENV)
	$(DGL_PY) -m pip install -q --upgrade pip
	$(DGL_PY) -m pip install -q $(DGL_PINS)
	$(DGL_PY) -m pip install -q --no-deps -e .
	touch $@

venv-dgl: $(DGL_VENV)/.installed

# Only the DGL test files: the others import torch_geometric or cupy, which this environment lacks.
DGL_TESTS ?= tests/examples/test_dgl_examples.py tests/loaders/test_dgl.py tests/loaders/test_dgl_parity.py tests/loaders/test_dgl_hetero.py tests/loaders/test_dgl_store.py tests/loaders/test_dgl_link.py tests/loaders/test_dgl_options.py tests/loaders/test_dgl_live_features.py tests/distributed/test_sharded_dgl.py tests/data/test_partition_dgl.py tests/pipeline/test_features_dgl.py tests/train/test_loop_dgl.py tests/train/test_sharded_train.py tests/benchmarks/test_sampler_bench.py tests/benchmarks/test_loader_bench.py

test-dgl: venv-dgl
	DGLBACKEND=pytorch $(DGL_PY) -m pytest -m dgl $(DGL_TESTS) $(PYTEST_ARGS)

gpu-check:
	bash scripts/gpu_check.sh

clean:
	rm -rf $(VENV) $(DGL_VENV) build *.egg-info .pytest_cache .hypothesis

# softnpu: every target sets up what it needs on a fresh machine (Debian packages, the venv in .venv, torch).
# The two commands a newcomer needs are `make demo` and `make test`; the rest are steps of those.
SHELL := /bin/bash
.DEFAULT_GOAL := build

PYTHON ?= python3
JOBS ?= 2
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
CMAKE := $(VENV)/bin/cmake
CTEST := $(VENV)/bin/ctest
STAMPS := $(VENV)/.stamps
APT_PACKAGES := ccache libgtest-dev protobuf-compiler libprotobuf-dev
TORCH_VERSION := 2.13.0

export CMAKE_BUILD_PARALLEL_LEVEL := $(JOBS)
export CCACHE_DIR ?= $(HOME)/.cache/ccache
# Paths relative to the checkout in ccache's hash, so clones of the project (a clean clone, a second work tree) share
# one cache instead of each compiling the ATen-heavy sources again.
export CCACHE_BASEDIR ?= $(CURDIR)
export CCACHE_NOHASHDIR ?= 1

.PHONY: build runtime test test-runtime test-python test-cpp tsan bench demo conformance fuzz onnx-node-tests hf-suites torch-npu-tests deps clean

# ---------------------------------------------------------------- set-up

$(STAMPS)/apt:
	@scripts/ensure-apt-packages $(APT_PACKAGES)
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/venv: requirements-dev.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet "torch==$(TORCH_VERSION)" -r requirements-dev.txt
	@mkdir -p $(STAMPS) && touch $@

deps: $(STAMPS)/apt $(STAMPS)/venv

# ---------------------------------------------------------------- build

# The Python package with its C++ extension, the runtime library and npu-smi, built by CMake through
# scikit-build-core against the installed torch (never in an isolated environment: that would fetch another torch).
# Concurrent builds (several shells, editors) share build/py: they take turns.
build: deps
	flock $(VENV)/.build.lock $(PIP) install --quiet --no-build-isolation --no-deps .

# ---------------------------------------------------------------- tests

# The runtime alone (no torch): its tests and its benchmark.
runtime: deps
	$(CMAKE) -S . -B build/runtime -G Ninja -DSOFTNPU_BUILD_BACKEND=OFF -DSOFTNPU_BUILD_TESTS=ON \
	  -DSOFTNPU_BUILD_BENCH=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
	$(CMAKE) --build build/runtime

test-runtime: runtime
	$(CTEST) --test-dir build/runtime --output-on-failure -j $(JOBS)

tsan: deps
	$(CMAKE) -S . -B build/tsan -G Ninja -DSOFTNPU_BUILD_BACKEND=OFF -DSOFTNPU_BUILD_TESTS=ON -DSOFTNPU_TSAN=ON \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo
	$(CMAKE) --build build/tsan
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" $(CTEST) --test-dir build/tsan --output-on-failure

test-python: build
	$(PY) -m pytest tests -q

# The C++ example (examples/cpp): a libtorch program built with find_package(Torch) and find_package(softnpu) against
# the installed packages, and run by ctest. The prefixes are read when the recipe runs, after `build`.
TORCH_CMAKE_PREFIX = $$($(PY) -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
SOFTNPU_CMAKE_PREFIX = $$($(PY) -c 'import importlib.util, pathlib; \
  print(pathlib.Path(importlib.util.find_spec("softnpu").origin).parent / "share" / "cmake")')

test-cpp: build
	$(CMAKE) -S examples/cpp -B build/example -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_CXX_COMPILER_LAUNCHER=$$(command -v ccache) \
	  -DCMAKE_PREFIX_PATH="$(TORCH_CMAKE_PREFIX);$(SOFTNPU_CMAKE_PREFIX)"
	$(CMAKE) --build build/example -j $(JOBS)
	$(CTEST) --test-dir build/example --output-on-failure
	$(CMAKE) -S examples/acl -B build/acl -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_CXX_COMPILER_LAUNCHER=$$(command -v ccache) -DPython_EXECUTABLE=$(CURDIR)/$(PY) \
	  -DCMAKE_PREFIX_PATH="$(TORCH_CMAKE_PREFIX);$(SOFTNPU_CMAKE_PREFIX)"
	$(CMAKE) --build build/acl -j $(JOBS)
	$(CTEST) --test-dir build/acl --output-on-failure

test: test-runtime tsan test-python test-cpp

# ---------------------------------------------------------------- main jobs

# The runtime's own figures, then softnpu against the CPU (benchmarks/README.md); results in benchmarks/results.
bench: runtime build
	@mkdir -p benchmarks/results
	build/runtime/csrc/runtime/bench/runtime_bench --json benchmarks/results/runtime.json
	$(PY) benchmarks/run.py
	$(PY) benchmarks/fragmentation.py
	$(PY) benchmarks/offline.py

demo: build
	$(PY) examples/demo.py

# PyTorch's OpInfo and ModuleInfo databases on npu against the CPU (tests/conformance; `make test` runs a slice of
# each): prints the forward, gradient and error-input pass rates of ops and the forward and backward pass rates of
# modules, and the expected failures by reason; fails on an unexpected failure, an unexpected pass
# (tests/conformance/expected_failures.toml must be updated) or a crash. Then the Meta kernels against the CPU's over
# every OpInfo, forward and backward (tests/conformance/meta_audit.py): fails on a disagreement the op path leaves
# undecided.
conformance: build
	$(PY) tests/conformance/runner.py -j $(JOBS)
	$(PY) tests/conformance/meta_audit.py

# ONNX's backend node tests (onnx 1.22.0's, 1765 cases) converted by atc and run through ACL; tests/onnx_node lists the
# expected failures with reasons, and `make test` runs a slice (tests/test_onnx_node.py).
onnx-node-tests: build
	$(PY) tests/onnx_node/runner.py

# transformers' and diffusers' model test suites (their pinned versions' sdists from PyPI, with tests/clients/hf_suites'
# model files) on the CPU and on npu, compared case by case; fails on an npu-only failure that
# tests/clients/hf_suites/expected_differences.toml does not explain. `make test` runs a slice (tests/test_hf_suites.py).
hf-suites: build
	$(PY) tests/clients/hf_suites/run.py

# torch_npu's own tests (Ascend/pytorch's test/, not on PyPI: TORCH_NPU_SOURCE names a checkout or git clone of it;
# the commit tests/torch_npu_suite/expectations.toml was recorded at is extracted from a clone) run unchanged, a file
# per process; prints passed / failed / needs-silicon counts and fails on a test whose outcome the expectations do not
# list.
torch-npu-tests: build
	@test -n "$(TORCH_NPU_SOURCE)" || { echo "make torch-npu-tests TORCH_NPU_SOURCE=<Ascend/pytorch checkout or clone>"; exit 2; }
	$(PY) tests/torch_npu_suite/run.py --source $(TORCH_NPU_SOURCE) -j $(JOBS)

# The differential fuzzer (tests/fuzz_ops.py): OpInfo ops on mutated inputs, npu against the CPU, for FUZZ_MINUTES;
# prints the cases tried and each disagreement as a minimal reproducer, and fails if it found one.
FUZZ_MINUTES ?= 10
fuzz: build
	$(PY) tests/fuzz_ops.py --minutes $(FUZZ_MINUTES)

# DeepSpeed with DS_ACCELERATOR=npu (tests/clients/deepspeed_npu; pinned, installed into the venv without replacing
# torch): its CPU Adam op builder compiled against torch_npu's headers, ZeRO 1/2/3 and ZeRO-Offload on 2 processes and
# FusedAdam, each against the CPU. `make test` runs ZeRO 1-3 (tests/test_deepspeed_npu.py).
.PHONY: deepspeed-npu
deepspeed-npu: build
	$(PY) tests/clients/deepspeed_npu/run.py

# MindSpeed's op builders (tests/clients/mindspeed_ops; not on PyPI: MINDSPEED_SOURCE names a checkout or git clone):
# every builder's C++ compiled (-fsyntax-only) against torch_npu's headers with its own flags, the aclnn operators it
# calls looked up in libopapi.so, then the MoE permute/unpermute and rotary builders built by MindSpeed's load() and
# run against the CPU (also tests/test_mindspeed_ops.py when MINDSPEED_SOURCE is set).
.PHONY: mindspeed-ops
mindspeed-ops: build
	@test -n "$(MINDSPEED_SOURCE)" || { echo "make mindspeed-ops MINDSPEED_SOURCE=<MindSpeed checkout or clone>"; exit 2; }
	$(PY) tests/clients/mindspeed_ops/run.py --source $(MINDSPEED_SOURCE)

clean:
	rm -rf build

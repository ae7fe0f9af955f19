# Two commands do all the set-up on a fresh machine:
#   make demo   -> local venv, install, run the default demo (table + plot under tables/)
#   make test   -> local venv, install with the dev and scale extras (Ray, Flower), run the test suite
#   make docs   -> build the documentation site (mkdocs.yml) into site/ with strict link checking
# On a GPU machine choose the torch build: make demo TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126"

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
# pytest-xdist workers for `make test`: one per core of the 2-core CI machine
TEST_WORKERS ?= 2
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test install bench docs clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_SPEC)
	$(PY) -m pip install -q -e ".[dev,scale,docs]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) run_benchmark.py

test: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup

bench: $(STAMP)
	$(PY) run_benchmark.py bench

# strict: a broken link or anchor, or a docs page missing from the nav, fails the build
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) .cache site

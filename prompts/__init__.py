"""Prompt templates, one file per prompt (string.Template syntax: $name); no prompt text lives in code."""
from __future__ import annotations

from importlib.resources import files
from string import Template


def render(name: str, **values) -> str:
    text = files("rcagent.prompts").joinpath(f"{name}.txt").read_text()
    return Template(text).substitute(**values).strip()

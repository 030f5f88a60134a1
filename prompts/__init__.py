"""Prompt templates, one file per prompt, and the short messages of messages.yaml (string.Template syntax:
$name): the text a model reads lives here, not in code.

Telemetry is attacker-controlled text: a pod name, a log line or an event can carry chat-template tokens,
escape codes or a line that looks like a prompt header. Every value put into a prompt is neutralized
(control characters escaped, chat-template tokens broken up) and kept on one line (newlines shown as
\\n); a block of data (`data(...)`) keeps its lines but is indented, so that no line of it starts at
column 0 where the prompt's own headers do; `ours(...)` marks multi-line text rcagent itself wrote.
"""
from __future__ import annotations

import re
from importlib.resources import files
from functools import cache
from string import Template

import yaml

# <|im_start|> (ChatML), <start_of_turn> (Gemma), [INST], <s>: markers a chat template gives meaning to
_TEMPLATE_TOKENS = re.compile(r"<\||\|>|<(/?)(start_of_turn|end_of_turn|s)>|\[(/?)INST\]", re.I)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
DATA_INDENT = "  "


def neutral(value) -> str:
    """A value as plain text: control characters (escape codes, carriage returns) shown escaped and
    chat-template tokens broken up, so they cannot act on the terminal or on the model's template."""
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))
    return _TEMPLATE_TOKENS.sub(lambda m: " ".join(m.group()), text)


class Block(str):
    """Multi-line text that render() keeps as it is (already framed by data(), or written by rcagent)."""


def data(text: str) -> Block:
    """A block of observed data (an observation, the overview): every line indented."""
    return Block("\n".join(DATA_INDENT + line for line in neutral(text).split("\n")))


def ours(text: str) -> Block:
    """Multi-line text rcagent wrote itself (the tool docs), kept as it is."""
    return Block(neutral(text))


def _value(value) -> str:
    return value if isinstance(value, Block) else neutral(value).replace("\r", "").replace("\n", "\\n")


def render(name: str, **values) -> str:
    text = files("rcagent.prompts").joinpath(f"{name}.txt").read_text()
    return Template(text).substitute(**{k: _value(v) for k, v in values.items()}).strip()


@cache
def _messages() -> dict:
    return yaml.safe_load(files("rcagent.prompts").joinpath("messages.yaml").read_text())


def message(key: str, part: str | None = None, /, **values) -> str:
    """A short message of messages.yaml (`part`: "error" or "hint" of a two-part one). Values go in as they
    are: the message reaches the model through render(), which neutralizes it."""
    text = _messages()[key]
    return Template(text[part] if part else text).substitute(**{k: str(v) for k, v in values.items()})

"""The package's shape: no import cycles, the agent independent of evaluation, a short controller loop."""
from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
EVALUATION = "rcagent.eval"
# what only evaluation, the command line and batch (which runs baselines beside the agent) may import
OUTSIDE_THE_AGENT = ("rcagent.eval", "rcagent.cli", "rcagent.commands", "rcagent.batch", "rcagent.progress")


def modules() -> dict[str, Path]:
    """Import name -> file, from pyproject's package-dir mapping (rcagent.tools lives in tools/, ...)."""
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    out = {}
    for package in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]:
        top = next(p for p in sorted(dirs, key=len, reverse=True) if package == p or package.startswith(p + "."))
        folder = ROOT / dirs[top] / package[len(top):].lstrip(".").replace(".", "/")
        for file in folder.glob("*.py"):
            out[package if file.stem == "__init__" else f"{package}.{file.stem}"] = file
    return out


def import_graph(top_level_only: bool) -> nx.DiGraph:
    mods = modules()
    g = nx.DiGraph()
    for name, file in mods.items():
        g.add_node(name)
        tree = ast.parse(file.read_text())
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and getattr(block.test, "id", "") == "TYPE_CHECKING" for n in ast.walk(block)}
        nodes = [n for n in (tree.body if top_level_only else ast.walk(tree)) if id(n) not in typing_only]
        for node in nodes:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rcagent"):
                targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            target = next((t for t in targets if t in mods), None)
            if target and target != name:
                g.add_edge(name, target)
    return g


def test_the_package_has_no_import_cycle():
    """Counting imports inside functions too: a lazy import that closes a cycle is a cycle all the same."""
    g = import_graph(top_level_only=False)
    # a package's __init__ importing its own modules (registries) is how registration works, not a cycle
    g.remove_edges_from([(a, b) for a, b in list(g.edges) if b.startswith(a + ".")])
    assert len(g) > 60
    assert list(nx.simple_cycles(g)) == []


def test_the_agent_imports_nothing_from_evaluation():
    g = import_graph(top_level_only=False)
    agent = [n for n in g if not n.startswith(OUTSIDE_THE_AGENT)]
    leaks = [(a, b) for a in agent for b in g.successors(a) if b.startswith(EVALUATION)]
    assert "rcagent.controller" in agent and "rcagent.spans.mode" in agent
    assert leaks == []


def test_the_controller_is_a_loop_you_read_on_one_screen():
    lines = (ROOT / "rcagent" / "controller.py").read_text().splitlines()
    assert len(lines) < 200, len(lines)

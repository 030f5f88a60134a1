"""code_expert(target): an LLM expert reads the job's source code from a class, file or stack frame onwards.

The target may be a class (`TravelServiceImpl`), a frame from a log line (`c.s.TravelServiceImpl#532`,
`travel/service.py:88`) or a file path. The expert reads that file around the line, summarizes it and
recommends the next classes to read; those found in the job's `code/` folder are queued, the others are
external dependencies and end that branch. It stops when the queue is empty or after MAX_FILES files, and
returns a summary that names each file and the lines it read.

Reads stay inside `<job>/code`: no absolute paths, no `..` out of it, no symlinks (a symlinked file or folder
is never followed), files above MAX_BYTES are read only up to it. Under a grammar the recommendations are an
enumeration of the names the file mentions that exist in `code/`, so a small model cannot invent one.
"""
from __future__ import annotations

import re
from pathlib import Path

from rcagent import prompts
from rcagent.experts import ExpertContext
from rcagent.job import Job
from rcagent.tools import Param, register
from rcagent.validate import unsurrogate

MAX_FILES = 4
MAX_BYTES = 200_000
CONTEXT_LINES = 40        # lines shown on each side of a target line (from the top when there is none)
SOURCE_SUFFIXES = {".java", ".py", ".go", ".js", ".ts", ".kt", ".scala", ".cs", ".rb", ".php", ".c", ".cc", ".cpp", ".h"}
_FRAME = re.compile(r"^(?P<name>[\w./$-]+?)(?:[#:](?P<line>\d+))?$")


def code_root(job: Job) -> Path | None:
    root = job.path / "code"
    return root if root.is_dir() and not root.is_symlink() else None


def safe_file(root: Path, relative: str) -> Path | None:
    """root/relative if it is a regular file inside root reached without any symlink, else None."""
    rel = Path(relative)
    if rel.is_absolute() or ".." in rel.parts:
        return None
    path = root
    for part in rel.parts:
        path = path / part
        if path.is_symlink():
            return None
    resolved = path.resolve()
    if not resolved.is_relative_to(root.resolve()) or not resolved.is_file():
        return None
    return resolved


def index(root: Path) -> dict[str, str]:
    """Lower-cased file stem -> relative path of the source files under root (symlinks not followed)."""
    out: dict[str, str] = {}
    stack = [root]
    while stack:
        folder = stack.pop()
        for entry in sorted(folder.iterdir()):
            if entry.is_symlink():
                continue
            if entry.is_dir():
                stack.append(entry)
            elif entry.suffix in SOURCE_SUFFIXES:
                out.setdefault(entry.stem.lower(), str(entry.relative_to(root)))
    return out


def locate(root: Path, files: dict[str, str], target: str) -> tuple[str | None, int | None]:
    """(relative file, line) for a class, frame or path inside root."""
    m = _FRAME.match(target.strip())
    if not m:
        return None, None
    name, line = m.group("name"), int(m.group("line")) if m.group("line") else None
    if safe_file(root, name):
        return name, line
    # 'c.s.TravelServiceImpl' or 'pkg/Travel.java' or 'Outer$Inner': try the last name part first
    bare = name.removesuffix(Path(name).suffix) if Path(name).suffix in SOURCE_SUFFIXES else name
    for part in reversed([p for p in re.split(r"[./$]", bare) if p]):
        if part.lower() in files:
            return files[part.lower()], line
    return None, line


def read_window(path: Path, line: int | None) -> tuple[str, int, int]:
    with path.open("rb") as fh:
        text = fh.read(MAX_BYTES).decode("utf-8", errors="replace")
    lines = text.splitlines()
    if line:
        start = max(1, line - CONTEXT_LINES)
        end = min(len(lines), line + CONTEXT_LINES)
    else:
        start, end = 1, min(len(lines), 2 * CONTEXT_LINES)
    numbered = "\n".join(f"{n:>5} {lines[n - 1]}" for n in range(start, end + 1)) if lines else "(empty file)"
    return numbered, start, end


def mentioned(text: str, files: dict[str, str], current: str) -> tuple[list[str], list[str]]:
    """(names in code/ the text mentions, imported names that are not in code/: external dependencies)."""
    words = set(re.findall(r"\b[A-Za-z_][A-Za-z0-9_]{2,}\b", text))
    inside = sorted(w for w in words if w.lower() in files and files[w.lower()] != current)
    imports = re.findall(r"^\s*(?:\d+\s+)?(?:import|from)\s+([\w.]+)", text, re.M)
    external = sorted({i for i in imports if not any(p.lower() in files for p in i.split("."))})
    return inside, external


def schema(candidates: list[str]) -> dict:
    nxt = {"type": "string", "enum": candidates} if candidates else {"type": "string"}
    return {"type": "object",
            "properties": {"summary": {"type": "string"},
                           "next": {"type": "array", "maxItems": 2, "items": nxt}},
            "required": ["summary", "next"]}


@register("code_expert", "An expert reads the job's source code from a class, file or stack frame "
          "(e.g. TravelServiceImpl#532) and follows the classes it calls; returns what it read, by file and line",
          Param("target", "a class, file or frame from a log line, e.g. TravelServiceImpl#532", min_chars=4),
          expert=True, available=lambda job: code_root(job) is not None)
def code_expert(job: Job, target: str, ctx: ExpertContext) -> str:
    import json

    from json_repair import repair_json

    root = code_root(job)
    if root is None:
        ctx.report(files=0)
        return ("This job has no code/ folder (source code is not part of the job), so the code expert has "
                "nothing to read.")
    files = index(root)
    first, line = locate(root, files, target)
    if first is None:
        ctx.report(files=0)
        return f"Code expert: '{target}' is not a file or class under code/ ({len(files)} source files there)."
    queue, read, external, notes = [(first, line)], [], set(), []
    while queue and len(read) < MAX_FILES:
        rel, at = queue.pop(0)
        path = safe_file(root, rel)
        if path is None or rel in [r for r, _, _ in read]:
            continue
        text, start, end = read_window(path, at)
        read.append((rel, start, end))
        inside, outside = mentioned(text, files, rel)
        external.update(outside)
        prompt = prompts.render("code_expert", alert=job.alert, target=target, file=rel, start=start, end=end,
                                code=prompts.data(text), candidates=", ".join(inside) or "(none)")
        answer = ctx.ask([{"role": "user", "content": prompt}], schema(inside), 400)
        try:
            data = unsurrogate(json.loads(repair_json(answer)))
        except (ValueError, TypeError, RecursionError):
            data = {}
        data = data if isinstance(data, dict) else {}
        notes.append(f"{rel} lines {start}-{end}: {str(data.get('summary') or '(no summary)').strip()[:400]}")
        for name in data.get("next") or []:
            nxt = files.get(str(name).lower())
            if nxt and nxt not in [r for r, _, _ in read] and nxt not in [q for q, _ in queue]:
                queue.append((nxt, None))
            elif not nxt:
                external.add(str(name))
    stopped = "the queue was exhausted" if not queue else f"the limit of {MAX_FILES} files was reached"
    ctx.report(files=len(read), queued_left=len(queue), external=len(external))
    return "\n".join([f"Code expert on {target}: read {len(read)} file(s); stopped because {stopped}.",
                      *notes,
                      "External dependencies (not in code/, not followed): " + (", ".join(sorted(external)[:10]) or "none")])

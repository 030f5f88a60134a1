"""OBSK: a long observation is stored whole behind a snapshot key; the prompt sees its head and the key,
and read_snapshot shows the rest a page at a time (the pages shown are the investigation's)."""
from __future__ import annotations

from rcagent.investigation import Investigation
from rcagent.prompts import message
from rcagent.store import Store


def shorten(store: Store, run_id: str, step: int, tool: str, observation: str, inv: Investigation,
            threshold: int, head_chars: int) -> tuple[str, str | None]:
    """The observation as the prompt shows it, and its snapshot key (None when it is short enough)."""
    if len(observation) <= threshold or tool == "read_snapshot":
        return observation, None
    key = store.put_snapshot(run_id, step, tool, observation)
    inv.add_snapshot(key, max(1, -(-len(observation) // head_chars)))
    head = observation[:head_chars]
    cut = head.rfind("\n")
    head = head[:cut] if cut > len(head) // 2 else head
    return f"{head}\n{message('snapshot_stored', rest=len(observation) - len(head), key=key)}", key


def read(store: Store, run_id: str, inv: Investigation, key: str, page: int | None, head_chars: int) -> str:
    """A page of a snapshot: the one asked for (clamped to the snapshot), else the first not shown yet
    (else, when every page was shown and no error handler refused the call, the last one again)."""
    text = store.snapshot(run_id, key) or ""
    pages = inv.pages.get(key, 1)
    number = max(1, min(int(page), pages)) if page is not None else inv.next_page(key) or pages
    inv.shown.setdefault(key, set()).add(number)
    chunk = text[(number - 1) * head_chars: number * head_chars]
    return f"{message('snapshot_page', key=key, page=number, pages=pages)}\n{chunk}"

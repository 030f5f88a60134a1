"""The Agents Pool (RCLAgent §IV-B2): at most K agents active at once, and no deadlock.

Each span needs two tasks: its self-state verification (independent of every other span) and its
evidence consolidation (after its own self-state and all its children's consolidations). Tasks run on a
fixed pool of K worker threads. A parent never waits inside a worker for its children: its consolidation
is *submitted* by the last of its prerequisites to finish, so every worker is always doing work and the
pool cannot deadlock whatever the tree's depth or width. Independent branches run in parallel.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Generic, TypeVar

Node = TypeVar("Node")


class AgentsPool(Generic[Node]):
    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError("the pool needs at least one slot")
        self.capacity = capacity
        self.active = self.max_active = self.tasks = 0
        self._lock = threading.Lock()

    def run(self, root: Node, children: Callable[[Node], list[Node]], key: Callable[[Node], str],
            self_state: Callable[[Node], object],
            consolidate: Callable[[Node, object, list[object]], object]) -> tuple[dict, dict]:
        """Self-state of every node, then consolidation bottom-up: ({key: self-state}, {key: consolidated})."""
        nodes, parent = [], {}
        stack = [root]
        while stack:
            node = stack.pop()
            nodes.append(node)
            for child in children(node):
                parent[id(child)] = node
                stack.append(child)
        waiting = {id(n): len(children(n)) + 1 for n in nodes}   # own self-state + each child's consolidation
        states: dict[int, object] = {}
        consolidated: dict[int, object] = {}
        done = threading.Event()
        failure: list[BaseException] = []

        with ThreadPoolExecutor(max_workers=self.capacity, thread_name_prefix="span-agent") as executor:
            def tracked(fn):
                def task():
                    if failure:
                        return
                    with self._lock:
                        self.active += 1
                        self.tasks += 1
                        self.max_active = max(self.max_active, self.active)
                    try:
                        fn()
                    except BaseException as exc:        # surfaces in the caller; the rest is abandoned
                        failure.append(exc)
                        done.set()
                    finally:
                        with self._lock:
                            self.active -= 1
                return task

            def prerequisite_done(node):
                with self._lock:
                    waiting[id(node)] -= 1
                    ready = waiting[id(node)] == 0
                if ready:
                    executor.submit(tracked(lambda: consolidate_task(node)))

            def self_state_task(node):
                states[id(node)] = self_state(node)
                prerequisite_done(node)

            def consolidate_task(node):
                consolidated[id(node)] = consolidate(node, states[id(node)],
                                                     [consolidated[id(c)] for c in children(node)])
                if node is root:
                    done.set()
                else:
                    prerequisite_done(parent[id(node)])

            for node in nodes:
                executor.submit(tracked(lambda n=node: self_state_task(n)))
            done.wait()
        if failure:
            raise failure[0]
        return ({key(n): states[id(n)] for n in nodes}, {key(n): consolidated[id(n)] for n in nodes})

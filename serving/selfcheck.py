"""`python -m rcagent.serving.selfcheck`: load the default local model and decode a prompt of many tokens,
so that a llama.cpp build that cannot run on this CPU fails the install with one line, not the first
analysis with a segmentation fault. Run in a child process: a crash there is reported, not suffered."""
from __future__ import annotations

import subprocess
import sys

PROBE = """
from rcagent.serving.local import LocalBackend
backend = LocalBackend("smollm2", n_ctx=1024, threads=2)
out = backend.complete([{"role": "user", "content": "Name the service: " + "checkout payment cart " * 40}],
                       max_tokens=4)
print(out[0].prompt_tokens)
"""


def main() -> int:
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    if result.returncode != 0:
        why = f"signal {-result.returncode}" if result.returncode < 0 else f"exit {result.returncode}"
        last = (result.stderr.strip().splitlines() or [""])[-1][:200]
        print(f"selfcheck: the local model failed to decode a prompt ({why}) {last}; rebuild llama-cpp-python "
              f"for this CPU (see the Makefile's LLAMA_CMAKE_ARGS)", file=sys.stderr)
        return 1
    print(f"selfcheck: the local model decoded a {result.stdout.strip()}-token prompt")
    return 0


if __name__ == "__main__":
    sys.exit(main())

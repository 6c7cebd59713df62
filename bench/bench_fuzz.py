"""Fuzzing the descriptions at scale: the strategies of tests/client/test_description_fuzz.py.

    .venv/bin/python bench/bench_fuzz.py [--examples 100000] [--seed S]

Each example is one call of the descriptions' API (TaskDescription / PilotDescription from
keywords, from a dict, by setattr, through check_descriptions) with a keyword set of real
fields, near misses and random names holding valid values or garbage (ints past 4300 digits,
nan/inf, lone surrogates, NUL, bytes, deep and cyclic containers, objects whose repr or eq
raise...). Each must give a description -- which must then encode with msgpack (JSON for
pilots) and, for tasks, pass misfit() only if the Rust placer takes it -- or a
DescriptionError. Prints the counts accepted, rejected per field, and any other exception
(which must be 0: the exit status is 1 otherwise), and the time.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "client"))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

import test_description_fuzz as fuzz  # noqa: E402  (the strategies, shared with the test)
from pilotfish._errors import show  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    accepted: collections.Counter = collections.Counter()
    rejected: collections.Counter = collections.Counter()
    modes: collections.Counter = collections.Counter()
    others: collections.Counter = collections.Counter()
    first_others: list[str] = []

    @seed(args.seed)
    @settings(max_examples=args.examples, deadline=None, database=None,
              phases=[Phase.generate],  # count, do not shrink: a failure is reported below
              suppress_health_check=list(HealthCheck))
    @given(fuzz.all_cases)
    def run(case):
        cls, mode, kw, shape = case
        modes[mode] += 1
        try:
            verdict, what = fuzz.outcome(cls, mode, kw, shape)
        except Exception as e:  # noqa: BLE001 -- counted: the point of the benchmark
            others[type(e).__name__] += 1
            if len(first_others) < 5:
                first_others.append(f"{cls.__name__} {mode} {show(kw, 300)}\n"
                                    + "".join(traceback.format_exception(e)[-3:]))
            return
        (accepted if verdict == "accepted" else rejected)[(cls._kind, what)] += 1

    t0 = time.perf_counter()
    run()
    elapsed = time.perf_counter() - t0

    n = sum(accepted.values()) + sum(rejected.values()) + sum(others.values())
    print(f"examples: {n:,} in {elapsed:.1f} s ({n / elapsed:,.0f}/s, hypothesis generation included)")
    print(f"  by entry point: {', '.join(f'{m} {c:,}' for m, c in sorted(modes.items()))}")
    for (kind, _), c in sorted(accepted.items()):
        print(f"accepted  {kind:<17} {c:>8,}")
    by_kind: dict[str, list] = collections.defaultdict(list)
    for (kind, field), c in rejected.items():
        by_kind[kind].append((c, field))
    for kind, items in sorted(by_kind.items()):
        total = sum(c for c, _ in items)
        print(f"rejected  {kind:<17} {total:>8,} (DescriptionError), per field:")
        for c, field in sorted(items, reverse=True):
            print(f"    {show(field, 40):<34} {c:>8,}")
    print(f"other exceptions: {sum(others.values())}"
          + (f" {dict(others)}" if others else " (must be 0)"))
    for text in first_others:
        print("---\n" + text)
    return 1 if others else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""An independent reader of rtrain's traces (Chrome Trace Event Format, gzip).

Usage: check_trace.py TRACE.json.gz [--ranks N] [--layers L] [--checkpoint]

Checks what Perfetto and chrome://tracing need and what rtrain(1) promises: the file is
gzip-compressed JSON with a traceEvents array; every complete event ("ph": "X") has a
name, ts and dur >= 0; on each thread (pid, tid) slices nest, none overlapping another
without lying inside it; each of the N ranks (pids 0..N-1) has a forward and a backward
slice per layer, data, optimizer and step slices, with --checkpoint a checkpoint copy,
and, with more than one rank, collectives on its second thread with their bytes; the
ranks' clocks agree (the median gap between the same step's start on two ranks is under
50 ms). Prints one line per problem and exits 1 when there is any.
"""
import argparse
import gzip
import json
import statistics
import sys
from collections import defaultdict


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--checkpoint", action="store_true")
    a = ap.parse_args()
    problems = []
    with gzip.open(a.trace, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        print(f"{a.trace}: no traceEvents array")
        return 1
    threads = defaultdict(list)
    names = defaultdict(set)
    steps = defaultdict(dict)
    comm = defaultdict(int)
    for e in events:
        if e.get("ph") != "X":
            continue
        if not isinstance(e.get("name"), str) or not isinstance(e.get("ts"), (int, float)) \
                or not isinstance(e.get("dur"), (int, float)) or e["dur"] < 0:
            problems.append(f"malformed complete event {e}")
            continue
        threads[(e["pid"], e["tid"])].append(e)
        names[e["pid"]].add(e["name"])
        if e.get("cat") == "step":
            steps[e["pid"]][e["name"]] = e["ts"]
        if e.get("cat") == "comm" and e["tid"] == 1 and e.get("args", {}).get("bytes", 0) > 0:
            comm[e["pid"]] += 1
    for (pid, tid), slices in sorted(threads.items()):
        slices.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in slices:
            end = e["ts"] + e["dur"]
            while stack and stack[-1][1] <= e["ts"]:
                stack.pop()
            if stack and end > stack[-1][1] + 1e-3:  # a microsecond's thousandth: the file's resolution
                problems.append(f"pid {pid} tid {tid}: '{e['name']}' at {e['ts']} overlaps '{stack[-1][0]}' "
                                f"ending at {stack[-1][1]} without nesting")
            stack.append((e["name"], end))
    for rank in range(a.ranks):
        want = {"data", "optimizer"} | {f"forward {l}" for l in range(a.layers)} \
            | {f"backward {l}" for l in range(a.layers)}
        if a.checkpoint:
            want.add("checkpoint copy")
        missing = sorted(want - names[rank])
        if missing:
            problems.append(f"rank {rank}: no slice {', '.join(missing)}")
        if not steps[rank]:
            problems.append(f"rank {rank}: no step slices")
        if a.ranks > 1 and comm[rank] == 0:
            problems.append(f"rank {rank}: no collective with its bytes on the collectives thread")
    if a.ranks > 1 and steps[0] and steps[1]:
        gaps = [abs(steps[0][s] - steps[1][s]) for s in steps[0] if s in steps[1]]
        if not gaps or statistics.median(gaps) > 50_000:
            problems.append(f"ranks 0 and 1: their steps start a median {statistics.median(gaps or [0]) / 1e3:.1f} ms apart")
    for p in problems:
        print(p)
    n = sum(len(s) for s in threads.values())
    print(f"{a.trace}: {n} slices on {len(threads)} threads, {len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

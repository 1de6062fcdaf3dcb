#!/usr/bin/python3
"""Fills a run store with runs for bench/runs.sh: copies of one real run's row.

Usage: runs_gen.py STORE.db RUNS [METRIC_STEPS]

The store holds one run that `rtrain run` recorded; its row is copied RUNS - 1 times,
each copy with its own id, experiment (one of 20), learning rate and final loss, so
that filters and tables have something to tell apart. With METRIC_STEPS, every run also
gets that many steps of each of 10 metrics (curves for compare). Written in one
transaction, as the store itself would write them.
"""
import json
import random
import sqlite3
import sys


def main():
    path, runs = sys.argv[1], int(sys.argv[2])
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    db = sqlite3.connect(path)
    cols = [r[1] for r in db.execute("PRAGMA table_info(runs)") if r[1] != "id"]
    template = dict(zip(cols, db.execute(f"SELECT {', '.join(cols)} FROM runs ORDER BY id LIMIT 1").fetchone()))
    rng = random.Random(0)
    params = json.loads(template["params"])
    keys = ["loss", "eval_loss", "lr", "samples_per_s", "step_time_s", "data_s", "compute_s", "comm_s",
            "comm_hidden", "grad_norm"]
    with db:
        for i in range(1, runs):
            row = dict(template)
            row["run_id"] = f"{rng.getrandbits(48):012x}"
            row["experiment"] = f"exp-{i % 20:02d}"
            row["start_s"] = template["start_s"] + i
            row["end_s"] = row["start_s"] + 30 + rng.random()
            params["train.lr"] = round(rng.uniform(1e-4, 1e-2), 6)
            row["params"] = json.dumps(params)
            final = {k: {"last": rng.random(), "step": 1000, "min": 0.01, "max": 2.0} for k in keys}
            row["final"] = json.dumps(final)
            db.execute(f"INSERT INTO runs({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
            if steps:
                run = db.execute("SELECT last_insert_rowid()").fetchone()[0]
                db.executemany("INSERT INTO metrics(run, key, step, value, time_s) VALUES (?, ?, ?, ?, ?)",
                               ((run, k, s, 1.0 / s + rng.random() * 0.01, row["start_s"] + s)
                                for s in range(1, steps + 1) for k in keys))


if __name__ == "__main__":
    main()

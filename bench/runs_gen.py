#!/usr/bin/python3
"""Fills a run store with runs for bench/runs.sh: copies of one real run.

Usage: runs_gen.py STORE.db RUNS [METRIC_STEPS]

The store holds one run that `rtrain run` recorded; its rows (runs, run_texts) are copied
RUNS - 1 times, each copy with its own id, experiment (one of 20), learning rate and
final metrics (latest too), so that filters and tables have something to tell apart. With METRIC_STEPS, every run also
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

    def row_of(table, key):
        cols = [r[1] for r in db.execute(f"PRAGMA table_info({table})") if r[1] != key]
        return dict(zip(cols, db.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY {key} LIMIT 1").fetchone()))

    run, texts = row_of("runs", "id"), row_of("run_texts", "run")
    rng = random.Random(0)
    params = json.loads(texts["params"])
    keys = ["loss", "eval_loss", "lr", "samples_per_s", "step_time_s", "data_s", "compute_s", "comm_s",
            "comm_hidden", "grad_norm"]

    def insert(table, row):
        db.execute(f"INSERT INTO {table}({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))

    with db:
        for i in range(1, runs):
            r = dict(run, run_id=f"{rng.getrandbits(48):012x}", experiment=f"exp-{i % 20:02d}",
                     start_s=run["start_s"] + i)
            r["end_s"] = r["start_s"] + 30 + rng.random()
            insert("runs", r)
            rowid = db.execute("SELECT last_insert_rowid()").fetchone()[0]
            params["train.lr"] = round(rng.uniform(1e-4, 1e-2), 6)
            final = {k: {"last": rng.random(), "step": 1000, "min": 0.01, "max": 2.0} for k in keys}
            insert("run_texts", dict(texts, run=rowid, params=json.dumps(params), final=json.dumps(final)))
            db.executemany("INSERT INTO latest(run, key, last) VALUES (?, ?, ?)",
                           ((rowid, k, v["last"]) for k, v in final.items()))
            if steps:
                db.executemany("INSERT INTO metrics(run, key, step, value, time_s) VALUES (?, ?, ?, ?, ?)",
                               ((rowid, k, s, 1.0 / s + rng.random() * 0.01, r["start_s"] + s)
                                for s in range(1, steps + 1) for k in keys))


if __name__ == "__main__":
    main()

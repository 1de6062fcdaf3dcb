#!/usr/bin/python3
"""Writes N rkit.job.v1 records, as `rsub ls --all --json` prints them, for the rcost benchmark.

  rcost_gen.py N SEED > jobs.jsonl

Independent of rkit's C++ code: each line has the fields of tools/rsub/core/record.cpp in its
order (head, spec fields, tail, alloc), numbers printed as nlohmann/json prints them
(integers as integers, floats in their shortest round-trip form, as Python's repr).
The same N and SEED give the same bytes: blocks of records are drawn from generators
seeded with (SEED, block) and written in order, whatever the number of processes.

What the records look like (a month of a 50-desk research platform, seen from a snapshot
taken at 2026-12-01T00:00:00Z, after the last submit):
  - job ids 1..N in submit order; submits spread over November 2026 (UTC); 1% of jobs
    start job arrays of 2-32 elements (array_parent, array_index, ids "P_I");
  - backends local (25%), slurm (55%, ids "slurm:400123", host sgpuNNN/scpuNNN) and
    cloud (20%, ids "cloud:rsub-123-train", hosts of two GKE node pools); local jobs
    carry their alloc (cores, PUs, GPUs per task), remote ones an empty one, as rsub
    stores them;
  - 500 users user-000..user-499, ten to a tenant desk-00..desk-49, used unevenly;
    projects per desk, or "";
  - tasks 1-8, cpus_per_task 1-32, gpus_per_task 0 (55%), 1 (30%), 2, 4 or 8;
    gpu_type null, "H100", "H200" (and a few "h100") for GPU jobs, null for CPU jobs;
    memory per task 0 or 512 MiB-256 GiB;
  - queue waits lognormal (median 45 s, up to 12 h); run times lognormal (median 25 min,
    1 s to 3 days), so that about 9% of the runs cross a midnight;
  - states from the snapshot: jobs that would start after it are PENDING (start and
    end null), jobs still running then are RUNNING (end null); 0.3% held (PENDING,
    JobHeldUser), 0.4% cancelled while pending (start null, end set); time limits (none
    for 30%) above the run time, but 1% of runs hit theirs (TIMEOUT); of the rest 87%
    COMPLETED, 8% FAILED, 5% CANCELLED.
About 790 bytes a record: 7.9 GB for 10 million, written in ~3 minutes on 2 cores.
"""
import calendar
import multiprocessing
import os
import sys

import numpy as np

DAY = 86400
T0 = calendar.timegm((2026, 11, 1, 0, 0, 0))  # first submit
SPAN = 30 * DAY                                # submits over November
NOW = T0 + SPAN                                # the snapshot: 2026-12-01T00:00:00Z
BLOCK = 50_000
TENANTS = [f"desk-{t:02d}" for t in range(50)]
USERS = [f"user-{u:03d}" for u in range(500)]  # user u belongs to tenant u // 10
PROJECTS = ["llm-pretrain", "llm-sft", "rlhf", "vision", "speech", "retrieval", "eval-harness", "data-pipeline",
            "distill", "moe", "long-context", "safety", "multimodal", "agents", "tokenizer", "recsys", "forecast",
            "graph", "diffusion", "infra"]
NAMES = ["train", "finetune", "eval", "sweep", "preprocess", "tokenize", "infer", "bench", "export", "notebook"]
COMMANDS = {
    "train": '["torchrun","--nproc-per-node","{g}","train.py","--config","configs/{p}.yaml"]',
    "finetune": '["python3","finetune.py","--base","ckpt/step-{k}","--lr","2e-5"]',
    "eval": '["python3","-m","eval.run","--suite","core","--ckpt","ckpt/step-{k}"]',
    "sweep": '["/bin/sh","-c","python3 sweep.py --trial {k} > logs/trial-{k}.txt"]',
    "preprocess": '["python3","prep.py","--shard","{k}","--out","/data/{p}/shards"]',
    "tokenize": '["rtrain","tokenize","--in","/data/{p}/raw","--shard","{k}"]',
    "infer": '["python3","serve_batch.py","--model","ckpt/step-{k}","--batch","64"]',
    "bench": '["rbench","run","--quick","--json"]',
    "export": '["rckpt","pack","ckpt/step-{k}","-o","/archive/{p}-{k}.rkpt"]',
    "notebook": '["jupyter","nbconvert","--execute","analysis.ipynb"]',
}
GIB = 1 << 30


def user_weights(seed):
    """Uneven use: weight ~ 1/(rank + 10), ranks shuffled with the seed."""
    rng = np.random.default_rng([seed, 1 << 30])
    w = 1.0 / (rng.permutation(len(USERS)) + 10.0)
    return w / w.sum()


def block_text(args):
    n_total, seed, b = args
    lo = b * BLOCK
    n = min(BLOCK, n_total - lo)
    rng = np.random.default_rng([seed, b])
    pos = np.arange(n)
    job_id = lo + pos + 1

    # Arrays: 1% of records start one; its elements follow it (cut at the block's end).
    src = pos.copy()         # the record whose spec a record copies (an array's first)
    aidx = np.full(n, -1)
    starts = np.flatnonzero(rng.random(n) < 0.01)
    lens = rng.integers(2, 33, size=len(starts))
    i_next = 0
    for s, ln in zip(starts.tolist(), lens.tolist()):
        if s < i_next:
            continue
        e = min(n, s + ln)
        src[s:e] = s
        aidx[s:e] = np.arange(e - s)
        i_next = e

    user = rng.choice(len(USERS), size=n, p=user_weights(seed))[src]
    backend = rng.choice(3, size=n, p=[0.25, 0.55, 0.20])[src]          # local, slurm, cloud
    gpt = rng.choice([0, 1, 2, 4, 8], size=n, p=[0.55, 0.30, 0.06, 0.05, 0.04])[src]
    gtype = rng.choice(4, size=n, p=[0.35, 0.38, 0.25, 0.02])[src]      # null, H100, H200, h100
    tasks = rng.choice([1, 2, 4, 3, 8], size=n, p=[0.72, 0.14, 0.09, 0.03, 0.02])[src]
    cpt = rng.choice([1, 2, 4, 8, 16, 32], size=n, p=[0.2, 0.2, 0.25, 0.2, 0.1, 0.05])[src]
    local = backend == 0
    too_big = local & ((tasks * cpt > 64) | (tasks * gpt > 8))         # one 64-core, 8-GPU machine
    tasks = np.where(too_big, 1, tasks)
    mem_gib = rng.choice([0, 0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256], size=n,
                         p=[0.1, 0.05, 0.1, 0.15, 0.15, 0.15, 0.1, 0.08, 0.06, 0.04, 0.02])[src]
    mem = (mem_gib * GIB).astype(np.int64)
    prio = np.where(rng.random(n) < 0.85, 0, rng.integers(-1000, 1001, size=n))[src]
    dep = np.where(rng.random(n) < 0.07, np.maximum(job_id - rng.integers(1, 51, size=n), 0), 0)
    name = rng.integers(0, len(NAMES), size=n)[src]
    proj = np.where(rng.random(n) < 0.2, -1, rng.integers(0, 4, size=n))[src]
    karg = rng.integers(0, 100000, size=n)[src]

    submit = T0 + SPAN * ((lo + pos)[src] + rng.random(n)[src]) / n_total
    wait = np.minimum(rng.lognormal(np.log(45.0), 2.2, size=n), 12 * 3600.0)
    dur = np.clip(rng.lognormal(np.log(1500.0), 2.0, size=n), 1.0, 3 * DAY)
    # Time limits (none for 30%): the smallest of 1 h, 4 h, 1 d, 3 d above 1.5 × the run
    # time, one larger for 30% (users ask generously); 1% of runs hit theirs (TIMEOUT).
    limits = np.array([0.0, 3600.0, 14400.0, 86400.0, 259200.0])
    limit = np.minimum(np.searchsorted(limits[1:], 1.5 * dur) + 1 + (rng.random(n) < 0.3), 4)
    limit = np.where(rng.random(n) < 0.3, 0, limit)
    limit_s = limits[limit]
    dur = np.where((limit > 0) & (rng.random(n) < 0.01), limit_s + rng.random(n) * 5, dur)
    start = submit + wait
    end = start + dur
    u_state = rng.random(n)
    u_pend = rng.random(n)
    u_fail = rng.random(n)
    fail_code = rng.choice([1, 2, 3, 127, 137], size=n)
    retried = rng.random(n) < 0.02
    host_n = rng.integers(0, 256, size=n)
    core_off = rng.integers(0, 64, size=n)
    gpu_off = rng.integers(0, 8, size=n)
    cols = [x.tolist() for x in (job_id, aidx, src, user, backend, gpt, gtype, tasks, cpt, mem, limit, limit_s, prio, dep,
                                 name, proj, karg, submit, start, end, u_state, u_pend, u_fail, fail_code, retried,
                                 host_n, core_off, gpu_off)]
    out = []
    alloc_cache = {}
    for (jid, ai, sp, u, be, g, gt, t, c, m, lim, lim_s, pr, dp, nm, pj, k, sub, st, en, us, up, uf, fc, rt, hn, co,
         go) in zip(*cols):
        parent = lo + sp + 1
        tenant = u // 10
        user_s = USERS[u]
        name_s = NAMES[nm]
        proj_s = "" if pj < 0 else PROJECTS[(tenant * 3 + pj) % len(PROJECTS)]
        if be == 0:
            backend_s, remote = "local", None
            id_s = str(jid) if ai < 0 else f"{parent}_{ai}"
        elif be == 1:
            backend_s = "slurm"
            remote = str(400000 + jid) if ai < 0 else f"{400000 + parent}_{ai}"
            id_s = "slurm:" + remote
        else:
            backend_s = "cloud"
            remote = f"rsub-{jid}-{name_s}"
            id_s = "cloud:" + remote
        # The state as the snapshot at NOW sees it.
        held = False
        exit_code = signal = None
        reason = ""
        attempts = 1
        elapsed = None
        if up < 0.003:
            state, reason, held, st, en, attempts = "PENDING", "JobHeldUser", True, None, None, 0
        elif st >= NOW:
            state, reason, st, en, attempts = "PENDING", ("Resources" if up < 0.5 else "Priority"), None, None, 0
        elif up > 0.996:
            state, reason, signal, attempts = "CANCELLED", f"cancelled by {user_s}", None, 0
            en, st = st, None  # cancelled while it waited
        else:
            if en >= NOW:
                state, en = "RUNNING", None
                elapsed = NOW - st
            elif lim and en - st > lim_s:
                state, reason, signal = "TIMEOUT", "TimeLimit", "SIGKILL"
                elapsed = en - st
            else:
                elapsed = en - st
                if us < 0.87:
                    state, exit_code = "COMPLETED", 0
                elif us < 0.95:
                    state = "FAILED"
                    if uf < 0.8:
                        exit_code, reason = fc, f"NonZeroExitCode {fc}"
                    else:
                        signal = "SIGSEGV" if uf < 0.9 else "SIGKILL"
                        reason = "Signal " + signal
                else:
                    state, reason, signal = "CANCELLED", f"cancelled by {user_s}", "SIGTERM"
            if rt and state in ("COMPLETED", "FAILED"):
                attempts = 2
        gpus = t * g
        gtype_s = "null" if g == 0 or gt == 0 else ('"H100"', '"H200"', '"h100"')[gt - 1]
        if st is None:
            host_s, alloc_s = "null", "[]"
        elif be == 0:
            host_s = f'"ws-{tenant % 16:02d}"'
            key = (t, c, g, m, co, go)
            alloc_s = alloc_cache.get(key)
            if alloc_s is None:
                base = min(co, 64 - t * c) if t * c <= 64 else 0
                gbase = min(go, 8 - t * g) if t * g <= 8 else 0
                parts = []
                for i in range(t):
                    cores = ",".join(str(base + i * c + x) for x in range(c))
                    gl = ",".join(str(gbase + i * g + x) for x in range(g))
                    parts.append(f'{{"task":{i},"cores":[{cores}],"pus":[{cores}],"gpus":[{gl}],"memory_bytes":{m}}}')
                alloc_s = "[" + ",".join(parts) + "]"
                alloc_cache[key] = alloc_s
        elif be == 1:
            host_s, alloc_s = (f'"sgpu{hn % 128:03d}"' if g else f'"scpu{hn:03d}"'), "[]"
        else:
            # Node pools of 96 GPU and 64 CPU nodes, named as GKE names them.
            host_s = (f'"gke-ml-gpu-pool-5c1e9a2b-{(hn % 96) * 40503 % 65536:04x}"' if g
                      else f'"gke-ml-cpu-pool-0d7f3e61-{(hn % 64) * 40503 % 65536:04x}"')
            alloc_s = "[]"
        cmd = COMMANDS[name_s].format(g=max(g, 1), p=proj_s or "default", k=k)
        out.append(
            f'{{"schema":"rkit.job.v1","id":"{id_s}","backend":"{backend_s}",'
            f'"remote_id":{"null" if remote is None else chr(34) + remote + chr(34)},"job_id":{jid},'
            f'"array_parent":{"null" if ai < 0 else parent},"array_index":{"null" if ai < 0 else ai},'
            f'"name":"{name_s}","tenant":"{TENANTS[tenant]}","project":"{proj_s}","tasks":{t},"cpus_per_task":{c},'
            f'"gpus_per_task":{g},"gpu_type":{gtype_s},"memory_per_task_bytes":{m},"cpus":{t * c},"gpus":{gpus},'
            f'"time_limit_s":{lim_s if lim else "null"},"priority":{pr},'
            f'"depends":{"[]" if dp == 0 else f"[{chr(34)}afterok:{dp}{chr(34)}]"},"command":{cmd},'
            f'"workdir":"/home/{user_s}/{proj_s or "scratch"}","user":"{user_s}","uid":{1000 + u},'
            f'"state":"{state}","reason":"{reason}","held":{"true" if held else "false"},'
            f'"exit_code":{"null" if exit_code is None else exit_code},'
            f'"signal":{"null" if signal is None else chr(34) + signal + chr(34)},"attempts":{attempts},'
            f'"submit_unix_s":{sub!r},"start_unix_s":{"null" if st is None else repr(st)},'
            f'"end_unix_s":{"null" if en is None else repr(en)},"elapsed_s":{"null" if elapsed is None else repr(elapsed)},'
            f'"host":{host_s},"alloc":{alloc_s}}}\n')
    return "".join(out).encode()


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: rcost_gen.py N SEED > jobs.jsonl")
    n, seed = int(sys.argv[1]), int(sys.argv[2])
    blocks = [(n, seed, b) for b in range((n + BLOCK - 1) // BLOCK)]
    out = sys.stdout.buffer
    procs = min(len(os.sched_getaffinity(0)), max(1, len(blocks)))
    if procs == 1:
        for a in blocks:
            out.write(block_text(a))
    else:
        with multiprocessing.Pool(procs) as pool:
            for text in pool.imap(block_text, blocks, chunksize=1):
                out.write(text)
    out.flush()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""An independent computation of what `rcost report` must print, for its tests.

Written from rcost's definitions (rcost(1), rkit(7)), not from its code; Python 3
standard library only. Times are Unix seconds; a window is [SINCE, UNTIL).

  rcost_check.py totals --prices SHEET --since S --until U [--config CFG]
                        [--slurm-backend NAME] [--by KEYS] INPUT...
      One JSON line per tenant (or per value of KEYS, comma-separated fields of the
      records: tenant, project, workflow, rule) with usage in the window: the keys, jobs,
      gpu_hours, core_hours, memory_gib_hours, cost; the jobs are rkit.job.v1 records or
      `sacct -a -X -P` text, priced with SHEET; samples in the inputs name the GPU
      model of jobs whose record does not.
  rcost_check.py capacity --prices SHEET --since S --until U INPUT...
      One JSON object: per resource (gpu, cpu, memory_gib) the capacity the samples
      cover, and, where no two samples of a host overlap, what jobs held and used of
      it and what the unallocated part costs.
  rcost_check.py samples --host H --start T0 --end T1 --interval D --gpus N --cpus N
                         [--gpu-name NAME] [--memory-bytes B] [--seed N]
      rkit.sample.v1 lines every D seconds from T0 + D to T1 (utilisations from a
      seeded generator).
  rcost_check.py compare --expect EXPECTED --rcost REPORT [--min-cost X] [--by KEYS]
      Compares `totals` with the rows of `rcost report --json` (keyed by KEYS, as
      `totals` was; tenant when not given) to the cent; exit 1, naming each difference,
      when they differ.
  rcost_check.py check-capacity --expect CAPACITY --rcost REPORT [--exact]
      Conservation: per resource used + allocated idle + unallocated = capacity,
      used <= allocated <= capacity; capacity as `capacity` computed it and, with
      --exact, used and allocated too.
  rcost_check.py check-idle --rcost REPORT --expect EXPECTED --share-idle HOW
      Idle capacity's cost: with weighted or even, the rows' total_cost add up to
      their cost plus the unallocated cost; with none, the __idle__ row holds it.
"""
import argparse
import json
import math
import random
import sys
import time
import tomllib

GIB = 1 << 30
HOURS_PER_YEAR = 8760


def fail(msg):
    print(f"rcost_check: {msg}", file=sys.stderr)
    sys.exit(2)


# ------------------------------------------------------------------ prices


class Backend:
    def __init__(self, name, table):
        elec = float(table.get("electricity_per_kwh", 0))
        pue = float(table.get("pue", 1))

        def value(v):
            if isinstance(v, dict):
                return (v["purchase_price"] / (v["depreciation_years"] * HOURS_PER_YEAR)
                        + v.get("power_w", 0) / 1000 * pue * elec) / v.get("units", 1)
            return float(v)

        self.name = name
        self.cpu = value(table.get("cpu_hour", 0))
        self.mem = value(table.get("memory_gib_hour", 0))
        gpu = table.get("gpu_hour", 0)
        derived_keys = {"purchase_price", "depreciation_years", "power_w", "units"}
        if isinstance(gpu, dict) and not derived_keys & gpu.keys():
            self.gpu = {k: value(v) for k, v in gpu.items()}
        else:
            self.gpu = {"default": value(gpu)}
        self.factor = 1 - table["spot_discount"] if table.get("market") == "spot" else 1.0

    def gpu_rate(self, model):
        model = (model or "").lower()
        best = None
        for key in self.gpu:
            if key != "default" and key.lower() in model and (best is None or len(key) > len(best)):
                best = key
        price = self.gpu[best] if best is not None else self.gpu.get("default", 0.0)
        return price * self.factor

    def rates(self, model):
        """(cpu per core-hour, gpu per GPU-hour, memory per GiB-hour), as billed."""
        return self.cpu * self.factor, self.gpu_rate(model), self.mem * self.factor


def load_sheet(path):
    with open(path, "rb") as f:
        sheet = tomllib.load(f)
    return {name: Backend(name, t) for name, t in sheet.get("backends", {}).items()}


# ------------------------------------------------------------------ inputs


SACCT_NEEDED = ["JobID", "User", "Account", "State", "Submit", "Start", "End", "AllocTRES", "NodeList"]


def sacct_time(text):
    if text in ("", "Unknown", "None"):
        return None
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def sacct_tres(text):
    cpus = gpus = mem = 0.0
    gpu_type = ""
    typed = 0.0
    for item in filter(None, text.split(",")):
        key, value = item.split("=", 1)
        if key == "cpu":
            cpus = float(value)
        elif key == "mem":
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
            if value[-1] in scale:
                mem = float(value[:-1]) * scale[value[-1]]
            else:
                mem = float(value) * (1 << 20)
        elif key == "gres/gpu":
            gpus = float(value)
        elif key.startswith("gres/gpu:"):
            gpu_type = key[len("gres/gpu:"):]
            typed += float(value)
    return cpus, gpus or typed, mem, gpu_type


def read_inputs(paths, users, slurm_backend):
    """(jobs, samples): jobs as dicts with tenant, backend, host, gpu_type, cpus, gpus,
    memory, start, end, pus, gpu_indices; samples as given."""
    jobs, samples = [], []
    for path in paths:
        with open(path) as f:
            lines = [l.rstrip("\n") for l in f]
        nonblank = [l for l in lines if l.strip()]
        if not nonblank:
            continue
        if not nonblank[0].lstrip().startswith("{"):
            header = nonblank[0].strip().split("|")
            missing = [c for c in SACCT_NEEDED if c not in header]
            if missing:
                fail(f"{path}: sacct text lacks {missing}")
            for line in nonblank[1:]:
                row = dict(zip(header, line.strip().split("|")))
                if "." in row["JobID"]:
                    continue
                cpus, gpus, mem, gpu_type = sacct_tres(row["AllocTRES"])
                start = sacct_time(row["Start"])
                end = sacct_time(row["End"]) if start is not None else None
                user = row["User"]
                jobs.append(dict(id=row["JobID"], tenant=users.get(user, row["Account"] or user), project="",
                                 workflow="", rule="",
                                 backend=slurm_backend, host=row["NodeList"], gpu_type=gpu_type,
                                 cpus=cpus, gpus=gpus, memory=mem, start=start, end=end,
                                 pus=None, gpu_indices=None, cpu_used_s=None))
            continue
        for line in nonblank:
            rec = json.loads(line)
            if rec["schema"] == "rkit.sample.v1":
                samples.append(rec)
            elif rec["schema"] == "rkit.job.v1":
                pus, gpu_indices = [], []
                for task in rec.get("alloc") or []:
                    pus += task.get("pus", [])
                    gpu_indices += task.get("gpus", [])
                jobs.append(dict(id=rec["id"], tenant=rec["tenant"], project=rec.get("project") or "",
                                 workflow=rec.get("workflow") or "", rule=rec.get("rule") or "",
                                 backend=rec["backend"],
                                 host=rec.get("host") or "", gpu_type=rec.get("gpu_type") or "",
                                 cpus=rec["cpus"], gpus=rec["gpus"],
                                 memory=rec.get("tasks", 1) * rec.get("memory_per_task_bytes", 0),
                                 start=rec["start_unix_s"], end=rec["end_unix_s"],
                                 pus=pus, gpu_indices=gpu_indices, cpu_used_s=rec.get("cpu_used_s")))
            else:
                fail(f"{path}: schema {rec['schema']} is not for this check")
    return jobs, samples


def host_models(samples):
    """host → the GPU name its earliest sample gives (first GPU with a name)."""
    models = {}
    for s in sorted(samples, key=lambda s: s["time_unix_s"]):
        names = [g["name"] for g in s.get("gpus", []) if g.get("name")]
        if names and s["host"] not in models:
            models[s["host"]] = names[0]
    return models


def usage(job, since, until):
    """The job's usage interval in the window, or None."""
    if job["start"] is None:
        return None
    a = max(job["start"], since)
    b = min(job["end"] if job["end"] is not None else until, until)
    return (a, b) if b > a else None


def job_model(job, models):
    return job["gpu_type"] or models.get(job["host"], "")


def config_users(path):
    if not path:
        return {}
    with open(path, "rb") as f:
        return tomllib.load(f).get("rsub", {}).get("users", {})


# ------------------------------------------------------------------ totals


def cmd_totals(a):
    sheet = load_sheet(a.prices)
    jobs, samples = read_inputs(a.inputs, config_users(a.config), a.slurm_backend)
    models = host_models(samples)
    keys = a.by.split(",")
    groups = {}
    for j in jobs:
        span = usage(j, a.since, a.until)
        if span is None:
            continue
        if j["backend"] not in sheet:
            fail(f"no backend {j['backend']} in {a.prices}")
        cpu, gpu, mem = sheet[j["backend"]].rates(job_model(j, models))
        hours = (span[1] - span[0]) / 3600
        key = tuple(j[k] for k in keys)
        t = groups.setdefault(key, dict(zip(keys, key), jobs=0, gpu_hours=0.0, core_hours=0.0,
                                        memory_gib_hours=0.0, cost=0.0))
        t["jobs"] += 1
        t["gpu_hours"] += j["gpus"] * hours
        t["core_hours"] += j["cpus"] * hours
        t["memory_gib_hours"] += j["memory"] / GIB * hours
        t["cost"] += hours * (j["cpus"] * cpu + j["gpus"] * gpu + j["memory"] / GIB * mem)
    for _, t in sorted(groups.items()):
        print(json.dumps(t))


# ------------------------------------------------------------------ capacity


def overlap(a, b, c, d):
    return max(0.0, min(b, d) - max(a, c))


def cmd_capacity(a):
    sheet = load_sheet(a.prices)
    jobs, samples = read_inputs(a.inputs, {}, "slurm")
    models = host_models(samples)
    out = {r: dict(capacity_hours=0.0, allocated_hours=0.0, used_hours=0.0, unallocated_cost=0.0)
           for r in ("gpu", "cpu", "memory_gib")}
    detailed = True
    by_host = {}
    for s in samples:
        by_host.setdefault(s["host"], []).append(s)
    for host, ss in by_host.items():
        # Capacity: the union of the samples' intervals (end - interval, end] in the window,
        # cut into pieces at every sample edge; each piece counts once, at the unit count of
        # the samples that cover it (they must agree).
        edges = sorted({x for s in ss for x in (s["time_unix_s"] - s["interval_s"], s["time_unix_s"])
                        if a.since <= x <= a.until} | {a.since, a.until})
        for lo, hi in zip(edges, edges[1:]):
            cover = [s for s in ss if s["time_unix_s"] - s["interval_s"] <= lo and hi <= s["time_unix_s"]]
            if not cover:
                continue
            if len(cover) > 1:
                detailed = False
            counts = {(len(s.get("gpus", [])), len(s.get("cpu_util_per_cpu", [])), s.get("memory_total_bytes", 0))
                      for s in cover}
            if len(counts) != 1:
                fail(f"samples of {host} that overlap disagree about its GPUs, CPUs or memory")
            n_gpu, n_cpu, mem = counts.pop()
            out["gpu"]["capacity_hours"] += n_gpu * (hi - lo) / 3600
            out["cpu"]["capacity_hours"] += n_cpu * (hi - lo) / 3600
            out["memory_gib"]["capacity_hours"] += mem / GIB * (hi - lo) / 3600
        # Held and used, sample by sample (only when no two samples overlap).
        on_host = [j for j in jobs if j["host"] == host and usage(j, a.since, a.until)]
        counted = {}
        for j in jobs:
            if j["host"] == host:
                counted[j["backend"]] = counted.get(j["backend"], 0) + 1
        backend = max(counted, key=counted.get) if counted else "local"
        cpu_rate, gpu_rate, mem_rate = sheet[backend].rates(models.get(host, ""))
        for s in ss:
            lo, hi = max(s["time_unix_s"] - s["interval_s"], a.since), min(s["time_unix_s"], a.until)
            if hi <= lo:
                continue
            cap_g = len(s.get("gpus", [])) * (hi - lo)
            cap_c = len(s.get("cpu_util_per_cpu", [])) * (hi - lo)
            cap_m = s.get("memory_total_bytes", 0) / GIB * (hi - lo)
            util_g = {g["index"]: g.get("util") or 0.0 for g in s.get("gpus", [])}
            util_c = s.get("cpu_util_per_cpu", [])
            mean_g = sum(util_g.values()) / len(util_g) if util_g else 0.0
            held_g = held_c = held_m = used_g = used_c = 0.0
            parts = []
            for j in on_host:
                ja, jb = usage(j, a.since, a.until)
                t = overlap(ja, jb, lo, hi)
                if t <= 0:
                    continue
                held_g += j["gpus"] * t
                held_c += j["cpus"] * t
                held_m += j["memory"] / GIB * t
                if j["gpu_indices"] and len(j["gpu_indices"]) == j["gpus"]:
                    ug = sum(util_g.get(i, 0.0) for i in j["gpu_indices"])
                else:
                    ug = j["gpus"] * mean_g
                if j["pus"]:
                    uc = sum(util_c[p] if p < len(util_c) else 0.0 for p in j["pus"]) * j["cpus"] / len(j["pus"])
                else:
                    uc = j["cpus"] * s.get("cpu_util", 0.0)
                # rcost(1): the CPU time a job's cgroup measured, when its record has it,
                # is its mean cores used over its run, instead of the samples' estimate.
                if j["cpu_used_s"] is not None and j["start"] is not None and j["end"] is not None \
                        and j["end"] > j["start"]:
                    uc = j["cpu_used_s"] / (j["end"] - j["start"])
                parts.append((min(ug, j["gpus"]) * t, min(uc, j["cpus"]) * t))
            # Held beyond the capacity is scaled down to it; what is used, in proportion.
            fg = cap_g / held_g if held_g > cap_g else 1.0
            fc = cap_c / held_c if held_c > cap_c else 1.0
            used_g = sum(p[0] for p in parts) * fg
            used_c = sum(p[1] for p in parts) * fc
            alloc_g, alloc_c, alloc_m = min(held_g, cap_g), min(held_c, cap_c), min(held_m, cap_m)
            out["gpu"]["allocated_hours"] += alloc_g / 3600
            out["gpu"]["used_hours"] += used_g / 3600
            out["gpu"]["unallocated_cost"] += (cap_g - alloc_g) / 3600 * gpu_rate
            out["cpu"]["allocated_hours"] += alloc_c / 3600
            out["cpu"]["used_hours"] += used_c / 3600
            out["cpu"]["unallocated_cost"] += (cap_c - alloc_c) / 3600 * cpu_rate
            out["memory_gib"]["allocated_hours"] += alloc_m / 3600
            out["memory_gib"]["unallocated_cost"] += (cap_m - alloc_m) / 3600 * mem_rate
    if not detailed:  # sample by sample, overlapping samples would count held time twice
        for r in out.values():
            r.update(allocated_hours=None, used_hours=None, unallocated_cost=None)
    out["detailed"] = detailed
    print(json.dumps(out))


def cmd_samples(a):
    rng = random.Random(a.seed)
    t = a.start + a.interval
    while t <= a.end + 1e-9:
        gpus = [dict(index=i, util=round(rng.random(), 3), name=a.gpu_name) for i in range(a.gpus)]
        per_cpu = [round(rng.random(), 3) for _ in range(a.cpus)]
        print(json.dumps(dict(schema="rkit.sample.v1", host=a.host, time_unix_s=t, interval_s=a.interval,
                              cpu_util=sum(per_cpu) / len(per_cpu) if per_cpu else 0.0,
                              cpu_util_per_cpu=per_cpu, memory_total_bytes=a.memory_bytes, gpus=gpus,
                              gpu_util_mean=sum(g["util"] for g in gpus) / len(gpus) if gpus else None)))
        t += a.interval


# ------------------------------------------------------------------ comparisons


def read_report(path):
    with open(path) as f:
        recs = [json.loads(l) for l in f if l.strip()]
    if not recs or recs[-1].get("schema") != "rkit.cost.summary.v1":
        fail(f"{path}: the last line is not an rkit.cost.summary.v1 record")
    rows = recs[:-1]
    if any(r.get("schema") != "rkit.cost.v1" for r in rows):
        fail(f"{path}: a row is not an rkit.cost.v1 record")
    return rows, recs[-1]


def same_cents(x, y):
    return round(x, 2) == round(y, 2) or abs(x - y) < 0.005


def same_hours(x, y):
    return abs(x - y) <= 1e-9 * max(1.0, abs(x), abs(y))


def cmd_compare(a):
    with open(a.expect) as f:
        expect = [json.loads(l) for l in f if l.strip()]
    rows, summary = read_report(a.rcost)
    keys = a.by.split(",")

    def key(r):
        return "/".join(str(r.get(k) or "") for k in keys)

    got = {key(r): r for r in rows if not r["idle"]}
    errors = []
    total = 0.0
    print(f"{a.by:24} {'jobs':>9} {'cost (check)':>14} {'cost (rcost)':>14}")
    for e in expect:
        name = f"{a.by} {key(e)}"
        r = got.pop(key(e), None)
        print(f"{key(e):24} {e['jobs']:>4}/{(r or {}).get('jobs', '-'):>4} {e['cost']:14.4f} "
              f"{(r or {}).get('cost', float('nan')):14.4f}")
        total += e["cost"]
        if r is None:
            errors.append(f"{name}: no row in the report")
            continue
        if r["jobs"] != e["jobs"]:
            errors.append(f"{name}: jobs {r['jobs']}, expected {e['jobs']}")
        if not same_cents(r["cost"], e["cost"]):
            errors.append(f"{name}: cost {r['cost']!r}, expected {e['cost']!r}")
        for k in ("gpu_hours", "core_hours", "memory_gib_hours"):
            if not same_hours(r[k], e[k]):
                errors.append(f"{name}: {k} {r[k]!r}, expected {e[k]!r}")
    for k, r in got.items():  # rows of jobs with no usage in the window (queue waits only)
        if r["jobs"] != 0 or r["cost"] != 0:
            errors.append(f"{a.by} {k}: a row the check does not have: jobs {r['jobs']}, cost {r['cost']!r}")
    if not same_cents(summary["total"]["cost"], total):
        errors.append(f"total cost {summary['total']['cost']!r}, expected {total!r}")
    if summary["jobs_run"] != sum(e["jobs"] for e in expect):
        errors.append(f"jobs_run {summary['jobs_run']}, expected {sum(e['jobs'] for e in expect)}")
    if total < a.min_cost:
        errors.append(f"the expected total {total:.4f} is under {a.min_cost}: the comparison would prove little")
    for e in errors:
        print(f"rcost_check: {e}", file=sys.stderr)
    sys.exit(1 if errors else 0)


def cmd_check_capacity(a):
    with open(a.expect) as f:
        expect = json.load(f)
    _, summary = read_report(a.rcost)
    errors = []
    close = lambda x, y: abs(x - y) <= 1e-6 * max(1e-9, abs(x), abs(y))
    for res in ("gpu", "cpu"):
        c, e = summary["capacity"][res], expect[res]
        cap, used, idle, free = c["capacity_hours"], c["used_hours"], c["allocated_idle_hours"], c["unallocated_hours"]
        allocated = used + idle
        check_alloc = "-" if e["allocated_hours"] is None else f"{e['allocated_hours']:.6f}"
        print(f"{res}: capacity {cap:.6f} (check {e['capacity_hours']:.6f}), used {used:.6f}, "
              f"allocated {allocated:.6f} (check {check_alloc}), unallocated {free:.6f}")
        if e["capacity_hours"] <= 0:
            errors.append(f"{res}: the samples cover no capacity: the check would prove little")
        if not close(cap, e["capacity_hours"]):
            errors.append(f"{res}: capacity_hours {cap!r}, expected {e['capacity_hours']!r}")
        if not close(used + idle + free, cap):
            errors.append(f"{res}: used + allocated idle + unallocated = {used + idle + free!r}, capacity {cap!r}")
        if min(used, idle, free) < -1e-9 or used > allocated + 1e-9 or allocated > cap * (1 + 1e-9):
            errors.append(f"{res}: not 0 <= used <= allocated <= capacity: {used!r}, {allocated!r}, {cap!r}")
        if a.exact:
            if not expect["detailed"]:
                fail("--exact needs samples that do not overlap")
            if not close(allocated, e["allocated_hours"]):
                errors.append(f"{res}: allocated {allocated!r}, expected {e['allocated_hours']!r}")
            if not close(used, e["used_hours"]):
                errors.append(f"{res}: used_hours {used!r}, expected {e['used_hours']!r}")
            if not same_cents(c["unallocated_cost"], e["unallocated_cost"]):
                errors.append(f"{res}: unallocated_cost {c['unallocated_cost']!r}, expected {e['unallocated_cost']!r}")
    m = summary["capacity"]["memory_gib"]
    if not close(m["capacity_hours"], expect["memory_gib"]["capacity_hours"]):
        errors.append(f"memory_gib: capacity_hours {m['capacity_hours']!r}, expected {expect['memory_gib']['capacity_hours']!r}")
    if a.exact and not same_cents(m["unallocated_cost"], expect["memory_gib"]["unallocated_cost"]):
        errors.append(f"memory_gib: unallocated_cost {m['unallocated_cost']!r}, expected {expect['memory_gib']['unallocated_cost']!r}")
    for e in errors:
        print(f"rcost_check: {e}", file=sys.stderr)
    sys.exit(1 if errors else 0)


def cmd_check_idle(a):
    with open(a.expect) as f:
        expect = [json.loads(l) for l in f if l.strip()]
    rows, summary = read_report(a.rcost)
    unallocated = sum(summary["capacity"][r]["unallocated_cost"] for r in ("gpu", "cpu", "memory_gib"))
    cost = sum(e["cost"] for e in expect)
    errors = []
    if unallocated < 0.01:
        errors.append(f"unallocated cost {unallocated!r}: nothing to share, the check would prove little")
    if summary["share_idle"] != a.share_idle:
        errors.append(f"share_idle {summary['share_idle']!r}, expected {a.share_idle!r}")
    total = sum(r["total_cost"] for r in rows)
    print(f"rows' total_cost {total:.4f}; cost {cost:.4f} + unallocated {unallocated:.4f} = {cost + unallocated:.4f}")
    if not same_cents(total, cost + unallocated):
        errors.append(f"rows' total_cost add up to {total!r}, not cost + unallocated = {cost + unallocated!r}")
    if not same_cents(summary["total"]["total_cost"], cost + unallocated):
        errors.append(f"summary total_cost {summary['total']['total_cost']!r}, expected {cost + unallocated!r}")
    idle_rows = [r for r in rows if r["idle"]]
    if a.share_idle == "none":
        if len(idle_rows) != 1 or idle_rows[0]["tenant"] != "__idle__":
            errors.append(f"expected one __idle__ row, got {idle_rows}")
        elif not same_cents(idle_rows[0]["idle_cost"], unallocated) or idle_rows[0]["cost"] != 0:
            errors.append(f"__idle__ row: idle_cost {idle_rows[0]['idle_cost']!r}, expected {unallocated!r}")
        if any(r["idle_cost"] != 0 for r in rows if not r["idle"]):
            errors.append("with --share-idle none, a tenant row has an idle share")
    else:
        if idle_rows:
            errors.append(f"an __idle__ row with --share-idle {a.share_idle}: {idle_rows}")
        weights = {r["tenant"]: (r["cost"] / cost if a.share_idle == "weighted" else 1 / len(rows)) for r in rows}
        for r in rows:
            if not same_cents(r["idle_cost"], unallocated * weights[r["tenant"]]):
                errors.append(f"tenant {r['tenant']}: idle_cost {r['idle_cost']!r}, expected "
                              f"{unallocated * weights[r['tenant']]!r}")
    for e in errors:
        print(f"rcost_check: {e}", file=sys.stderr)
    sys.exit(1 if errors else 0)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("totals", "capacity"):
        s = sub.add_parser(name)
        s.add_argument("--prices", required=True)
        s.add_argument("--since", type=float, required=True)
        s.add_argument("--until", type=float, required=True)
        s.add_argument("--config")
        s.add_argument("--slurm-backend", default="slurm")
        s.add_argument("inputs", nargs="+")
    sub.choices["totals"].add_argument("--by", default="tenant")
    s = sub.add_parser("samples")
    s.add_argument("--host", required=True)
    s.add_argument("--start", type=float, required=True)
    s.add_argument("--end", type=float, required=True)
    s.add_argument("--interval", type=float, required=True)
    s.add_argument("--gpus", type=int, required=True)
    s.add_argument("--cpus", type=int, required=True)
    s.add_argument("--gpu-name", default="NVIDIA H200")
    s.add_argument("--memory-bytes", type=float, default=float(64 * GIB))
    s.add_argument("--seed", type=int, default=1)
    s = sub.add_parser("compare")
    s.add_argument("--expect", required=True)
    s.add_argument("--rcost", required=True)
    s.add_argument("--min-cost", type=float, default=1.0)
    s.add_argument("--by", default="tenant")
    s = sub.add_parser("check-capacity")
    s.add_argument("--expect", required=True)
    s.add_argument("--rcost", required=True)
    s.add_argument("--exact", action="store_true")
    s = sub.add_parser("check-idle")
    s.add_argument("--expect", required=True)
    s.add_argument("--rcost", required=True)
    s.add_argument("--share-idle", required=True, choices=["weighted", "even", "none"])
    a = p.parse_args()
    {"totals": cmd_totals, "capacity": cmd_capacity, "samples": cmd_samples, "compare": cmd_compare,
     "check-capacity": cmd_check_capacity, "check-idle": cmd_check_idle}[a.cmd](a)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""PyTorch's Gloo allreduce, timed the way `rbench run comm.gloo` times its own.

The peer that rbench's comm.gloo is held against (bench/rbench_comm.sh): N local
processes (torch.multiprocessing, not torchrun: see DESIGN.md) meet through a file:// init
(a FileStore) and run torch.distributed.all_reduce on a float32 CPU tensor, in place, sum,
which ProcessGroupGloo turns into gloo::allreduce (ring) with gloo::sum<float>.

Timing rule, the same as comm.gloo's (nccl-tests' default -a 1):
  for each of WARMUP untimed and REPS timed samples: rewrite the inputs, barrier, then on
  every rank time ITERS back-to-back allreduces and divide by ITERS; the sample is the
  mean over ranks of those times. ITERS is 64 MiB / bytes, clamped to 1..20.
  busbw = bytes / time / 1e9 * 2(n-1)/n.
After the timed samples one more allreduce of fresh inputs is checked element by element.

Prints one JSON line on stdout:
  {"peer": "torch.distributed gloo", "torch_version", "collective": "allreduce", "bytes",
   "ranks", "warmup", "reps", "iters", "samples_busbw_GBps": [...], "busbw_GBps_median",
   "wrong"}
Exit 0 when every element was right, 1 otherwise.

  /usr/bin/python3 tests/peers/torch_gloo_allreduce.py --bytes 64M --ranks 2 --reps 9
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time


def parse_size(text):
    units = {"": 1, "B": 1, "K": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MIB": 1 << 20, "G": 1 << 30, "GIB": 1 << 30}
    t = text.strip().upper()
    i = len(t)
    while i > 0 and not t[i - 1].isdigit():
        i -= 1
    return int(t[:i]) * units[t[i:]]


def iterations_per_sample(nbytes):
    return max(1, min(20, (64 << 20) // nbytes))


def rank_main(rank, args, init_file, result_file):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=args.ranks)
    n = args.bytes // 4
    idx = torch.arange(n, dtype=torch.int64)

    def inputs(r, seed):
        # Small integers: every sum over ranks is exact in float32.
        return ((idx * 7919 + r * 104729 + seed * 1299709) % 251 - 125).to(torch.float32)

    timing = inputs(rank, 0)
    buf = torch.empty_like(timing)
    iters = iterations_per_sample(args.bytes)
    times = []
    for k in range(args.warmup + args.reps):
        buf.copy_(timing)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        t = (time.perf_counter() - t0) / iters
        if k >= args.warmup:
            times.append(t)

    buf.copy_(inputs(rank, 1))
    dist.barrier()
    dist.all_reduce(buf)
    expected = sum(inputs(r, 1) for r in range(args.ranks))
    wrong = int((buf != expected).sum())

    summed = torch.tensor(times + [float(wrong)], dtype=torch.float64)
    dist.all_reduce(summed)
    if rank == 0:
        factor = 2 * (args.ranks - 1) / args.ranks
        mean_times = [float(s) / args.ranks for s in summed[:-1]]
        busbw = [args.bytes / t / 1e9 * factor for t in mean_times]
        out = {
            "peer": "torch.distributed gloo",
            "torch_version": torch.__version__,
            "collective": "allreduce",
            "bytes": args.bytes,
            "ranks": args.ranks,
            "warmup": args.warmup,
            "reps": args.reps,
            "iters": iters,
            "samples_busbw_GBps": busbw,
            "busbw_GBps_median": statistics.median(busbw),
            "wrong": int(summed[-1]),
        }
        with open(result_file, "w") as f:
            json.dump(out, f)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bytes", type=parse_size, default=64 << 20, help="allreduce size (default 64M)")
    p.add_argument("--ranks", type=int, default=2, help="processes (default 2)")
    p.add_argument("--warmup", type=int, default=1, help="untimed samples (default 1)")
    p.add_argument("--reps", type=int, default=5, help="timed samples (default 5)")
    args = p.parse_args()
    if args.bytes < 4 or args.ranks < 1 or args.reps < 1 or args.warmup < 0:
        p.error("need --bytes >= 4, --ranks >= 1, --reps >= 1, --warmup >= 0")

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="torch-gloo-") as tmp:
        init_file = os.path.join(tmp, "store")
        result_file = os.path.join(tmp, "result.json")
        mp.spawn(rank_main, args=(args, init_file, result_file), nprocs=args.ranks, join=True)
        with open(result_file) as f:
            out = json.load(f)
    print(json.dumps(out))
    return 0 if out["wrong"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

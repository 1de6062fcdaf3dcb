#!/usr/bin/python3
"""The anchor of `rtrain run`'s speed: the same training loop in PyTorch.

A 256->1024->1024->1 fp32 MLP with GELU, MSE loss, AdamW (weight decay 0.01), warm-up
then cosine learning rate, gradient clipping at 1.0, batch 512, on random data held in
memory (its batches are indexed from one tensor: no data pipeline cost). Prints one
JSON line: samples/s over the timed steps (after warm-up steps), and the thread count.

  OPENBLAS_NUM_THREADS=2 /usr/bin/python3 bench/rtrain_torch.py --threads 2 --steps 60 --warmup 10

--threads sets PyTorch's threads (torch.set_num_threads); OpenBLAS, which does the
matrix products, takes its own count from OPENBLAS_NUM_THREADS (default: every core).
"""
import argparse
import json
import math
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--steps", type=int, default=60, help="timed steps")
p.add_argument("--warmup", type=int, default=10, help="untimed steps first")
p.add_argument("--batch", type=int, default=512)
p.add_argument("--layers", default="256,1024,1024,1")
a = p.parse_args()

torch.set_num_threads(a.threads)
torch.manual_seed(0)
sizes = [int(s) for s in a.layers.split(",")]
mods = []
for i in range(len(sizes) - 1):
    mods.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
    if i + 2 < len(sizes):
        mods.append(torch.nn.GELU())
model = torch.nn.Sequential(*mods)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
total = a.warmup + a.steps
warm = max(1, total // 10)
sched = torch.optim.lr_scheduler.LambdaLR(
    opt, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, total - warm))))
rows = 16 * a.batch
x = torch.randn(rows, sizes[0])
y = torch.randn(rows, sizes[-1])
perm = torch.randperm(rows)

start = None
for step in range(total):
    if step == a.warmup:
        start = time.perf_counter()
    idx = perm[(step * a.batch) % rows:(step * a.batch) % rows + a.batch]
    xb, yb = x[idx], y[idx]
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(xb), yb)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
elapsed = time.perf_counter() - start
print(json.dumps({"samples_per_s": a.steps * a.batch / elapsed, "threads": torch.get_num_threads(),
                  "steps": a.steps, "batch": a.batch, "torch": torch.__version__}))

#!/usr/bin/python3
"""A small PyTorch DDP training run: the real client rtrain launch is held against.

It is written for torchrun and nothing else: it reads RANK, WORLD_SIZE, LOCAL_RANK from
the environment (init_method="env://", the gloo backend on CPU), trains a linear model
on a fixed synthetic regression problem with DistributedDataParallel (each rank its
shard of every batch), and rank 0 prints one JSON line: the world size, the steps, the
final loss and a checksum of the weights. The same command under torchrun and under
rtrain launch must print the same line. Under `rtrain launch --track` it also records its
parameters and each step's loss through rkit's Python helper (examples/python/rkit_track.py),
which does nothing anywhere else.

  torchrun --standalone --nproc-per-node 2 --redirects 0:1,1:1 --tee 0:1,1:1 tests/peers/ddp_train.py
  rtrain launch --nproc-per-node 2 -- /usr/bin/python3 tests/peers/ddp_train.py
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python"))
import rkit_track  # noqa: E402  (rkit's helper, beside the examples)
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

STEPS = 50
BATCH = 64
FEATURES = 16


def main():
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
    torch.manual_seed(0)  # every rank builds the same model and data
    model = DistributedDataParallel(torch.nn.Linear(FEATURES, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    truth = torch.randn(FEATURES, 1)
    data = torch.randn(STEPS, BATCH, FEATURES)
    rkit_track.params(lr=0.05, batch_size=BATCH, features=FEATURES, steps=STEPS)
    for step in range(STEPS):
        x = data[step].chunk(world)[rank]  # this rank's shard of the batch
        loss = torch.nn.functional.mse_loss(model(x), x @ truth)
        optimizer.zero_grad()
        loss.backward()  # DDP averages the gradients over the ranks (gloo allreduce)
        optimizer.step()
        rkit_track.log(step + 1, loss=loss)  # rank 0's (the helper's default)
    full = data[-1]
    final = torch.nn.functional.mse_loss(model.module(full), full @ truth).item()
    if rank == 0:
        weights = torch.cat([p.detach().flatten() for p in model.parameters()])
        print(json.dumps({"world_size": world, "steps": STEPS, "final_loss": round(final, 6),
                          "weights_sum": round(weights.sum().item(), 6)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""A tiny PyTorch DDP job (Gloo backend) for the rank-discovery e2e test, started by
`python3 -m torch.distributed.run`: trains a linear layer on random data until OUT/stop exists
(rank 0 decides, the decision travels in an allreduce so both ranks stop at the same step)."""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job_churn import churn, should_stop, write_identity  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--max-seconds", type=float, default=60)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # env:// from torchrun: RANK, WORLD_SIZE, MASTER_ADDR/PORT
    rank = dist.get_rank()
    write_identity(a.out, "torch-rank%d" % rank, rank, os.environ["TORCHELASTIC_RUN_ID"])
    model = DistributedDataParallel(torch.nn.Linear(256, 256))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    started = time.monotonic()
    step = 0
    while True:
        x = torch.randn(32, 256)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()  # the gradient allreduce over Gloo's TCP pairs
        opt.step()
        churn(step)
        stop = torch.tensor([1.0 if rank == 0 and should_stop(a.out, started, a.max_seconds) else 0.0])
        dist.all_reduce(stop)
        if stop.item() > 0:
            break
        step += 1
        time.sleep(0.005)  # leave the CPUs to the collector on a 2-core machine
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

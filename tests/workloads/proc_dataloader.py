"""Workload: a torch DataLoader with 2 worker processes, iterating slowly for argv[1] seconds.

(No stdin-reading thread: DataLoader workers are forked, and multiprocessing closes sys.stdin in
the child, which deadlocks when another thread held stdin's lock at fork time.)
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.05)
        return torch.zeros(4)


def main() -> None:
    deadline = time.monotonic() + float(sys.argv[1] if len(sys.argv) > 1 else 60)
    loader = DataLoader(Slow(), batch_size=2, num_workers=2)
    for i, _batch in enumerate(loader):
        if i == 0:
            print("ready", flush=True)
        if time.monotonic() > deadline:
            break


if __name__ == "__main__":
    main()

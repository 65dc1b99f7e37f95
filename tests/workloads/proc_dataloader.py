"""Workload: a torch DataLoader with 2 worker processes, iterating slowly until stdin closes."""

import sys
import threading
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
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    loader = DataLoader(Slow(), batch_size=2, num_workers=2)
    for i, _batch in enumerate(loader):
        if i == 0:
            print("ready", flush=True)
        if done.is_set():
            break


if __name__ == "__main__":
    main()

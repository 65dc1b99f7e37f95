"""The worker threads that take whole chunks in turn (inference only).

BrainSlug parallelises over chunks: each worker runs single-threaded ops on whole chunks,
instead of every layer splitting each chunk across the intra-op threads. That avoids a thread
barrier at every layer of every chunk, which made chunked execution several times slower than
eager on a loaded machine. One pool per process, rebuilt when the thread count changes or
after fork.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Any

import torch


class Workers:
    """Threads that each run single-threaded ops on whole chunks (BrainSlug's parallelism
    over chunks): no barrier between the threads at every layer of every chunk."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.pid = os.getpid()
        self._tasks: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        ready = threading.Barrier(n + 1)
        default = torch.get_num_threads()
        for i in range(n):
            thread = threading.Thread(
                target=self._loop, args=(ready,), name=f"depth-first-{i}", daemon=True
            )
            thread.start()
        ready.wait()
        # torch.set_num_threads(1) in a worker also became the default for threads created
        # from now on; put the caller's value back (the workers keep 1, set per thread).
        torch.set_num_threads(default)

    def _loop(self, ready: threading.Barrier) -> None:
        torch.get_num_threads()  # torch's lazy per-thread init would later undo the 1 below
        torch.set_num_threads(1)
        ready.wait()
        while (task := self._tasks.get()) is not None:
            task()

    def stop(self) -> None:
        """Let every thread finish its current task and exit."""
        for _ in range(self.n):
            self._tasks.put(None)

    def map(self, jobs: list[Any], fn: Callable[[Any], None], inference: bool) -> None:
        """Call ``fn`` on every job, the workers taking jobs in turn; re-raise the first error."""
        pending = iter(jobs)
        lock = threading.Lock()
        errors: list[BaseException] = []
        done = threading.Semaphore(0)

        def work() -> None:
            try:
                # Grad mode is per thread: the workers must not record autograd.
                with torch.inference_mode() if inference else torch.no_grad():
                    while not errors:
                        with lock:
                            job = next(pending, None)
                        if job is None:
                            break
                        fn(job)
            except BaseException as exc:  # handed to the caller's thread
                errors.append(exc)
            finally:
                done.release()

        for _ in range(self.n):
            self._tasks.put(work)
        for _ in range(self.n):
            done.acquire()
        if errors:
            raise errors[0]


_WORKERS: Workers | None = None
_WORKERS_LOCK = threading.Lock()


def workers(n: int) -> Workers:
    """The process's pool of ``n`` workers, started on first use."""
    global _WORKERS
    with _WORKERS_LOCK:
        pool = _WORKERS
        # Threads do not survive fork (DataLoader workers): a child builds its own.
        if pool is None or pool.n != n or pool.pid != os.getpid():
            if pool is not None and pool.pid == os.getpid():
                pool.stop()
            pool = _WORKERS = Workers(n)
        return pool

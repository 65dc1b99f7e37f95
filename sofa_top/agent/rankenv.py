"""A process's rank in a distributed job, from its environment (stdlib only).

The agent reports it in its ``hello`` frame; the process collector reads the same variables
from ``/proc/PID/environ`` (so that attach mode and processes without an agent are named too).
The result is the JSON of ``sofa_top.datamodel.ranks.RankId``.

- torchrun (``torch.distributed.run``) sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
  ``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` (the node's rank), ``MASTER_ADDR`` and ``MASTER_PORT``
  for every worker; the launcher itself has none of them.
- ``tf.distribute.MultiWorkerMirroredStrategy`` reads ``TF_CONFIG``:
  ``{"cluster": {"chief": [...], "worker": [...]}, "task": {"type": "worker", "index": 1}}``.
  The chief is rank 0 and the workers follow it; each task is a node of one process.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

_TF_TYPES = ("chief", "worker")  # the tasks that train (an evaluator or ps is no rank)


def _int(env: Mapping[str, str], key: str) -> int | None:
    value = env.get(key)
    if value is None:
        return None
    try:
        n = int(value.strip())
    except ValueError:
        return None
    return n if n >= 0 else None


def _torchrun(env: Mapping[str, str], host: str) -> dict[str, Any] | None:
    rank = _int(env, "RANK")
    if rank is None:
        return None
    addr, port = env.get("MASTER_ADDR", ""), env.get("MASTER_PORT", "")
    return {
        "rank": rank,
        "world_size": _int(env, "WORLD_SIZE"),
        "local_rank": _int(env, "LOCAL_RANK"),
        "local_world_size": _int(env, "LOCAL_WORLD_SIZE"),
        "group_rank": _int(env, "GROUP_RANK"),
        "host": host,
        "master": f"{addr}:{port}" if addr and port else addr,
        "source": "torchrun",
    }


def _tf_config(text: str, host: str) -> dict[str, Any] | None:
    try:
        config = json.loads(text)
    except ValueError:
        return None
    if not isinstance(config, dict):
        return None
    cluster, task = config.get("cluster"), config.get("task")
    if not isinstance(cluster, dict) or not isinstance(task, dict):
        return None
    kind, index = task.get("type"), task.get("index", 0)
    if kind not in _TF_TYPES or isinstance(index, bool) or not isinstance(index, int):
        return None
    sizes = {t: len(v) if isinstance(v, list) else 0 for t, v in cluster.items()}
    chiefs = sizes.get("chief", 0)
    rank = index if kind == "chief" else chiefs + index
    world = chiefs + sizes.get("worker", 0)
    first = cluster.get("chief") or cluster.get("worker") or []
    master = first[0] if isinstance(first, list) and first and isinstance(first[0], str) else ""
    return {
        "rank": rank,
        "world_size": world or None,
        "local_rank": 0,
        "local_world_size": 1,
        "group_rank": rank,
        "host": host,
        "master": master,
        "source": "tf-config",
    }


def rank_from_env(env: Mapping[str, str], host: str) -> dict[str, Any] | None:
    """The rank fields of a process with environment ``env`` on ``host`` (None: not a rank)."""
    found = _torchrun(env, host)
    if found is None and env.get("TF_CONFIG"):
        found = _tf_config(env["TF_CONFIG"], host)
    return found


def parse_environ(raw: bytes) -> dict[str, str]:
    """``/proc/PID/environ`` (NUL-separated ``KEY=VALUE``) as a dict; undecodable bytes are
    replaced, never fatal."""
    out: dict[str, str] = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep and key:
            out[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return out

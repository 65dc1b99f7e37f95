"""The metric and label names sofa-top serves (the exporter writes them, ``cluster`` reads them).

Every series carries ``run`` (the sofa-top session name: ``--name``) and ``node`` (the host
name, plus ``/`` and torchrun's node rank for a rank); per-rank series add ``rank`` and
``local_rank`` (empty for a job that is not distributed). ``job`` and ``instance`` are left to
Prometheus, which sets them itself.
"""

from __future__ import annotations

PREFIX = "sofa_top_"

# per rank (or, without ranks, for the whole job), over the verdict window (~10 s)
STEP_SECONDS = "sofa_top_step_seconds"  # median step time
INPUT_WAIT = "sofa_top_input_wait_ratio"  # share of the step waiting for input, 0..1
COLLECTIVE_WAIT = "sofa_top_collective_wait_ratio"  # share blocked in collectives, 0..1
COMPUTE = "sofa_top_compute_ratio"  # what is left of the step
STEPS_PER_SECOND = "sofa_top_steps_per_second"
WINDOW_STEPS = "sofa_top_window_steps"  # steps the figures above are computed from
# 1 for the rank's current verdict (labels kind, cause, severity); a verdict it had before
# stays at 0, so ``last_over_time(...) == 1`` is the latest one even after the run ended
VERDICT_INFO = "sofa_top_verdict_info"
RANK_PID = "sofa_top_rank_pid"  # the rank's process id
RANK_UP = "sofa_top_rank_up"  # 1 while the rank's process runs, 0 once it exited
WORLD_SIZE = "sofa_top_world_size"
# this sofa-top's own cross-rank verdict (its node's ranks only): labels kind, straggler
JOB_VERDICT_INFO = "sofa_top_job_verdict_info"

# processes: the rank's process and its DataLoader workers (label pid: the rank's)
PROCESS_CPU = "sofa_top_process_cpu_percent"  # % of one core
PROCESS_RSS = "sofa_top_process_rss_bytes"
# the whole target tree and the machine
TREE_CPU = "sofa_top_tree_cpu_percent"
TREE_RSS = "sofa_top_tree_rss_bytes"
SYSTEM_CPU = "sofa_top_system_cpu_percent"  # 0..100, mean of the cores
SYSTEM_MEMORY = "sofa_top_system_memory_used_bytes"
# per GPU (label gpu: its index)
GPU_UTIL = "sofa_top_gpu_utilization_percent"
GPU_MEMORY = "sofa_top_gpu_memory_used_bytes"
GPU_POWER = "sofa_top_gpu_power_watts"
GPU_TEMPERATURE = "sofa_top_gpu_temperature_celsius"
INFO = "sofa_top_info"  # 1; labels run, node, host, version, target (its pid)

RUN, NODE, RANK, LOCAL_RANK = "run", "node", "rank", "local_rank"
RANK_LABELS = (RUN, NODE, RANK, LOCAL_RANK)

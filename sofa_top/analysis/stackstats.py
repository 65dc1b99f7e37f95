"""Aggregate stack windows into hot functions, a class split and per-thread stats (pure functions).

Percentages (``own_pct``/``total_pct``) are of all thread-samples considered: with py-spy's
``--idle`` every Python thread is sampled at each instant, so a process with one busy thread and
three idle ones shows the busy function at about 25 %. Filter by ``tid`` for one thread's view.

sofa-top never profiles itself: the in-process agent's threads (named ``sofa-top*``: its drain
loop ``sofa-top-agent``, its CUDA window thread) and samples whose innermost frame is the
agent's own code are left out of everything (hot functions, split, threads); the ones where it
was running are counted apart as its overhead (``StackSummary.agent_samples``). This is the one
place that tells them apart: the collector stores every thread, so live and replay count the
same overhead. Agent wrapper frames inside a user's stack (the
``timed_next`` around a DataLoader's ``__next__``, the Keras train-function wrapper) are
dropped from the frames; the sample keeps the class its whole stack gave it.

The hot functions and the split are of the threads that run the loop: a thread idle in
``IDLE_THREAD`` of its samples or more (a queue's feeder thread, the resource sharer, a
DataLoader worker's main thread waiting for its next index) is a helper, counted apart
(``idle_threads``, ``idle_thread_samples``), unless every thread is one (an idle process);
so are the idle samples of a pipeline worker that also works (a DataLoader worker waiting
for its next index between two items: the pipeline's spare capacity, not the loop's time).
The loop thread's samples outside its model calls give the host time's split
(``analysis.host``). A thread seen inside a model call in any of the windows is read in its
model-call context in all of them (``analysis.classify.in_model_context``).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace

from sofa_top.analysis.classify import in_model_call, in_model_context, is_worker_loop_frame
from sofa_top.analysis.host import HOST_CLASSES, host_counts, model_samples, setup_samples
from sofa_top.analysis.sources import ABSOLUTE_ONLY, Lines
from sofa_top.datamodel.samples import STACK_CLASSES, Frame, StackClass, StackCount, StackWindow
from sofa_top.datamodel.snapshot import FunctionStat, StackSummary, ThreadStat

DEFAULT_TOP = 200
STACK_SUMMARY_S = 5.0  # the stacks pane (live and replayed) aggregates this much recent history
IDLE_THREAD = 0.95  # a thread idle in this share of its samples is a helper, not the loop
MIN_THREAD_SAMPLES = 50  # about half a second at 100 Hz: any share of the loop's time is read
# fewer say nothing; from here to MIN_THREAD_SAMPLES a share is read when its 95% lower bound
# clears its bar (a short run beside busy neighbours, where the sampler's CPU budget buys 5-10 Hz)
MIN_DECISIVE_SAMPLES = 20
Z_95 = 1.96


def lower_bound(share: float, n: int, z: float = Z_95) -> float:
    """Wilson's lower confidence bound of a share seen in ``n`` samples."""
    if n <= 0:
        return 0.0
    zz = z * z / n
    centre = share + zz / 2
    spread = z * math.sqrt(share * (1 - share) / n + zz / (4 * n))
    return max(0.0, (centre - spread) / (1 + zz))


def readable(n: int, shares: Iterable[tuple[float, float]]) -> bool:
    """Enough samples (``n``) to read the loop's split: plenty of them, or a few in which one
    ``(share, bar)`` clears its bar beyond doubt."""
    if n >= MIN_THREAD_SAMPLES:
        return True
    return n >= MIN_DECISIVE_SAMPLES and any(lower_bound(s, n) >= bar for s, bar in shares)


def thread_label(name: str, tid: int) -> str:
    """How a thread is shown: its Python name, else ``tid N``."""
    return name or f"tid {tid}"


def _split(counts: Counter[StackClass], total: int) -> dict[str, float]:
    if total <= 0:
        return {k: 0.0 for k in STACK_CLASSES}
    return {k: counts[k] / total for k in STACK_CLASSES}


AGENT_THREADS = "sofa-top"  # the prefix of the agent's thread names (sofa_top/agent/)
_AGENT_PATH = "/sofa_top/agent/"


def is_agent_frame(frame: Frame) -> bool:
    """A frame of sofa-top's in-process agent (its hooks, its drain loop, its sitecustomize)."""
    return _AGENT_PATH in "/" + frame.filename.replace("\\", "/")


def is_agent_stack(stack: StackCount) -> bool:
    """Samples of the agent itself: its threads, or the agent's own code innermost."""
    if stack.thread_name.startswith(AGENT_THREADS):
        return True
    frames = stack.frames
    return bool(frames) and is_agent_frame(frames[-1])


def _without_agent(stack: StackCount) -> StackCount:
    if not any(is_agent_frame(f) for f in stack.frames):
        return stack
    return replace(stack, frames=tuple(f for f in stack.frames if not is_agent_frame(f)))


def merged(stacks: Iterable[StackCount]) -> list[StackCount]:
    """``stacks`` with each repeat of one thread's stack and class summed into its first: every
    figure a summary derives is a sum of counts (in the order stacks first appear), and a long
    session repeats a few hundred stacks over thousands of windows. Keyed by the identity of
    the frames (the reader and the collectors share one tuple per distinct stack), so that no
    stack is hashed; equal stacks in distinct tuples stay apart, which changes no figure."""
    first: dict[tuple[int, int, str, int, str], int] = {}
    out: list[StackCount] = []
    counts: list[int] = []
    for s in stacks:
        key = (s.pid, s.tid, s.thread_name, id(s.frames), s.klass)
        i = first.get(key)
        if i is None:
            first[key] = len(out)
            out.append(s)
            counts.append(s.count)
        else:
            counts[i] += s.count
    return [s if s.count == n else replace(s, count=n) for s, n in zip(out, counts, strict=True)]


def _stacks(
    windows: Iterable[StackWindow], tid: int | None, sources: Lines
) -> tuple[list[StackCount], int]:
    """The user's stacks (agent frames dropped) and the agent's running samples."""
    out: list[StackCount] = []
    agent = 0
    sampled = (
        s for w in windows for s in w.stacks if s.count > 0 and (tid is None or s.tid == tid)
    )
    for s in merged(sampled):
        if is_agent_stack(s):
            if s.klass != "idle":
                agent += s.count
            continue
        out.append(_without_agent(s))
    # A thread's context is known once one of its samples is inside a model call; its windows
    # before that were classified without it (the collector cannot see ahead).
    callers = {(s.pid, s.tid) for s in out if in_model_call(s.frames)}
    out = [in_model_context(s, sources) if (s.pid, s.tid) in callers else s for s in out]
    return out, agent


def _spare(stack: StackCount) -> bool:
    """An idle sample of a pipeline worker: it waits for work to do."""
    return stack.klass == "idle" and any(is_worker_loop_frame(f) for f in stack.frames)


def _threads(stacks: Iterable[StackCount]) -> tuple[ThreadStat, ...]:
    per: dict[tuple[int, int], Counter[StackClass]] = defaultdict(Counter)
    names: dict[tuple[int, int], Counter[str]] = defaultdict(Counter)
    for s in stacks:
        key = (s.pid, s.tid)
        per[key][s.klass] += s.count
        if s.thread_name:
            names[key][s.thread_name] += s.count
    stats: list[ThreadStat] = []
    for (pid, tid), counts in per.items():
        n = sum(counts.values())
        name = names[(pid, tid)].most_common(1)[0][0] if names[(pid, tid)] else ""
        stats.append(ThreadStat(pid=pid, tid=tid, name=name, samples=n, split=_split(counts, n)))
    # Busiest first: with --idle every thread has the same sample count, so rank by non-idle.
    stats.sort(key=lambda t: (-(t.samples * (1.0 - t.split["idle"])), -t.samples, t.pid, t.tid))
    return tuple(stats)


def list_threads(
    windows: Sequence[StackWindow], sources: Lines = ABSOLUTE_ONLY
) -> tuple[ThreadStat, ...]:
    """Every (pid, tid) seen in ``windows`` but the agent's, busiest (most non-idle) first."""
    return _threads(_stacks(windows, None, sources)[0])


def _weighted_mean(pairs: Iterable[tuple[float, float | None]]) -> float | None:
    num = den = 0.0
    for weight, value in pairs:
        if value is not None and weight > 0:
            num += weight * value
            den += weight
    return num / den if den > 0 else None


def summarize(
    windows: Sequence[StackWindow],
    tid: int | None = None,
    *,
    top: int = DEFAULT_TOP,
    sources: Lines = ABSOLUTE_ONLY,
) -> StackSummary | None:
    """Aggregate ``windows`` (all threads, or only thread ``tid``); None when nothing was sampled.

    Functions are keyed by (function, file): ``line`` is the line seen most as the innermost frame
    (or anywhere, for a function that is never innermost). ``top`` caps the function table.
    ``sources``: the session's source lines (``analysis.sources``).
    """
    if not windows:
        return None
    every, agent_samples = _stacks(windows, tid, sources)
    threads = _threads(every)
    helpers = {(t.pid, t.tid) for t in threads if t.split["idle"] >= IDLE_THREAD}
    if len(helpers) == len(threads):
        helpers = set()  # an idle process: its threads are all there is to show
    stacks = [s for s in every if (s.pid, s.tid) not in helpers and not _spare(s)]
    total = sum(s.count for s in stacks)
    if total <= 0:
        return None
    host, host_n, setup = _host_split(windows, stacks, sources)

    own: Counter[tuple[str, str]] = Counter()
    anywhere: Counter[tuple[str, str]] = Counter()
    own_lines: dict[tuple[str, str], Counter[int]] = defaultdict(Counter)
    any_lines: dict[tuple[str, str], Counter[int]] = defaultdict(Counter)
    own_class: dict[tuple[str, str], Counter[StackClass]] = defaultdict(Counter)
    any_class: dict[tuple[str, str], Counter[StackClass]] = defaultdict(Counter)
    where: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    classes: Counter[StackClass] = Counter()

    for s in stacks:
        n = s.count
        classes[s.klass] += n
        if not s.frames:
            continue
        leaf = s.frames[-1]
        key = (leaf.function, leaf.filename)
        own[key] += n
        own_lines[key][leaf.line] += n
        own_class[key][s.klass] += n
        label = thread_label(s.thread_name, s.tid)
        seen: set[tuple[str, str]] = set()
        for f in s.frames:
            k = (f.function, f.filename)
            if k in seen:
                continue  # recursion: count a sample once per function
            seen.add(k)
            anywhere[k] += n
            any_lines[k][f.line] += n
            any_class[k][s.klass] += n
            where[k][label] += n

    ranked = sorted(anywhere, key=lambda k: (-own[k], -anywhere[k], k))[: max(0, top)]
    functions: list[FunctionStat] = []
    for k in ranked:
        lines = own_lines[k] if own[k] else any_lines[k]
        klass = (own_class[k] if own[k] else any_class[k]).most_common(1)[0][0]
        functions.append(
            FunctionStat(
                function=k[0],
                filename=k[1],
                line=lines.most_common(1)[0][0],
                own_pct=100.0 * own[k] / total,
                total_pct=100.0 * anywhere[k] / total,
                thread=where[k].most_common(1)[0][0],
                klass=klass,
            )
        )

    durations = [(max(0.0, w.ts_end - w.ts_start) or 1e-9, w) for w in windows]
    sampled = [(d, w) for d, w in durations if w.samples > 0] or durations
    rate = _weighted_mean((d, w.rate_hz) for d, w in sampled)
    return StackSummary(
        ts_start=min(w.ts_start for w in windows),
        ts_end=max(w.ts_end for w in windows),
        thread_samples=total,
        functions=tuple(functions),
        split=_split(classes, total),
        threads=threads,
        rate_hz=rate if rate is not None else windows[-1].rate_hz,
        sampler_cpu=_weighted_mean((d, w.sampler_cpu) for d, w in durations),
        agent_samples=agent_samples,
        idle_threads=len(helpers),
        idle_thread_samples=sum(s.count for s in every) - total,
        host_split=host,
        host_samples=host_n,
        call_setup_share=setup,
    )


def _host_split(
    windows: Sequence[StackWindow], stacks: list[StackCount], sources: Lines
) -> tuple[dict[str, float] | None, int, float | None]:
    """The host split of the thread with the most samples inside model calls (the loop's),
    over the windows in which it called its model (not its imports, nor its setup before the
    loop), its sample count, and the share of its model calls' samples spent on their own
    setup; (None, 0, None) when no thread was seen in one."""
    per: dict[tuple[int, int], list[StackCount]] = defaultdict(list)
    for s in stacks:
        per[(s.pid, s.tid)].append(s)
    key, best = max(per.items(), key=lambda kv: model_samples(kv[1]), default=((0, 0), []))
    if not best or model_samples(best) == 0:
        return None, 0, None
    looping: list[StackCount] = []
    # per distinct stack (by the frames' identity, as ``merged``): its frames without the
    # agent's, and whether they are inside a model call; None for the agent's own samples
    seen: dict[tuple[str, int], tuple[tuple[Frame, ...], bool] | None] = {}
    for w in windows:
        # the agent's own samples (its hooks' bookkeeping, innermost) are the profiler's time,
        # not the loop's: left out before their frames are dropped, or they read as its Python
        mine: list[StackCount] = []
        calls = False
        for c in w.stacks:
            if (c.pid, c.tid) != key or c.count <= 0:
                continue
            ident = (c.thread_name, id(c.frames))
            if ident not in seen:
                user = None if is_agent_stack(c) else _without_agent(c).frames
                seen[ident] = None if user is None else (user, in_model_call(user))
            known = seen[ident]
            if known is not None:
                mine.append(c if known[0] is c.frames else replace(c, frames=known[0]))
                calls = calls or known[1]
        if calls:
            looping += mine
    looping = merged(looping)
    counts = host_counts(looping, sources)
    n = sum(counts.values())
    setup = setup_samples(looping) / max(1, model_samples(looping))
    if n == 0:
        return {k: 0.0 for k in HOST_CLASSES}, 0, setup
    return {k: counts[k] / n for k in HOST_CLASSES}, n, setup


def summarize_by_thread(
    windows: list[StackWindow], sources: Lines = ABSOLUTE_ONLY
) -> tuple[StackSummary | None, dict[int, StackSummary]]:
    """The summary of ``windows`` and one per thread (tid), for the live hub and replay."""
    summary = summarize(windows, sources=sources) if windows else None
    by_thread: dict[int, StackSummary] = {}
    if summary is None:
        return None, by_thread
    # Group once (O(samples)) rather than filter per thread: a torch process has ~150 threads.
    per_tid: dict[int, list[StackWindow]] = {}
    for w in windows:
        groups: dict[int, list[StackCount]] = {}
        for c in w.stacks:
            groups.setdefault(c.tid, []).append(c)
        for tid, counts in groups.items():
            per_tid.setdefault(tid, []).append(replace(w, stacks=tuple(counts)))
    for tid, ws in per_tid.items():
        s = summarize(ws, sources=sources)
        if s is not None:
            by_thread[tid] = s
    return summary, by_thread

"""What a verdict concludes from its measurements, on the committed corpus of real recorded
sessions (``tests/sessions/``, see its README): each judged through the current code against
what its workload measured itself and was built to be (``NAME.truth.json``).

For each session: it opens as a session; the verdict kind is the one the workload was built
with; the input fraction is within 0.10 of the workload's own measure (where it measured one);
a model-call clock's session has its host split; the advice is for the model's framework; and
the final snapshot of a replay, ``record --json`` and the live hub's last verdict (stored in
the file) are one value.
"""

from __future__ import annotations

import re

import pytest
from session_corpus import judged, names, truth

from sofa_top.analysis.steps import model_call
from sofa_top.datamodel.verdict import RANK_VERDICT_KINDS, VERDICT_KINDS, Verdict

TOLERANCE = 0.10  # the live tests' bound on an input fraction against the workload's own
# the advice of one framework that must never reach a model of the other
TF_ONLY = re.compile(r"tf\.data|tf\.function|jit_compile|XLA|tf\.stack")
TORCH_ONLY = re.compile(r"DataLoader|torch\.|num_workers")
SESSIONS = names()


def each(sessions: list[str]) -> list[object]:
    """One parameter per session, each session's tests on one xdist worker (``--dist
    loadgroup``): a session is decompressed and judged once per worker that reads it."""
    return [pytest.param(n, id=n, marks=pytest.mark.xdist_group(f"corpus.{n}")) for n in sessions]


def _evidence(verdict: Verdict) -> dict[str, object]:
    """A verdict's evidence as its JSON has it (the one serializer's keys)."""
    ev = verdict.as_json()["evidence"]
    assert isinstance(ev, dict)
    return ev


def test_the_corpus_covers_what_it_must() -> None:
    """At least 20 sessions: the verdict kinds, launch and attach, the step clocks."""
    truths = [truth(n) for n in SESSIONS]
    assert len(truths) >= 20, SESSIONS
    # memory-pressure (the host's RAM 95% used) is the one kind no recording may do to a shared
    # machine: a session of it, taken on a machine of its own, is still to come
    assert {t["kind"] for t in truths} == set(VERDICT_KINDS) - {"memory-pressure"}
    assert {"launch", "attach", "gpu"} <= {t["recorded"]["mode"] for t in truths}
    clocks = {t["clock"] for t in truths}
    wanted = {
        "tf-eager", "keras-fit", "torch-dataloader", "torch-optimizer", "torch-model-call",
        "keras-model-call", "tf-function-call",
    }  # fmt: skip
    assert wanted <= clocks, clocks
    assert any(t.get("exit_code") for t in truths)  # a failed workload


@pytest.mark.parametrize("name", each(SESSIONS))
def test_a_recorded_session_opens_as_a_session(name: str) -> None:
    got = judged(name)
    assert {"started", "ended"} <= got.meta_keys, sorted(got.meta_keys)


@pytest.mark.parametrize("name", each(SESSIONS))
def test_the_verdict_is_the_kind_the_workload_was_built_with(name: str) -> None:
    want, got = truth(name), judged(name)
    report = got.report["verdict"]
    if want["kind"] in RANK_VERDICT_KINDS:  # the job's, across its ranks
        assert got.report["rank_verdict"]["kind"] == want["kind"], got.report["rank_verdict"]
        if want["kind"] == "straggler":  # it leads the job's verdict
            assert report["kind"] == "straggler", report["headline"]
            assert report["evidence"]["rank"] == want["slow_rank"], report["evidence"]
    else:
        assert report["kind"] == want["kind"], (report["headline"], want["about"])
        assert got.rejudged.kind == want["kind"], (got.rejudged.headline, want["about"])
    if "exit_code" in want:
        assert got.report["exit_code"] == want["exit_code"], got.report["workload_error"]
    if "error" in want:
        assert want["error"] in (got.report["workload_error"] or ""), got.report
    evidence = _evidence(got.rejudged)  # as record --json writes it
    for key in ("device", "cause"):
        if key in want:
            assert evidence.get(key) == want[key], evidence
    if "input_causes" in want:  # the causes its input stage was built with
        assert evidence.get("input_cause") in want["input_causes"], evidence


@pytest.mark.parametrize(
    "name", each([n for n in SESSIONS if "input_fraction" in truth(n)["measured"]])
)
def test_the_input_fraction_is_the_workloads_own(name: str) -> None:
    own = truth(name)["measured"]["input_fraction"]
    steps = judged(name).report["steps"]
    assert steps["input_wait_fraction"] is not None, steps
    assert abs(steps["input_wait_fraction"] - own) <= TOLERANCE, (steps, own)


@pytest.mark.parametrize("name", each(SESSIONS))
def test_the_steps_come_from_the_loops_clock(name: str) -> None:
    want, steps = truth(name), judged(name).report["steps"]
    if want["clock"] is None:
        assert steps["count"] == 0 and steps["reason"], steps
        return
    assert steps["sources"].get(want["clock"], 0) > 0, steps
    if model_call(want["clock"]):
        split = steps["host_split"]
        assert split is not None, steps
        # its shares of the loop's host samples (all 0: none outside the model's calls)
        assert all(0.0 <= v <= 1.0 for v in split.values()), split
        assert abs(sum(split.values()) - 1.0) < 0.01 or sum(split.values()) == 0.0, split


@pytest.mark.parametrize("name", each([n for n in SESSIONS if "phases" in truth(n)]))
def test_evaluation_is_a_phase_of_its_own(name: str) -> None:
    """A loop built with training and evaluation batches: each a phase, the top-level numbers
    training's; the evaluation's fraction against the loop's own where it measured one."""
    want, steps = truth(name), judged(name).report["steps"]
    phases = {p["phase"]: p for p in steps["phases"]}
    assert sorted(phases) == sorted(want["phases"]), steps["phases"]
    assert steps["phase"] == "train" and steps["count"] == phases["train"]["count"], steps
    if "sources" in want:  # the batches it was built with, each a step of its clock
        assert steps["sources"] == want["sources"], steps["sources"]
    own = want["measured"].get("eval_input_fraction")
    if own is not None:
        assert abs(phases["eval"]["input_wait_fraction"] - own) <= TOLERANCE, (phases, own)


@pytest.mark.parametrize("name", each([n for n in SESSIONS if truth(n)["framework"]]))
def test_the_advice_is_for_the_models_framework(name: str) -> None:
    framework, verdict = truth(name)["framework"], judged(name).report["verdict"]
    recs = " | ".join(verdict["recommendations"])
    other = TF_ONLY if framework == "torch" else TORCH_ONLY
    assert not other.search(recs), recs
    if verdict["kind"] == "input-bound":  # its own input API: a DataLoader, tf.data, a PyDataset
        own = r"DataLoader\(" if framework == "torch" else r"tf\.data|PyDataset"
        assert re.search(own, recs), recs


@pytest.mark.parametrize("name", each(SESSIONS))
def test_replay_report_and_the_live_hub_end_on_one_verdict(name: str) -> None:
    """The job's verdict: one (kind, headline) in the three; a distributed job's cross-rank
    verdict: one (kind, rank) (the hub stores a marker when either changes)."""
    got = judged(name)
    assert got.stored is not None, f"{name}: no final verdict stored"
    assert got.replay is not None, f"{name}: a replay at the end shows no verdict"
    report = got.report["verdict"]
    job = report["evidence"].get("job_verdict", report)  # a straggler leads: the job's is kept
    one = {
        "stored": (got.stored.kind, got.stored.headline),
        "replay": (got.replay.kind, got.replay.headline),
        "report": (job["kind"], job["headline"]),
    }
    assert len(set(one.values())) == 1, one
    ranks = got.report["rank_verdict"]
    if ranks is None and got.stored_ranks is None and got.replay_ranks is None:
        return
    one_rank = {
        "stored": None if (v := got.stored_ranks) is None else (v.kind, _evidence(v).get("rank")),
        "replay": None if (v := got.replay_ranks) is None else (v.kind, _evidence(v).get("rank")),
        "report": None if ranks is None else (ranks["kind"], ranks["evidence"].get("rank")),
    }
    assert len(set(one_rank.values())) == 1, one_rank

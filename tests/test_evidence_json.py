"""A verdict's evidence is typed per kind, and its JSON did not move: every rule's verdict writes
byte for byte what the string-keyed evidence wrote (key order included), reads back to the
same JSON, matches ``record.schema.json``, and an older file's evidence still reads."""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from pathlib import Path

import pytest
from evidence_cases import CASES, GOLDEN, judged

from sofa_top.datamodel.evidence_json import evidence_json, parse_evidence
from sofa_top.datamodel.verdict import Verdict
from sofa_top.datamodel.verdict_evidence import (
    BareEvidence,
    ComputeBoundEvidence,
    InputBoundEvidence,
    ProcessEvidence,
    StragglerEvidence,
    UnknownEvidence,
)
from sofa_top.recording.report import SCHEMA_FILE

ROOT = Path(__file__).resolve().parent.parent
WRITTEN = Path(__file__).parent / "data" / "verdict_evidence_written.json"
GOLDEN_JSON: dict[str, str] = json.loads(GOLDEN.read_text())


def _stored() -> list[str]:
    """Every verdict JSON the string-keyed evidence wrote that these tests keep."""
    written: list[str] = json.loads(WRITTEN.read_text())
    return [j for j in (*GOLDEN_JSON.values(), *written) if j != "null"]


def test_every_case_is_kept() -> None:
    assert sorted(GOLDEN_JSON) == sorted(CASES)
    kinds = {json.loads(j)["kind"] for j in _stored()}
    assert kinds == set(typing.get_args(typing.get_type_hints(Verdict)["kind"]))


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_rule_writes_the_json_it_wrote_before(name: str) -> None:
    assert judged()[name] == GOLDEN_JSON[name]


@pytest.mark.parametrize("text", _stored())
def test_stored_json_reads_back_to_itself(text: str) -> None:
    """A session file's verdict, read and written again (``record --json`` of a stored
    verdict), is the same text."""
    v = Verdict.from_json(json.loads(text))
    assert json.dumps(v.as_json()) == text
    assert Verdict.from_json(v.as_json()) == v


def test_the_json_matches_the_schema() -> None:
    import jsonschema

    schema = json.loads(SCHEMA_FILE.read_text())
    verdict = {"$defs": schema["$defs"], "$ref": "#/$defs/verdict"}
    check = jsonschema.Draft202012Validator(verdict)
    for text in _stored():
        check.validate(json.loads(text))


def test_evidence_is_a_union_of_dataclasses() -> None:
    hint = typing.get_type_hints(Verdict)["evidence"]
    members = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    assert len(members) > 1 and all(dataclasses.is_dataclass(m) for m in members)
    # each process kind has its own class, frozen
    kinds = {m.__name__ for m in members}
    assert {"InputBoundEvidence", "StragglerEvidence", "OversubscribedEvidence"} <= kinds
    assert all(m.__dataclass_params__.frozen for m in members)  # type: ignore[attr-defined]


def test_the_typed_fields_say_what_the_json_says() -> None:
    v = CASES["steps input-bound, schedstat cause"]()
    assert v is not None and isinstance(v.evidence, InputBoundEvidence)
    ev, js = v.evidence, v.as_json()["evidence"]
    assert isinstance(js, dict) and ev.input_cause is not None and ev.steps is not None
    assert (ev.input_cause.cause, ev.input_cause.source) == (js["input_cause"], "schedstat")
    assert ev.input_fraction == js["input_fraction"] and ev.steps.steps == js["steps"] == 20
    assert ev.load is not None and ev.load.others_cores == js["others_cores"] == 1.0
    straggler = CASES["straggler"]()
    assert straggler is not None and isinstance(straggler.evidence, StragglerEvidence)
    assert straggler.evidence.rank == 2 and straggler.evidence.job_verdict is not None


def test_an_older_files_evidence_reads_with_neutral_values_and_more_keys_only() -> None:
    old = {
        "input_fraction": "63%",  # ill-typed: dropped
        "steps": 12,
        "gone_key": 1,  # a key this version does not write: dropped
        "input_cause": "cpu",
        "input_cause_source": "sundial",  # not a source: the neutral one
        "device": "tpu",  # not a device: none
    }
    ev = parse_evidence("input-bound", old)
    assert isinstance(ev, InputBoundEvidence) and ev.steps is not None
    assert ev.input_fraction is None and ev.steps.steps == 12
    assert ev.input_cause is not None and ev.input_cause.source == "tree"
    out = evidence_json(ev)
    assert out["steps"] == 12 and out["input_cause"] == "cpu" and "gone_key" not in out
    compute = parse_evidence("compute-bound", {"device": "tpu", "input_fraction": 0.1})
    assert isinstance(compute, ComputeBoundEvidence) and compute.device is None
    # nothing, or not an object: no figures, written back as {}
    for raw in (None, {}, [1, 2], "x"):
        assert parse_evidence("straggler", raw) == BareEvidence()
        assert evidence_json(parse_evidence("idle", raw)) == {}
    # a kind this version does not know reads as unknown, its figures kept
    unknown = Verdict.from_json({"kind": "tpu-bound", "evidence": {"steps_reason": "why"}})
    assert isinstance(unknown.evidence, UnknownEvidence)
    assert unknown.evidence.steps_reason == "why"


# the check: no consumer reads evidence by string
PATTERN = re.compile(r"""\b(ev|evidence)(\.get\(\s*|\[\s*)["']""")
CONSUMERS = ("sofa_top/tui", "sofa_top/metrics", "sofa_top/web", "sofa_top/recording/diff.py")


def test_no_consumer_reads_evidence_by_string() -> None:
    found = []
    for where in CONSUMERS:
        path = ROOT / where
        for f in [path] if path.is_file() else sorted(path.rglob("*.py")):
            for n, line in enumerate(f.read_text().splitlines(), 1):
                if PATTERN.search(line):
                    found.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == []
    assert PATTERN.search('x = ev.get("rank")') and PATTERN.search("evidence['cause']")


def test_the_verdict_panel_derives_no_load_of_its_own() -> None:
    """CPU saturation and GPU use are the evidence's (``analysis.load`` before a verdict)."""
    text = (ROOT / "sofa_top/tui/verdict_panel.py").read_text()
    assert "tree_cpu_percent /" not in text and "100.0 * max(1" not in text
    assert ".util for d in" not in text
    assert isinstance(ProcessEvidence().load, type(None))

"""The header says when the agent was injected into an attached process."""

from __future__ import annotations

import asyncio

from textual.app import App, ComposeResult
from tui_fakes import launch_snapshot, make_snapshot

from sofa_top.datamodel.snapshot import Snapshot
from sofa_top.tui.header import DashboardHeader


def _first_line(snapshot: Snapshot) -> str:
    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield DashboardHeader("/tmp/s.sofa", id="h")

    async def run() -> str:
        app = One()
        async with app.run_test(size=(120, 10)) as pilot:
            header = app.query_one(DashboardHeader)
            header.snapshot = snapshot
            await pilot.pause()
            return header.text_lines()[0].plain

    return asyncio.run(run())


def test_attached_with_an_injected_agent_says_so() -> None:
    assert "agent injected" in _first_line(launch_snapshot(launched=False))


def test_attached_without_agent_and_launched_do_not() -> None:
    assert "agent injected" not in _first_line(make_snapshot())
    assert "agent injected" not in _first_line(launch_snapshot())

"""The docs' pictures of the dashboard, taken from a real run of the bundled PyTorch demo.

    .venv/bin/python scripts/screenshots.py          # rewrites docs/images/*.svg

It starts the demo's workload as ``sofa-top demo torch`` does (a real child process with the
in-process agent, py-spy sampling its stacks), drives the real dashboard headless with
Textual's pilot until the verdict and the steps are in, then saves one SVG per view: the
overview (also the README's picture), the steps view, the log, the help screen and the
optimizer panel. Nothing on them is made up. Needs the torch extra (``pip install -e
'.[torch]'``); sessions go to a scratch data directory, removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from textual.pilot import Pilot

    from sofa_top.tui.app import DashboardApp

IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"
SIZE = (140, 44)  # wide and roomy: every pane at its fuller layout
STEPS_WANTED = 40  # enough steps for the steps chart to fill and the verdict to settle
SETTLE_S = 45.0  # the verdict is judged over ~10 s; the timelines fill most of their 60 s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=IMAGES, help="folder for the SVGs")
    ap.add_argument("--timeout", type=float, default=240.0, help="give up after S seconds")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sofa-top-screens-") as data:
        os.environ["SOFA_TOP_DATA_DIR"] = data
        return asyncio.run(shoot(args.out, args.timeout))


async def shoot(out: Path, timeout: float) -> int:
    from sofa_top.demos import DEMOS
    from sofa_top.launch import LaunchRequest, Sampling, open_launch
    from sofa_top.tui.app import DashboardApp

    cmd = (sys.executable, str(DEMOS["torch"]))
    run = open_launch(LaunchRequest(cmd=cmd, name="demo-torch", sampling=Sampling()))
    app = DashboardApp(run)
    out.mkdir(parents=True, exist_ok=True)
    try:
        async with app.run_test(size=SIZE) as pilot:
            start = time.monotonic()
            while not ready(app, start):
                if time.monotonic() - start > timeout:
                    print("screenshots: the demo gave no verdict in time", file=sys.stderr)
                    return 1
                await pilot.pause(0.5)
            # The hot-functions cursor follows the function under it as the ranks change, and
            # the table scrolls with it: put it on the hottest one, as a user would (Home).
            app.stacks.table.move_cursor(row=0, animate=False)
            await redrawn(pilot)  # a table filled by this snapshot lays out on the next idle
            save(app, out / "dashboard.svg", "sofa-top demo torch")
            for key, name in (("2", "steps"), ("3", "log")):
                await pilot.press(key)
                await redrawn(pilot)
                save(app, out / f"{name}.svg", f"sofa-top: the {name} view")
            await pilot.press("1", "question_mark")
            await redrawn(pilot)
            save(app, out / "help.svg", "sofa-top: help (?)")
            await pilot.press("escape", "o")
            await redrawn(pilot)
            save(app, out / "optimizer.svg", "sofa-top: the optimizer panel (o)")
            await pilot.press("escape")
    finally:
        run.finish("screenshots taken")
    return 0


def ready(app: DashboardApp, start: float) -> bool:
    """The dashboard shows a judged verdict over enough steps, after the settling time."""
    shown = app.shown
    if shown is None or shown.verdict is None or shown.verdict.kind == "unknown":
        return False
    return len(shown.steps) >= STEPS_WANTED and time.monotonic() - start >= SETTLE_S


async def redrawn(pilot: Pilot[Any]) -> None:
    """Two snapshots' time: a view switched to draws from the next one."""
    await pilot.pause(2.5)


def save(app: DashboardApp, path: Path, title: str) -> None:
    svg = app.export_screenshot(title=title)
    path.write_text(svg, encoding="utf-8")
    print(f"wrote {path} ({len(svg) // 1024} KiB)")


if __name__ == "__main__":
    raise SystemExit(main())

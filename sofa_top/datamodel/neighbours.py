"""A process outside the target's tree (the process collector's ``neighbours`` scan), one
shape for the samples and for a verdict's evidence that names it."""

from __future__ import annotations

from dataclasses import dataclass

from sofa_top.datamodel.units import Pid


@dataclass(frozen=True, slots=True)
class Neighbour:
    """A process outside the target's tree and what of the machine's cores it kept busy."""

    pid: Pid
    name: str
    cores: float

"""What an input pipeline is made of, as the advice needs it: which stages it has and which of
them run serially. Advice may only name a parameter of a stage the pipeline has."""

from __future__ import annotations

from dataclasses import dataclass

from sofa_top.datamodel.samples import PipelineSample, PipelineStage

# A stage kind whose parallelism a parameter of that stage sets.
PARALLEL_KINDS = ("map", "interleave", "source", "iterable", "py_dataset", "generator")


@dataclass(frozen=True)
class PipelineView:
    """A pipeline's stages by kind (outermost first within each kind)."""

    framework: str  # "tf.data", "torch" or "" (no pipeline known)
    stages: tuple[PipelineStage, ...] = ()

    def of(self, *kinds: str) -> list[PipelineStage]:
        """The stages of these kinds."""
        return [s for s in self.stages if s.kind in kinds]

    def has(self, *kinds: str) -> bool:
        """Whether a stage of one of these kinds is there."""
        return bool(self.of(*kinds))

    def serial(self, *kinds: str) -> list[PipelineStage]:
        """Stages of these kinds that run one element at a time (parallelism 1)."""
        return [s for s in self.of(*kinds) if s.parallelism == 1]

    @property
    def bottleneck(self) -> PipelineStage | None:
        """The stage the agent marked as the slowest, if any."""
        return next((s for s in self.stages if s.is_bottleneck), None)

    @property
    def source(self) -> PipelineStage | None:
        """The innermost stage that produces data (a DataLoader's dataset, a generator)."""
        found = self.of("source", "iterable", "generator", "py_dataset")
        return found[-1] if found else None

    @property
    def workers(self) -> int:
        """DataLoader workers (0: it loads in the training loop's own process)."""
        src = self.of("source", "iterable")
        if self.framework != "torch" or not src:
            return 0
        # the agent reports max(workers, 1): a single loading process is "0 workers" unless the
        # worker prefetch stage says there are workers
        return (src[0].parallelism or 0) if self.has("prefetch") else 0

    @property
    def serial_source(self) -> PipelineStage | None:
        """A source that no setting of the pipeline's own parallelism speeds up: a serial
        ``from_generator``, a Keras PyDataset with one worker, a DataLoader over an
        IterableDataset without workers (workers need it to shard first)."""
        src = self.source
        if src is None:
            return None
        if src.kind == "generator" and (src.parallelism or 1) <= 1:
            return src
        if src.kind == "py_dataset" and (src.parallelism or 1) <= 1:
            return src
        if src.kind == "iterable" and self.workers == 0:
            return src
        return None


def view(p: PipelineSample | None) -> PipelineView:
    """The advice's view of ``p`` (an empty one when no pipeline is known)."""
    if p is None:
        return PipelineView("")
    return PipelineView(p.framework, tuple(p.stages))

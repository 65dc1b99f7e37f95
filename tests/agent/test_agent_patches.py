"""core.Patches: every change the agent makes is undone exactly at detach."""

from __future__ import annotations

from sofa_top.agent.patches import Patches


class Base:
    def inherited(self) -> str:
        return "base"


class Loader(Base):
    def __next__(self) -> str:
        return "orig"

    @staticmethod
    def helper() -> str:
        return "static"


def test_own_attributes_are_set_back_and_inherited_ones_removed() -> None:
    own, static = Loader.__dict__["__next__"], Loader.__dict__["helper"]
    p = Patches()
    p.set(Loader, "__next__", lambda self: "hooked")
    p.set(Loader, "inherited", lambda self: "hooked")
    p.set(Loader, "helper", staticmethod(lambda: "hooked"))
    it = Loader()
    assert next(it) == "hooked" and it.inherited() == "hooked" and Loader.helper() == "hooked"
    assert p.restore() == []
    assert Loader.__dict__["__next__"] is own and Loader.__dict__["helper"] is static
    assert "inherited" not in Loader.__dict__ and it.inherited() == "base"
    assert next(it) == "orig"  # an iterator made before the patch sees the original again


def test_instance_attributes_and_undo_callbacks() -> None:
    it = Loader()
    removed: list[str] = []
    p = Patches()
    p.set(it, "train_function", "wrapped")
    p.on_detach("a hook handle", lambda: removed.append("handle"))
    assert len(p) == 2
    assert p.restore() == []
    assert not hasattr(it, "train_function") and removed == ["handle"]


def test_a_patch_someone_else_replaced_is_left_alone_and_failures_are_reported() -> None:
    own = Loader.__dict__["__next__"]
    p = Patches()
    p.set(Loader, "__next__", lambda self: "ours")
    theirs = lambda self: "theirs"  # noqa: E731
    Loader.__next__ = theirs  # type: ignore[method-assign]
    p.on_detach("broken", lambda: 1 / 0)  # type: ignore[func-returns-value]
    problems = p.restore()
    assert Loader.__dict__["__next__"] is theirs
    assert len(problems) == 1 and problems[0].startswith("broken: ZeroDivisionError")
    Loader.__next__ = own  # type: ignore[method-assign]

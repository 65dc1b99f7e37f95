"""Apply hook installers right after the workload imports the modules they patch (stdlib only).

``PostImportHooks`` sits first on ``sys.meta_path``: when the workload imports a watched module,
the real loader runs, the module is put back exactly as it would have been, and then the
installers run on it. Modules already imported (attach mode) are hooked at ``install``.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from sofa_top.agent.core import Agent, HookSkipped

if TYPE_CHECKING:
    from sofa_top.agent.core import Installer


class _HookingLoader(importlib.abc.Loader):
    """Runs the real loader, puts it back on the module, then calls the hook installer."""

    def __init__(
        self,
        loader: importlib.abc.Loader,
        spec: importlib.machinery.ModuleSpec,
        after: Callable[[ModuleType], None],
    ) -> None:
        self._loader = loader
        self._spec = spec
        self._after = after

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module: ModuleType) -> None:
        try:
            self._loader.exec_module(module)
        finally:
            # from here on the module looks exactly as if we had never been there
            self._spec.loader = self._loader
            module.__loader__ = self._loader
        self._after(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class PostImportHooks(importlib.abc.MetaPathFinder):
    """Applies installers right after the workload itself imports the watched modules."""

    def __init__(
        self, agent: Agent, installers: dict[str, Sequence[tuple[str, Installer]]]
    ) -> None:
        self._agent = agent
        self._pending = dict(installers)

    def install(self) -> None:
        """Put the finder first on sys.meta_path, and apply hooks of already-imported modules."""
        for name in list(self._pending):
            mod = sys.modules.get(name)
            if mod is not None:
                self._apply(name, mod)
        if self._pending:
            sys.meta_path.insert(0, self)

    def uninstall(self) -> None:
        """Stop watching imports (detach): off sys.meta_path, nothing left pending."""
        self._pending.clear()
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self._pending:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return None
        spec.loader = _HookingLoader(loader, spec, lambda m: self._apply(fullname, m))
        return spec  # type: ignore[no-any-return]

    def _apply(self, name: str, module: ModuleType) -> None:
        if self._agent.detached:
            return
        entries = self._pending.pop(name, ())
        if not self._pending:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self)
        for hook, installer in entries:
            if self._agent.is_disabled(hook):
                continue
            try:
                installer(self._agent, module)
            except HookSkipped as e:
                self._agent.hook_skipped(hook, str(e))
            except Exception as e:
                self._agent.hook_skipped(hook, f"install failed: {e!r}")

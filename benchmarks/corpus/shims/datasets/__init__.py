"""A stand-in for Hugging Face ``datasets`` (no hub access here): ``load_dataset`` gives
synthetic rows for the two hub datasets the corpus names, as a list-backed ``Dataset`` (or, with
``streaming=True``, an ``IterableDataset``) with the few methods the corpus scripts call.

transformers' Trainer finds it (by module spec) and treats ``Dataset`` as a datasets.Dataset:
it reads ``__version__`` and calls ``remove_columns``."""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from typing import Any

from datasets.utils import logging  # noqa: F401  (datasets.utils.logging.set_verbosity_*)

__version__ = "4.0.0+corpus-shim"  # transformers' Trainer compares it (>= 1.4: remove_columns)

_COMPLEXITIES = ["constant", "linear", "logn", "nlogn", "quadratic", "cubic", "np"]
_WORDS = [
    "int",
    "for",
    "while",
    "if",
    "else",
    "return",
    "public",
    "static",
    "void",
    "class",
    "new",
    "String",
    "List",
    "Map",
    "import",
    "def",
    "self",
    "None",
    "True",
    "False",
    "in",
    "range",
    "len",
    "print",
    "append",
    "yield",
    "lambda",
    "try",
    "except",
    "with",
    "as",
    "i",
    "j",
    "k",
    "n",
    "x",
    "y",
    "value",
    "result",
    "count",
    "index",
    "data",
    "items",
    "key",
    "left",
    "right",
    "mid",
    "sum",
    "max",
    "min",
    "sort",
]


def _code(rng: random.Random, n_words: int) -> str:
    lines = []
    while n_words > 0:
        k = rng.randint(3, 12)
        lines.append("    " * rng.randint(0, 3) + " ".join(rng.choices(_WORDS, k=k)))
        n_words -= k
    return "\n".join(lines)


def _rows(name: str, n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    if "codecomplex" in name:
        return [
            {
                "src": _code(rng, rng.randint(40, 200)),
                "complexity": rng.choice(_COMPLEXITIES),
                "problem": f"p{i}",
                "from": "CODEFORCES",
            }
            for i in range(n)
        ]
    return [{"content": _code(rng, rng.randint(100, 600)), "repo_name": f"r{i}"} for i in range(n)]


class Dataset:
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self._rows = rows

    @property
    def column_names(self) -> list[str]:
        return list(self._rows[0]) if self._rows else []

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            return [r[key] for r in self._rows]
        return self._rows[key]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._rows)

    def remove_columns(self, columns: str | list[str]) -> Dataset:
        drop = {columns} if isinstance(columns, str) else set(columns)
        return Dataset([{k: v for k, v in r.items() if k not in drop} for r in self._rows])

    def train_test_split(self, test_size: float = 0.25, seed: int = 0) -> DatasetDict:
        rows = list(self._rows)
        random.Random(seed).shuffle(rows)
        k = int(len(rows) * test_size)
        return DatasetDict({"train": Dataset(rows[k:]), "test": Dataset(rows[:k])})

    def map(
        self,
        fn: Callable[[Any], dict[str, Any]],
        batched: bool = False,
        batch_size: int = 1000,
        remove_columns: list[str] | None = None,
        **_: Any,
    ) -> Dataset:
        drop = set(remove_columns or ())
        out: list[dict[str, Any]] = []
        if not batched:
            for r in self._rows:
                new = {k: v for k, v in r.items() if k not in drop}
                new.update(fn(r))
                out.append(new)
            return Dataset(out)
        for i in range(0, len(self._rows), batch_size):
            chunk = self._rows[i : i + batch_size]
            cols = {k: [r[k] for r in chunk] for k in chunk[0]}
            res = fn(cols)
            for j, r in enumerate(chunk):
                new = {k: v for k, v in r.items() if k not in drop}
                new.update({k: v[j] for k, v in res.items()})
                out.append(new)
        return Dataset(out)


class DatasetDict(dict):  # type: ignore[type-arg]
    def map(self, fn: Callable[[Any], dict[str, Any]], **kw: Any) -> DatasetDict:
        return DatasetDict({k: v.map(fn, **kw) for k, v in self.items()})


class IterableDataset:
    def __init__(self, rows: list[dict[str, Any]], seed: int | None = None) -> None:
        self._rows = rows
        self._seed = seed

    def shuffle(self, buffer_size: int = 1000, seed: int | None = None) -> IterableDataset:
        return IterableDataset(self._rows, seed)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        rows = list(self._rows)
        if self._seed is not None:
            random.Random(self._seed).shuffle(rows)
        yield from rows


class ClassLabel:
    def __init__(self, num_classes: int | None = None, names: list[str] | None = None) -> None:
        self.names = list(names or [str(i) for i in range(num_classes or 0)])
        self.num_classes = len(self.names)

    def str2int(self, v: str | list[str]) -> int | list[int]:
        if isinstance(v, list):
            return [self.names.index(x) for x in v]
        return self.names.index(v)


def load_dataset(name: str, split: str | None = None, streaming: bool = False, **_: Any) -> Any:
    """Synthetic rows: ``CORPUS_SHIM_ROWS`` of them (default 1000)."""
    n = int(os.environ.get("CORPUS_SHIM_ROWS", "1000"))
    rows = _rows(name, n, seed=hash(name) % 1000)
    ds: Any = IterableDataset(rows) if streaming else Dataset(rows)
    return ds if split is not None else DatasetDict({"train": ds})

"""depth_first: results, gradients and BatchNorm state equal the untouched model's."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.fx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import Tensor, nn

from sofa_top.optimizers import depth_first, depth_first_report
from sofa_top.optimizers.cache import (
    FALLBACK_L2,
    FALLBACK_L3,
    default_chunk_bytes,
    parse_size,
    read_cache_sizes,
)

pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.*:DeprecationWarning")

RTOL, ATOL = 1e-5, 1e-6
SMALL = 1024  # bytes: forces many chunks even on tiny test tensors


def test_the_package_name_is_the_function_however_it_was_loaded() -> None:
    """``sofa_top.optimizers`` loads depth_first lazily (the CLI imports the package, and must
    not import torch); whoever imports the submodule first (the agent does, by name), the
    package's ``depth_first`` stays the function."""
    import subprocess
    import sys

    code = (
        "import importlib, sys\n"
        "import sofa_top.optimizers\n"
        "assert 'torch' not in sys.modules\n"
        "sub = importlib.import_module('sofa_top.optimizers.depth_first')\n"
        "from sofa_top.optimizers import depth_first, depth_first_report\n"
        "assert depth_first is sub.depth_first and callable(depth_first), depth_first\n"
        "assert depth_first_report is sub.depth_first_report\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["ok"], out.stderr


# ----------------------------------------------------------------------------- models


def vgg_bn() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(inplace=True),
        nn.Conv2d(8, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2, 2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.BatchNorm2d(16, momentum=None),  # cumulative average: uses num_batches_tracked
        nn.LeakyReLU(0.2),
        nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True),
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 32),
        nn.BatchNorm1d(32),
        nn.GELU(),
        nn.Dropout(0.3),
        nn.Linear(32, 5),
    )


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock: one ReLU module used twice, ``out += identity``."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x: Tensor) -> Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)  # type: ignore[no-any-return]


def resnet_like() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, stride=2, padding=1),
        BasicBlock(),
        BasicBlock(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    )


def randomize_bn(model: nn.Module, seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if not isinstance(m, nn.modules.batchnorm._BatchNorm):
                continue
            if m.running_mean is not None and m.running_var is not None:
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.2)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            if m.affine:
                m.weight.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=gen) * 0.1)


# ----------------------------------------------------------------------------- helpers


def close(a: Tensor, b: Tensor, what: str, rtol: float = RTOL, atol: float = ATOL) -> None:
    torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def check_step(
    model: nn.Module, ref: nn.Module, x: Tensor, train: bool, seed: int = 0, atol: float = ATOL
) -> None:
    """One forward+backward on both models: outputs, input/param grads, buffers agree."""
    model.train(train)
    ref.train(train)
    xa = x.clone().requires_grad_()
    xb = x.clone().requires_grad_()
    torch.manual_seed(seed)
    out_a = model(xa)
    torch.manual_seed(seed)
    out_b = ref(xb)
    close(out_a, out_b, "output", atol=atol)
    weights = torch.randn(out_b.shape, generator=torch.Generator().manual_seed(1))
    (out_a * weights).sum().backward()
    (out_b * weights).sum().backward()
    assert xa.grad is not None and xb.grad is not None
    close(xa.grad, xb.grad, "input grad", atol=atol)
    for (name, pa), pb in zip(model.named_parameters(), ref.parameters(), strict=True):
        assert pa.grad is not None and pb.grad is not None, name
        close(pa.grad, pb.grad, f"grad of {name}", rtol=1e-4, atol=1e-5)
    for (name, ba), bb in zip(model.named_buffers(), ref.named_buffers(), strict=True):
        close(ba, bb[1], f"buffer {name}")
    model.zero_grad()
    ref.zero_grad()


def chunked_runs(model: nn.Module) -> int:
    return sum(d.chunked for r in depth_first_report(model) for d in r.decisions)


# ----------------------------------------------------------------------------- architectures


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_vgg_bn_matches_original(train: bool) -> None:
    torch.manual_seed(0)
    model = vgg_bn()
    randomize_bn(model)
    ref = copy.deepcopy(model)
    keys = list(model.state_dict())
    params = list(model.parameters())
    # 64 bytes: even the [4, 32] BatchNorm1d run is split (into 16 or 4 channels per chunk)
    assert depth_first(model, chunk_bytes=64) is model
    assert list(model.state_dict()) == keys
    assert all(a is b for a, b in zip(model.parameters(), params, strict=True))
    runs = depth_first_report(model)
    assert [r.layers for r in runs] == [
        ("1", "2"),
        ("4", "5", "6"),
        ("8", "9", "10"),
        ("13", "14", "15"),
    ]
    x = torch.randn(4, 3, 16, 16)
    for step in range(3):  # running stats and num_batches_tracked accumulate over steps
        check_step(model, ref, x + step, train, seed=step)
    assert chunked_runs(model) == 4
    splits = {d.split for r in depth_first_report(model) for d in r.decisions}
    assert splits == ({"channels"} if train else {"batch+channels"})


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_resnet_block_with_residual_add(train: bool) -> None:
    torch.manual_seed(0)
    model = resnet_like()
    randomize_bn(model)
    ref = copy.deepcopy(model)
    depth_first(model, chunk_bytes=SMALL)
    layers = [r.layers for r in depth_first_report(model)]
    # the residual add and the final ReLU join bn2 in one fx run, with the block input as a side
    # input; the shared ReLU module appears in two runs
    assert ("4.bn2", "4.<add>", "4.relu") in layers
    assert ("4.bn1", "4.relu") in layers
    assert ("1", "2", "3") in layers
    assert {r.source for r in depth_first_report(model)} == {"fx"}
    x = torch.randn(3, 3, 12, 12)
    for step in range(2):
        check_step(model, ref, x * (step + 1), train, seed=step)
    assert chunked_runs(model) == len(layers)


def test_model_without_eligible_layers_is_unchanged() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Conv2d(4, 4, 3), nn.Flatten(), nn.Linear(16, 2))
    before = dict(model.__dict__)
    assert depth_first(model, chunk_bytes=SMALL) is model
    assert depth_first_report(model) == []
    assert model.__dict__.keys() == before.keys()  # no forward override, no runs attribute


def test_single_eligible_layer_is_not_a_run() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3), nn.Identity())
    depth_first(model)
    assert depth_first_report(model) == []


class Untraceable(nn.Module):
    """Data-dependent control flow: fx cannot trace it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(6, 6, 1)

    def forward(self, x: Tensor) -> Tensor:
        if x.sum() > 0:
            return self.conv(x)  # type: ignore[no-any-return]
        return -x


@pytest.mark.parametrize("use_fx", [True, False])
def test_sequential_path(use_fx: bool) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1),
        nn.BatchNorm2d(6),
        nn.Hardswish(),
        nn.Dropout(0.25),
        nn.MaxPool2d(2),
        Untraceable(),
        nn.BatchNorm2d(6),
        nn.ELU(),
        nn.Sigmoid(),
        nn.Identity(),
        nn.Tanh(),
        nn.ReLU6(),
        nn.SiLU(),
    )
    randomize_bn(model)
    ref = copy.deepcopy(model)
    depth_first(model, chunk_bytes=SMALL, use_fx=use_fx)
    runs = depth_first_report(model)
    assert [r.layers for r in runs] == [("1", "2", "3", "4"), tuple(str(i) for i in range(6, 13))]
    assert {r.source for r in runs} == {"fx" if use_fx else "sequential"}
    assert model[5].forward.__func__ is Untraceable.forward  # untraceable child left alone
    x = torch.randn(2, 3, 8, 8)
    check_step(model, ref, x, train=True, seed=3)
    check_step(model, ref, x, train=False)


def test_mlp_batchnorm1d() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(10, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3)
    )
    ref = copy.deepcopy(model)
    depth_first(model, chunk_bytes=64)
    x = torch.randn(12, 10)
    check_step(model, ref, x, train=True, seed=7)
    check_step(model, ref, x, train=False)
    assert chunked_runs(model) == 2


# ----------------------------------------------------------------------------- exactness details


def test_training_dropout_is_bit_identical_and_consumes_rng_like_eager() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 1), nn.ReLU(), nn.Dropout(0.4), nn.SiLU(), nn.Dropout(0.2)
    )
    ref = copy.deepcopy(model)
    depth_first(model, chunk_bytes=SMALL)
    x = torch.randn(4, 3, 10, 10)
    torch.manual_seed(11)
    a = model(x)
    after_a = torch.rand(3)
    torch.manual_seed(11)
    b = ref(x)
    after_b = torch.rand(3)
    assert torch.equal(a, b)
    assert torch.equal(after_a, after_b)
    assert chunked_runs(model) == 1


def test_inplace_first_layer_on_caller_input_keeps_semantics() -> None:
    # The original ReLU(inplace=True) overwrites the caller's tensor; it must stay outside the
    # run (a chunked run would not mutate), while BN+ReLU after it still form a run.
    model = nn.Sequential(nn.ReLU(inplace=True), nn.BatchNorm2d(4), nn.ReLU()).eval()
    ref = copy.deepcopy(model)
    depth_first(model, chunk_bytes=SMALL)
    assert [r.layers for r in depth_first_report(model)] == [("1", "2")]
    xa = torch.randn(2, 4, 6, 6)
    xb = xa.clone()
    with torch.no_grad():
        close(model(xa), ref(xb), "output")
    assert torch.equal(xa, xb)
    assert (xa >= 0).all()


def test_broadcast_side_input_takes_original_path() -> None:
    class Bias(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = nn.BatchNorm2d(4)
            self.bias = nn.Parameter(torch.randn(4, 1, 1))

        def forward(self, x: Tensor) -> Tensor:
            return torch.relu(self.bn(x) + self.bias)

    model = Bias().eval()
    ref = copy.deepcopy(model)
    depth_first(model, chunk_bytes=SMALL)
    x = torch.randn(3, 4, 5, 5)
    check_step(model, ref, x, train=False)
    (decision,) = depth_first_report(model)[0].decisions
    assert not decision.chunked and "broadcast" in decision.reason


def test_small_batch_eval_splits_channels() -> None:
    model = nn.Sequential(nn.BatchNorm2d(16), nn.ReLU()).eval()
    ref = copy.deepcopy(model)
    depth_first(model, chunk_bytes=4 * 8 * 8 * 4)
    x = torch.randn(1, 16, 8, 8)
    with torch.no_grad():
        close(model(x), ref(x), "output")
    (decision,) = depth_first_report(model)[0].decisions
    assert decision.split == "channels" and decision.tile == (1, 4)


def test_errors_of_the_original_are_kept() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU())
    depth_first(model, chunk_bytes=4)
    x = torch.randn(1, 3)
    model.eval()
    model(x)  # fine in eval: running stats
    model.train()
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        model(x)
    with pytest.raises(RuntimeError):
        model(torch.randn(2, 5))  # wrong feature count, raised by Linear as before


def test_mode_dependent_forward_is_not_rewritten() -> None:
    class Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = nn.BatchNorm2d(3)
            self.act = nn.ReLU()
            self.inner = nn.Sequential(nn.BatchNorm2d(3), nn.GELU())

        def forward(self, x: Tensor) -> Tensor:
            x = self.act(self.bn(x))
            if self.training:
                x = x * 2
            return self.inner(x)  # type: ignore[no-any-return]

    model = Branchy()
    ref = copy.deepcopy(model)
    depth_first(model, chunk_bytes=SMALL)
    assert "forward" not in model.__dict__
    assert [r.layers for r in depth_first_report(model)] == [("inner.0", "inner.1")]
    x = torch.randn(2, 3, 6, 6)
    check_step(model, ref, x, train=True)
    check_step(model, ref, x, train=False)


def test_layers_with_hooks_stay_outside_runs() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.ReLU(), nn.Tanh())
    calls: list[tuple[int, ...]] = []
    model[2].register_forward_hook(lambda m, i, o: calls.append(tuple(o.shape)))
    depth_first(model, chunk_bytes=SMALL)
    assert depth_first_report(model) == []  # BN | hooked ReLU | Tanh: no run of two
    model(torch.randn(2, 3, 5, 5))
    assert calls == [(2, 4, 5, 5)]


def test_copy_state_dict_and_idempotence() -> None:
    torch.manual_seed(0)
    model = resnet_like()
    randomize_bn(model)
    fresh = copy.deepcopy(model)
    depth_first(model, chunk_bytes=SMALL)
    n_runs = len(depth_first_report(model))
    depth_first(model, chunk_bytes=SMALL)
    assert len(depth_first_report(model)) == n_runs
    clone = copy.deepcopy(model)
    x = torch.randn(2, 3, 8, 8)
    clone.eval()
    model.eval()
    fresh.eval()
    with torch.no_grad():
        close(clone(x), fresh(x), "deepcopy of transformed model")
        other = resnet_like().eval()
        other.load_state_dict(model.state_dict())
        close(other(x), model(x), "state_dict round trip")


# ----------------------------------------------------------------------------- tuning


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_tuning_records_a_measured_decision_and_changes_nothing(train: bool) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 1),
        nn.BatchNorm2d(16),
        nn.ReLU(inplace=True),
        nn.Dropout(0.3),
        nn.MaxPool2d(2),
    )
    randomize_bn(model)
    ref = copy.deepcopy(model)
    depth_first(model)  # tune=True, cache-derived sizes
    # Big enough that the cache-derived chunk (>= 32 KiB) splits it.
    x = torch.randn(8, 3, 64, 64)
    check_step(model, ref, x, train=train, seed=5)  # tuning restored BN stats and the RNG
    (run,) = depth_first_report(model)
    (decision,) = run.decisions
    assert decision.speedup is not None and decision.speedup > 0
    assert decision.tile is not None
    assert decision.reason in ("measured faster", "chunking not faster: original kept")
    assert decision.chunked == (decision.speedup >= 1.05)
    assert decision.mode == ("train" if train else "eval")


def test_no_tuning_while_tracing() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2))
    model.eval()
    depth_first(model)
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        traced = torch.jit.trace(model, x, check_trace=False)
    assert depth_first_report(model)[0].decisions == ()
    graph_module = torch.fx.symbolic_trace(model)
    assert depth_first_report(model)[0].decisions == ()
    ref = copy.deepcopy(model)
    with torch.no_grad():
        close(traced(x), ref(x), "jit.trace of transformed model")
        close(graph_module(x), ref(x), "fx trace of transformed model")


def test_compiled_module_is_rejected() -> None:
    model = nn.Sequential(nn.BatchNorm2d(3), nn.ReLU())
    with pytest.raises(ValueError, match=r"torch\.compile"):
        depth_first(torch.compile(model))
    inner = nn.Sequential(nn.BatchNorm2d(3), nn.ReLU())
    inner.compile()
    with pytest.raises(ValueError, match="mutually exclusive"):
        depth_first(nn.Sequential(nn.Conv2d(3, 3, 1), inner))


@pytest.fixture
def two_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("two_threads")
@pytest.mark.parametrize("context", ["no_grad", "inference_mode"])
def test_worker_threads_for_inference_chunks(context: str) -> None:
    torch.manual_seed(0)
    model = vgg_bn().eval()
    randomize_bn(model)
    ref = copy.deepcopy(model)
    depth_first(model, chunk_bytes=64, parallel_chunks=True)
    x = torch.randn(5, 3, 16, 16)
    guard = torch.no_grad() if context == "no_grad" else torch.inference_mode()
    with guard:
        close(model(x), ref(x), "output")
    decisions = [d for r in depth_first_report(model) for d in r.decisions]
    assert decisions and all(d.workers == 2 and d.chunked for d in decisions)
    # The workers run single-threaded ops; neither this thread nor threads started later
    # may inherit that.
    assert torch.get_num_threads() == 2
    seen: list[int] = []
    worker = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    worker.start()
    worker.join()
    assert seen == [2]
    # With autograd the chunks stay on the calling thread.
    model.train()
    ref.train()
    check_step(model, ref, x, train=True)
    assert all(d.workers == 0 for r in depth_first_report(model) for d in r.decisions if d.grad)


@pytest.mark.usefixtures("two_threads")
def test_worker_error_reaches_the_caller() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.ReLU()).eval()
    depth_first(model, chunk_bytes=SMALL, parallel_chunks=True)
    (run,) = model.__dict__["_depth_first_runs"]
    run.ops[1].act = "no-such-activation"  # the workers' chunks raise AssertionError
    with torch.no_grad(), pytest.raises(AssertionError, match="no-such-activation"):
        model(torch.randn(4, 3, 8, 8))
    run.ops[1].act = "relu"
    with torch.no_grad():
        model(torch.randn(4, 3, 8, 8))  # the workers survived the error


# ----------------------------------------------------------------------------- properties


def chain_model(kind: int) -> nn.Module:
    if kind == 0:
        return nn.Sequential(
            nn.BatchNorm2d(9),
            nn.ReLU(),
            nn.MaxPool2d(3, stride=1, padding=1),
            nn.BatchNorm2d(9, affine=False),
            nn.GELU(),
            nn.AvgPool2d(2, ceil_mode=True),
        )
    if kind == 1:
        return BNNoStats()
    return ResidualChain()


class BNNoStats(nn.Module):
    """Batch statistics even in eval mode (no running stats): must split by channels."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(9, track_running_stats=False)
        self.pool = nn.AdaptiveMaxPool2d(2)

    def forward(self, x: Tensor) -> Tensor:
        return self.pool(torch.sigmoid(self.bn(x)))  # type: ignore[no-any-return]


class ResidualChain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(9)

    def forward(self, x: Tensor) -> Tensor:
        y = torch.nn.functional.leaky_relu(self.bn(x), 0.1) + x
        return torch.tanh(y.relu() + 1.0)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    kind=st.integers(0, 2),
    batch=st.integers(1, 5),
    channels=st.integers(1, 9),
    height=st.integers(2, 9),
    width=st.integers(2, 9),
    chunk_bytes=st.integers(1, 4096),
    train=st.booleans(),
    parallel=st.booleans(),
)
def test_property_chunked_equals_original(
    kind: int,
    batch: int,
    channels: int,
    height: int,
    width: int,
    chunk_bytes: int,
    train: bool,
    parallel: bool,
) -> None:
    torch.manual_seed(batch * 100 + channels)
    model = chain_model(kind)
    model = _resize_channels(model, channels)
    randomize_bn(model, seed=channels)
    ref = copy.deepcopy(model)
    depth_first(model, chunk_bytes=chunk_bytes, parallel_chunks=parallel)
    x = torch.randn(batch, channels, height, width) * 3
    check_step(model, ref, x, train=train, atol=1e-5)
    # without autograd: in-place scratch ops, preallocated output, worker threads if parallel
    model.train(train)
    ref.train(train)
    with torch.no_grad():
        close(model(x), ref(x), "no-grad output", atol=1e-5)


def _resize_channels(model: nn.Module, channels: int) -> nn.Module:
    for name, m in list(model.named_modules()):
        if isinstance(m, nn.BatchNorm2d):
            new = nn.BatchNorm2d(
                channels, affine=m.affine, track_running_stats=m.track_running_stats
            )
            parent = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
            setattr(parent, name.rpartition(".")[2], new)
    return model


# ----------------------------------------------------------------------------- cache sizes


def _fake_sysfs(root: Path, entries: list[tuple[int, str, str]]) -> Path:
    for i, (level, kind, size) in enumerate(entries):
        d = root / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    return root


def test_cache_sizes_from_sysfs(tmp_path: Path) -> None:
    root = _fake_sysfs(
        tmp_path,
        [
            (1, "Data", "48K"),
            (1, "Instruction", "32K"),
            (2, "Unified", "2048K"),
            (3, "Unified", "36M"),
        ],
    )
    sizes = read_cache_sizes(root)
    assert (sizes.l1d, sizes.l2, sizes.l3, sizes.source) == (48 << 10, 2 << 20, 36 << 20, "sysfs")
    assert default_chunk_bytes(threads=4, sizes=sizes) == 4 << 20
    assert default_chunk_bytes(threads=64, sizes=sizes) == 9 << 20  # capped at L3/4


def test_cache_sizes_fallback(tmp_path: Path) -> None:
    sizes = read_cache_sizes(tmp_path / "missing")
    assert (sizes.l2, sizes.l3, sizes.source) == (FALLBACK_L2, FALLBACK_L3, "fallback")
    assert parse_size("512K") == 512 << 10 and parse_size("8M") == 8 << 20
    assert parse_size("4096") == 4096

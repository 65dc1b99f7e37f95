"""Start the agent in this process: connect to sofa-top, register the hooks (stdlib only).

``start`` is what the injected ``sitecustomize`` calls (launch mode); ``attach`` is what the
attach bootstrap (``inject/attach.py``) calls in a process that is already running. The
hooks' installers are listed here, above ``core`` (which the hook modules build on), so that
nothing in the agent imports in a circle.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sofa_top.agent import (
    clocks,
    core,
    hooks_cuda,
    hooks_dist,
    hooks_keras,
    hooks_model,
    hooks_tf,
    hooks_torch,
    midrun,
    optimize,
    output,
    probes,
    protocol,
)
from sofa_top.agent.core import Agent, log_once
from sofa_top.agent.post_import import PostImportHooks
from sofa_top.agent.settings import ENV_SETTINGS, ENV_SOCKET, AgentSettings, parse_settings
from sofa_top.agent.transport import Connection

if TYPE_CHECKING:
    from sofa_top.agent.core import Installer


def installers() -> dict[str, Sequence[tuple[str, Installer]]]:
    """The agent's own hooks: the module each waits for, its name and its installer."""
    return {
        "tensorflow.python.data.ops.iterator_ops": [(clocks.TF_EAGER, hooks_tf.install_eager)],
        "tensorflow.python.data.ops.dataset_ops": [("tf-data-pipeline", hooks_tf.install_pipeline)],
        "keras.src.backend.tensorflow.trainer": [
            (clocks.KERAS_FIT, hooks_keras.install_keras),
            (clocks.KERAS_MODEL_CALL, hooks_model.install_keras_trainer),
        ],
        "keras.src.callbacks.callback_list": [
            (clocks.KERAS_FIT, hooks_keras.install_keras_epochs),
            (clocks.KERAS_EVALUATE, hooks_model.install_keras_test_batches),
        ],
        "torch.utils.data.dataloader": [(clocks.TORCH_DATALOADER, hooks_torch.install_dataloader)],
        "torch.optim.optimizer": [(clocks.TORCH_OPTIMIZER, hooks_torch.install_optimizer)],
        "torch.distributed.distributed_c10d": [
            ("torch-collectives", hooks_dist.install_collectives)
        ],
        "torch.nn.parallel.distributed": [("torch-ddp", hooks_dist.install_ddp)],
        "torch.cuda": [("torch-cuda", hooks_cuda.install)],
        "torch.autograd": [(clocks.TORCH_BACKWARD, hooks_torch.install_backward)],
        # the model-call clock and the compute spans of TensorFlow's eager training loops
        "keras.src.models.model": [(clocks.KERAS_MODEL_CALL, hooks_model.install_keras_model)],
        "tensorflow.python.eager.polymorphic_function.polymorphic_function": [
            (clocks.TF_FUNCTION_CALL, hooks_model.install_tf_function)
        ],
        "tensorflow.python.eager.backprop": [
            (clocks.TF_FUNCTION_CALL, hooks_model.install_tf_tape)
        ],
        "keras.src.optimizers.base_optimizer": [
            (clocks.KERAS_MODEL_CALL, hooks_model.install_keras_optimizer)
        ],
        # what the advice needs to know of the model and thread pools (agent-model events)
        "torch.nn.modules.module": [
            (clocks.TORCH_MODEL_CALL, hooks_model.install_torch_module),
            ("model-probe", probes.install_torch_model),
        ],
        "tensorflow": [("model-probe", probes.install_tf)],
    }


def start(environ: dict[str, str] | None = None) -> Agent | None:
    """Start the agent if the launcher asked for one (``SOFA_TOP_SOCKET`` set); idempotent."""
    if core.AGENT is not None:
        return core.AGENT
    env = os.environ if environ is None else environ
    path = env.get(ENV_SOCKET)
    if not path:
        return None
    settings = parse_settings(env.get(ENV_SETTINGS))
    # the output files sofa-top tails get each line as it is printed (see output.py)
    output.line_buffer()
    try:
        conn: Connection | None = Connection(
            path, settings.connect_timeout_s, settings.send_timeout_s
        )
    except OSError as e:
        log_once(f"cannot reach sofa-top at {path} ({e.strerror or e}); running without telemetry")
        conn = None
    agent = core.AGENT = Agent(settings, conn)
    hooks = {} if conn is None else installers()
    # the toggles apply with or without telemetry; compare's data check rides with them
    if settings.optimize.toggles() or settings.optimize.check_data:
        optimize.add_installers(agent, hooks)
    if hooks:
        PostImportHooks(agent, hooks).install()
    if conn is None:
        return agent
    agent.start_thread()
    return agent


def attach(
    socket_path: str,
    token: str,
    deadline: float,
    settings_json: str | None = None,
    added_modules: tuple[str, ...] = (),
    started_cpu: float | None = None,
) -> str:
    """Start an attach-mode agent in a process that is already running (the bootstrap calls it).

    Connects to sofa-top, says hello with the attach ``token``, installs the hooks on the
    modules the workload already imported (and waits for the others), adopts what is already
    running (``midrun``) and starts the drain thread, which detaches the agent when sofa-top's
    end of the socket closes. Returns "attached", "expired", "unreachable" or "refused".
    """
    if time.time() > deadline:
        return "expired"
    settings = parse_settings(settings_json)
    existing = core.AGENT
    if existing is not None and not existing.detached and existing.enabled:
        _refuse(
            socket_path,
            settings,
            token,
            f"pid {os.getpid()} already runs a sofa-top agent ({existing.mode} mode)",
        )
        return "refused"
    try:
        conn = Connection(socket_path, settings.connect_timeout_s, settings.send_timeout_s)
    except OSError:
        return "unreachable"  # sofa-top gave up waiting (or is gone): do nothing at all
    agent = core.AGENT = Agent(settings, conn, mode="attach", token=token)
    if added_modules:
        agent.patches.on_detach("the agent's modules", lambda: _forget(added_modules))
    agent.start_thread()
    if agent.detached or not agent.enabled:
        return "unreachable"
    t0 = time.perf_counter()
    finder = agent.finder = PostImportHooks(agent, installers())
    finder.install()  # hooks the modules the workload already imported, right now
    midrun.adopt(agent)
    install_s = time.perf_counter() - t0
    cpu_s = None if started_cpu is None else time.thread_time() - started_cpu
    agent.event(
        "agent-connected",
        f"agent injected into pid {agent.pid}: hooks installed in {install_s * 1e3:.1f} ms",
        {"mode": "attach", "install_s": install_s, "bootstrap_cpu_s": cpu_s},
    )
    return "attached"


def _refuse(path: str, settings: AgentSettings, token: str, reason: str) -> None:
    with contextlib.suppress(OSError):
        conn = Connection(path, settings.connect_timeout_s, settings.send_timeout_s)
        hello = {
            "type": "hello",
            "v": protocol.PROTOCOL_VERSION,
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "t": time.time(),
            "python": sys.version.split()[0],
            "argv": [],
            "settings": {},
            "mode": "attach",
            "token": token,
            "refused": reason,
        }
        conn.send(protocol.encode(hello))
        conn.close()


def _forget(names: tuple[str, ...]) -> None:
    # the agent's own modules, registered by the bootstrap: the workload never imported them
    for name in names:
        sys.modules.pop(name, None)

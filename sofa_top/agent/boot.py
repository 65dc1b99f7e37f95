"""Start the agent in this process: connect to sofa-top, register the hooks (stdlib only).

``start`` is what the injected ``sitecustomize`` calls. The hooks' installers are listed here,
above ``core`` (which the hook modules build on), so that nothing in the agent imports in a
circle.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sofa_top.agent import core, hooks_tf, hooks_torch, optimize, probes
from sofa_top.agent.core import Agent, PostImportHooks, log_once
from sofa_top.agent.settings import ENV_SETTINGS, ENV_SOCKET, parse_settings
from sofa_top.agent.transport import Connection

if TYPE_CHECKING:
    from sofa_top.agent.core import Installer


def installers() -> dict[str, Sequence[tuple[str, Installer]]]:
    """The agent's own hooks: the module each waits for, its name and its installer."""
    return {
        "tensorflow.python.data.ops.iterator_ops": [("tf-eager", hooks_tf.install_eager)],
        "tensorflow.python.data.ops.dataset_ops": [("tf-data-pipeline", hooks_tf.install_pipeline)],
        "keras.src.backend.tensorflow.trainer": [("keras-fit", hooks_tf.install_keras)],
        "keras.src.callbacks.callback_list": [("keras-fit", hooks_tf.install_keras_epochs)],
        "torch.utils.data.dataloader": [("torch-dataloader", hooks_torch.install_dataloader)],
        "torch.optim.optimizer": [("torch-optimizer", hooks_torch.install_optimizer)],
        # what the advice needs to know of the model and thread pools (agent-model events)
        "torch.nn.modules.module": [("model-probe", probes.install_torch_model)],
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

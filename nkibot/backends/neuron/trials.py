"""The neuron backend's kernel child for verification: `python -m nkibot.backends.neuron.trials`.

It answers the same `run_kernel` request as the simulator's child
(`verify.children.kernel_side`), over the same trials, in the same secret order, to the
same fixed file names, but the kernel is called through the real `nki` package: compiled
and run on the NeuronCore the parent pinned with NEURON_RT_VISIBLE_CORES. The parent
(`NeuronBackend.child`) names this module; `verify.check` judges what it wrote exactly
as it judges the simulator's runs. Nothing under `verify/` imports this package.
"""

from __future__ import annotations

from typing import Any

from nkibot.verify.children.kernel_side import load_and_run
from nkibot.verify.harness import serve
from nkibot.verify.protocol import KernelReply, problem


def run_kernel(request: dict[str, Any]) -> KernelReply:
    """Run the candidate on every trial on the visible NeuronCore."""
    from nkibot.backends.neuron.device import run_on_device

    reply: KernelReply = {"ok": False, "simulator": None, "device": "neuron", "error": None,
                          "stats": {}}
    if request.get("op") != "run_kernel":
        reply["error"] = problem("BadRequest", f"this child only runs kernels, not "
                                 f"{request.get('op')!r}")
        return reply
    load_and_run(request, reply,
                 lambda kernel: lambda *arrays: tuple(run_on_device(kernel, arrays)))
    reply["ok"] = reply["error"] is None
    return reply


if __name__ == "__main__":
    raise SystemExit(serve(run_kernel))

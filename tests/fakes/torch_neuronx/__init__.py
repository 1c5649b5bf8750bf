"""A stand-in for TorchNeuron's ``torch_neuronx``, for opcov's tests only: opcov's test backend
(opcov.sources.pybackend) registered under the device name ``neuron``, with the two calls through which
TorchNeuron reports, after a run, what ran where: ``get_fallback_ops()`` (ops that ran through its CPU
fallback) and ``get_executed_ops()`` (ops executed by the device's kernels). No Trainium, no AWS code:
it lets the code path of 'opcov run -b neuron' that reads those counters run and be checked.

The test plants kernels with ``OPCOV_FAKE_NEURON_KERNELS`` (a JSON list of op names, kernels that pass);
every other op goes through the recorded CPU fallback.
"""

from __future__ import annotations

import json
import os

os.environ["OPCOV_PYBACKEND_SPEC"] = json.dumps({"name": "neuron", "kernels": {}, "fallback": None})

from torch.library import Library  # noqa: E402

from opcov.sources import pybackend  # noqa: E402

_FALLBACK: set[str] = set()
_EXECUTED: set[str] = set()
_planted = pybackend._planted_kernel


def _recording_kernel(op, behaviour):
    fn = _planted(op, behaviour)

    def kernel(*args, **kwargs):
        _EXECUTED.add(str(op.name()))
        return fn(*args, **kwargs)

    return kernel


def _recording_fallback(op, *args, **kwargs):
    _FALLBACK.add(str(op.name()))
    return pybackend._fallback_cpu(op, *args, **kwargs)


pybackend._planted_kernel = _recording_kernel
_kernels = json.loads(os.environ.get("OPCOV_FAKE_NEURON_KERNELS", "[]"))
pybackend.install({"name": "neuron", "kernels": {k: "pass" for k in _kernels}, "fallback": None})
_LIB = Library("_", "IMPL")
_LIB.fallback(_recording_fallback, "PrivateUse1")


def get_fallback_ops() -> list[str]:
    return sorted(_FALLBACK)


def get_executed_ops() -> list[str]:
    return sorted(_EXECUTED)

"""Composites whose decomposition depends on the device family: the op set keeps both paths.

Why: ATen's recurrent layers and cells (``lstm``, ``gru``, ``lstm_cell``, ``gru_cell``: nn.LSTM, nn.GRU,
nn.LSTMCell, nn.GRUCell) call the fused kernels (``_thnn_fused_lstm_cell``, ``_thnn_fused_gru_cell``)
only when the input is on CUDA, XPU or a PrivateUse1 device (aten/src/ATen/native/RNN.cpp,
``input.is_cuda() || input.is_xpu() || input.is_privateuseone()``); every other device (PyTorch/XLA,
MPS, CPU) takes the generic cell: linear, chunk, sigmoid, tanh, mul, add. The stand-in accelerator is
PrivateUse1, so a trace records the fused path, which TorchTPU and TorchNeuron take and PyTorch/XLA
never does. So under each such composite the tracer records two ``call`` nodes: ``device-branch:fused``
(what the stand-in ran) and ``device-branch:generic`` (torch's own reference decomposition of the op,
``torch._decomp``, run on the same inputs, with its backward where the inputs require grad), and the
verdict walks the one the judged backend's dispatch key takes (``family``). Torch-free but for
``generic``, which the tracer calls with torch imported.
"""

from __future__ import annotations

from opcov import backends

PREFIX = "device-branch:"
FUSED, GENERIC = "fused", "generic"
FUSED_KEYS = frozenset({"CUDA", "XPU", "PrivateUse1"})  # the dispatch keys whose devices take the fused cells
# composite op -> the torch._decomp.decompositions function that is its generic (unfused) path, or the
# adapter below where torch has the cell's math but not with the op's signature
OPS = {
    "aten::lstm.input": "lstm_impl",
    "aten::lstm.data": "lstm_data_impl",
    "aten::gru.input": "gru_impl",
    "aten::gru.data": "gru_impl_data",
    "aten::lstm_cell": "_lstm_cell",
    "aten::gru_cell": "_gru_cell",
}


def node_name(family: str) -> str:
    return PREFIX + family


def family(dispatch_key: str) -> str:
    """The branch a backend with ``dispatch_key`` takes."""
    return FUSED if dispatch_key in FUSED_KEYS else GENERIC


def skipped(op: str, backend_family: str) -> bool:
    """Whether a call-tree ``call`` node named ``op`` is a branch the backend does not take."""
    return op.startswith(PREFIX) and op != node_name(backend_family)


def generic(op_name: str):
    """The generic path of composite ``op_name`` (a callable taking its arguments), or None."""
    name = OPS.get(op_name)
    if name is None:
        return None
    if name in _ADAPTERS:
        return _ADAPTERS[name]
    from torch._decomp import decompositions

    return getattr(decompositions, name, None)


def _lstm_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """aten::lstm_cell as RNN.cpp's generic LSTMCell computes it (torch's ``lstm_cell`` decomposition)."""
    import torch.nn.functional as F
    from torch._decomp.decompositions import lstm_cell

    return lstm_cell(F.linear(input, w_ih, b_ih), hx[0], hx[1], w_hh, b_hh, None, 1)


def _gru_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """aten::gru_cell as RNN.cpp's generic GRUCell computes it (torch's ``gru_cell_data`` decomposition)."""
    from torch._decomp.decompositions import gru_cell_data

    return gru_cell_data(input, hx, w_ih, b_ih, w_hh, b_hh)


_ADAPTERS = {"_lstm_cell": _lstm_cell, "_gru_cell": _gru_cell}


# ATen kernels made for one device type, which ATen's composites call only there: a graph traced on that
# device (torch.compile's AOT graph on CPU) holds them where another device's graph holds its own choice.
# scaled_dot_product_attention picks its kernel per device at run time (_fused_sdp_choice: CPU's flash
# kernel; CUDA's flash, efficient or cudnn kernel; the math path), so on another device such a call is
# judged as the generic op it stands for, whose coverage record says how that device reaches it. Each
# backend's record lists the kernels made for it (``own_kernels``).


def foreign(ops, device_type: str) -> dict[str, str]:
    """Each of ``ops`` that is another device type's own kernel, with the generic op it stands for there.
    Asked once per op set and backend (the records are read once), not per call."""
    return {k: op for k, (made_for, op) in backends.own_kernels().items() if made_for != device_type and k in ops}

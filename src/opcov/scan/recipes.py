"""Hand-written calls for the composite ops whose reach no synthesized or recorded call could record.

Why: a composite op's reach is recorded by calling it (opcov.scan.reach). Inputs synthesized from the
schema give every Tensor one shape and every int the value 1; where an op needs arguments that agree
with each other (an LSTM cell's weights are 4 x hidden rows; a packed sequence's batch sizes sum to its
rows; a CTC target is shorter than its input) no synthesized call fits, no OpInfo sample calls the op
and no zoo model does either, so the op stayed 'reach unresolved' on every backend. Each recipe is one
ordinary, valid call of its op, written from the op's documentation: ``RECIPES[name](torch, device)``
returns ``(args, kwargs)`` with tensors on ``device`` ("meta", or "cpu" with values). An out= overload
uses its functional overload's recipe (reach._functional), so one recipe serves both.

Tensors that an op requires on the CPU whatever the device (lengths, batch sizes, a Sobol state's
direction numbers) are made on the CPU. A recipe is tried before the synthesized calls; where it does
not fit, the other calls are tried as before (tests/test_reach_recipes.py keeps each recipe fitting).

No recipe is written for an op whose result is a sparse or quantized tensor (embedding's sparse
backward): its reach ends in kernels registered at the Sparse* and Quantized* keys, which the
registered scan does not read, so a recorded reach would call it missing on a backend that has it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Call = tuple[list, dict]


def _t(torch, device: str, *shape: int, dtype=None, values: Any = None):
    """A tensor on ``device``: given ``values`` (always with values, also on meta: copied there), else
    random floats in [0, 1) (or zeros for an integer dtype) on cpu, empty on meta."""
    dtype = dtype or torch.float32
    if values is not None:
        return torch.tensor(values, dtype=dtype).to(device)
    if device == "meta":
        return torch.empty(shape, dtype=dtype, device="meta")
    if dtype.is_floating_point or dtype.is_complex:
        return torch.rand(shape, dtype=dtype)
    return torch.zeros(shape, dtype=dtype)


def _cpu_ints(torch, values):
    """An int64 tensor the op requires on the CPU whatever the device of its other inputs."""
    return torch.tensor(values, dtype=torch.int64)


# --- recurrent layers: input 4 features, hidden 3, gates of 4 (LSTM), 3 (GRU) or 1 (RNN) x hidden rows
def _rnn_params(torch, device, gates: int) -> list:
    return [
        _t(torch, device, gates * 3, 4),
        _t(torch, device, gates * 3, 3),
        _t(torch, device, gates * 3),
        _t(torch, device, gates * 3),
    ]


def _cell(gates: int, lstm: bool = False) -> Callable:
    def make(torch, device) -> Call:
        hx: Any = [_t(torch, device, 2, 3), _t(torch, device, 2, 3)] if lstm else _t(torch, device, 2, 3)
        return [_t(torch, device, 2, 4), hx, *_rnn_params(torch, device, gates)], {}

    return make


def _packed_rnn(gates: int, lstm: bool = False) -> Callable:
    """The PackedSequence overload (.data): 5 rows packed from 3 sequences of lengths 2, 2 and 1."""

    def make(torch, device) -> Call:
        hx: Any = [_t(torch, device, 1, 3, 3), _t(torch, device, 1, 3, 3)] if lstm else _t(torch, device, 1, 3, 3)
        data, batch_sizes = _t(torch, device, 5, 4), _cpu_ints(torch, [3, 2])
        return [data, batch_sizes, hx, _rnn_params(torch, device, gates), True, 1, 0.0, False, False], {}

    return make


def _padded_rnn(gates: int) -> Callable:
    """The padded overload (.input), batch first: 2 sequences of 5 steps."""

    def make(torch, device) -> Call:
        hx = _t(torch, device, 1, 2, 3)
        return [_t(torch, device, 2, 5, 4), hx, _rnn_params(torch, device, gates), True, 1, 0.0, False, False, True], {}

    return make


def _pack_padded(torch, device) -> Call:
    return [_t(torch, device, 3, 2, 4), _cpu_ints(torch, [3, 2]), False], {}


def _pack_padded_backward(torch, device) -> Call:
    return [_t(torch, device, 5, 4), [3, 2, 4], _cpu_ints(torch, [2, 2, 1]), False], {}


def _pad_packed(torch, device) -> Call:
    return [_t(torch, device, 5, 4), _cpu_ints(torch, [2, 2, 1]), False, 0.0, 3], {}


# --- vision: affine grids and grid sampling (N=2, C=3, H=4, W=5)
def _affine_grid(torch, device) -> Call:
    return [_t(torch, device, 2, 2, 3), [2, 3, 4, 5], False], {}


def _affine_grid_backward(torch, device) -> Call:
    return [_t(torch, device, 2, 4, 5, 2), [2, 3, 4, 5], False], {}


def _grid_sampler(torch, device) -> Call:
    return [_t(torch, device, 2, 3, 4, 5), _t(torch, device, 2, 3, 3, 2), 0, 0, False], {}


def _grid_sampler_backward(torch, device) -> Call:
    grad = _t(torch, device, 2, 3, 3, 3)
    return [grad, _t(torch, device, 2, 3, 4, 5), _t(torch, device, 2, 3, 3, 2), 0, 0, False], {}


# --- convolutions
def _conv_tbc(torch, device) -> Call:  # (time, batch, channels in); weight (width, in, out)
    return [_t(torch, device, 5, 2, 4), _t(torch, device, 3, 4, 6), _t(torch, device, 6), 1], {}


def _thnn_conv2d(torch, device) -> Call:
    return [
        _t(torch, device, 1, 2, 5, 5),
        _t(torch, device, 3, 2, 3, 3),
        [3, 3],
        _t(torch, device, 3),
        [1, 1],
        [0, 0],
    ], {}


def _convolution_double_backward(torch, device) -> Call:
    x, w, gout = _t(torch, device, 1, 2, 5, 5), _t(torch, device, 3, 2, 3, 3), _t(torch, device, 1, 3, 3, 3)
    ggi, ggw, ggb = _t(torch, device, 1, 2, 5, 5), _t(torch, device, 3, 2, 3, 3), _t(torch, device, 3)
    return [ggi, ggw, ggb, gout, w, x, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, True, True]], {}


# --- losses
def _cosine_embedding_loss(torch, device) -> Call:
    target = _t(torch, device, 3, values=[1.0, -1.0, 1.0])
    return [_t(torch, device, 3, 4), _t(torch, device, 3, 4), target, 0.0, 1], {}


def _nll_loss(torch, device) -> Call:
    return [_t(torch, device, 3, 5), _t(torch, device, 3, dtype=torch.int64, values=[0, 4, 2]), None, 1, -100], {}


def _kl_div(torch, device) -> Call:
    return [_t(torch, device, 3, 4), _t(torch, device, 3, 4), 1], {"log_target": False}


def _ctc_log_probs(torch, device):
    return _t(torch, device, 6, 2, 4)  # (input length T, batch N, classes C, blank 0)


def _ctc_loss_intlist(torch, device) -> Call:
    targets = _t(torch, device, 2, 3, dtype=torch.int64, values=[[1, 2, 3], [3, 1, 0]])
    return [_ctc_log_probs(torch, device), targets, [6, 6], [3, 2], 0, 1, False], {}


def _ctc_loss_tensor(torch, device) -> Call:
    targets = _t(torch, device, 2, 3, dtype=torch.int64, values=[[1, 2, 3], [3, 1, 0]])
    lengths = _t(torch, device, 2, dtype=torch.int64, values=[6, 6])
    target_lengths = _t(torch, device, 2, dtype=torch.int64, values=[3, 2])
    return [_ctc_log_probs(torch, device), targets, lengths, target_lengths, 0, 1, False], {}


# --- embeddings
def _embedding_bag_padding_idx(torch, device) -> Call:
    indices = _t(torch, device, 4, dtype=torch.int64, values=[1, 2, 4, 5])
    offsets = _t(torch, device, 2, dtype=torch.int64, values=[0, 2])
    return [_t(torch, device, 10, 3), indices, offsets, False, 0, False, None, False, None], {}


# --- reductions, norms and linear algebra of 3 x 3 matrices
def _x33(torch, device):
    return _t(torch, device, 3, 3)


def _float_power_scalar(torch, device) -> Call:  # in place: the base must already be float64
    return [_t(torch, device, 3, 3, dtype=torch.float64), 2.0], {}


def _float_power_tensor(torch, device) -> Call:
    return [_t(torch, device, 3, 3, dtype=torch.float64), _t(torch, device, 3, 3, dtype=torch.float64)], {}


def _gradient_tensorarray(torch, device) -> Call:  # coordinates along dim 0
    return [_t(torch, device, 3, 4)], {"spacing": [_t(torch, device, 3, values=[0.0, 1.0, 3.0])], "dim": [0]}


def _gradient_tensorarrayint(torch, device) -> Call:  # coordinates along every dim
    coords = [_t(torch, device, 3, values=[0.0, 1.0, 3.0]), _t(torch, device, 4, values=[0.0, 1.0, 2.0, 4.0])]
    return [_t(torch, device, 3, 4)], {"spacing": coords}


def _istft(torch, device) -> Call:  # a one-sided spectrum of n_fft 8: 5 bins, 4 frames, a window given
    spectrum = _t(torch, device, 5, 4, dtype=torch.complex64)
    return [spectrum, 8, 2, 8, _t(torch, device, 8, values=[1.0] * 8), True, False, None, None, False], {}


def _linalg_cond_str(torch, device) -> Call:
    return [_x33(torch, device), "fro"], {}


def _linalg_norm_str(torch, device) -> Call:
    return [_x33(torch, device), "fro"], {}


def _linalg_tensorinv(torch, device) -> Call:  # prod(shape[:ind]) == prod(shape[ind:])
    return [_t(torch, device, 4, 2, 2), 1], {}


def _norm_dtype(torch, device) -> Call:
    return [_x33(torch, device), 2], {"dtype": torch.float64}


def _nuclear_norm_dim(torch, device) -> Call:
    return [_x33(torch, device), [0, 1]], {}


def _orgqr(torch, device) -> Call:  # Householder reflectors: tau has one dimension less
    return [_x33(torch, device), _t(torch, device, 2)], {}


def _trace_backward(torch, device) -> Call:
    return [_t(torch, device), [3, 3]], {}


def _unflatten_dense_tensors(torch, device) -> Call:
    return [_t(torch, device, 9), [_x33(torch, device)]], {}


def _reshape_from_tensor(torch, device) -> Call:
    return [_t(torch, device, 2, 3), _t(torch, device, 2, dtype=torch.int64, values=[3, 2])], {}


def _rowwise_prune(torch, device) -> Call:
    mask = _t(torch, device, 3, dtype=torch.bool, values=[True, False, True])
    return [_t(torch, device, 3, 4), mask, torch.int32], {}


def _grouped_mm(torch, device) -> Call:
    """A mixture-of-experts layer's grouped matmul (transformers' MoE): 4 rows in 2 groups (offs, the end
    of each), 2 experts' 8 x 8 weights; bfloat16 rows of 16 bytes, as its kernels require."""
    rows = _t(torch, device, 4, 8, dtype=torch.bfloat16)
    experts = _t(torch, device, 2, 8, 8, dtype=torch.bfloat16)
    return [rows, experts], {"offs": _t(torch, device, 2, dtype=torch.int32, values=[2, 4])}


# --- normalization
def _batch_norm_args(torch, device) -> list:
    c = 3
    return [
        _t(torch, device, 2, c, 4),
        _t(torch, device, c),
        _t(torch, device, c),
        _t(torch, device, c),
        _t(torch, device, c),
    ]


def _batch_norm_no_update(torch, device) -> Call:
    return [*_batch_norm_args(torch, device), 0.1, 1e-5], {}


def _batch_norm_with_update_functional(torch, device) -> Call:
    return [*_batch_norm_args(torch, device), 0.1, 1e-5], {}


# --- factories, random numbers and the like
def _randint_like_tensor(torch, device) -> Call:
    return [_x33(torch, device), torch.tensor(5)], {}


def _randint_like_generator(torch, device) -> Call:
    return [_x33(torch, device), torch.tensor(5)], {"generator": None}


def _retain_grad(torch, device) -> Call:
    return [_x33(torch, device).requires_grad_(True)], {}


def _assert_scalar(torch, device) -> Call:
    return [True, "a message"], {}


def _functional_assert_scalar(torch, device) -> Call:
    return [True, "a message", _t(torch, device)], {}


def _functional_sym_constrain_range_for_size(torch, device) -> Call:
    return [3, 0, 10, _t(torch, device)], {}


def _test_check_tensor(torch, device) -> Call:
    return [_t(torch, device, 3, dtype=torch.bool, values=[True, True, True])], {}


RECIPES: dict[str, Callable[[Any, str], Call]] = {
    "aten::lstm_cell": _cell(4, lstm=True),
    "aten::gru_cell": _cell(3),
    "aten::lstm.data": _packed_rnn(4, lstm=True),
    "aten::gru.data": _packed_rnn(3),
    "aten::rnn_tanh.data": _packed_rnn(1),
    "aten::rnn_relu.data": _packed_rnn(1),
    "aten::gru.input": _padded_rnn(3),
    "aten::_pack_padded_sequence": _pack_padded,
    "aten::_pack_padded_sequence_backward": _pack_padded_backward,
    "aten::_pad_packed_sequence": _pad_packed,
    "aten::affine_grid_generator": _affine_grid,
    "aten::affine_grid_generator_backward": _affine_grid_backward,
    "aten::_grid_sampler_2d_cpu_fallback": _grid_sampler,
    "aten::_grid_sampler_2d_cpu_fallback_backward": _grid_sampler_backward,
    "aten::conv_tbc": _conv_tbc,
    "aten::thnn_conv2d": _thnn_conv2d,
    "aten::_convolution_double_backward": _convolution_double_backward,
    "aten::cosine_embedding_loss": _cosine_embedding_loss,
    "aten::nll_loss": _nll_loss,
    "aten::kl_div": _kl_div,
    "aten::ctc_loss.IntList": _ctc_loss_intlist,
    "aten::ctc_loss.Tensor": _ctc_loss_tensor,
    "aten::embedding_bag.padding_idx": _embedding_bag_padding_idx,
    "aten::float_power_.Scalar": _float_power_scalar,
    "aten::float_power_.Tensor": _float_power_tensor,
    "aten::gradient.tensorarray": _gradient_tensorarray,
    "aten::gradient.tensorarrayint": _gradient_tensorarrayint,
    "aten::istft": _istft,
    "aten::linalg_cond.p_str": _linalg_cond_str,
    "aten::linalg_norm.ord_str": _linalg_norm_str,
    "aten::linalg_tensorinv": _linalg_tensorinv,
    "aten::norm.ScalarOpt_dtype": _norm_dtype,
    "aten::nuclear_norm.dim": _nuclear_norm_dim,
    "aten::orgqr": _orgqr,
    "aten::trace_backward": _trace_backward,
    "aten::unflatten_dense_tensors": _unflatten_dense_tensors,
    "aten::_reshape_from_tensor": _reshape_from_tensor,
    "aten::_rowwise_prune": _rowwise_prune,
    "aten::_grouped_mm": _grouped_mm,
    "aten::_batch_norm_no_update": _batch_norm_no_update,
    "aten::_batch_norm_with_update_functional": _batch_norm_with_update_functional,
    "aten::randint_like.Tensor": _randint_like_tensor,
    "aten::randint_like.Tensor_generator": _randint_like_generator,
    "aten::retain_grad": _retain_grad,
    "aten::_assert_scalar": _assert_scalar,
    "aten::_functional_assert_scalar": _functional_assert_scalar,
    "aten::_functional_sym_constrain_range_for_size": _functional_sym_constrain_range_for_size,
    "aten::_test_check_tensor": _test_check_tensor,
}

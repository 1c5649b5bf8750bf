"""Composites whose path depends on the device family (opcov.branches): an LSTM's and a GRU's cells are
fused only on CUDA, XPU and PrivateUse1 devices, and so are nn.LSTMCell's and nn.GRUCell's. The op set keeps both branches and each backend is judged
on the one its dispatch key takes: PyTorch/XLA on the generic cells, TorchTPU (PrivateUse1) on the fused
kernels. Recurrent layers and hand-written cell loops, traced by the real tracer and judged on the bundled data."""

import json
import textwrap

import pytest
from conftest import check_verdict, opcov_here, trace_factories

FACTORIES = textwrap.dedent(
    """
    import torch
    import torch.nn as nn

    class Head(nn.Module):
        def __init__(self, rnn):
            super().__init__()
            self.rnn, self.out = rnn, nn.Linear(16, 2)

        def forward(self, x):
            return self.out(self.rnn(x)[0][:, -1])

    def lstm():
        torch.manual_seed(0)
        return Head(nn.LSTM(8, 16, batch_first=True)), (torch.randn(2, 5, 8),)

    def gru():
        torch.manual_seed(0)
        return Head(nn.GRU(8, 16, num_layers=2, batch_first=True)), (torch.randn(2, 5, 8),)

    class CellDecoder(nn.Module):
        # a hand-written decoder loop over one cell (nn.LSTMCell or nn.GRUCell), as seq2seq code has

        def __init__(self, cell):
            super().__init__()
            self.cell, self.out = cell, nn.Linear(16, 2)

        def forward(self, x):
            state = None
            for t in range(x.shape[1]):
                state = self.cell(x[:, t], state)
            return self.out(state[0] if isinstance(state, tuple) else state)

    def lstm_cell():
        torch.manual_seed(0)
        return CellDecoder(nn.LSTMCell(8, 16)), (torch.randn(2, 4, 8),)

    def gru_cell():
        torch.manual_seed(0)
        return CellDecoder(nn.GRUCell(8, 16)), (torch.randn(2, 4, 8),)
    """
)


@pytest.fixture(scope="module")
def opsets(tmp_path_factory):
    names = ("lstm", "gru", "lstm_cell", "gru_cell")
    return trace_factories(tmp_path_factory.mktemp("branches"), "rnnmodels", FACTORIES, names, "training")


def _ops(path, backend):
    verdict = check_verdict(path, backend)
    return verdict["verdict"], {o["op"] for o in verdict["ops"]}


@pytest.mark.parametrize(
    "name, fused, tpu_fused",
    [
        ("lstm", "aten::_thnn_fused_lstm_cell", False),
        ("gru", "aten::_thnn_fused_gru_cell", False),
        ("lstm_cell", "aten::_thnn_fused_lstm_cell", True),  # nn.LSTMCell in a hand-written loop
        ("gru_cell", "aten::_thnn_fused_gru_cell", True),
    ],
)
def test_each_backend_is_judged_on_the_branch_its_dispatch_key_takes(opsets, name, fused, tpu_fused):
    """cuda takes the fused cells; xla the generic ones (and does not fail on a kernel it never calls).
    TorchTPU (PrivateUse1) registers aten::lstm and aten::gru itself, so neither branch below those is
    judged; it registers no lstm_cell or gru_cell, so a cell loop takes the fused kernels there."""
    xla_verdict, xla_ops = _ops(opsets[name], "xla")
    _, cuda_ops = _ops(opsets[name], "cuda")
    _, tpu_ops = _ops(opsets[name], "tpu")
    assert fused in cuda_ops and "aten::sigmoid_backward" not in cuda_ops
    assert fused not in xla_ops and {"aten::sigmoid", "aten::tanh", "aten::sigmoid_backward"} <= xla_ops
    assert xla_verdict != "fails", xla_ops
    assert (fused in tpu_ops) == tpu_fused and "aten::sigmoid_backward" not in tpu_ops


def test_the_op_set_names_both_branches_under_the_recurrent_composite(opsets):
    text = open(opsets["lstm"]).read()
    assert "forward call device-branch:fused" in text and "forward call device-branch:generic" in text
    assert "backward call device-branch:generic" in text


@pytest.mark.parametrize("model", ["llama", "bert"])  # a decoder and an encoder, both with sdpa
def test_a_compiled_graph_traced_on_cpu_is_judged_on_each_devices_own_attention(model):
    """Inductor's graph traced on CPU holds CPU's own attention kernel
    (_scaled_dot_product_flash_attention_for_cpu, and its backward in training), which CUDA never calls:
    its sdpa picks flash, efficient or cudnn at run time. Judged on it, cuda said 'fails' for every
    transformer; on cuda the call is judged as scaled_dot_product_attention, with a note; cpu keeps its own."""
    proc = opcov_here("check", model, "-b", "cuda", "-b", "cpu", "--path", "compile", "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdicts = json.loads(proc.stdout)
    assert verdicts, proc.stdout
    stood = 0
    for v in verdicts:
        graphs = v["graphs"]
        ops, notes = {r["op"] for r in graphs["ops"]}, graphs["notes"]
        cpu_kernel = "aten::_scaled_dot_product_flash_attention_for_cpu"
        if v["backend"] == "cuda":
            assert cpu_kernel not in ops, ops
            if any(n.startswith(f"{cpu_kernel} is cpu's own kernel") for n in notes):
                stood += 1
                assert "aten::scaled_dot_product_attention" in ops, ops
        else:
            assert not any("own kernel (the op set" in n for n in notes)
            assert v["mode"] != "inference" or cpu_kernel in ops  # cpu is judged on its own kernel
    assert stood  # the inference graph holds CPU's kernel in both models

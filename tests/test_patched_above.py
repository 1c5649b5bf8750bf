"""Calls a backend's Python patch takes before the dispatcher and raises on (its record's ``raises_above``).

Importing torch_xla replaces ``torch.nn.GRU`` with its scan-based GRU, which refuses a PackedSequence
(torch_xla/experimental/gru.py): every GRU over packed sequences raises on xla, whatever the dispatcher's
kernels would do with ``aten::gru.data`` (the overload a packed GRU dispatches). The class is GRU over a
PackedSequence; two families show it (a text classifier over an embedding, a speech encoder with a conv
front end and a bidirectional GRU), and its edges: the same GRU on a plain tensor, and an LSTM over packed
sequences (not patched), are not failed by it. Traced by the real tracer, judged on the bundled data."""

import textwrap

import pytest
from conftest import check_verdict, trace_factories

FACTORIES = textwrap.dedent(
    """
    import torch
    import torch.nn as nn
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    class _Packed(nn.Module):
        def __init__(self, front, rnn, head, lengths):
            super().__init__()
            self.front, self.rnn, self.head, self.lengths = front, rnn, head, lengths

        def forward(self, x):
            packed = pack_padded_sequence(self.front(x), self.lengths, batch_first=True, enforce_sorted=False)
            out, _ = self.rnn(packed)
            return self.head(pad_packed_sequence(out, batch_first=True)[0])

    class _Conv(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(4, 6, 3, padding=1)

        def forward(self, x):
            return torch.relu(self.conv(x.transpose(1, 2))).transpose(1, 2)

    def text_gru():
        torch.manual_seed(0)
        model = _Packed(nn.Embedding(20, 6), nn.GRU(6, 8, batch_first=True), nn.Linear(8, 3), [5, 3, 4])
        return model, (torch.randint(0, 20, (3, 5)),)

    def speech_bigru():
        torch.manual_seed(0)
        model = _Packed(_Conv(), nn.GRU(6, 5, batch_first=True, bidirectional=True), nn.Linear(10, 4), [7, 4])
        return model, (torch.randn(2, 7, 4),)

    def text_lstm():
        torch.manual_seed(0)
        model = _Packed(nn.Embedding(20, 6), nn.LSTM(6, 8, batch_first=True), nn.Linear(8, 3), [5, 3, 4])
        return model, (torch.randint(0, 20, (3, 5)),)

    class _Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn, self.head = nn.GRU(6, 8, batch_first=True), nn.Linear(8, 3)

        def forward(self, x):
            return self.head(self.rnn(x)[0])

    def plain_gru():
        torch.manual_seed(0)
        return _Plain(), (torch.randn(3, 5, 6),)
    """
)
MODELS = ("text_gru", "speech_bigru", "text_lstm", "plain_gru")


@pytest.fixture(scope="module")
def opsets(tmp_path_factory):
    return trace_factories(tmp_path_factory.mktemp("patched"), "rnnmodels", FACTORIES, MODELS, "inference")


@pytest.mark.parametrize("name", ["text_gru", "speech_bigru"])
def test_a_gru_over_packed_sequences_fails_on_xla_with_the_patchs_reason(opsets, name):
    v = check_verdict(opsets[name], "xla")
    assert v["verdict"] == "fails", v["verdict"]
    (gru,) = [o for o in v["ops"] if o["op"] == "aten::gru.data"]
    assert gru["outcome"] == "fails" and gru["evidence"] == "declared", gru
    assert "PackedSequence is not supported" in gru["findings"][0]["why"]
    assert any("Python patch takes aten::gru.data before the dispatcher" in n for n in v["notes"]), v["notes"]
    # the patch is xla's: on cpu the same call runs
    assert check_verdict(opsets[name], "cpu")["verdict"] == "runs"


@pytest.mark.parametrize("name", ["text_lstm", "plain_gru"])
def test_the_rule_stops_at_its_class(opsets, name):
    """An LSTM over packed sequences, and a GRU over a plain tensor, are not the patch's refusal."""
    v = check_verdict(opsets[name], "xla")
    assert not any("raises above the dispatcher" in f["why"] for o in v["ops"] for f in o["findings"]), v["ops"]


def test_a_records_file_declares_what_its_patch_raises_on(tmp_path):
    """A vendor's records file states raises_above as [op, why] pairs; any other shape is one line."""
    from opcov import backends
    from opcov.errors import DataError

    head = 'name = "acme"\ndevice_type = "acme"\ndispatch_key = "PrivateUse1"\nmodule = "acme_torch"\n'
    good = tmp_path / "good.toml"
    good.write_text("[[backend]]\n" + head + 'raises_above = [["aten::gru.data", "acme GRU takes no packs"]]\n')
    (rec,) = backends.records_from(str(good))
    assert rec.raises_above == (("aten::gru.data", "acme GRU takes no packs"),)
    bad = tmp_path / "bad.toml"
    bad.write_text("[[backend]]\n" + head + 'raises_above = ["aten::gru.data"]\n')
    with pytest.raises(DataError, match=r"raises_above is a list of \[op, why\] pairs"):
        backends.records_from(str(bad))

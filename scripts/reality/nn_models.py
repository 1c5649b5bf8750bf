"""The TUNING set of plain ``torch.nn`` user models (no transformers) that opcov's verdicts on PyTorch/XLA are
measured and tuned against (issue 42, item 9). Its held-out twin is ``nn_heldout.py``: never tune on that one.

Each model is a factory ``NAME()`` returning ``(model, inputs)``, ``inputs`` a tuple of positional tensors,
seeded inside the factory, small enough to run in seconds on a CPU. The factories follow opcov's factory
contract (docs/trace-and-zoo.md): they build no tensor from another tensor's values, so that opcov can call
them under ``torch.device("meta")``; whatever needs values (sparse tensors, sequence lengths) is made inside
``forward`` from buffers or kept as Python constants. Every model has a floating output that depends on its
parameters (the sum of those is the training loss, as ``opcov trace`` takes it); a model whose point is a
loss returns that loss, a 0-d tensor. No model returns a complex tensor (training sums floating outputs).
Randomness is kept off the compared path: dropout and RReLU run with ``training=False`` or ``p=0``.

    PYTHONPATH=scripts/reality opcov trace nn_models:conv_groups_dilation --mode training --out x.yaml
    PJRT_DEVICE=CPU .envs/xla/bin/python scripts/envs/nn_reality.py --set tuning --models conv_groups_dilation

``MODELS`` names each factory: name -> (family, one-line description).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

# ---------------------------------------------------------------- vision: convolution and pooling


class _ConvGroupsDilation(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(4, 8, 3, groups=2, dilation=2, padding=2)
        self.b = nn.Conv2d(8, 8, 3, padding=1, padding_mode="reflect")
        self.bn = nn.BatchNorm2d(8)
        self.c = nn.Conv2d(8, 8, 3, groups=8, padding="same", padding_mode="circular")
        self.d = nn.Conv2d(8, 6, 1, stride=2, bias=False)
        self.head = nn.Linear(6, 5)

    def forward(self, x):
        x = F.relu(self.bn(self.b(self.a(x))))
        x = self.d(self.c(x))
        return self.head(x.mean(dim=(2, 3)))


def conv_groups_dilation():
    torch.manual_seed(0)
    return _ConvGroupsDilation(), (torch.randn(2, 4, 12, 12),)


class _MaxPoolDilated(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.pool = nn.MaxPool2d(3, stride=1, dilation=2)
        self.fc = nn.Linear(6 * 6 * 6, 4)

    def forward(self, x):
        return self.fc(self.pool(torch.tanh(self.conv(x))).flatten(1))


def maxpool_dilated():
    torch.manual_seed(0)
    return _MaxPoolDilated(), (torch.randn(2, 3, 10, 10),)


class _MaxPoolCeilIndices(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.pool = nn.MaxPool2d(2, stride=2, ceil_mode=True, return_indices=True)
        self.unpool = nn.MaxUnpool2d(2, stride=2)
        self.fc = nn.Linear(4 * 5 * 5, 3)

    def forward(self, x):
        y = self.conv(x)  # 9x9: ceil_mode makes a 5x5 output with a partial last window
        p, idx = self.pool(y)
        u = self.unpool(p, idx, output_size=y.shape[-2:])
        return self.fc(p.flatten(1)), u.sum(dim=1), idx


def maxpool_ceil_indices():
    torch.manual_seed(0)
    return _MaxPoolCeilIndices(), (torch.randn(2, 3, 11, 11),)


class _AvgPoolVariants(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.p1 = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False, ceil_mode=True)
        self.p2 = nn.AvgPool2d(2, divisor_override=3)
        self.p3 = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=True)

    def forward(self, x):
        y = self.conv(x)
        return self.p1(y), self.p2(y), self.p3(y)


def avgpool_variants():
    torch.manual_seed(0)
    return _AvgPoolVariants(), (torch.randn(2, 3, 9, 9),)


class _AdaptiveEven(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.avg = nn.AdaptiveAvgPool2d(4)
        self.max = nn.AdaptiveMaxPool2d(2)

    def forward(self, x):
        y = self.conv(x)  # 8x8: every bin the same size
        return self.avg(y), self.max(y)


def adaptive_even():
    torch.manual_seed(0)
    return _AdaptiveEven(), (torch.randn(2, 3, 8, 8),)


class _AdaptiveUneven(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.avg = nn.AdaptiveAvgPool2d((3, 5))
        self.max = nn.AdaptiveMaxPool2d(3)

    def forward(self, x):
        y = self.conv(x)  # 7x11: bins of unequal, overlapping sizes
        return self.avg(y), self.max(y)


def adaptive_uneven():
    torch.manual_seed(0)
    return _AdaptiveUneven(), (torch.randn(2, 3, 7, 11),)


class _Conv1dPool1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv1d(2, 6, 5, padding="same")
        self.b = nn.Conv1d(6, 6, 3, stride=2, padding=1, padding_mode="replicate")
        self.mp = nn.MaxPool1d(3, stride=2)
        self.ap = nn.AvgPool1d(2)
        self.ad = nn.AdaptiveAvgPool1d(5)
        self.am = nn.AdaptiveMaxPool1d(4)

    def forward(self, x):
        y = F.relu(self.b(F.relu(self.a(x))))  # length 16
        return self.ad(self.mp(y)), self.am(self.ap(y))


def conv1d_pool1d():
    torch.manual_seed(0)
    return _Conv1dPool1d(), (torch.randn(2, 2, 32),)


class _Conv3dPool3d(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(2, 4, 3, padding=1)
        self.bn = nn.BatchNorm3d(4)
        self.mp = nn.MaxPool3d(2)
        self.ap = nn.AvgPool3d(2, stride=1)
        self.ad = nn.AdaptiveAvgPool3d(2)
        self.fc = nn.Linear(4 * 8, 3)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        return self.fc(self.ad(self.ap(self.mp(y))).flatten(1))


def conv3d_pool3d():
    torch.manual_seed(0)
    return _Conv3dPool3d(), (torch.randn(2, 2, 6, 6, 6),)


class _ConvTranspose(nn.Module):
    def __init__(self):
        super().__init__()
        self.up2 = nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.up1 = nn.ConvTranspose1d(3, 2, 4, stride=2, dilation=2)

    def forward(self, x, s):
        return self.up2(x), self.up1(s)


def conv_transpose():
    torch.manual_seed(0)
    return _ConvTranspose(), (torch.randn(2, 4, 5, 5), torch.randn(2, 3, 7))


class _ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(c)
        self.c2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(x + self.b2(self.c2(F.relu(self.b1(self.c1(x))))))


class _SmallResnet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.blocks = nn.Sequential(_ResBlock(8), _ResBlock(8))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        return self.fc(self.pool(self.blocks(self.stem(x))).flatten(1))


def small_resnet():
    torch.manual_seed(0)
    return _SmallResnet(), (torch.randn(2, 3, 16, 16),)


# ---------------------------------------------------------------- interpolation


class _Interp(nn.Module):
    """A conv, then F.interpolate with fixed arguments: the arguments are what the model is about."""

    def __init__(self, dims=2, fn=None, **kw):
        super().__init__()
        conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[dims]
        self.conv = conv(2, 3, 3, padding=1)
        self.fn = fn or F.interpolate
        self.kw = kw

    def forward(self, x):
        return self.fn(self.conv(x), **self.kw)


def interp_nearest_int():
    torch.manual_seed(0)
    return _Interp(scale_factor=2, mode="nearest"), (torch.randn(2, 2, 5, 6),)


def interp_nearest_frac():
    torch.manual_seed(0)
    return _Interp(scale_factor=1.5, mode="nearest"), (torch.randn(2, 2, 5, 6),)


def interp_nearest_exact():
    torch.manual_seed(0)
    return _Interp(size=(7, 9), mode="nearest-exact"), (torch.randn(2, 2, 5, 6),)


class _Bilinear2Ways(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return (
            F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=True),
            F.interpolate(y, size=(9, 7), mode="bilinear", align_corners=False),
        )


def interp_bilinear():
    torch.manual_seed(0)
    return _Bilinear2Ways(), (torch.randn(2, 2, 5, 6),)


def interp_bicubic():
    torch.manual_seed(0)
    return _Interp(size=(8, 11), mode="bicubic", align_corners=False), (torch.randn(2, 2, 5, 6),)


def interp_trilinear():
    torch.manual_seed(0)
    return _Interp(dims=3, scale_factor=2, mode="trilinear", align_corners=False), (torch.randn(1, 2, 3, 4, 4),)


def interp_area():
    torch.manual_seed(0)
    return _Interp(size=(4, 5), mode="area"), (torch.randn(2, 2, 9, 11),)


def upsample_size():
    torch.manual_seed(0)
    return _Interp(fn=F.upsample, size=(10, 14)), (torch.randn(2, 2, 5, 6),)


# ---------------------------------------------------------------- recurrent networks


class _LstmBiMulti(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(6, 8, num_layers=2, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(16, 3)

    def forward(self, x):
        out, (h, c) = self.rnn(x)
        return self.fc(out[:, -1]), h, c


def lstm_bi_multi():
    torch.manual_seed(0)
    return _LstmBiMulti(), (torch.randn(2, 7, 6),)


class _Gru(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(5, 8)
        self.fc = nn.Linear(8, 2)

    def forward(self, x, h0):
        out, h = self.rnn(x, h0)
        return self.fc(out), h


def gru_basic():
    torch.manual_seed(0)
    return _Gru(), (torch.randn(6, 3, 5), torch.randn(1, 3, 8))


class _GruBiMulti(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(4, 6, num_layers=2, bidirectional=True, batch_first=True)

    def forward(self, x):
        out, h = self.rnn(x)
        return out, h


def gru_bi_multi():
    torch.manual_seed(0)
    return _GruBiMulti(), (torch.randn(2, 5, 4),)


class _RnnTanhRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.tanh = nn.RNN(4, 6, nonlinearity="tanh", batch_first=True)
        self.relu = nn.RNN(6, 5, nonlinearity="relu", num_layers=2)

    def forward(self, x):
        a, _ = self.tanh(x)
        b, h = self.relu(a.transpose(0, 1))
        return b, h


def rnn_tanh_relu():
    torch.manual_seed(0)
    return _RnnTanhRelu(), (torch.randn(3, 6, 4),)


class _LstmPacked(nn.Module):
    lengths = [6, 4, 2]

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(5, 7, batch_first=True)
        self.fc = nn.Linear(7, 2)

    def forward(self, x):
        packed = pack_padded_sequence(x, self.lengths, batch_first=True)
        out, (h, _) = self.rnn(packed)
        padded, _ = pad_packed_sequence(out, batch_first=True)
        return self.fc(padded), h


def lstm_packed():
    torch.manual_seed(0)
    return _LstmPacked(), (torch.randn(3, 6, 5),)


class _CellLoops(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTMCell(4, 6)
        self.gru = nn.GRUCell(6, 5)

    def forward(self, x):
        h = c = x.new_zeros(x.shape[1], 6)
        g = x.new_zeros(x.shape[1], 5)
        outs = []
        for t in range(x.shape[0]):
            h, c = self.lstm(x[t], (h, c))
            g = self.gru(h, g)
            outs.append(g)
        return torch.stack(outs)


def cell_loops():
    torch.manual_seed(0)
    return _CellLoops(), (torch.randn(5, 2, 4),)


# ---------------------------------------------------------------- audio and FFT


class _RfftFilter(nn.Module):
    """A learned filter in the frequency domain: rfft, a complex multiply, irfft."""

    def __init__(self, n=32):
        super().__init__()
        self.n = n
        self.w = nn.Parameter(torch.randn(n // 2 + 1, 2) * 0.1)
        self.fc = nn.Linear(n, 4)

    def forward(self, x):
        spec = torch.fft.rfft(x, dim=-1)
        y = torch.fft.irfft(spec * torch.view_as_complex(self.w), n=self.n, dim=-1)
        return self.fc(y)


def fft_rfft():
    torch.manual_seed(0)
    return _RfftFilter(), (torch.randn(3, 32),)


class _Fft2(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)

    def forward(self, x):
        f = torch.fft.fft2(self.conv(x))
        return f.abs(), torch.fft.ifft2(f).real


def fft2_model():
    torch.manual_seed(0)
    return _Fft2(), (torch.randn(2, 2, 8, 8),)


class _StftSpectrogram(nn.Module):
    """Waveform -> |STFT|^2 (Hann window) -> log -> a linear layer over frequency bins."""

    def __init__(self, n_fft=32, hop=8):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft))
        self.fc = nn.Linear(n_fft // 2 + 1, 6)

    def forward(self, wav):
        spec = torch.stft(wav, self.n_fft, hop_length=self.hop, window=self.window, return_complex=True)
        power = spec.abs().pow(2)
        return self.fc(torch.log(power + 1e-6).transpose(1, 2))


def stft_spectrogram():
    torch.manual_seed(0)
    return _StftSpectrogram(), (torch.randn(2, 128),)


class _ComplexOps(nn.Module):
    """abs of a complex tensor, view_as_real / view_as_complex, angle, a complex multiply."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.rot = nn.Parameter(torch.randn(4, 2))

    def forward(self, x):
        z = torch.view_as_complex(self.fc(x).reshape(x.shape[0], 4, 2))
        z = z * torch.view_as_complex(self.rot)
        return z.abs(), torch.angle(z), torch.view_as_real(z)


def complex_ops():
    torch.manual_seed(0)
    return _ComplexOps(), (torch.randn(3, 8),)


# ---------------------------------------------------------------- sparse


class _SparseCoo(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("idx", torch.tensor([[0, 1, 1, 3, 4], [2, 0, 3, 1, 4]]))
        self.vals = nn.Parameter(torch.randn(5))
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        s = torch.sparse_coo_tensor(self.idx, self.vals, (5, 5))
        return self.fc(s @ x)


def sparse_coo_matmul():
    torch.manual_seed(0)
    return _SparseCoo(), (torch.randn(5, 6),)


class _SparseMm(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("idx", torch.tensor([[0, 0, 2, 3], [1, 3, 2, 0]]))
        self.register_buffer("vals", torch.tensor([1.0, -2.0, 0.5, 3.0]))
        self.w = nn.Parameter(torch.randn(3, 5))

    def forward(self, x):
        adj = torch.sparse_coo_tensor(self.idx, self.vals, (4, 4))
        return torch.sparse.mm(adj, x @ self.w)


def sparse_mm():
    torch.manual_seed(0)
    return _SparseMm(), (torch.randn(4, 3),)


class _EmbeddingSparse(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 6, sparse=True)
        self.fc = nn.Linear(6, 2)

    def forward(self, ids):
        return self.fc(self.emb(ids).mean(1))


def embedding_sparse():
    torch.manual_seed(0)
    return _EmbeddingSparse(), (torch.randint(0, 20, (3, 5)),)


# ---------------------------------------------------------------- losses


class _Ctc(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 6)
        self.loss = nn.CTCLoss(blank=0)

    def forward(self, x, targets, in_len, tgt_len):
        logp = F.log_softmax(self.fc(x), dim=-1)  # (T, N, C)
        return self.loss(logp, targets, in_len, tgt_len)


def ctc_loss():
    torch.manual_seed(0)
    T, N = 12, 2
    return _Ctc(), (
        torch.randn(T, N, 8),
        torch.randint(1, 6, (N, 4)),
        torch.full((N,), T, dtype=torch.long),
        torch.tensor([4, 3]),
    )


class _NllWeighted(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 5)
        self.register_buffer("cw", torch.tensor([1.0, 2.0, 0.5, 1.5, 1.0]))

    def forward(self, x, y):
        return F.nll_loss(F.log_softmax(self.fc(x), -1), y, weight=self.cw, ignore_index=2)


def nll_weighted():
    torch.manual_seed(0)
    return _NllWeighted(), (torch.randn(8, 6), torch.randint(0, 5, (8,)))


class _CeSmoothing(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x, y):  # a per-pixel (N, C, H, W) cross entropy
        return F.cross_entropy(self.conv(x), y, label_smoothing=0.1)


def ce_label_smoothing():
    torch.manual_seed(0)
    return _CeSmoothing(), (torch.randn(2, 3, 4, 4), torch.randint(0, 4, (2, 4, 4)))


class _KlDiv(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 5)

    def forward(self, x, target_logits):
        return F.kl_div(F.log_softmax(self.fc(x), -1), F.softmax(target_logits, -1), reduction="batchmean")


def kl_div_loss():
    torch.manual_seed(0)
    return _KlDiv(), (torch.randn(4, 6), torch.randn(4, 5))


class _RegressionLosses(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 3)

    def forward(self, x, y):
        p = self.fc(x)
        return F.smooth_l1_loss(p, y, beta=0.5) + F.huber_loss(p, y, delta=0.8) + F.mse_loss(p, y)


def smooth_l1_huber():
    torch.manual_seed(0)
    return _RegressionLosses(), (torch.randn(6, 5), torch.randn(6, 3) * 2)


class _PairLosses(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(6, 4)

    def forward(self, a, p, n, sign):
        ea, ep, en = self.enc(a), self.enc(p), self.enc(n)
        return (
            F.margin_ranking_loss(ea.sum(1), en.sum(1), sign, margin=0.2)
            + F.cosine_embedding_loss(ea, ep, sign, margin=0.1)
            + F.triplet_margin_loss(ea, ep, en, margin=1.0, p=2)
        )


def pair_losses():
    torch.manual_seed(0)
    return _PairLosses(), (
        torch.randn(5, 6),
        torch.randn(5, 6),
        torch.randn(5, 6),
        torch.tensor([1.0, -1.0, 1.0, 1.0, -1.0]),
    )


class _MultiLabelLosses(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.register_buffer("pos_weight", torch.tensor([1.0, 3.0, 0.5, 2.0]))

    def forward(self, x, y, counts):
        z = self.fc(x)
        return (
            F.multilabel_soft_margin_loss(z, y)
            + F.binary_cross_entropy_with_logits(z, y, pos_weight=self.pos_weight)
            + F.poisson_nll_loss(z, counts, log_input=True)
        )


def multilabel_losses():
    torch.manual_seed(0)
    return _MultiLabelLosses(), (
        torch.randn(5, 6),
        torch.randint(0, 2, (5, 4)).float(),
        torch.randint(0, 5, (5, 4)).float(),
    )


# ---------------------------------------------------------------- embedding bags and embeddings


class _EmbBagSumOffsets(nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(30, 6, mode="sum")
        self.fc = nn.Linear(6, 2)

    def forward(self, ids, offsets, weights):
        return self.fc(self.bag(ids, offsets, per_sample_weights=weights))


def embbag_sum_offsets():
    torch.manual_seed(0)
    return _EmbBagSumOffsets(), (torch.randint(0, 30, (10,)), torch.tensor([0, 3, 7]), torch.rand(10))


class _EmbBagMeanMax(nn.Module):
    def __init__(self):
        super().__init__()
        self.mean = nn.EmbeddingBag(25, 5, mode="mean")
        self.max = nn.EmbeddingBag(25, 5, mode="max")

    def forward(self, ids2d, ids, offsets):
        return self.mean(ids2d), self.max(ids, offsets)


def embbag_mean_max():
    torch.manual_seed(0)
    return _EmbBagMeanMax(), (torch.randint(0, 25, (3, 4)), torch.randint(0, 25, (9,)), torch.tensor([0, 2, 6]))


class _EmbeddingMaxNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(15, 6, max_norm=1.0, padding_idx=0)
        self.fc = nn.Linear(6, 3)

    def forward(self, ids):
        return self.fc(self.emb(ids))


def embedding_max_norm():
    torch.manual_seed(0)
    return _EmbeddingMaxNorm(), (torch.randint(0, 15, (2, 6)),)


# ---------------------------------------------------------------- integer and boolean paths


class _Histograms(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, labels):
        y = self.fc(x)
        counts = torch.bincount(labels, minlength=6)
        weighted = torch.bincount(labels, weights=y[:, 0].detach())
        hist = torch.histc(y.detach(), bins=5, min=-2.0, max=2.0)
        return y * counts[:4].float(), counts, weighted, hist


def histograms():
    torch.manual_seed(0)
    return _Histograms(), (torch.randn(8, 4), torch.randint(0, 6, (8,)))


class _IntegerOps(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 5)

    def forward(self, x, ids):
        csum = torch.cumsum(ids, dim=1)  # int64 cumsum
        q = ids // 3 + torch.div(ids, 2, rounding_mode="floor") + torch.div(ids, 4, rounding_mode="trunc")
        bits = (ids & 5) | (ids ^ 3) | (~ids & 1) | (ids << 1) >> 1
        mask = (ids % 2 == 0) & (ids > 1) | ~(ids < 7)
        y = self.fc(x) * mask.float() + q.float() * 0.1
        return y, csum, bits, mask


def integer_ops():
    torch.manual_seed(0)
    return _IntegerOps(), (torch.randn(3, 5), torch.randint(0, 10, (3, 5)))


class _SelectSort(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        y = self.fc(x)
        top, top_i = torch.topk(y, 3, dim=-1)
        order = torch.argsort(y, dim=-1, descending=True)
        best = torch.argmax(y, dim=-1)
        masked = y.masked_fill(y < 0, -1.0)
        picked = torch.where(y > 0.2, y, torch.zeros_like(y))
        return top, top_i, order, best, masked + picked


def select_sort():
    torch.manual_seed(0)
    return _SelectSort(), (torch.randn(4, 6),)


# ---------------------------------------------------------------- custom autograd


class _StraightThroughRound(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x * 4) / 4

    @staticmethod
    def backward(ctx, g):
        return g


class _ScaledExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        y = torch.exp(x) * scale
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y, None


class _CustomFunction(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 5)

    def forward(self, x):
        return _ScaledExp.apply(_StraightThroughRound.apply(torch.tanh(self.fc(x))), 0.5)


def custom_function():
    torch.manual_seed(0)
    return _CustomFunction(), (torch.randn(4, 5),)


# ---------------------------------------------------------------- activations and norms


class _ActivationsA(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.acts = nn.ModuleList([nn.SELU(), nn.ELU(alpha=0.7), nn.CELU(alpha=1.3), nn.GELU("tanh"), nn.Mish()])

    def forward(self, x):
        y = self.fc(x)
        return tuple(a(y) for a in self.acts)


def activations_a():
    torch.manual_seed(0)
    return _ActivationsA(), (torch.randn(4, 6) * 2,)


class _ActivationsB(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 8)
        self.prelu = nn.PReLU(8, init=0.2)
        self.hs = nn.Hardswish()
        self.glu = nn.GLU(dim=-1)

    def forward(self, x):
        y = self.fc(x)
        return (
            self.hs(y),
            self.prelu(y),
            F.rrelu(y, lower=0.1, upper=0.3, training=False),
            self.glu(y),
            F.softplus(y, beta=2.0, threshold=5.0),
        )


def activations_b():
    torch.manual_seed(0)
    return _ActivationsB(), (torch.randn(4, 6) * 2,)


class _Norms(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.gn = nn.GroupNorm(4, 8)
        self.inorm = nn.InstanceNorm2d(8, affine=True)
        self.ln = nn.LayerNorm([8, 6, 6])
        self.lrn = nn.LocalResponseNorm(3)

    def forward(self, x):
        y = self.conv(x)
        return self.gn(y), self.inorm(y), self.ln(y), self.lrn(y)


def norms():
    torch.manual_seed(0)
    return _Norms(), (torch.randn(2, 3, 6, 6),)


# ---------------------------------------------------------------- reshaping, sampling, padding


class _PixelShuffle(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 12, 3, padding=1)
        self.shuffle = nn.PixelShuffle(2)
        self.unshuffle = nn.PixelUnshuffle(2)
        self.conv2 = nn.Conv2d(12, 4, 1)

    def forward(self, x):
        up = self.shuffle(self.conv(x))
        return self.conv2(self.unshuffle(up)), up


def pixel_shuffle():
    torch.manual_seed(0)
    return _PixelShuffle(), (torch.randn(2, 3, 4, 4),)


class _UnfoldFold(nn.Module):
    """A convolution written as unfold -> matmul -> fold (overlapping patches summed back)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3 * 3 * 3, 3 * 3 * 3) * 0.1)

    def forward(self, x):
        cols = F.unfold(x, kernel_size=3, padding=1, stride=2)
        return F.fold(self.w @ cols, output_size=x.shape[-2:], kernel_size=3, padding=1, stride=2)


def unfold_fold():
    torch.manual_seed(0)
    return _UnfoldFold(), (torch.randn(2, 3, 7, 7),)


class _SpatialTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.loc = nn.Linear(3 * 8 * 8, 6)
        with torch.no_grad():
            self.loc.weight.mul_(0.01)
            self.loc.bias.copy_(torch.tensor([1.0, 0.1, 0.0, -0.1, 0.9, 0.05]))

    def forward(self, x):
        theta = self.loc(x.flatten(1)).view(-1, 2, 3)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def grid_sample_affine():
    torch.manual_seed(0)
    return _SpatialTransformer(), (torch.randn(2, 3, 8, 8),)


class _PadModes(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3)

    def forward(self, x, s):
        y = self.conv(x)
        return (
            F.pad(y, (1, 2, 2, 1), mode="reflect"),
            F.pad(y, (2, 0, 1, 3), mode="replicate"),
            F.pad(y, (1, 1, 2, 2), mode="circular"),
            F.pad(s * self.conv.bias.sum(), (2, 3), mode="reflect"),
        )


def pad_modes():
    torch.manual_seed(0)
    return _PadModes(), (torch.randn(2, 2, 7, 7), torch.randn(2, 3, 6))


class _CdistEinsum(nn.Module):
    def __init__(self):
        super().__init__()
        self.proto = nn.Parameter(torch.randn(4, 6))
        self.bil = nn.Parameter(torch.randn(6, 6) * 0.2)

    def forward(self, x):
        d = torch.cdist(x, self.proto, p=2.0)
        d1 = torch.cdist(x, self.proto, p=1.0)
        s = torch.einsum("bi,ij,kj->bk", x, self.bil, self.proto)
        outer = torch.einsum("bi,bj->bij", x, x @ self.bil)
        return -d, d1, s, outer


def cdist_einsum():
    torch.manual_seed(0)
    return _CdistEinsum(), (torch.randn(5, 6),)


class _ScatterGather(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("rows", torch.tensor([0, 2, 2, 1, 4]))
        self.register_buffer("cols", torch.tensor([1, 3, 0, 0, 2]))

    def forward(self, x, idx):
        y = self.fc(x)  # (5, 4)
        g = torch.gather(y, 1, idx)
        s = y.new_zeros(5, 4).scatter(1, idx, g)
        sa = y.new_zeros(5, 4).scatter_add(0, idx, g * 2)
        ia = y.new_zeros(6, 4).index_add(0, self.rows, y)
        ip = y.new_zeros(5, 4).index_put((self.rows, self.cols), y[:, 0], accumulate=True)
        return g, s, sa, ia, ip


def scatter_gather():
    torch.manual_seed(0)
    return _ScatterGather(), (torch.randn(5, 4), torch.randint(0, 4, (5, 3)))


class _Cumulative(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 5)

    def forward(self, x):
        y = torch.sigmoid(self.fc(x)) + 0.5
        return torch.cumprod(y, dim=1), torch.cumsum(y, dim=0)


def cumprod_model():
    torch.manual_seed(0)
    return _Cumulative(), (torch.randn(4, 5),)


# ---------------------------------------------------------------- attention and other layers


class _EncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True)

    def forward(self, x, pad):
        return self.layer(x, src_key_padding_mask=pad)


def transformer_encoder():
    torch.manual_seed(0)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True
    return _EncoderLayer(), (torch.randn(2, 6, 16), pad)


class _MhaMasks(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(12, 3, dropout=0.0)

    def forward(self, q, kv, pad):
        causal = torch.triu(q.new_full((q.shape[0], kv.shape[0]), float("-inf")), diagonal=1)
        out, w = self.mha(q, kv, kv, attn_mask=causal, key_padding_mask=pad)
        return out, w


def mha_masks():
    torch.manual_seed(0)
    pad = torch.zeros(2, 5, dtype=torch.bool)
    pad[0, 4] = True
    return _MhaMasks(), (torch.randn(5, 2, 12), torch.randn(5, 2, 12), pad)


class _BilinearLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.bil = nn.Bilinear(5, 4, 3)

    def forward(self, a, b):
        return self.bil(a, b)


def bilinear_layer():
    torch.manual_seed(0)
    return _BilinearLayer(), (torch.randn(6, 5), torch.randn(6, 4))


class _DropoutVariants(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4, 4)
        self.zero = nn.Dropout(p=0.0)

    def forward(self, x):
        y = self.conv(x)
        a = F.dropout2d(y, p=0.3, training=False)
        b = F.feature_alpha_dropout(y, p=0.2, training=False)
        v = self.fc(y.mean((2, 3)))
        return a, b, F.alpha_dropout(v, p=0.4, training=False), self.zero(v)


def dropout_variants():
    torch.manual_seed(0)
    return _DropoutVariants(), (torch.randn(2, 3, 5, 5),)


# ---------------------------------------------------------------- the table

MODELS = {
    "conv_groups_dilation": (
        "vision",
        "Conv2d with groups+dilation, reflect and circular padding_mode, 'same', BatchNorm2d",
    ),
    "maxpool_dilated": ("vision", "MaxPool2d with dilation=2"),
    "maxpool_ceil_indices": ("vision", "MaxPool2d ceil_mode=True return_indices=True, MaxUnpool2d"),
    "avgpool_variants": ("vision", "AvgPool2d count_include_pad False/True, ceil_mode, divisor_override"),
    "adaptive_even": ("vision", "AdaptiveAvgPool2d / AdaptiveMaxPool2d with even bins"),
    "adaptive_uneven": ("vision", "AdaptiveAvgPool2d (3,5) on 7x11, AdaptiveMaxPool2d 3 on 7x11: uneven bins"),
    "conv1d_pool1d": (
        "vision",
        "Conv1d 'same' and replicate padding, MaxPool1d, AvgPool1d, adaptive 1d pools (uneven)",
    ),
    "conv3d_pool3d": ("vision", "Conv3d, BatchNorm3d, MaxPool3d, AvgPool3d, AdaptiveAvgPool3d"),
    "conv_transpose": ("vision", "ConvTranspose2d with groups/output_padding, ConvTranspose1d with dilation"),
    "small_resnet": ("vision", "a two-block residual CNN with BatchNorm and global average pooling"),
    "interp_nearest_int": ("interpolation", "nearest, integer scale_factor=2"),
    "interp_nearest_frac": ("interpolation", "nearest, non-integer scale_factor=1.5"),
    "interp_nearest_exact": ("interpolation", "nearest-exact to a size"),
    "interp_bilinear": ("interpolation", "bilinear, align_corners True (scale 2) and False (size)"),
    "interp_bicubic": ("interpolation", "bicubic to a size, align_corners False"),
    "interp_trilinear": ("interpolation", "trilinear 3d, scale_factor 2"),
    "interp_area": ("interpolation", "area mode to an uneven smaller size"),
    "upsample_size": ("interpolation", "F.upsample with size (nearest)"),
    "lstm_bi_multi": ("rnn", "LSTM 2 layers, bidirectional, batch_first"),
    "gru_basic": ("rnn", "GRU one layer, seq-first, given h0"),
    "gru_bi_multi": ("rnn", "GRU 2 layers, bidirectional, batch_first"),
    "rnn_tanh_relu": ("rnn", "RNN tanh (batch_first) then RNN relu 2 layers"),
    "lstm_packed": ("rnn", "pack_padded_sequence -> LSTM -> pad_packed_sequence"),
    "cell_loops": ("rnn", "LSTMCell and GRUCell in a Python loop"),
    "fft_rfft": ("audio/fft", "rfft, complex multiply with a learned filter, irfft"),
    "fft2_model": ("audio/fft", "fft2 / ifft2 of conv features, abs and real part"),
    "stft_spectrogram": ("audio/fft", "stft with a Hann window, power, log, linear (spectrogram)"),
    "complex_ops": ("complex", "view_as_complex, complex multiply, abs, angle, view_as_real"),
    "sparse_coo_matmul": ("sparse", "torch.sparse_coo_tensor with learned values @ dense"),
    "sparse_mm": ("sparse", "torch.sparse.mm of a fixed sparse adjacency"),
    "embedding_sparse": ("sparse", "Embedding(sparse=True): sparse gradients"),
    "ctc_loss": ("loss", "CTCLoss over log_softmax"),
    "nll_weighted": ("loss", "nll_loss with class weights and ignore_index"),
    "ce_label_smoothing": ("loss", "per-pixel cross_entropy with label_smoothing"),
    "kl_div_loss": ("loss", "kl_div batchmean"),
    "smooth_l1_huber": ("loss", "smooth_l1 (beta), huber (delta), mse"),
    "pair_losses": ("loss", "margin_ranking, cosine_embedding, triplet_margin"),
    "multilabel_losses": ("loss", "multilabel_soft_margin, BCEWithLogits pos_weight, poisson_nll"),
    "embbag_sum_offsets": ("embedding", "EmbeddingBag sum with offsets and per_sample_weights"),
    "embbag_mean_max": ("embedding", "EmbeddingBag mean (2d input) and max (offsets)"),
    "embedding_max_norm": ("embedding", "Embedding with max_norm and padding_idx"),
    "histograms": ("integer", "bincount (minlength, weights), histc"),
    "integer_ops": ("integer", "int cumsum, floor/trunc division, bitwise and/or/xor/not/shifts, bool masks"),
    "select_sort": ("integer", "topk, argsort, argmax, masked_fill, where"),
    "custom_function": ("autograd", "custom autograd Functions: straight-through round, saved-tensor exp"),
    "activations_a": ("activation", "SELU, ELU, CELU, GELU tanh, Mish"),
    "activations_b": ("activation", "Hardswish, PReLU, RReLU eval, GLU, softplus beta"),
    "norms": ("norm", "GroupNorm, InstanceNorm2d affine, LayerNorm, LocalResponseNorm"),
    "pixel_shuffle": ("reshape", "PixelShuffle and PixelUnshuffle"),
    "unfold_fold": ("reshape", "unfold -> matmul -> fold with stride and padding"),
    "grid_sample_affine": ("sampling", "affine_grid + grid_sample bilinear zeros"),
    "pad_modes": ("padding", "F.pad reflect, replicate, circular (2d) and reflect (1d)"),
    "cdist_einsum": ("math", "cdist p=2 and p=1, einsum contractions"),
    "scatter_gather": ("indexing", "gather, scatter, scatter_add, index_add, index_put accumulate"),
    "cumprod_model": ("math", "cumprod and float cumsum"),
    "transformer_encoder": ("attention", "TransformerEncoderLayer batch_first with a key padding mask"),
    "mha_masks": ("attention", "MultiheadAttention with a float causal mask and key_padding_mask, weights returned"),
    "bilinear_layer": ("layer", "nn.Bilinear"),
    "dropout_variants": (
        "dropout",
        "dropout2d / feature_alpha_dropout / alpha_dropout with training=False, Dropout(p=0)",
    ),
}

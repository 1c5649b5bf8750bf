"""The HELD-OUT set of plain ``torch.nn`` user models: the same kind as the tuning set (``nn_models.py``) but
none of its models: other layers, other combinations, other argument values. It measures opcov's verdicts
on PyTorch/XLA; nothing may be tuned on it. Written without reading how opcov judges models.

The same contract as ``nn_models.py``: each factory ``NAME()`` returns ``(model, inputs)``, seeded inside,
small, callable under ``torch.device("meta")`` (no tensor built from another's values in the factory); a
floating output depends on the parameters; no complex output; no randomness on the compared path.

    PYTHONPATH=scripts/reality opcov trace nn_heldout:resnet_stem --mode training --out x.yaml

``MODELS`` names each factory: name -> (family, one-line description).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

# ---------------------------------------------------------------- vision


class _ResnetStem(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 7, stride=2, padding=3, bias=False)
        self.bn = nn.BatchNorm2d(8, momentum=0.3)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(self.gap(self.pool(F.relu(self.bn(self.conv(x))))).flatten(1))


def resnet_stem():
    torch.manual_seed(0)
    return _ResnetStem(), (torch.randn(2, 3, 20, 20),)


class _Pool1dIndices(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(3, 4, 3, dilation=2, padding=2)
        self.pool = nn.MaxPool1d(3, stride=2, padding=1, return_indices=True)
        self.unpool = nn.MaxUnpool1d(3, stride=2, padding=1)
        self.lp = nn.LPPool1d(2, 3, stride=2)

    def forward(self, x):
        y = self.conv(x)
        p, idx = self.pool(y)
        return self.unpool(p, idx, output_size=y.shape[-1:]), self.lp(y), idx


def pool1d_indices_lp():
    torch.manual_seed(0)
    return _Pool1dIndices(), (torch.randn(2, 3, 15),)


class _Pool3dCeil(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(1, 3, (1, 3, 3), padding=(0, 1, 1))
        self.mp = nn.MaxPool3d((1, 3, 3), stride=(1, 2, 2), ceil_mode=True)
        self.ap = nn.AvgPool3d(2, stride=2, ceil_mode=True, count_include_pad=False)
        self.am = nn.AdaptiveMaxPool3d((1, 3, 2))

    def forward(self, x):
        y = self.conv(x)
        return self.mp(y), self.ap(y), self.am(y)


def pool3d_ceil_adaptive_max():
    torch.manual_seed(0)
    return _Pool3dCeil(), (torch.randn(2, 1, 3, 7, 9),)


class _DepthwiseSeparable(nn.Module):
    def __init__(self):
        super().__init__()
        self.dw = nn.Conv2d(6, 6, 5, padding=4, dilation=2, groups=6, padding_mode="replicate")
        self.pw = nn.Conv2d(6, 10, 1)
        self.bn = nn.BatchNorm2d(10, affine=False)
        self.pool = nn.AdaptiveAvgPool2d((5, 3))

    def forward(self, x):
        return self.pool(F.relu6(self.bn(self.pw(self.dw(x)))))


def depthwise_separable():
    torch.manual_seed(0)
    return _DepthwiseSeparable(), (torch.randn(2, 6, 11, 13),)


class _Decoder2d(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(6, 4, 4, stride=2, padding=1)
        self.up3 = nn.ConvTranspose3d(2, 2, 3, stride=(1, 2, 2), padding=1, output_padding=(0, 1, 1))
        self.conv = nn.Conv2d(4, 2, 3, stride=1, padding=2, dilation=2)

    def forward(self, x, v):
        return torch.sigmoid(self.conv(self.up(x))), self.up3(v)


def decoder_transpose():
    torch.manual_seed(0)
    return _Decoder2d(), (torch.randn(2, 6, 4, 5), torch.randn(1, 2, 2, 3, 3))


# ---------------------------------------------------------------- interpolation


class _UpsampleModules(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(2, 3, 3, padding=1)
        self.near = nn.Upsample(scale_factor=3, mode="nearest")
        self.lin = nn.Upsample(size=17, mode="linear", align_corners=True)

    def forward(self, x):
        y = self.conv(x)
        return self.near(y), self.lin(y)


def upsample_1d():
    torch.manual_seed(0)
    return _UpsampleModules(), (torch.randn(2, 2, 6),)


class _DownscaleAntialias(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return (
            F.interpolate(y, scale_factor=0.75, mode="bilinear", align_corners=False, antialias=True),
            F.interpolate(y, scale_factor=0.5, mode="nearest"),
        )


def downscale_antialias():
    torch.manual_seed(0)
    return _DownscaleAntialias(), (torch.randn(2, 3, 12, 12),)


class _BicubicCorners(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 1)

    def forward(self, x):
        y = self.conv(x)
        return (
            F.interpolate(y, size=(9, 5), mode="bicubic", align_corners=True),
            F.interpolate(y, scale_factor=2.5, mode="nearest-exact"),
        )


def bicubic_corners_exact_frac():
    torch.manual_seed(0)
    return _BicubicCorners(), (torch.randn(1, 2, 4, 6),)


# ---------------------------------------------------------------- recurrent


class _LstmProj(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(5, 8, proj_size=3)
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        out, (h, c) = self.rnn(x)
        return self.fc(out), c


def lstm_proj():
    torch.manual_seed(0)
    return _LstmProj(), (torch.randn(6, 2, 5),)


class _GruPackedUnsorted(nn.Module):
    lengths = [3, 5, 2, 4]

    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(4, 6, num_layers=2, batch_first=True)
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        packed = pack_padded_sequence(x, self.lengths, batch_first=True, enforce_sorted=False)
        out, h = self.rnn(packed)
        padded, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        return self.fc(padded), h[-1]


def gru_packed_unsorted():
    torch.manual_seed(0)
    return _GruPackedUnsorted(), (torch.randn(4, 5, 4),)


class _RnnCells(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.RNNCell(3, 5, nonlinearity="relu")
        self.b = nn.RNNCell(5, 4, nonlinearity="tanh", bias=False)

    def forward(self, x):
        h = x.new_zeros(x.shape[1], 5)
        g = x.new_zeros(x.shape[1], 4)
        for t in range(x.shape[0]):
            h = self.a(x[t], h)
            g = self.b(h, g)
        return g, h


def rnn_cells():
    torch.manual_seed(0)
    return _RnnCells(), (torch.randn(4, 3, 3),)


class _BiRnnRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(4, 5, nonlinearity="relu", bidirectional=True, batch_first=True)
        self.lstm = nn.LSTM(10, 3, batch_first=True, bias=False)

    def forward(self, x):
        a, _ = self.rnn(x)
        b, (h, _) = self.lstm(a)
        return b, h


def birnn_relu_lstm_nobias():
    torch.manual_seed(0)
    return _BiRnnRelu(), (torch.randn(2, 5, 4),)


# ---------------------------------------------------------------- audio, FFT, complex


class _FftNd(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)

    def forward(self, x):
        f = torch.fft.fftshift(torch.fft.fftn(self.conv(x), dim=(-2, -1)), dim=(-2, -1))
        back = torch.fft.ifft(torch.fft.ifftshift(f, dim=(-2, -1)), dim=-1)
        return torch.log1p(f.abs()), back.imag, torch.fft.hfft(f[..., 0, :4], n=6)


def fftn_shift():
    torch.manual_seed(0)
    return _FftNd(), (torch.randn(2, 1, 6, 6),)


class _StftRoundTrip(nn.Module):
    def __init__(self, n_fft=16, hop=4):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hamming_window(n_fft))
        self.gain = nn.Parameter(torch.ones(n_fft // 2 + 1, 1) * 0.9)

    def forward(self, wav):
        spec = torch.stft(wav, self.n_fft, self.hop, window=self.window, center=True, return_complex=True)
        return torch.istft(spec * self.gain, self.n_fft, self.hop, window=self.window, length=wav.shape[-1])


def stft_istft():
    torch.manual_seed(0)
    return _StftRoundTrip(), (torch.randn(2, 64),)


class _MelFeatures(nn.Module):
    def __init__(self, n_fft=32, mels=6):
        super().__init__()
        self.n_fft = n_fft
        self.register_buffer("window", torch.hann_window(n_fft, periodic=False))
        self.register_buffer("fbank", torch.rand(n_fft // 2 + 1, mels))
        self.conv = nn.Conv1d(mels, 4, 3, padding=1)

    def forward(self, wav):
        spec = torch.stft(wav, self.n_fft, hop_length=16, window=self.window, center=False, return_complex=True)
        mag = torch.view_as_real(spec).pow(2).sum(-1)  # power from the real and imaginary parts
        mel = torch.log1p(mag.transpose(1, 2) @ self.fbank)
        return self.conv(mel.transpose(1, 2))


def mel_features():
    torch.manual_seed(0)
    return _MelFeatures(), (torch.randn(2, 160),)


class _ComplexLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.re = nn.Parameter(torch.randn(4, 4) * 0.3)
        self.im = nn.Parameter(torch.randn(4, 4) * 0.3)

    def forward(self, mag, phase):
        z = torch.polar(mag, phase)
        w = torch.complex(self.re, self.im)
        y = z @ w.conj().t()
        return y.real, y.imag, torch.abs(y) ** 2


def complex_linear_polar():
    torch.manual_seed(0)
    return _ComplexLinear(), (torch.rand(3, 4) + 0.1, torch.randn(3, 4))


# ---------------------------------------------------------------- losses


class _ClassLosses(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 4)
        self.register_buffer("w", torch.tensor([0.5, 1.0, 2.0, 1.0]))

    def forward(self, x, y, t):
        z = self.fc(x)
        return (
            F.multi_margin_loss(z, y, p=1, margin=0.5, weight=self.w)
            + F.hinge_embedding_loss(z.sum(1), t, margin=0.5)
            + F.soft_margin_loss(z[:, 0], t)
            + F.binary_cross_entropy(torch.sigmoid(z), (z.detach() > 0).float(), weight=self.w.expand(6, 4))
            + F.l1_loss(z, z.detach() * 0.5, reduction="sum")
        )


def class_losses():
    torch.manual_seed(0)
    return _ClassLosses(), (torch.randn(6, 5), torch.randint(0, 4, (6,)), torch.tensor([1.0, -1, 1, -1, -1, 1]))


class _SoftTargets(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(3, 5, 1)

    def forward(self, x, probs, labels, var_target):
        z = self.conv(x)  # (N, C, L)
        return (
            F.cross_entropy(z, probs)  # class probabilities as targets
            + F.cross_entropy(z, labels, ignore_index=1, reduction="sum") * 0.1
            + F.gaussian_nll_loss(z.mean(1), var_target, torch.ones_like(var_target) * 0.5)
        )


def soft_target_losses():
    torch.manual_seed(0)
    return _SoftTargets(), (
        torch.randn(2, 3, 4),
        torch.softmax(torch.randn(2, 5, 4), dim=1),
        torch.randint(0, 5, (2, 4)),
        torch.randn(2, 4),
    )


class _CtcSum(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(6, 8)
        self.fc = nn.Linear(8, 5)
        self.loss = nn.CTCLoss(blank=4, reduction="sum", zero_infinity=True)

    def forward(self, x, targets, in_len, tgt_len):
        h, _ = self.rnn(x)
        return self.loss(F.log_softmax(self.fc(h), -1), targets, in_len, tgt_len)


def ctc_gru_sum():
    torch.manual_seed(0)
    return _CtcSum(), (
        torch.randn(10, 3, 6),
        torch.randint(0, 4, (7,)),  # concatenated targets, 1-d
        torch.tensor([10, 9, 8]),
        torch.tensor([3, 2, 2]),
    )


# ---------------------------------------------------------------- embeddings, integer, indexing


class _BagPaddingLast(nn.Module):
    def __init__(self):
        super().__init__()
        self.mx = nn.EmbeddingBag(12, 4, mode="max", padding_idx=0)
        self.mean = nn.EmbeddingBag(12, 4, mode="mean", include_last_offset=True, sparse=False)

    def forward(self, ids2d, ids, offsets):
        return self.mx(ids2d), self.mean(ids, offsets)


def embbag_padding_last_offset():
    torch.manual_seed(0)
    return _BagPaddingLast(), (
        torch.randint(0, 12, (3, 4)),
        torch.randint(0, 12, (8,)),
        torch.tensor([0, 3, 5, 8]),
    )


class _IntArith(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x, a):
        r = torch.remainder(a, 4) + torch.fmod(a, 3)
        fd = torch.floor_divide(a, 3)
        sh = torch.bitwise_right_shift(a.abs(), 1) ^ torch.bitwise_left_shift(a.abs() & 3, 2)
        kth, _ = torch.kthvalue(x, 2, dim=1)
        cmax, cidx = torch.cummax(a, dim=1)
        srt, order = torch.sort(a, dim=1, stable=True)
        y = self.fc(x) + fd.float() * 0.01
        return y, r, sh, kth, cmax, cidx, srt, order


def int_arith_sort():
    torch.manual_seed(0)
    return _IntArith(), (torch.randn(3, 6), torch.randint(-9, 9, (3, 6)))


class _IndexOps(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Parameter(torch.randn(6, 3))
        self.register_buffer("src_idx", torch.tensor([4, 0, 2, 2]))

    def forward(self, x, mask):
        sel = torch.index_select(self.emb, 0, self.src_idx)
        taken = torch.take_along_dim(x, x.argmin(dim=1, keepdim=True), dim=1)
        filled = self.emb.index_fill(0, torch.tensor([1, 3], device=x.device), 0.5)
        scat = torch.zeros_like(self.emb).scatter_reduce(0, self.src_idx[:, None].expand(4, 3), sel, "amax")
        masked = self.emb.masked_scatter(mask, torch.arange(18.0, device=x.device).reshape(6, 3))
        return sel * 2, taken, filled, scat, masked


def index_ops():
    torch.manual_seed(0)
    return _IndexOps(), (torch.randn(3, 5), torch.rand(6, 3) > 0.5)


class _ScanOps(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 5)

    def forward(self, x):
        y = self.fc(x)
        cmin, _ = torch.cummin(y, dim=1)
        return (
            torch.logcumsumexp(y, dim=1),
            cmin,
            torch.diff(y, dim=1),
            torch.triu(y @ y.t(), diagonal=1) + torch.tril(y @ y.t(), diagonal=-1),
            torch.roll(y, shifts=2, dims=1).flip(0),
        )


def scan_ops():
    torch.manual_seed(0)
    return _ScanOps(), (torch.randn(4, 5),)


# ---------------------------------------------------------------- layers, norms, activations


class _MoreActivations(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 6)
        self.acts = nn.ModuleList(
            [
                nn.Hardtanh(-0.5, 0.8),
                nn.LogSigmoid(),
                nn.Softsign(),
                nn.Tanhshrink(),
                nn.Hardshrink(0.3),
                nn.Softshrink(0.2),
                nn.Threshold(0.1, -1.0),
                nn.SiLU(),
                nn.LeakyReLU(0.05),
                nn.Hardsigmoid(),
                nn.LogSoftmax(dim=1),
                nn.Softmin(dim=1),
            ]
        )

    def forward(self, x):
        y = self.fc(x)
        return tuple(a(y) for a in self.acts)


def more_activations():
    torch.manual_seed(0)
    return _MoreActivations(), (torch.randn(4, 5) * 2,)


class _Norms1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(3, 6, 3, padding=1)
        self.bn = nn.BatchNorm1d(6)
        self.inorm = nn.InstanceNorm1d(6, affine=False, track_running_stats=True)
        self.gn = nn.GroupNorm(1, 6, eps=1e-3)
        self.ln = nn.LayerNorm(8, elementwise_affine=False)
        self.rms = nn.RMSNorm(8)

    def forward(self, x):
        y = self.conv(x)
        return self.bn(y), self.inorm(y), self.gn(y), self.ln(y), self.rms(y)


def norms_1d():
    torch.manual_seed(0)
    return _Norms1d(), (torch.randn(3, 3, 8),)


class _DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(
            12, 2, dim_feedforward=24, dropout=0.0, activation="gelu", norm_first=True
        )

    def forward(self, tgt, memory, mem_pad):
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[0], device=tgt.device)
        return self.layer(tgt, memory, tgt_mask=causal, memory_key_padding_mask=mem_pad, tgt_is_causal=True)


def transformer_decoder():
    torch.manual_seed(0)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 5] = True
    return _DecoderLayer(), (torch.randn(4, 2, 12), torch.randn(6, 2, 12), pad)


class _Sampling3d(nn.Module):
    def __init__(self):
        super().__init__()
        self.theta = nn.Parameter(
            torch.tensor([[0.9, 0.1, 0.0, 0.05], [-0.1, 1.0, 0.0, 0.0], [0.0, 0.05, 0.95, -0.05]])
        )

    def forward(self, vol, img, grid2d):
        grid = F.affine_grid(self.theta.expand(vol.shape[0], 3, 4), list(vol.shape), align_corners=True)
        return (
            F.grid_sample(vol, grid, mode="bilinear", padding_mode="border", align_corners=True),
            F.grid_sample(img * self.theta[0, 0], grid2d, mode="nearest", padding_mode="reflection"),
        )


def grid_sample_3d_nearest():
    torch.manual_seed(0)
    return _Sampling3d(), (torch.randn(1, 2, 3, 4, 4), torch.randn(2, 1, 5, 5), torch.rand(2, 3, 4, 2) * 2.2 - 1.1)


class _PadLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3)
        self.zero = nn.ZeroPad2d((1, 0, 2, 1))
        self.refl1 = nn.ReflectionPad1d(3)
        self.rep3 = nn.ReplicationPad3d(1)
        self.circ1 = nn.CircularPad1d((2, 1))

    def forward(self, x, v):
        y = self.conv(x)
        row = y[:, :, 0]  # (N, C, W)
        return (
            F.pad(self.zero(y), (1, 1, 1, 1), mode="constant", value=-0.5),
            self.refl1(row),
            self.rep3(v * self.conv.weight.mean()),
            self.circ1(row),
        )


def pad_layers():
    torch.manual_seed(0)
    return _PadLayers(), (torch.randn(2, 2, 7, 7), torch.randn(1, 2, 2, 3, 3))


class _ShuffleDistance(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 9, 3, padding=1)
        self.shuffle = nn.ChannelShuffle(3)
        self.unshuffle = nn.PixelUnshuffle(3)
        self.proj = nn.Linear(9 * 9, 6)

    def forward(self, x, other):
        y = self.unshuffle(self.shuffle(self.conv(x)))  # (N, 81, 2, 2)
        e = F.normalize(self.proj(y.mean((2, 3))), dim=1)
        return (
            F.cosine_similarity(e, other, dim=1),
            F.pairwise_distance(e, other, p=3.0),
            torch.cdist(e.unsqueeze(0), other.unsqueeze(0), p=0.5).squeeze(0),
        )


def shuffle_distance():
    torch.manual_seed(0)
    return _ShuffleDistance(), (torch.randn(3, 2, 6, 6), torch.randn(3, 6))


class _ClampGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lo, hi):
        ctx.save_for_backward(x)
        ctx.lo, ctx.hi = lo, hi
        idx = x.argmax(dim=-1)
        ctx.mark_non_differentiable(idx)
        return x.clamp(lo, hi), idx

    @staticmethod
    def backward(ctx, g, _gi):
        (x,) = ctx.saved_tensors
        inside = (x >= ctx.lo) & (x <= ctx.hi)
        return g * inside + 0.01 * g * ~inside, None, None


class _CustomClamp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 6)
        self.fc2 = nn.Linear(6, 2)

    def forward(self, x):
        y, idx = _ClampGrad.apply(self.fc(x), -0.5, 0.5)
        return self.fc2(y), idx


def custom_clamp_function():
    torch.manual_seed(0)
    return _CustomClamp(), (torch.randn(5, 4),)


class _SparseBag(nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(16, 4, mode="sum", sparse=True)
        self.register_buffer("rows", torch.tensor([0, 1, 1, 2]))
        self.register_buffer("cols", torch.tensor([1, 0, 2, 2]))
        self.fc = nn.Linear(4, 3)

    def forward(self, ids, offsets):
        h = self.bag(ids, offsets)  # (3, 4)
        adj = torch.sparse_coo_tensor(torch.stack([self.rows, self.cols]), h.new_ones(4), (3, 3)).coalesce()
        return self.fc(torch.sparse.addmm(h, adj, h, beta=0.5, alpha=2.0))


def sparse_bag_addmm():
    torch.manual_seed(0)
    return _SparseBag(), (torch.randint(0, 16, (7,)), torch.tensor([0, 2, 5]))


class _GatedMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(6, 16, bias=False)
        self.down = nn.Linear(8, 6)
        self.bil = nn.Bilinear(6, 6, 2, bias=False)
        self.emb = nn.Embedding(10, 6, scale_grad_by_freq=True)

    def forward(self, x, ids):
        a, b = self.up(x + self.emb(ids)).chunk(2, dim=-1)
        h = self.down(F.silu(a) * b)
        return h, self.bil(h, x)


def gated_mlp_bilinear():
    torch.manual_seed(0)
    return _GatedMlp(), (torch.randn(5, 6), torch.randint(0, 10, (5,)))


# ---------------------------------------------------------------- the table

MODELS = {
    "resnet_stem": ("vision", "Conv2d 7x7 stride 2 pad 3, BatchNorm momentum, MaxPool2d 3/2/1, global pool"),
    "pool1d_indices_lp": ("vision", "Conv1d dilated, MaxPool1d with padding and indices, MaxUnpool1d, LPPool1d"),
    "pool3d_ceil_adaptive_max": ("vision", "MaxPool3d ceil_mode, AvgPool3d ceil_mode no pad count, AdaptiveMaxPool3d"),
    "depthwise_separable": (
        "vision",
        "depthwise dilated conv replicate padding, pointwise, BatchNorm affine=False, ReLU6, uneven adaptive pool",
    ),
    "decoder_transpose": ("vision", "ConvTranspose2d 4/2/1, ConvTranspose3d with output_padding, dilated conv"),
    "upsample_1d": ("interpolation", "nn.Upsample nearest scale 3 and linear align_corners=True to a size (1d)"),
    "downscale_antialias": ("interpolation", "bilinear antialias downscale 0.75, nearest downscale 0.5"),
    "bicubic_corners_exact_frac": ("interpolation", "bicubic align_corners=True, nearest-exact scale 2.5"),
    "lstm_proj": ("rnn", "LSTM with proj_size"),
    "gru_packed_unsorted": ("rnn", "GRU 2 layers over a packed sequence with enforce_sorted=False"),
    "rnn_cells": ("rnn", "RNNCell relu and tanh (no bias) in a loop"),
    "birnn_relu_lstm_nobias": ("rnn", "bidirectional RNN relu, then LSTM without bias"),
    "fftn_shift": ("audio/fft", "fftn, fftshift/ifftshift, ifft, hfft"),
    "stft_istft": ("audio/fft", "stft (Hamming) -> gain -> istft"),
    "mel_features": ("audio/fft", "stft center=False, power via view_as_real, filterbank matmul, log1p, Conv1d"),
    "complex_linear_polar": ("complex", "polar, complex(), conj, complex matmul, real/imag, abs"),
    "class_losses": ("loss", "multi_margin (weight, p=1), hinge_embedding, soft_margin, BCE with weight, l1 sum"),
    "soft_target_losses": ("loss", "cross_entropy with class probabilities, with ignore_index sum, gaussian_nll"),
    "ctc_gru_sum": ("loss", "GRU + CTCLoss blank=4, reduction sum, zero_infinity, 1-d targets"),
    "embbag_padding_last_offset": ("embedding", "EmbeddingBag max with padding_idx, mean with include_last_offset"),
    "int_arith_sort": ("integer", "remainder, fmod, floor_divide on negatives, shifts, kthvalue, cummax, stable sort"),
    "index_ops": ("indexing", "index_select, take_along_dim, index_fill, scatter_reduce amax, masked_scatter"),
    "scan_ops": ("math", "logcumsumexp, cummin, diff, triu/tril, roll, flip"),
    "more_activations": (
        "activation",
        "Hardtanh, LogSigmoid, Softsign, Tanhshrink, Hard/Softshrink, Threshold, SiLU, LeakyReLU, Hardsigmoid, LogSoftmax, Softmin",
    ),
    "norms_1d": ("norm", "BatchNorm1d, InstanceNorm1d running stats, GroupNorm 1 group, LayerNorm no affine, RMSNorm"),
    "transformer_decoder": (
        "attention",
        "TransformerDecoderLayer norm_first, gelu, causal tgt mask, memory padding mask",
    ),
    "grid_sample_3d_nearest": ("sampling", "affine_grid 3d + grid_sample border align_corners; 2d nearest reflection"),
    "pad_layers": ("padding", "ZeroPad2d, constant pad value, ReflectionPad1d, ReplicationPad3d, CircularPad1d"),
    "shuffle_distance": (
        "reshape",
        "ChannelShuffle, PixelUnshuffle 3, normalize, cosine_similarity, pairwise_distance p=3, cdist p=0.5",
    ),
    "custom_clamp_function": ("autograd", "custom Function with mark_non_differentiable and a second output"),
    "sparse_bag_addmm": ("sparse", "EmbeddingBag(sparse=True), coalesced sparse adjacency, torch.sparse.addmm"),
    "gated_mlp_bilinear": ("layer", "gated SiLU MLP, Bilinear without bias, Embedding scale_grad_by_freq"),
}

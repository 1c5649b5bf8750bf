"""The UNSEEN set of plain ``torch.nn`` user models: a fourth set, written after the tuning set
(``nn_models.py``), the held-out set (``nn_heldout.py``) and the fresh set (``nn_fresh.py``) had all been
seen by the people who tune opcov's rules, and written without reading how opcov judges models. It holds
blocks and small models of the kinds users write (a ResNeXt block with a ResNet-D shortcut, a MobileNetV3
block, an R(2+1)D video net, a tied-weight LSTM language model, a Fourier neural operator layer, a DLRM
interaction, a domain-adversarial net with a gradient-reversal Function, weight and spectral norm
parametrizations, small linear algebra...) with layer arguments the earlier sets use little or not at all.
It measures opcov's verdicts on PyTorch/XLA; nothing may be tuned on it.

The same contract as the other sets: each factory ``NAME()`` returns ``(model, inputs)``, seeded inside,
small, callable under ``torch.device("meta")`` (no tensor built from another's values in the factory;
tables a model needs, such as windows and triangle indices, are made in ``forward``); a floating output
depends on the parameters; no complex output; no randomness on the compared path (the fractional max
pool's samples are an input, no dropout is active in training). Two models are data-dependent on purpose
(``sparse_gcn_prune``: to_sparse of a thresholded matrix; ``rnn_packed_relu``: packing by lengths).

    PYTHONPATH=scripts/reality opcov trace nn_unseen:resnext_block --mode training --out x.yaml
    PJRT_DEVICE=CPU .envs/xla/bin/python scripts/envs/nn_reality.py --set unseen --models resnext_block

``MODELS`` names each factory: name -> (family, one-line description).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

# ---------------------------------------------------------------- vision


class _ResNeXtBlock(nn.Module):
    """Bottleneck with a grouped 3x3 conv; the strided block's shortcut is ResNet-D's avg pool + 1x1 conv."""

    def __init__(self, cin, width, cout, groups, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(
                nn.AvgPool2d(stride, stride, ceil_mode=True, count_include_pad=False),
                nn.Conv2d(cin, cout, 1, bias=False),
                nn.BatchNorm2d(cout),
            )
        else:
            self.short = nn.Identity()

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        return F.relu(self.bn3(self.conv3(y)) + self.short(x))


class _ResNeXt(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.b1 = _ResNeXtBlock(8, 16, 16, groups=4, stride=2)
        self.b2 = _ResNeXtBlock(16, 16, 16, groups=8, stride=1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        return self.fc(self.b2(self.b1(self.stem(x))).mean((2, 3)))


def resnext_block():
    torch.manual_seed(0)
    return _ResNeXt(), (torch.randn(2, 3, 15, 15),)


class _MbV3Block(nn.Module):
    def __init__(self, cin=8, exp=24, cout=12, k=5):
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(cin, exp, 1, bias=False), nn.BatchNorm2d(exp), nn.Hardswish())
        self.dw = nn.Sequential(
            nn.Conv2d(exp, exp, k, stride=2, padding=k // 2, groups=exp, bias=False),
            nn.BatchNorm2d(exp),
            nn.Hardswish(),
        )
        self.se = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Conv2d(exp, 8, 1), nn.ReLU(inplace=True), nn.Conv2d(8, exp, 1), nn.Hardsigmoid()
        )
        self.project = nn.Sequential(nn.Conv2d(exp, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.dw(self.expand(x))
        return self.project(y * self.se(y))


class _MobileNetV3(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.Hardswish()
        )
        self.block = _MbV3Block()
        self.head = nn.Sequential(
            nn.Conv2d(12, 24, 1), nn.Hardswish(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(24, 4)
        )

    def forward(self, x):
        return self.head(self.block(self.stem(x)))


def mobilenet_v3_block():
    torch.manual_seed(0)
    return _MobileNetV3(), (torch.randn(2, 3, 20, 20),)


class _FracLpPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.lp2 = nn.LPPool2d(norm_type=2, kernel_size=2, stride=1)
        self.lp3 = nn.LPPool2d(norm_type=3, kernel_size=(3, 2), stride=(2, 1), ceil_mode=True)
        self.amax = nn.AdaptiveMaxPool2d((2, 3), return_indices=True)
        self.fc = nn.Linear(6 * (1 + 1 + 1 + 1), 3)

    def forward(self, x, samples):
        y = torch.relu(self.conv(x)) + 0.1
        f = F.fractional_max_pool2d(y, kernel_size=2, output_size=(5, 5), _random_samples=samples)
        g = F.fractional_max_pool2d(y, kernel_size=3, output_ratio=(0.5, 0.5), _random_samples=samples)
        a = self.lp2(f)
        b = self.lp3(y)
        m, idx = self.amax(y)
        feats = [t.flatten(2).mean(2) for t in (a, b, m, g)]
        return self.fc(torch.cat(feats, 1)), idx


def fractional_lp_pool():
    torch.manual_seed(0)
    return _FracLpPool(), (torch.randn(2, 3, 11, 11), torch.rand(2, 6, 2))


class _TransposeOutSize(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(6, 4, 3, stride=3, padding=1)
        self.odd = nn.ConvTranspose2d(4, 3, (3, 5), stride=(2, 1), padding=(1, 2), dilation=(1, 2), bias=False)
        self.w1d = nn.Parameter(torch.randn(6, 2, 4) * 0.3)  # groups=3: (in, out/groups, k)

    def forward(self, x):
        y = self.up(x, output_size=[x.shape[2] * 3, x.shape[3] * 3])  # output_padding picked from the size
        z = self.odd(torch.tanh(y))
        s = F.conv_transpose1d(x.flatten(2), self.w1d, stride=2, padding=1, output_padding=1, groups=3)
        return z, s


def transpose_output_size():
    torch.manual_seed(0)
    return _TransposeOutSize(), (torch.randn(2, 6, 5, 4),)


class _InterpVariants(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.conv1d = nn.Conv1d(4, 4, 1)
        self.fc = nn.Linear(4 * 5, 3)

    def forward(self, x):
        y = self.conv(x)  # (N, 4, 7, 9)
        a = F.interpolate(y, scale_factor=1.7, mode="bilinear", align_corners=False, recompute_scale_factor=True)
        b = F.interpolate(y, scale_factor=(2, 3), mode="nearest")
        c = F.interpolate(y, size=(4, 5), mode="bicubic", align_corners=False, antialias=True)
        d = F.interpolate(y, scale_factor=0.6, mode="area")
        e = F.interpolate(self.conv1d(y.mean(2)), scale_factor=2.5, mode="linear", align_corners=False)
        feats = [t.flatten(2).mean(2) for t in (a, b, c, d, e)]
        return self.fc(torch.cat(feats, 1)), c


def interp_variants():
    torch.manual_seed(0)
    return _InterpVariants(), (torch.randn(2, 3, 7, 9),)


class _R2Plus1D(nn.Module):
    """Factorised (2+1)D video convolutions: spatial (1,3,3) then temporal (3,1,1)."""

    def __init__(self):
        super().__init__()
        self.spatial = nn.Conv3d(3, 8, (1, 3, 3), padding=(0, 1, 1), bias=False)
        self.bn1 = nn.BatchNorm3d(8)
        self.temporal = nn.Conv3d(8, 8, (3, 1, 1), padding=(1, 0, 0), bias=False)
        self.bn2 = nn.BatchNorm3d(8)
        self.pool = nn.MaxPool3d((1, 2, 2))
        self.down = nn.Conv3d(8, 12, 3, stride=(2, 1, 1), padding=1)
        self.gap = nn.AdaptiveAvgPool3d(1)
        self.fc = nn.Linear(12, 4)

    def forward(self, x):  # (N, C, T, H, W)
        y = F.relu(self.bn1(self.spatial(x)))
        y = F.relu(self.bn2(self.temporal(y)))
        y = F.relu(self.down(self.pool(y)))
        return self.fc(self.gap(y).flatten(1))


def r2plus1d_video():
    torch.manual_seed(0)
    return _R2Plus1D(), (torch.randn(2, 3, 4, 8, 8),)


# ---------------------------------------------------------------- sequence and recurrent


class _LstmProjBi(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 10, num_layers=2, bidirectional=True, proj_size=4)  # seq-first
        self.fc = nn.Linear(8, 3)

    def forward(self, x, h0, c0):
        out, (hn, cn) = self.lstm(x, (h0, c0))
        return self.fc(out[-1]), hn, cn


def lstm_seqfirst_proj_bi():
    torch.manual_seed(0)
    return _LstmProjBi(), (torch.randn(7, 3, 6), torch.randn(4, 3, 4) * 0.1, torch.randn(4, 3, 10) * 0.1)


class _RnnPackedRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 6, padding_idx=0)
        self.rnn = nn.RNN(6, 8, num_layers=2, nonlinearity="relu", batch_first=True, bidirectional=True)
        self.fc = nn.Linear(16, 4)

    def forward(self, tokens, lengths):
        packed = pack_padded_sequence(self.emb(tokens), lengths.cpu(), batch_first=True, enforce_sorted=True)
        out, hn = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=tokens.shape[1])
        mask = (tokens != 0).unsqueeze(-1).to(out.dtype)
        pooled = (out * mask).sum(1) / mask.sum(1).clamp_min(1.0)
        return self.fc(pooled), hn


def rnn_packed_relu():
    torch.manual_seed(0)
    tokens = torch.randint(1, 20, (3, 7)) * torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 2 + [0] * 5])
    return _RnnPackedRelu(), (tokens, torch.tensor([7, 5, 2]))


class _TiedLm(nn.Module):
    def __init__(self, vocab=30, dim=12):
        super().__init__()
        self.vocab = vocab
        self.emb = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, dim)  # seq-first, one layer
        self.decoder = nn.Linear(dim, vocab)
        self.decoder.weight = self.emb.weight  # weight tying

    def forward(self, tokens, targets):  # (T, B)
        h, (hn, _) = self.lstm(self.emb(tokens))
        logits = self.decoder(h)
        loss = F.cross_entropy(logits.view(-1, self.vocab), targets.view(-1))
        return {"loss": loss, "logits": logits, "hidden": hn}


def lstm_tied_lm():
    torch.manual_seed(0)
    return _TiedLm(), (torch.randint(0, 30, (8, 2)), torch.randint(0, 30, (8, 2)))


# ---------------------------------------------------------------- audio and FFT


class _SpectralConv2d(nn.Module):
    """A Fourier neural operator layer: keep the low modes of rfft2, mix channels there, irfft2 back."""

    def __init__(self, cin, cout, m1, m2):
        super().__init__()
        self.m1, self.m2, self.cout = m1, m2, cout
        scale = 1.0 / (cin * cout)
        self.w1 = nn.Parameter(scale * torch.rand(cin, cout, m1, m2, 2))
        self.w2 = nn.Parameter(scale * torch.rand(cin, cout, m1, m2, 2))

    def forward(self, x):
        b, _, h, w = x.shape
        x_ft = torch.fft.rfft2(x)
        out_ft = torch.zeros(b, self.cout, h, w // 2 + 1, dtype=torch.cfloat, device=x.device)
        w1, w2 = torch.view_as_complex(self.w1), torch.view_as_complex(self.w2)
        out_ft[:, :, : self.m1, : self.m2] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, : self.m1, : self.m2], w1)
        out_ft[:, :, -self.m1 :, : self.m2] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, -self.m1 :, : self.m2], w2)
        return torch.fft.irfft2(out_ft, s=(h, w))


class _Fno(nn.Module):
    def __init__(self):
        super().__init__()
        self.lift = nn.Conv2d(3, 6, 1)
        self.spec = _SpectralConv2d(6, 6, 4, 4)
        self.skip = nn.Conv2d(6, 6, 1)
        self.proj = nn.Conv2d(6, 1, 1)

    def forward(self, x):
        y = self.lift(x)
        y = F.gelu(self.spec(y) + self.skip(y))
        return self.proj(y)


def spectral_conv_fno():
    torch.manual_seed(0)
    return _Fno(), (torch.randn(2, 3, 16, 16),)


class _FftNormWindow(nn.Module):
    def __init__(self, n=32, nfft=40):
        super().__init__()
        self.n, self.nfft = n, nfft
        self.filt = nn.Parameter(torch.randn(nfft // 2 + 1) * 0.5 + 1.0)
        self.gain = nn.Parameter(torch.ones(n))
        self.fc = nn.Linear(n // 2 + 1 + n + nfft + n, 4)

    def forward(self, x):  # (N, n)
        dev = x.device
        hann = torch.hann_window(self.n, periodic=False, device=dev)
        mag = torch.fft.fft(x * hann, norm="ortho").abs()[:, : self.n // 2 + 1]
        black = torch.blackman_window(self.n, device=dev)
        spec = torch.fft.rfft(x * black, n=self.nfft, norm="forward") * self.filt
        y = torch.fft.irfft(spec, n=self.nfft, norm="forward")
        kaiser = torch.kaiser_window(self.n, periodic=True, beta=8.0, device=dev)
        z = torch.fft.ifft(torch.fft.fft(x * kaiser) * self.gain, norm="backward").real
        ham = torch.hamming_window(self.n, device=dev)
        feats = torch.cat([torch.log1p(mag), y, z, x * ham * self.gain], 1)
        return self.fc(feats), y


def fft_norm_window():
    torch.manual_seed(0)
    return _FftNormWindow(), (torch.randn(3, 32),)


# ---------------------------------------------------------------- attention


class _DecoderPostNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(16, 4, dim_feedforward=32, dropout=0.0)  # seq-first, post-norm
        self.fc = nn.Linear(16, 6)

    def forward(self, tgt, memory, tgt_pad, mem_pad):  # (T, B, E), (S, B, E), (B, T), (B, S)
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[0], device=tgt.device)
        y = self.layer(
            tgt,
            memory,
            tgt_mask=mask,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=mem_pad,
            tgt_is_causal=True,
        )
        return self.fc(y)


def transformer_decoder_postnorm():
    torch.manual_seed(0)
    tgt_pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    mem_pad = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    return _DecoderPostNorm(), (torch.randn(5, 2, 16), torch.randn(6, 2, 16), tgt_pad, mem_pad)


class _EncoderClassifier(nn.Module):
    def __init__(self, vocab=25, dim=16, maxlen=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(1, maxlen, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, 2, 32, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, norm=nn.LayerNorm(dim), enable_nested_tensor=True)
        self.fc = nn.Linear(dim, 3)

    def forward(self, tokens):  # (B, L), 0 = padding
        pad = tokens == 0
        h = self.encoder(self.emb(tokens) + self.pos[:, : tokens.shape[1]], src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(h.dtype)
        return self.fc((h * keep).sum(1) / keep.sum(1))  # masked mean: padded positions are never read


def transformer_encoder_masked_pool():
    torch.manual_seed(0)
    tokens = torch.randint(1, 25, (3, 8)) * torch.tensor([[1] * 8, [1] * 6 + [0] * 2, [1] * 3 + [0] * 5])
    return _EncoderClassifier(), (tokens,)


# ---------------------------------------------------------------- losses


class _RegressionLosses(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(5, 16), nn.Tanh())
        self.mean = nn.Linear(16, 3)
        self.var = nn.Linear(16, 3)
        self.rate = nn.Linear(16, 3)

    def forward(self, x, y, counts):
        h = self.body(x)
        mu, var, rate = self.mean(h), F.softplus(self.var(h)) + 1e-3, F.softplus(self.rate(h)) + 1e-2
        loss = (
            F.huber_loss(mu, y, delta=0.5, reduction="none").mean(0).sum()
            + F.smooth_l1_loss(mu, y, beta=2.0, reduction="sum") * 0.1
            + F.poisson_nll_loss(rate, counts, log_input=False, full=True)
            + F.gaussian_nll_loss(mu, y, var, full=True, eps=1e-4)
        )
        return {"loss": loss, "mu": mu, "var": var}


def regression_losses():
    torch.manual_seed(0)
    return _RegressionLosses(), (torch.randn(6, 5), torch.randn(6, 3) * 2, torch.randint(0, 6, (6, 3)).float())


class _ClassLosses(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 5)
        self.register_buffer("class_w", torch.tensor([1.0, 2.0, 0.5, 1.0, 1.5]))

    def forward(self, x, labels, multi, teacher, sign, ml_targets):
        logits = self.fc(x)
        logp = F.log_softmax(logits, -1)
        dist = (logits - logits.mean(0, keepdim=True)).norm(dim=1)
        loss = (
            F.multilabel_soft_margin_loss(logits, multi, weight=self.class_w)
            + F.hinge_embedding_loss(dist, sign, margin=2.0)
            + F.kl_div(logp, F.log_softmax(teacher, -1), reduction="batchmean", log_target=True)
            + F.nll_loss(logp, labels, weight=self.class_w, reduction="sum") * 0.1
            + F.multilabel_margin_loss(logits, ml_targets)
        )
        return {"loss": loss, "logits": logits}


def classification_losses():
    torch.manual_seed(0)
    ml_targets = torch.tensor([[0, 3, -1, 0, 0], [1, -1, 0, 0, 0], [4, 2, 1, -1, 0], [2, -1, 0, 0, 0]])
    return _ClassLosses(), (
        torch.randn(4, 6),
        torch.randint(0, 5, (4,)),
        torch.randint(0, 2, (4, 5)).float(),
        torch.randn(4, 5),
        torch.randint(0, 2, (4,)).float() * 2 - 1,
        ml_targets,
    )


class _CtcConv(nn.Module):
    def __init__(self, feats=8, classes=6):
        super().__init__()
        self.net = nn.Sequential(nn.Conv1d(feats, 16, 3, padding=1), nn.ReLU(), nn.Conv1d(16, classes, 1))

    def forward(self, x, targets, in_len, tgt_len):  # x (B, F, T); targets padded (B, S), int32
        lp = F.log_softmax(self.net(x), dim=1).permute(2, 0, 1)  # (T, B, C)
        per = F.ctc_loss(lp, targets, in_len, tgt_len, blank=0, reduction="none")
        mean = F.ctc_loss(lp, targets, in_len, tgt_len, blank=0, reduction="mean")
        return {"loss": (per / tgt_len.to(per.dtype)).mean() + mean, "per_sample": per}


def ctc_conv_none():
    torch.manual_seed(0)
    return _CtcConv(), (
        torch.randn(3, 8, 12),
        torch.randint(1, 6, (3, 4), dtype=torch.int32),
        torch.tensor([12, 11, 10], dtype=torch.int32),
        torch.tensor([4, 3, 2], dtype=torch.int32),
    )


# ---------------------------------------------------------------- embeddings


class _BagLastOffset(nn.Module):
    def __init__(self):
        super().__init__()
        self.sum_bag = nn.EmbeddingBag(20, 6, mode="sum", include_last_offset=True)
        self.mean_bag = nn.EmbeddingBag(15, 6, mode="mean", padding_idx=0)
        self.fc = nn.Linear(12, 2)

    def forward(self, ids, offsets, weights, grid):
        a = self.sum_bag(ids, offsets, per_sample_weights=weights)  # 3 bags: the last offset closes the last
        b = self.mean_bag(grid)  # 2-d input, padding index left out of the mean
        return self.fc(torch.cat([a, b], 1))


def embbag_lastoffset_psw():
    torch.manual_seed(0)
    grid = torch.randint(1, 15, (3, 4)) * torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 1, 0]])
    return _BagLastOffset(), (torch.randint(0, 20, (10,)), torch.tensor([0, 3, 7, 10]), torch.rand(10), grid)


class _Dlrm(nn.Module):
    def __init__(self, dim=6):
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(5, 12), nn.ReLU(), nn.Linear(12, dim), nn.ReLU())
        self.bags = nn.ModuleList(
            [
                nn.EmbeddingBag(10, dim, mode="sum"),
                nn.EmbeddingBag(12, dim, mode="sum"),
                nn.EmbeddingBag(8, dim, mode="mean"),
            ]
        )
        self.top = nn.Sequential(nn.Linear(dim + 6, 8), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, dense, ids0, ids1, ids2, offsets, label):
        d = self.bottom(dense)
        feats = torch.stack([d] + [bag(i, offsets) for bag, i in zip(self.bags, (ids0, ids1, ids2))], 1)  # (B, 4, D)
        z = torch.bmm(feats, feats.transpose(1, 2))
        li, lj = torch.triu_indices(4, 4, offset=1, device=dense.device)
        logit = self.top(torch.cat([d, z[:, li, lj]], 1)).squeeze(1)
        return {"loss": F.binary_cross_entropy_with_logits(logit, label), "prob": torch.sigmoid(logit)}


def dlrm_interaction():
    torch.manual_seed(0)
    offsets = torch.tensor([0, 2, 3, 6])
    return _Dlrm(), (
        torch.randn(4, 5),
        torch.randint(0, 10, (8,)),
        torch.randint(0, 12, (8,)),
        torch.randint(0, 8, (8,)),
        offsets,
        torch.randint(0, 2, (4,)).float(),
    )


# ---------------------------------------------------------------- integer and boolean paths


class _IntBoolFeatures(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(16, 4)
        self.pos = nn.Embedding(8, 4)
        self.fc = nn.Linear(8, 2)

    def forward(self, x, codes):  # x (B, 8) float, codes (B, 8) int64
        q = torch.floor(x * 3).to(torch.int64).clamp(-8, 7)
        a = torch.bitwise_and(codes, 6) | (codes >> 1)
        b = torch.bitwise_xor(q, codes)
        c = torch.floor_divide(q, 3)
        d = torch.remainder(q, 5)
        key = (a + b.abs() + c.abs() + d) % 16
        m = (x > 0) & codes.ne(3)
        m2 = torch.logical_xor(m, q.ge(1)) | torch.eq(codes, q)
        weight = m2.float().mean(1, keepdim=True) + torch.count_nonzero(m, dim=1).unsqueeze(1).float() / 8
        top, low = x.argmax(1), x.argmin(1)
        h = torch.cat([self.emb(key).sum(1) * weight, self.pos(top) - self.pos(low)], 1)
        return self.fc(h), key, m2, torch.sign(q)


def int_bool_features():
    torch.manual_seed(0)
    return _IntBoolFeatures(), (torch.randn(4, 8), torch.randint(0, 16, (4, 8)))


# ---------------------------------------------------------------- custom autograd


class _GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lam):
        ctx.lam = lam
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return -ctx.lam * g, None


class _SoftplusFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.log1p(torch.exp(-x.abs())) + x.clamp_min(0)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * -torch.expm1(-y) if ctx.needs_input_grad[0] else None  # sigmoid(x) = 1 - exp(-softplus(x))


class _Dann(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Linear(6, 10)
        self.label_head = nn.Linear(10, 3)
        self.domain_head = nn.Linear(10, 1)

    def forward(self, x, labels, domain):
        f = _SoftplusFn.apply(self.features(x))
        y = self.label_head(f)
        dom = self.domain_head(_GradReverse.apply(f, 0.3)).squeeze(1)
        loss = F.cross_entropy(y, labels) + F.binary_cross_entropy_with_logits(dom, domain)
        return {"loss": loss, "logits": y, "domain": dom}


def custom_fn_gradrev():
    torch.manual_seed(0)
    return _Dann(), (torch.randn(5, 6), torch.randint(0, 3, (5,)), torch.randint(0, 2, (5,)).float())


# ---------------------------------------------------------------- normalisation


class _NormParam(nn.Module):
    def __init__(self):
        super().__init__()
        self.wn = nn.utils.parametrizations.weight_norm(nn.Linear(8, 8))
        self.sn = nn.utils.parametrizations.spectral_norm(nn.Linear(8, 8), n_power_iterations=2)
        self.bn = nn.BatchNorm1d(8, momentum=None)  # cumulative moving average
        self.ln = nn.LayerNorm([4, 8])  # over the last two dims
        self.gn = nn.GroupNorm(2, 8, eps=1e-3)
        self.fc = nn.Linear(8, 2)

    def forward(self, x):  # (B, 4, 8)
        y = self.ln(torch.relu(self.wn(x)))
        y = self.bn(y.transpose(1, 2)).transpose(1, 2)  # BatchNorm1d over (B, C=8, L=4)
        y = self.gn(self.sn(y).transpose(1, 2)).transpose(1, 2)
        return self.fc(F.normalize(y, p=1, dim=-1).mean(1))


def norm_parametrizations():
    torch.manual_seed(0)
    return _NormParam(), (torch.randn(3, 4, 8),)


# ---------------------------------------------------------------- math


class _ScanKronCross(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.k = nn.Parameter(torch.randn(2, 2))

    def forward(self, x):  # (3, 6)
        h = self.fc(x)
        cs = torch.cumsum(h, 1)
        cp = torch.cumprod(torch.sigmoid(h), dim=1)
        lc = torch.logcumsumexp(h, dim=0)
        df = torch.diff(h, n=2, dim=1, prepend=h[:, :2])
        rl = torch.roll(h, shifts=(1, -2), dims=(0, 1))
        fl = torch.flip(h, [0, 1])
        g = h @ h.T
        tri = torch.tril(g, diagonal=-1) + torch.triu(g, diagonal=1).T
        kr = torch.kron(self.k, h[:, :3])  # (6, 6)
        cr = torch.linalg.cross(h[:, :3], h[:, 3:], dim=-1)
        cart = torch.cartesian_prod(h[0, :3], h[1, :2])  # (6, 2)
        count = torch.cumsum((h > 0).int(), dim=1)
        out = (cs + cp + lc + df + rl + fl).sum(0) + kr.sum(0) + cart.prod(1)
        return out, tri, cr, count


def scan_kron_cross():
    torch.manual_seed(0)
    return _ScanKronCross(), (torch.randn(3, 6),)


class _LinalgSmall(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4) * 0.5)
        self.m = nn.Parameter(torch.randn(4, 3))

    def forward(self, b):  # (4, 3)
        eye = torch.eye(4, device=b.device)
        a = self.w @ self.w.T + 2.0 * eye  # symmetric positive definite
        sol = torch.linalg.solve(a, b)
        evals, evecs = torch.linalg.eigh(a)
        sqrt_a = evecs @ torch.diag(evals.sqrt()) @ evecs.T  # sign-free use of the eigenvectors
        q, r = torch.linalg.qr(self.m + b)
        proj = q @ q.T
        u, s, vh = torch.linalg.svd(self.m + 0.5 * b, full_matrices=False)
        low = u[:, :2] @ torch.diag(s[:2]) @ vh[:2]
        chol = torch.linalg.cholesky(a)
        norms = torch.stack(
            [
                torch.linalg.norm(self.m, ord="fro"),
                torch.linalg.matrix_norm(self.m + b, ord="nuc"),
                torch.linalg.vector_norm(sol, ord=3),
                torch.linalg.det(a),
                torch.linalg.slogdet(self.w)[1],
            ]
        )
        return sol + proj @ b + low, sqrt_a + torch.linalg.inv(a) + chol, r.diagonal().abs(), evals, norms


def linalg_small():
    torch.manual_seed(0)
    return _LinalgSmall(), (torch.randn(4, 3),)


# ---------------------------------------------------------------- sparse


class _SparseGcnPrune(nn.Module):
    """A graph conv with the adjacency kept sparse, and a magnitude-pruned weight stored sparse."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(5, 8) * 0.4)
        self.lin = nn.Linear(8, 8)
        self.fc = nn.Linear(8, 2)

    def forward(self, x, adj):  # x (N, 5), adj (N, N) dense 0/1
        a = adj + torch.eye(adj.shape[0], device=adj.device)
        deg = a.sum(1)
        a_sparse = (a / deg.unsqueeze(1)).to_sparse()
        h = torch.relu(torch.sparse.mm(a_sparse, x @ self.w))
        pruned = (self.lin.weight * (self.lin.weight.abs() > 0.1)).to_sparse().to_dense()
        h = torch.relu(h @ pruned.T + self.lin.bias)
        return self.fc(h.mean(0, keepdim=True)), h


def sparse_gcn_prune():
    torch.manual_seed(0)
    adj = torch.tensor(
        [
            [0, 1, 0, 0, 1, 0],
            [1, 0, 1, 0, 0, 0],
            [0, 1, 0, 1, 0, 0],
            [0, 0, 1, 0, 1, 1],
            [1, 0, 0, 1, 0, 0],
            [0, 0, 0, 1, 0, 0],
        ],
        dtype=torch.float32,
    )
    return _SparseGcnPrune(), (torch.randn(6, 5), adj)


# ---------------------------------------------------------------- the table

MODELS = {
    "resnext_block": (
        "vision",
        "ResNeXt bottleneck: grouped 3x3 conv (groups 4 and 8), stride 2, ResNet-D shortcut (AvgPool2d ceil_mode, 1x1 conv, BN)",
    ),
    "mobilenet_v3_block": (
        "vision",
        "MobileNetV3 block: Hardswish, depthwise 5x5 stride 2, squeeze-excite with Hardsigmoid, linear projection",
    ),
    "fractional_lp_pool": (
        "vision",
        "fractional_max_pool2d (output_size and output_ratio, samples given), LPPool2d p=2 and p=3 ceil_mode, AdaptiveMaxPool2d indices",
    ),
    "transpose_output_size": (
        "vision",
        "ConvTranspose2d stride 3 called with output_size, non-square dilated ConvTranspose2d, conv_transpose1d groups output_padding",
    ),
    "interp_variants": (
        "interpolation",
        "bilinear scale 1.7 recompute_scale_factor, nearest scale (2,3), bicubic antialias to a size, area scale 0.6, linear 1d x2.5",
    ),
    "r2plus1d_video": (
        "vision",
        "R(2+1)D video net: Conv3d (1,3,3) then (3,1,1), BatchNorm3d, MaxPool3d (1,2,2), strided Conv3d, AdaptiveAvgPool3d",
    ),
    "lstm_seqfirst_proj_bi": (
        "rnn",
        "LSTM 2 layers bidirectional with proj_size, seq-first, given (h0, c0), final states out",
    ),
    "rnn_packed_relu": (
        "rnn",
        "Embedding padding_idx -> pack_padded_sequence -> RNN relu 2 layers bidirectional -> pad_packed total_length, masked mean",
    ),
    "lstm_tied_lm": (
        "rnn",
        "LSTM language model with the decoder weight tied to the embedding, cross_entropy over the vocabulary, dict out",
    ),
    "spectral_conv_fno": (
        "audio/fft",
        "Fourier neural operator layer: rfft2, complex weights via view_as_complex, einsum on low modes, irfft2 with s",
    ),
    "fft_norm_window": (
        "audio/fft",
        "hann (symmetric), blackman, kaiser, hamming windows; fft ortho, rfft/irfft n=40 norm forward, ifft backward, abs",
    ),
    "transformer_decoder_postnorm": (
        "attention",
        "TransformerDecoderLayer seq-first post-norm relu, causal float mask with tgt_is_causal, tgt and memory padding masks",
    ),
    "transformer_encoder_masked_pool": (
        "attention",
        "TransformerEncoder 2 layers with final LayerNorm, enable_nested_tensor, key padding mask from tokens, masked mean pool",
    ),
    "regression_losses": (
        "loss",
        "huber delta 0.5 none, smooth_l1 beta 2 sum, poisson_nll log_input=False full, gaussian_nll full eps",
    ),
    "classification_losses": (
        "loss",
        "multilabel_soft_margin weight, hinge_embedding margin 2, kl_div log_target batchmean, weighted nll sum, multilabel_margin",
    ),
    "ctc_conv_none": (
        "loss",
        "Conv1d acoustic model, ctc_loss reduction none and mean, padded 2-d int32 targets and int32 lengths",
    ),
    "embbag_lastoffset_psw": (
        "embedding",
        "EmbeddingBag sum include_last_offset with per_sample_weights; EmbeddingBag mean padding_idx on 2-d input",
    ),
    "dlrm_interaction": (
        "embedding",
        "DLRM: bottom MLP, three EmbeddingBags with offsets, bmm dot interaction, triu_indices gather, BCE-with-logits",
    ),
    "int_bool_features": (
        "integer",
        "floor to int, bitwise and/or/xor/shift, floor_divide, remainder, comparisons, logical_xor, count_nonzero, argmax/argmin, sign",
    ),
    "custom_fn_gradrev": (
        "autograd",
        "domain-adversarial net: gradient-reversal Function, softplus Function with once_differentiable and needs_input_grad",
    ),
    "norm_parametrizations": (
        "norm",
        "weight_norm and spectral_norm parametrizations, BatchNorm1d momentum=None, LayerNorm over 2 dims, GroupNorm eps, normalize p=1",
    ),
    "scan_kron_cross": (
        "math",
        "cumsum, cumprod, logcumsumexp, diff n=2 prepend, roll 2 dims, flip, tril/triu diagonals, kron, linalg.cross, cartesian_prod, int cumsum",
    ),
    "linalg_small": (
        "math",
        "linalg solve, eigh, qr, svd, cholesky, inv, det, slogdet, norm fro, matrix_norm nuc, vector_norm ord 3 (4x4)",
    ),
    "sparse_gcn_prune": (
        "sparse",
        "graph conv with a normalised adjacency to_sparse and torch.sparse.mm, a pruned weight to_sparse().to_dense()",
    ),
}

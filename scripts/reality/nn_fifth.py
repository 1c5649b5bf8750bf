"""The FIFTH set of plain ``torch.nn`` user models: written after the tuning set (``nn_models.py``), the
held-out set (``nn_heldout.py``), the fresh set (``nn_fresh.py``) and the unseen set (``nn_unseen.py``), and
written without reading how opcov judges models. It holds small models of kinds users write that none of the
earlier sets holds (a U-Net with transposed convs and GroupNorm, SRResNet, a 3-d net with max unpooling, an
optical-flow warp, test-time augmentation by rot90, CondConv, PointNet, a BiLSTM-CRF, a Luong decoder, minGRU,
MFCCs by matmul, a spectral mask enhancer, complex convolution, sparsemax, GIN, a factorization machine,
distillation, ArcFace, fake quantization, NaN-robust binning, token pruning, VQ-VAE, a KAN layer and
orthogonal parametrizations). It measures opcov's verdicts on PyTorch/XLA; nothing may be tuned on it.

The same contract as the other sets: each factory ``NAME()`` returns ``(model, inputs)``, seeded inside,
small, callable under ``torch.device("meta")`` (no tensor built from another's values in the factory;
tables a model needs, such as sampling grids, filterbanks and windows, are made in ``forward``); a floating
output depends on the parameters; no complex output; no randomness on the compared path (no dropout is
active in training). Two models are data-dependent on purpose (``token_pruning_nonzero``: nonzero and
argwhere; ``vq_codebook``: bincount of the chosen codes), and one takes NaN and inf as inputs on purpose
(``tabular_nan_binning``).

    PYTHONPATH=scripts/reality opcov trace nn_fifth:unet_convtranspose_gn --mode training --out x.yaml
    PJRT_DEVICE=CPU .envs/xla/bin/python scripts/envs/nn_reality.py --set fifth --models unet_convtranspose_gn

``MODELS`` names each factory: name -> (family, one-line description).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------- vision


def _gn_block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1),
        nn.GroupNorm(4, cout),
        nn.SiLU(),
        nn.Conv2d(cout, cout, 3, padding=1),
        nn.GroupNorm(4, cout),
        nn.SiLU(),
    )


class _UNetTransposed(nn.Module):
    """A segmentation U-Net: ConvTranspose2d 2/2 upsampling, GroupNorm, skip concatenation, CE + soft dice."""

    def __init__(self, classes: int = 3):
        super().__init__()
        self.classes = classes
        self.enc1, self.enc2, self.mid = _gn_block(2, 8), _gn_block(8, 16), _gn_block(16, 32)
        self.pool = nn.MaxPool2d(2)
        self.up2, self.dec2 = nn.ConvTranspose2d(32, 16, 2, stride=2), _gn_block(32, 16)
        self.up1, self.dec1 = nn.ConvTranspose2d(16, 8, 2, stride=2), _gn_block(16, 8)
        self.head = nn.Conv2d(8, classes, 1)

    def forward(self, x, target):
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        m = self.mid(self.pool(e2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], 1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], 1))
        logits = self.head(d1)
        probs = logits.softmax(1)
        onehot = F.one_hot(target, self.classes).permute(0, 3, 1, 2).float()
        inter = (probs * onehot).sum((2, 3))
        dice = 1 - ((2 * inter + 1) / (probs.sum((2, 3)) + onehot.sum((2, 3)) + 1)).mean()
        return {"loss": F.cross_entropy(logits, target) + dice, "logits": logits}


def unet_convtranspose_gn():
    torch.manual_seed(0)
    return _UNetTransposed(), (torch.randn(2, 2, 16, 16), torch.randint(0, 3, (2, 16, 16)))


class _SRResBlock(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(c, c, 3, padding=1),
            nn.BatchNorm2d(c),
            nn.PReLU(c),
            nn.Conv2d(c, c, 3, padding=1),
            nn.BatchNorm2d(c),
        )

    def forward(self, x):
        return x + self.body(x)


class _SRResNet(nn.Module):
    """SRResNet x4: 9x9 head with per-channel PReLU, BN residual blocks, two conv + PixelShuffle(2) stages, tanh."""

    def __init__(self, c: int = 16):
        super().__init__()
        self.head = nn.Sequential(nn.Conv2d(3, c, 9, padding=4), nn.PReLU(c))
        self.blocks = nn.Sequential(_SRResBlock(c), _SRResBlock(c))
        self.mid = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c))
        self.up = nn.Sequential(
            nn.Conv2d(c, 4 * c, 3, padding=1),
            nn.PixelShuffle(2),
            nn.PReLU(init=0.1),
            nn.Conv2d(c, 4 * c, 3, padding=1),
            nn.PixelShuffle(2),
            nn.PReLU(init=0.1),
        )
        self.tail = nn.Conv2d(c, 3, 9, padding=4)

    def forward(self, x):
        h = self.head(x)
        return torch.tanh(self.tail(self.up(h + self.mid(self.blocks(h)))))


def srresnet_prelu_shuffle():
    torch.manual_seed(0)
    return _SRResNet(), (torch.randn(1, 3, 8, 8),)


class _Volume(nn.Module):
    """A 3-d segmentation/classification net: dilated Conv3d, InstanceNorm3d, MaxPool3d indices -> MaxUnpool3d."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv3d(1, 4, 3, padding=2, dilation=2)
        self.norm1 = nn.InstanceNorm3d(4, affine=True)
        self.act = nn.LeakyReLU(0.2)
        self.pool = nn.MaxPool3d(2, stride=2, return_indices=True)
        self.conv2 = nn.Conv3d(4, 4, (1, 3, 3), padding=(0, 1, 1), padding_mode="replicate")
        self.unpool = nn.MaxUnpool3d(2, stride=2)
        self.seg = nn.Conv3d(4, 2, 1)
        self.gap = nn.AdaptiveAvgPool3d((1, 3, 3))
        self.fc = nn.Linear(4 * 9, 3)

    def forward(self, x):
        y = self.act(self.norm1(self.conv1(x)))
        p, idx = self.pool(y)
        z = self.act(self.conv2(p))
        u = self.unpool(z, idx, output_size=y.shape[2:])
        return self.seg(u + y), self.fc(self.gap(u).flatten(1))


def conv3d_unpool_instnorm():
    torch.manual_seed(0)
    return _Volume(), (torch.randn(2, 1, 6, 8, 8),)


class _FlowWarp(nn.Module):
    """Unsupervised optical flow: a conv net predicts flow, the second frame is warped onto the first with
    grid_sample (bicubic/border and bilinear/reflection/align_corners), photometric L1 + smoothness."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(6, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 2, 3, padding=1))

    def forward(self, img1, img2):
        flow = 0.1 * torch.tanh(self.net(torch.cat([img1, img2], 1)))
        b, _, h, w = flow.shape
        ys, xs = torch.meshgrid(
            torch.linspace(-1, 1, h, device=flow.device), torch.linspace(-1, 1, w, device=flow.device), indexing="ij"
        )
        base = torch.stack((xs, ys), -1).unsqueeze(0).expand(b, -1, -1, -1)
        grid = base + flow.permute(0, 2, 3, 1)
        warped = F.grid_sample(img2, grid, mode="bicubic", padding_mode="border", align_corners=False)
        warped2 = F.grid_sample(img2, grid, mode="bilinear", padding_mode="reflection", align_corners=True)
        smooth = (flow[:, :, 1:] - flow[:, :, :-1]).abs().mean() + (flow[..., 1:] - flow[..., :-1]).abs().mean()
        loss = (warped - img1).abs().mean() + 0.5 * (warped2 - img1).abs().mean() + 0.1 * smooth
        return {"loss": loss, "flow": flow, "warped": warped}


def flow_warp_bicubic():
    torch.manual_seed(0)
    return _FlowWarp(), (torch.randn(2, 3, 9, 11), torch.randn(2, 3, 9, 11))


class _TTA(nn.Module):
    """Test-time augmentation of a dense predictor: rot90 by k = 0..3, a flip and a roll, each undone, then
    the mean and the spread of the six predictions."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 1, 3, padding=1)
        )

    def forward(self, x):
        outs = [torch.rot90(self.net(torch.rot90(x, k, dims=(2, 3))), -k, dims=(2, 3)) for k in range(4)]
        outs.append(torch.flip(self.net(torch.flip(x, dims=[3])), dims=[3]))
        outs.append(torch.roll(self.net(torch.roll(x, shifts=(2, -3), dims=(2, 3))), shifts=(-2, 3), dims=(2, 3)))
        stacked = torch.stack(outs, 0)
        return stacked.mean(0), stacked.std(0)


def tta_rot90_flip():
    torch.manual_seed(0)
    return _TTA(), (torch.randn(2, 3, 10, 12),)


class _CondConv(nn.Module):
    """CondConv: per-sample kernels mixed from experts by a softmax router, run as one grouped conv with
    groups = batch size (the batch folded into channels)."""

    def __init__(self, cin: int = 4, cout: int = 6, experts: int = 3):
        super().__init__()
        self.cout = cout
        self.router = nn.Linear(cin, experts)
        self.weight = nn.Parameter(torch.randn(experts, cout, cin, 3, 3) * 0.2)
        self.bias = nn.Parameter(torch.zeros(cout))
        self.bn = nn.BatchNorm2d(cout)
        self.down = nn.Conv2d(cout, 8, 3, stride=2, padding=1)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        b, c, h, w = x.shape
        r = torch.softmax(self.router(x.mean((2, 3))), 1)
        kernels = torch.einsum("be,eoihw->boihw", r, self.weight).reshape(b * self.cout, c, 3, 3)
        y = F.conv2d(x.reshape(1, b * c, h, w), kernels, padding=1, groups=b).reshape(b, self.cout, h, w)
        y = F.relu(self.bn(y + self.bias.view(1, -1, 1, 1)))
        return self.fc(F.relu(self.down(y)).mean((2, 3))), r


def dynamic_condconv():
    torch.manual_seed(0)
    return _CondConv(), (torch.randn(3, 4, 8, 8),)


class _TNet(nn.Module):
    def __init__(self, k: int):
        super().__init__()
        self.k = k
        self.conv = nn.Sequential(
            nn.Conv1d(k, 16, 1), nn.BatchNorm1d(16), nn.ReLU(), nn.Conv1d(16, 32, 1), nn.BatchNorm1d(32), nn.ReLU()
        )
        self.fc = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, k * k))

    def forward(self, x):
        eye = torch.eye(self.k, device=x.device).flatten()
        return (self.fc(self.conv(x).amax(2)) + eye).view(-1, self.k, self.k)


class _PointNet(nn.Module):
    """PointNet classifier: input and feature T-Nets applied by bmm, 1x1 Conv1d, max over points (the
    critical point indices out), orthogonality regulariser on the feature transform."""

    def __init__(self, classes: int = 4):
        super().__init__()
        self.tnet3, self.tnet16 = _TNet(3), _TNet(16)
        self.feat = nn.Sequential(nn.Conv1d(3, 16, 1), nn.BatchNorm1d(16), nn.ReLU())
        self.conv = nn.Sequential(nn.Conv1d(16, 32, 1), nn.BatchNorm1d(32))
        self.head = nn.Linear(32, classes)

    def forward(self, pts, labels):  # pts (B, 3, N)
        t = self.tnet3(pts)
        x = self.feat(torch.bmm(pts.transpose(2, 1), t).transpose(2, 1))
        tf = self.tnet16(x)
        x = self.conv(torch.bmm(x.transpose(2, 1), tf).transpose(2, 1))
        glob, critical = torch.max(x, 2)
        logits = self.head(glob)
        eye = torch.eye(16, device=pts.device)
        reg = torch.linalg.matrix_norm(eye - torch.bmm(tf, tf.transpose(1, 2))).mean()
        return {"loss": F.cross_entropy(logits, labels) + 1e-3 * reg, "logits": logits, "critical": critical}


def pointnet_tnet():
    torch.manual_seed(0)
    return _PointNet(), (torch.randn(4, 3, 20), torch.tensor([0, 1, 2, 3]))


# ---------------------------------------------------------------- rnn


class _BiLSTMCRF(nn.Module):
    """Sequence tagger: BiLSTM emissions, a linear-chain CRF (forward algorithm by logsumexp, gold path score
    by gather and transition indexing, masked), Viterbi decoding by max and gather backtracking."""

    def __init__(self, vocab: int = 20, tags: int = 5):
        super().__init__()
        self.tags = tags
        self.emb = nn.Embedding(vocab, 8)
        self.lstm = nn.LSTM(8, 6, bidirectional=True, batch_first=True)
        self.proj = nn.Linear(12, tags)
        self.trans = nn.Parameter(torch.randn(tags, tags) * 0.1)
        self.start = nn.Parameter(torch.randn(tags) * 0.1)
        self.end = nn.Parameter(torch.randn(tags) * 0.1)

    def forward(self, tokens, tags, mask):  # (B, L) each; mask bool, left-aligned
        em = self.proj(self.lstm(self.emb(tokens))[0])
        b, steps, _ = em.shape
        alpha = self.start + em[:, 0]
        score = self.start[tags[:, 0]] + em[:, 0].gather(1, tags[:, :1]).squeeze(1)
        for t in range(1, steps):
            nxt = torch.logsumexp(alpha.unsqueeze(2) + self.trans + em[:, t].unsqueeze(1), dim=1)
            alpha = torch.where(mask[:, t : t + 1], nxt, alpha)
            step = self.trans[tags[:, t - 1], tags[:, t]] + em[:, t].gather(1, tags[:, t : t + 1]).squeeze(1)
            score = score + step * mask[:, t]
        last = tags.gather(1, (mask.sum(1) - 1).unsqueeze(1)).squeeze(1)
        nll = (torch.logsumexp(alpha + self.end, 1) - score - self.end[last]).mean()
        v, back = self.start + em[:, 0], []
        keep = torch.arange(self.tags, device=em.device).expand(b, -1)
        for t in range(1, steps):
            best, arg = (v.unsqueeze(2) + self.trans).max(1)
            v = torch.where(mask[:, t : t + 1], best + em[:, t], v)
            back.append(torch.where(mask[:, t : t + 1], arg, keep))
        cur = (v + self.end).argmax(1)
        path = [cur]
        for arg in reversed(back):
            cur = arg.gather(1, cur.unsqueeze(1)).squeeze(1)
            path.append(cur)
        return {"loss": nll, "emissions": em, "path": torch.stack(path[::-1], 1)}


def bilstm_crf():
    torch.manual_seed(0)
    tokens = torch.randint(1, 20, (3, 6))
    tags = torch.randint(0, 5, (3, 6))
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]], dtype=torch.bool)
    return _BiLSTMCRF(), (tokens, tags, mask)


class _LuongSeq2Seq(nn.Module):
    """GRU encoder (2 layers, bidirectional, no bias, seq-first) bridged to an LSTMCell decoder stepped by hand
    with Luong 'general' attention (bmm, masked_fill -inf on source padding, softmax) and input feeding."""

    def __init__(self, src_vocab: int = 15, tgt_vocab: int = 12, h: int = 10):
        super().__init__()
        self.src_emb = nn.Embedding(src_vocab, 8, padding_idx=0)
        self.enc = nn.GRU(8, 6, num_layers=2, bidirectional=True, bias=False)
        self.bridge_h, self.bridge_c = nn.Linear(12, h), nn.Linear(12, h)
        self.tgt_emb = nn.Embedding(tgt_vocab, 8, padding_idx=0)
        self.cell = nn.LSTMCell(8 + h, h)
        self.attn = nn.Linear(h, 12, bias=False)
        self.combine = nn.Linear(h + 12, h)
        self.out = nn.Linear(h, tgt_vocab)
        self.h = h

    def forward(self, src, tgt_in, tgt_out):  # src (S, B) with 0 padding; tgt (B, T)
        enc_out, hn = self.enc(self.src_emb(src))
        mem = enc_out.transpose(0, 1)
        final = torch.cat([hn[-2], hn[-1]], 1)
        hx, cx = torch.tanh(self.bridge_h(final)), self.bridge_c(final)
        pad = (src == 0).transpose(0, 1)
        feed = hx.new_zeros(hx.shape)
        logits = []
        for t in range(tgt_in.shape[1]):
            hx, cx = self.cell(torch.cat([self.tgt_emb(tgt_in[:, t]), feed], 1), (hx, cx))
            score = torch.bmm(mem, self.attn(hx).unsqueeze(2)).squeeze(2).masked_fill(pad, float("-inf"))
            ctx = torch.bmm(torch.softmax(score, 1).unsqueeze(1), mem).squeeze(1)
            feed = torch.tanh(self.combine(torch.cat([hx, ctx], 1)))
            logits.append(self.out(feed))
        out = torch.stack(logits, 1)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), tgt_out.reshape(-1), ignore_index=0)
        return {"loss": loss, "logits": out}


def luong_lstmcell_decoder():
    torch.manual_seed(0)
    src = torch.tensor([[3, 4, 5], [6, 7, 2], [8, 9, 0], [10, 0, 0], [11, 0, 0]])  # (S=5, B=3)
    tgt_in = torch.tensor([[1, 4, 5, 6], [1, 7, 8, 0], [1, 9, 0, 0]])
    tgt_out = torch.tensor([[4, 5, 6, 2], [7, 8, 2, 0], [9, 2, 0, 0]])
    return _LuongSeq2Seq(), (src, tgt_in, tgt_out)


class _MinGRULayer(nn.Module):
    """minGRU with its parallel log-space scan: softplus gates, cumsum of log coefficients, logcumsumexp."""

    def __init__(self, d: int, h: int):
        super().__init__()
        self.to_z, self.to_h = nn.Linear(d, h), nn.Linear(d, h)

    def forward(self, x):
        k = self.to_z(x)
        log_z, log_coeffs = -F.softplus(-k), -F.softplus(k)
        ht = self.to_h(x)
        log_h_tilde = torch.where(ht >= 0, torch.log(F.relu(ht) + 0.5), -F.softplus(-ht))
        a_star = torch.cumsum(log_coeffs, dim=1)
        return torch.exp(a_star + torch.logcumsumexp(log_z + log_h_tilde - a_star, dim=1))


class _MinGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(5, 8)
        self.layers = nn.ModuleList([_MinGRULayer(8, 8), _MinGRULayer(8, 8)])
        self.norms = nn.ModuleList([nn.LayerNorm(8), nn.LayerNorm(8)])
        self.head = nn.Linear(8, 3)

    def forward(self, x):  # (B, L, 5)
        h = self.inp(x)
        for layer, norm in zip(self.layers, self.norms):
            h = h + layer(norm(h))
        return self.head(h[:, -1]), h


def mingru_logscan():
    torch.manual_seed(0)
    return _MinGRU(), (torch.randn(2, 12, 5),)


# ---------------------------------------------------------------- audio, fft, complex


class _Mfcc(nn.Module):
    """Keyword spotting on MFCCs computed by hand: Tensor.unfold framing, periodic Hann, rfft power from the
    real and imaginary parts, a triangular mel filterbank and a DCT-II matrix made in forward, cepstral mean
    norm, replicate-padded delta filters (grouped conv1d), then a Conv1d classifier with a max over time."""

    def __init__(self, n_fft: int = 64, hop: int = 16, n_mels: int = 12, n_mfcc: int = 8, sr: float = 8000.0):
        super().__init__()
        self.n_fft, self.hop, self.n_mels, self.n_mfcc, self.sr = n_fft, hop, n_mels, n_mfcc, sr
        self.conv = nn.Sequential(nn.Conv1d(3 * n_mfcc, 16, 3, padding=1), nn.BatchNorm1d(16), nn.ReLU())
        self.fc = nn.Linear(16, 4)

    def filterbank(self, device):
        def mel(f):
            return 2595.0 * math.log10(1.0 + f / 700.0)

        m = torch.linspace(mel(0.0), mel(self.sr / 2), self.n_mels + 2, device=device)
        f = 700.0 * (torch.pow(10.0, m / 2595.0) - 1.0)
        freqs = torch.linspace(0, self.sr / 2, self.n_fft // 2 + 1, device=device).unsqueeze(1)
        down = (freqs - f[:-2]) / (f[1:-1] - f[:-2])
        up = (f[2:] - freqs) / (f[2:] - f[1:-1])
        return torch.clamp(torch.minimum(down, up), min=0.0)  # (bins, n_mels)

    def forward(self, wave):  # (B, samples)
        dev = wave.device
        frames = wave.unfold(-1, self.n_fft, self.hop) * torch.hann_window(self.n_fft, periodic=True, device=dev)
        spec = torch.fft.rfft(frames, dim=-1)
        power = spec.real.pow(2) + spec.imag.pow(2)
        logmel = torch.log((power @ self.filterbank(dev)).clamp_min(1e-6))
        n = torch.arange(self.n_mels, device=dev, dtype=wave.dtype)
        k = torch.arange(self.n_mfcc, device=dev, dtype=wave.dtype).unsqueeze(1)
        dct = torch.cos(math.pi / self.n_mels * (n + 0.5) * k) * math.sqrt(2.0 / self.n_mels)
        mfcc = logmel @ dct.T
        x = (mfcc - mfcc.mean(1, keepdim=True)).transpose(1, 2)  # (B, n_mfcc, frames)
        kernel = torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0], device=dev).expand(self.n_mfcc, 1, 5) / 10.0
        d = F.conv1d(F.pad(x, (2, 2), mode="replicate"), kernel, groups=self.n_mfcc)
        dd = F.conv1d(F.pad(d, (2, 2), mode="replicate"), kernel, groups=self.n_mfcc)
        h = self.conv(torch.cat([x, d, dd], 1))
        return self.fc(h.amax(2)), mfcc


def framed_logmel_mfcc():
    torch.manual_seed(0)
    return _Mfcc(), (torch.randn(2, 400),)


class _MaskEnhancer(nn.Module):
    """Speech enhancement by a spectral mask: stft (win_length < n_fft, normalized, constant padding), abs and
    angle, a conv net's sigmoid mask on the log magnitude, torch.polar back, istft to the input length."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 1, 3, padding=1))

    def forward(self, noisy, clean):  # (B, samples)
        win = torch.hann_window(96, device=noisy.device)
        kw = dict(n_fft=128, hop_length=32, win_length=96, window=win, center=True, normalized=True)
        spec = torch.stft(noisy, pad_mode="constant", return_complex=True, **kw)
        mag, phase = spec.abs(), spec.angle()
        mask = torch.sigmoid(self.net(torch.log1p(mag).unsqueeze(1))).squeeze(1)
        wave = torch.istft(torch.polar(mag * mask, phase), length=noisy.shape[-1], **kw)
        return {"loss": F.l1_loss(wave, clean), "wave": wave, "mask": mask}


def stft_mask_enhance():
    torch.manual_seed(0)
    return _MaskEnhancer(), (torch.randn(2, 512), torch.randn(2, 512))


class _ComplexConvNet(nn.Module):
    """A complex-valued signal net: complex weights from real parameters (torch.complex), complex conv1d,
    modReLU (abs and sgn), a complex linear layer by matmul; magnitude and phase out."""

    def __init__(self):
        super().__init__()
        self.wr = nn.Parameter(torch.randn(4, 1, 5) * 0.3)
        self.wi = nn.Parameter(torch.randn(4, 1, 5) * 0.3)
        self.b = nn.Parameter(torch.full((1, 4, 1), -0.1))
        self.lr = nn.Parameter(torch.randn(3, 4) * 0.5)
        self.li = nn.Parameter(torch.randn(3, 4) * 0.5)

    def forward(self, re, im):  # (B, 1, L) each
        z = torch.complex(re, im)
        y = F.conv1d(z, torch.complex(self.wr, self.wi), padding=2)
        y = F.relu(y.abs() + self.b) * torch.sgn(y)
        out = y.mean(-1) @ torch.complex(self.lr, self.li).T
        return out.abs(), torch.angle(out)


def complex_conv_modrelu():
    torch.manual_seed(0)
    return _ComplexConvNet(), (torch.randn(2, 1, 24), torch.randn(2, 1, 24))


# ---------------------------------------------------------------- sorting, graphs, embeddings


def _sparsemax(z, dim: int = -1):
    zs, _ = torch.sort(z, dim=dim, descending=True)
    n = z.shape[dim]
    shape = [1] * z.dim()
    shape[dim] = n
    k = torch.arange(1, n + 1, device=z.device, dtype=z.dtype).view(shape)
    cs = zs.cumsum(dim)
    support = (1 + k * zs) > cs
    ksup = support.sum(dim, keepdim=True)
    tau = (cs.gather(dim, ksup - 1) - 1) / ksup.to(z.dtype)
    return torch.clamp(z - tau, min=0)


class _SparsemaxKmax(nn.Module):
    """Text CNN with sparsemax attention pooling (sort, cumsum, gather) and k-max pooling (topk, indices
    sorted back to sequence order, gather); a stable descending argsort ranks the positions."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(6, 8, 3, padding=1)
        self.score = nn.Linear(8, 1)
        self.fc = nn.Linear(8 * 3 + 8, 4)

    def forward(self, x):  # (B, 6, L)
        h = torch.tanh(self.conv(x))
        _, idx = h.topk(3, dim=2)
        kmax = h.gather(2, idx.sort(dim=2).values)
        s = self.score(h.transpose(1, 2)).squeeze(-1)
        p = _sparsemax(s, dim=1)
        pooled = (p.unsqueeze(1) * h).sum(2)
        rank = torch.argsort(s, dim=1, descending=True, stable=True)
        return self.fc(torch.cat([kmax.flatten(1), pooled], 1)), p, rank


def sparsemax_kmax():
    torch.manual_seed(0)
    return _SparsemaxKmax(), (torch.randn(3, 6, 10),)


class _GIN(nn.Module):
    """GIN on an edge list: messages by index_select, sums by index_add, degrees by scatter_add, graph pooling
    by segment sum (index_add), mean and max (scatter_reduce include_self=False), graph-mean centring by indexing."""

    def __init__(self, graphs: int = 3):
        super().__init__()
        self.graphs = graphs
        self.mlp1 = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 8))
        self.mlp2 = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
        self.eps = nn.Parameter(torch.zeros(1))
        self.head = nn.Linear(24, 2)

    def conv(self, h, src, dst, mlp):
        agg = torch.zeros_like(h).index_add_(0, dst, h.index_select(0, src))
        return mlp((1 + self.eps) * h + agg)

    def forward(self, x, edge_index, batch):  # x (N, 5), edge_index (2, E), batch (N,)
        src, dst = edge_index[0], edge_index[1]
        h = self.conv(F.relu(self.conv(x, src, dst, self.mlp1)), src, dst, self.mlp2)
        deg = torch.zeros(x.shape[0], device=x.device).scatter_add_(0, dst, torch.ones(dst.shape, device=x.device))
        idx = batch.unsqueeze(1).expand(-1, h.shape[1])
        empty = h.new_zeros(self.graphs, h.shape[1])
        total = empty.index_add(0, batch, h)
        mean = empty.scatter_reduce(0, idx, h, reduce="mean", include_self=False)
        peak = empty.scatter_reduce(0, idx, h, reduce="amax", include_self=False)
        centred = (h - mean[batch]) / deg.clamp_min(1).sqrt().unsqueeze(1)
        return self.head(torch.cat([total, mean, peak], 1)), centred


def gin_segment_pool():
    torch.manual_seed(0)
    edges = torch.tensor(
        [
            [0, 1, 1, 2, 3, 4, 4, 5, 6, 7, 7, 8, 8, 9],
            [1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 9, 8],
        ]
    )
    batch = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
    return _GIN(), (torch.randn(10, 5), edges, batch)


class _FactorizationMachine(nn.Module):
    """A DeepFM-style CTR model: field offsets into one Embedding (padding_idx, max_norm), first-order weights
    as a 1-d Embedding, a multi-hot tag field averaged under its mask, the FM pairwise term, a deep MLP,
    BCE-with-logits with pos_weight."""

    def __init__(self):
        super().__init__()
        self.register_buffer("offsets", torch.tensor([0, 5, 12]))
        self.register_buffer("pos_weight", torch.tensor(3.0))
        self.emb = nn.Embedding(17, 6, padding_idx=16, max_norm=1.0)
        self.first = nn.Embedding(17, 1, padding_idx=16)
        self.tag_emb = nn.Embedding(10, 6, padding_idx=0)
        self.bias = nn.Parameter(torch.zeros(1))
        self.deep = nn.Sequential(nn.Linear(4 * 6, 8), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, ids, tags, label):  # ids (B, 3) per field; tags (B, 4) with 0 padding
        idx = ids + self.offsets
        tmask = (tags != 0).unsqueeze(-1).float()
        tv = (self.tag_emb(tags) * tmask).sum(1) / tmask.sum(1).clamp_min(1.0)
        fields = torch.cat([self.emb(idx), tv.unsqueeze(1)], 1)
        fm = 0.5 * (fields.sum(1).pow(2) - fields.pow(2).sum(1)).sum(1)
        logit = self.bias + self.first(idx).sum((1, 2)) + fm + self.deep(fields.flatten(1)).squeeze(1)
        loss = F.binary_cross_entropy_with_logits(logit, label, pos_weight=self.pos_weight)
        return {"loss": loss, "logit": logit}


def fm_embedding_padding():
    torch.manual_seed(0)
    ids = torch.tensor([[0, 2, 1], [4, 6, 3], [2, 0, 0], [1, 1, 2]])
    tags = torch.tensor([[1, 2, 0, 0], [3, 0, 0, 0], [0, 0, 0, 0], [4, 5, 6, 9]])
    label = torch.tensor([1.0, 0.0, 0.0, 1.0])
    return _FactorizationMachine(), (ids, tags, label)


# ---------------------------------------------------------------- losses and heads


class _Distill(nn.Module):
    """Knowledge distillation: a frozen teacher under no_grad, temperature-scaled KL (sum / batch), label
    smoothing by one_hot by hand, and a focal term from the gathered true-class probability."""

    def __init__(self):
        super().__init__()
        self.teacher = nn.Sequential(nn.Linear(10, 16), nn.GELU(), nn.Linear(16, 5)).requires_grad_(False)
        self.student = nn.Sequential(nn.Linear(10, 8), nn.Softplus(beta=2.0, threshold=5.0), nn.Linear(8, 5))

    def forward(self, x, y):
        with torch.no_grad():
            t_logits = self.teacher(x)
        s_logits = self.student(x)
        temp = 3.0
        kd = F.kl_div(F.log_softmax(s_logits / temp, -1), F.softmax(t_logits / temp, -1), reduction="sum")
        kd = kd / x.shape[0] * temp * temp
        logp = F.log_softmax(s_logits, -1)
        smooth = F.one_hot(y, 5).float() * 0.9 + 0.1 / 5
        ce = -(smooth * logp).sum(-1).mean()
        pt = logp.gather(1, y.unsqueeze(1)).squeeze(1).exp()
        focal = (-((1 - pt) ** 2) * torch.log(pt.clamp_min(1e-8))).mean()
        return {"loss": 0.5 * kd + ce + focal, "logits": s_logits}


def distill_kl_smooth():
    torch.manual_seed(0)
    return _Distill(), (torch.randn(6, 10), torch.tensor([0, 1, 2, 3, 4, 0]))


class _ArcFace(nn.Module):
    """Face-embedding training: ArcFace additive angular margin (normalize, clamp, acos, cos(theta + m),
    one_hot where) plus a batch-hard triplet loss mined from cdist with label masks."""

    def __init__(self, classes: int = 4, s: float = 16.0, m: float = 0.3):
        super().__init__()
        self.s, self.m, self.classes = s, m, classes
        self.backbone = nn.Sequential(nn.Linear(12, 16), nn.BatchNorm1d(16), nn.PReLU(), nn.Linear(16, 8))
        self.w = nn.Parameter(torch.randn(classes, 8))

    def forward(self, x, y):
        emb = self.backbone(x)
        cos = (F.normalize(emb, dim=1) @ F.normalize(self.w, dim=1).T).clamp(-1 + 1e-6, 1 - 1e-6)
        theta = torch.acos(cos)
        target = torch.where(theta + self.m < math.pi, torch.cos(theta + self.m), cos - self.m * math.sin(self.m))
        logits = self.s * torch.where(F.one_hot(y, self.classes).bool(), target, cos)
        d = torch.cdist(emb, emb)
        same = y.unsqueeze(0) == y.unsqueeze(1)
        hardest_pos = d.masked_fill(~same, 0.0).amax(1)
        hardest_neg = d.masked_fill(same, float("inf")).amin(1)
        triplet = F.relu(hardest_pos - hardest_neg + 0.5).mean()
        return {"loss": F.cross_entropy(logits, y) + triplet, "logits": logits, "embedding": emb}


def arcface_triplet_mining():
    torch.manual_seed(0)
    return _ArcFace(), (torch.randn(8, 12), torch.tensor([0, 0, 1, 1, 2, 2, 3, 3]))


# ---------------------------------------------------------------- integer, numerics, dynamic shapes


class _QAT(nn.Module):
    """Quantization-aware training: fake_quantize_per_tensor_affine on activations (qparams from aminmax),
    fake_quantize_per_channel_affine on weights, a 4-bit straight-through layer (round, clamp) whose codes
    are packed two to a byte and unpacked (floor_divide, remainder, fmod)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 6)
        self.fc3 = nn.Linear(6, 3)

    def forward(self, x):
        lo, hi = torch.aminmax(x.detach())
        scale = ((hi - lo).clamp_min(1e-6) / 255.0).reshape(1)
        zp = (-lo / scale).round().clamp(0, 255).to(torch.int32).reshape(1)
        xq = torch.fake_quantize_per_tensor_affine(x, scale, zp, 0, 255)
        w = self.fc1.weight
        wscale = w.detach().abs().amax(1).clamp_min(1e-6) / 127.0
        wzp = torch.zeros(w.shape[0], dtype=torch.int32, device=w.device)
        wq = torch.fake_quantize_per_channel_affine(w, wscale, wzp, 0, -128, 127)
        h = F.relu(F.linear(xq, wq, self.fc1.bias))
        w2 = self.fc2.weight
        s2 = w2.detach().abs().max() / 7.0
        codes = torch.clamp(torch.round(w2 / s2), -8, 7)
        w2q = w2 + (codes * s2 - w2).detach()
        h = F.relu(F.linear(h, w2q, self.fc2.bias))
        nib = (codes.detach() + 8).to(torch.int64)  # (6, 8), 0..15
        packed = nib[:, 0::2] * 16 + nib[:, 1::2]
        unpacked = torch.stack([torch.floor_divide(packed, 16), torch.remainder(packed, 16)], -1).flatten(1)
        low = torch.fmod(packed.float(), 16.0)
        return self.fc3(h), packed, unpacked, low


def fake_quant_qat():
    torch.manual_seed(0)
    return _QAT(), (torch.randn(5, 8),)


class _Tabular(nn.Module):
    """A tabular net robust to missing values: isnan/isinf flags, nan_to_num, one-sided clamps, signed log1p,
    bucketize (right=True) onto boundaries made in forward, per-feature bin embeddings, torch.where gating."""

    def __init__(self, features: int = 4, bins: int = 8):
        super().__init__()
        self.features, self.bins = features, bins
        self.bin_emb = nn.Embedding(features * (bins + 1), 3)
        self.num = nn.Linear(3 * features, 8)
        self.head = nn.Linear(8 + 3 * features, 2)

    def forward(self, x):  # (B, features) with NaN and inf
        missing, infinite = torch.isnan(x), torch.isinf(x)
        clean = torch.nan_to_num(x, nan=0.0, posinf=10.0, neginf=-10.0).clamp(min=-5.0).clamp_max(6.0)
        signed_log = torch.sign(clean) * torch.log1p(clean.abs())
        boundaries = torch.linspace(-3.0, 3.0, self.bins, device=x.device)
        ids = torch.bucketize(clean, boundaries, right=True)
        ids = ids + torch.arange(self.features, device=x.device) * (self.bins + 1)
        emb = self.bin_emb(ids).flatten(1)
        h = F.relu(self.num(torch.cat([signed_log, missing.float(), infinite.float()], 1)))
        out = self.head(torch.cat([h, emb], 1))
        return torch.where(missing.any(1, keepdim=True), 0.5 * out, out), ids


def tabular_nan_binning():
    torch.manual_seed(0)
    x = torch.randn(5, 4) * 3
    x[0, 1] = float("nan")
    x[2, 3] = float("inf")
    x[3, 0] = float("-inf")
    x[4, 2] = float("nan")
    return _Tabular(), (x,)


class _TokenPruning(nn.Module):
    """Dynamic token pruning: a learned score keeps tokens above 0.5 (nonzero as_tuple, argwhere), only the
    kept tokens go through the MLP, and their updates go back by index_put with accumulate."""

    def __init__(self):
        super().__init__()
        self.score = nn.Linear(8, 1)
        self.mlp = nn.Linear(8, 8)
        self.out = nn.Linear(8, 3)

    def forward(self, x):  # (B, L, 8)
        s = torch.sigmoid(self.score(x)).squeeze(-1)
        keep = s > 0.5
        b, pos = torch.nonzero(keep, as_tuple=True)
        upd = F.gelu(self.mlp(x[b, pos])) * s[b, pos].unsqueeze(-1)
        full = x.index_put((b, pos), upd, accumulate=True)
        return self.out(full.mean(1)), keep.sum(1), torch.argwhere(keep)


def token_pruning_nonzero():
    torch.manual_seed(0)
    return _TokenPruning(), (torch.randn(3, 7, 8),)


# ---------------------------------------------------------------- generative, math


class _VQVAE(nn.Module):
    """VQ-VAE: nearest codebook entry by expanded squared distance and argmin, lookup by the Embedding,
    straight-through estimator, codebook and commitment losses, code usage perplexity by bincount."""

    def __init__(self, codes: int = 16, dim: int = 4):
        super().__init__()
        self.codes, self.dim = codes, dim
        self.enc = nn.Sequential(nn.Conv2d(3, 8, 4, stride=2, padding=1), nn.ReLU(), nn.Conv2d(8, dim, 1))
        self.codebook = nn.Embedding(codes, dim)
        self.dec = nn.ConvTranspose2d(dim, 3, 4, stride=2, padding=1)

    def forward(self, x):
        z = self.enc(x)
        b, c, h, w = z.shape
        flat = z.permute(0, 2, 3, 1).reshape(-1, c)
        e = self.codebook.weight
        d = flat.pow(2).sum(1, keepdim=True) - 2 * flat @ e.T + e.pow(2).sum(1)
        codes = d.argmin(1)
        q = self.codebook(codes).view(b, h, w, c).permute(0, 3, 1, 2)
        rec = self.dec(z + (q - z).detach())
        loss = F.mse_loss(rec, x) + F.mse_loss(q, z.detach()) + 0.25 * F.mse_loss(z, q.detach())
        p = torch.bincount(codes, minlength=self.codes).float() / codes.numel()
        perplexity = torch.exp(-(p * torch.log(p + 1e-10)).sum())
        return {"loss": loss, "recon": rec, "codes": codes.view(b, h, w), "perplexity": perplexity}


def vq_codebook():
    torch.manual_seed(0)
    return _VQVAE(), (torch.randn(2, 3, 8, 8),)


class _KANLayer(nn.Module):
    """A Kolmogorov-Arnold layer: SiLU base branch plus cubic B-spline bases by the Cox-de Boor recursion
    (comparisons to a grid buffer, bool to float, slices), mixed by learned spline weights."""

    def __init__(self, fin: int, fout: int, grid: int = 5, k: int = 3):
        super().__init__()
        self.k = k
        h = 2.0 / grid
        knots = torch.arange(-k, grid + k + 1, dtype=torch.float32) * h - 1.0
        self.register_buffer("grid", knots.expand(fin, -1).contiguous())
        self.base = nn.Linear(fin, fout, bias=False)
        self.spline = nn.Parameter(torch.randn(fout, fin, grid + k) * 0.1)

    def bases(self, x):  # (B, fin) -> (B, fin, grid + k)
        g = self.grid
        x = x.unsqueeze(-1)
        b = ((x >= g[:, :-1]) & (x < g[:, 1:])).to(x.dtype)
        for p in range(1, self.k + 1):
            left = (x - g[:, : -(p + 1)]) / (g[:, p:-1] - g[:, : -(p + 1)]) * b[:, :, :-1]
            right = (g[:, p + 1 :] - x) / (g[:, p + 1 :] - g[:, 1:(-p)]) * b[:, :, 1:]
            b = left + right
        return b

    def forward(self, x):
        spline = F.linear(self.bases(x).flatten(1), self.spline.flatten(1))
        return self.base(F.silu(x)) + spline


class _KAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = _KANLayer(4, 6), _KANLayer(6, 3)

    def forward(self, x):
        return self.l2(torch.tanh(self.l1(x)))


def kan_bspline():
    torch.manual_seed(0)
    return _KAN(), (torch.rand(6, 4) * 1.8 - 0.9,)


class _Orthogonal(nn.Module):
    """Orthogonal parametrizations (matrix_exp, householder, cayley maps; non-square weights, so the
    trivialization's base is completed by QR), then least squares by pinv and lstsq and a matrix exponential
    of a learned skew-symmetric generator."""

    def __init__(self):
        super().__init__()
        P = nn.utils.parametrizations
        self.rot = P.orthogonal(nn.Linear(6, 8), orthogonal_map="matrix_exp")
        self.proj = P.orthogonal(nn.Linear(8, 4), orthogonal_map="householder")
        self.mix = P.orthogonal(nn.Linear(4, 3, bias=False), orthogonal_map="cayley")
        self.gen = nn.Parameter(torch.randn(3, 3) * 0.2)

    def forward(self, x, target):  # x (5, 6) -> c (5, 3); target (5, 2)
        c = self.mix(torch.tanh(self.proj(self.rot(x))))
        sol = torch.linalg.pinv(c) @ target
        lst = torch.linalg.lstsq(c, target).solution
        rot3 = torch.linalg.matrix_exp(self.gen - self.gen.T)
        return c @ (sol + lst), rot3


def orthogonal_pinv():
    torch.manual_seed(0)
    return _Orthogonal(), (torch.randn(5, 6), torch.randn(5, 2))


# ---------------------------------------------------------------- the table

MODELS = {
    "unet_convtranspose_gn": (
        "vision",
        "U-Net: ConvTranspose2d 2/2 upsampling, GroupNorm, SiLU, skip concatenation, one_hot soft dice + cross_entropy",
    ),
    "srresnet_prelu_shuffle": (
        "vision",
        "SRResNet x4: 9x9 convs, per-channel PReLU, BN residual blocks, two conv + PixelShuffle(2) stages, tanh",
    ),
    "conv3d_unpool_instnorm": (
        "vision",
        "3-d net: dilated Conv3d, InstanceNorm3d affine, LeakyReLU, MaxPool3d indices -> MaxUnpool3d output_size, replicate Conv3d, AdaptiveAvgPool3d (1,3,3)",
    ),
    "flow_warp_bicubic": (
        "vision",
        "optical-flow warp: meshgrid/linspace grid + predicted flow, grid_sample bicubic border and bilinear reflection align_corners",
    ),
    "tta_rot90_flip": (
        "vision",
        "test-time augmentation: rot90 k=0..3 and back, flip, roll 2 dims, stack mean and std",
    ),
    "dynamic_condconv": (
        "vision",
        "CondConv: softmax router, einsum-mixed expert kernels, conv2d with groups = batch size, BatchNorm2d, strided conv",
    ),
    "pointnet_tnet": (
        "pointcloud",
        "PointNet: T-Nets by bmm, 1x1 Conv1d + BatchNorm1d, max over points with indices, matrix_norm orthogonality loss",
    ),
    "bilstm_crf": (
        "rnn",
        "BiLSTM-CRF tagger: forward algorithm (logsumexp, masked where), gold score by gather/indexing, Viterbi max + gather backtracking",
    ),
    "luong_lstmcell_decoder": (
        "rnn",
        "GRU encoder 2 layers bidirectional bias=False seq-first, LSTMCell decoder loop, Luong general attention (bmm, masked_fill -inf), CE ignore_index",
    ),
    "mingru_logscan": (
        "rnn",
        "minGRU parallel scan: softplus log gates, cumsum, logcumsumexp, exp, pre-LayerNorm residual layers",
    ),
    "framed_logmel_mfcc": (
        "audio/fft",
        "MFCC by hand: Tensor.unfold framing, periodic hann, rfft power by .real/.imag, mel filterbank and DCT by matmul, replicate-padded delta conv1d groups",
    ),
    "stft_mask_enhance": (
        "audio/fft",
        "spectral mask enhancer: stft win_length < n_fft normalized constant pad, abs/angle, sigmoid conv mask, polar, istft length",
    ),
    "complex_conv_modrelu": (
        "complex",
        "complex-valued net: torch.complex weights, complex conv1d, modReLU (abs, sgn), complex matmul, abs and angle out",
    ),
    "sparsemax_kmax": (
        "sorting",
        "sparsemax attention pooling (sort descending, cumsum, gather), k-max pooling (topk, sorted indices, gather), stable argsort",
    ),
    "gin_segment_pool": (
        "graph",
        "GIN on an edge list: index_select + index_add messages, scatter_add degrees, segment sum/mean/amax pooling (scatter_reduce include_self=False)",
    ),
    "fm_embedding_padding": (
        "embedding",
        "DeepFM: field offsets into Embedding padding_idx max_norm, 1-d Embedding weights, masked multi-hot mean, FM term, BCE-with-logits pos_weight",
    ),
    "distill_kl_smooth": (
        "loss",
        "distillation: frozen teacher under no_grad, temperature KL sum, one_hot label smoothing by hand, focal term, Softplus beta/threshold",
    ),
    "arcface_triplet_mining": (
        "loss",
        "ArcFace margin (normalize, clamp, acos, cos(theta+m), one_hot where) + batch-hard triplet from cdist and label masks (amax/amin)",
    ),
    "fake_quant_qat": (
        "integer",
        "QAT: fake_quantize_per_tensor_affine (aminmax qparams), fake_quantize_per_channel_affine, 4-bit STE round/clamp, nibble packing floor_divide/remainder/fmod",
    ),
    "tabular_nan_binning": (
        "numerics",
        "NaN/inf inputs: isnan, isinf, nan_to_num, clamp min / clamp_max, sign*log1p, bucketize right=True, bin Embedding, where gating",
    ),
    "token_pruning_nonzero": (
        "dynamic",
        "token pruning: sigmoid score > 0.5, nonzero as_tuple, advanced indexing of kept tokens, index_put accumulate, argwhere",
    ),
    "vq_codebook": (
        "generative",
        "VQ-VAE: squared distances to a codebook, argmin, Embedding lookup, straight-through, commitment loss, bincount perplexity",
    ),
    "kan_bspline": (
        "math",
        "KAN layers: SiLU base, cubic B-spline bases by Cox-de Boor (comparisons, bool to float, slicing), spline weight matmul",
    ),
    "orthogonal_pinv": (
        "linalg",
        "orthogonal parametrizations (matrix_exp, householder, cayley), linalg.pinv, linalg.lstsq, matrix_exp of a skew matrix",
    ),
}

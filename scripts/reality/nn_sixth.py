"""The SIXTH set of plain ``torch.nn`` user models: written after the tuning set (``nn_models.py``), the
held-out set (``nn_heldout.py``), the fresh set (``nn_fresh.py``), the unseen set (``nn_unseen.py``) and the
fifth set (``nn_fifth.py``), and written without reading how opcov judges models. It holds small models of
kinds users write that none of the earlier sets holds (deformable convolution by gather, ConvNeXt V2 with
global response norm, Swin shifted windows, a TSM video net with BlurPool, S4D, a Mamba selective scan, a
pointer network, WaveNet with mu-law classes, spectral statistics, a Hilbert envelope, the Lovasz hinge,
CLIP/SigLIP, Sinkhorn transport, soft-DTW, quotient-remainder hashed embedding bags, a sparse-softmax GAT,
voxel scatter pooling, XNOR bit packing, a float64 Gaussian process, distribution likelihoods by special
functions, Glow with an LU 1x1 conv, a tensor-train layer, gradient checkpointing with custom Functions and
a WGAN-GP critic with hook-style spectral and weight norm). It measures opcov's verdicts on PyTorch/XLA;
nothing may be tuned on it.

The same contract as the other sets: each factory ``NAME()`` returns ``(model, inputs)``, seeded inside,
small, callable under ``torch.device("meta")`` (no tensor built from another's values in the factory;
tables a model needs, such as filters, masks, windows and relative-position indices, are made in
``forward``); a floating output depends on the parameters; no complex output; no randomness on the compared
path (noise a model needs is an input). Some models are integer- or bool-heavy on purpose (``wavenet_mulaw``
quantises by truncation, ``voxel_scatter_pool`` hashes int32 voxel keys, ``xnor_bitpack`` packs bits and
counts them), and ``wgan_gp_spectral`` takes a gradient of a gradient (create_graph) in training.

    PYTHONPATH=scripts/reality opcov trace nn_sixth:deform_conv_gather --mode training --out x.yaml
    PJRT_DEVICE=CPU .envs/xla/bin/python scripts/envs/nn_reality.py --set sixth --models deform_conv_gather

``MODELS`` names each factory: name -> (family, one-line description).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as ckpt

# ---------------------------------------------------------------- vision


class _DeformConv(nn.Module):
    """Modulated deformable conv (v2) by hand: a conv predicts per-tap offsets and masks; the image is sampled
    bilinearly at the shifted taps by floor, long indices, clamp, validity masks and gather on the flattened
    image, and the columns meet the weight in one matmul."""

    def __init__(self, cin: int = 3, cout: int = 6, k: int = 3):
        super().__init__()
        self.k = k
        self.offset = nn.Conv2d(cin, 3 * k * k, 3, padding=1)
        self.weight = nn.Parameter(torch.randn(cout, cin * k * k) * 0.1)
        self.bias = nn.Parameter(torch.zeros(cout))
        self.head = nn.Linear(cout, 2)

    def forward(self, x):
        b, c, h, w = x.shape
        kk, r = self.k * self.k, self.k // 2
        om = self.offset(x)
        off = 0.5 * om[:, : 2 * kk].reshape(b, kk, 2, h, w)
        mask = torch.sigmoid(om[:, 2 * kk :])
        taps = torch.arange(-r, r + 1, device=x.device)
        dy, dx = torch.meshgrid(taps, taps, indexing="ij")
        ys = torch.arange(h, device=x.device).view(1, 1, h, 1) + dy.reshape(1, kk, 1, 1) + off[:, :, 0]
        xs = torch.arange(w, device=x.device).view(1, 1, 1, w) + dx.reshape(1, kk, 1, 1) + off[:, :, 1]
        y0f, x0f = ys.floor(), xs.floor()
        wy, wx = (ys - y0f).unsqueeze(1), (xs - x0f).unsqueeze(1)
        y0, x0 = y0f.long(), x0f.long()
        flat = x.reshape(b, c, h * w)

        def tap(yi, xi):
            valid = ((yi >= 0) & (yi < h) & (xi >= 0) & (xi < w)).unsqueeze(1)
            idx = (yi.clamp(0, h - 1) * w + xi.clamp(0, w - 1)).reshape(b, 1, -1).expand(-1, c, -1)
            return flat.gather(2, idx).reshape(b, c, kk, h, w) * valid

        v = (
            tap(y0, x0) * (1 - wy) * (1 - wx)
            + tap(y0, x0 + 1) * (1 - wy) * wx
            + tap(y0 + 1, x0) * wy * (1 - wx)
            + tap(y0 + 1, x0 + 1) * wy * wx
        )
        cols = (v * mask.unsqueeze(1)).reshape(b, c * kk, h * w)
        y = F.relu((self.weight @ cols).reshape(b, -1, h, w) + self.bias.view(1, -1, 1, 1))
        return self.head(y.mean((2, 3))), off


def deform_conv_gather():
    torch.manual_seed(0)
    return _DeformConv(), (torch.randn(2, 3, 7, 9),)


class _GRN(nn.Module):
    """ConvNeXt V2 global response norm (channels last): L2 norm over H, W, divided by its channel mean."""

    def __init__(self, d: int):
        super().__init__()
        self.gamma = nn.Parameter(torch.randn(1, 1, 1, d) * 0.1)
        self.beta = nn.Parameter(torch.randn(1, 1, 1, d) * 0.1)

    def forward(self, x):
        gx = torch.norm(x, p=2, dim=(1, 2), keepdim=True)
        nx = gx / (gx.mean(dim=-1, keepdim=True) + 1e-6)
        return self.gamma * (x * nx) + self.beta + x


class _NextBlock(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.dw = nn.Conv2d(d, d, 7, padding=3, groups=d)
        self.norm = nn.LayerNorm(d, eps=1e-6)
        self.pw1, self.pw2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.grn = _GRN(4 * d)
        self.scale = nn.Parameter(torch.full((d,), 0.5))

    def forward(self, x):
        y = self.norm(self.dw(x).permute(0, 2, 3, 1))
        y = self.pw2(self.grn(F.gelu(self.pw1(y))))
        return x + (self.scale * y).permute(0, 3, 1, 2)


class _ChannelsFirstLN(nn.Module):
    """ConvNeXt's LayerNorm over channels of an NCHW tensor, written out (mean, biased var, rsqrt)."""

    def __init__(self, d: int):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        return self.weight[:, None, None] * (x - u) * torch.rsqrt(s + 1e-6) + self.bias[:, None, None]


class _ConvNeXtV2(nn.Module):
    """ConvNeXt V2: patchify stem 4/4, depthwise 7x7 blocks with channels-last LayerNorm, GELU, GRN and layer
    scale, a LayerNorm + 2/2 conv downsample, global pooling, head LayerNorm."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 4, stride=4), _ChannelsFirstLN(8))
        self.stage1 = nn.Sequential(_NextBlock(8), _NextBlock(8))
        self.down = nn.Sequential(_ChannelsFirstLN(8), nn.Conv2d(8, 16, 2, stride=2))
        self.stage2 = _NextBlock(16)
        self.norm, self.head = nn.LayerNorm(16), nn.Linear(16, 5)

    def forward(self, x):
        y = self.stage2(self.down(self.stage1(self.stem(x))))
        return self.head(self.norm(y.mean((2, 3))))


def convnext_v2_grn():
    torch.manual_seed(0)
    return _ConvNeXtV2(), (torch.randn(2, 3, 16, 16),)


def _windows(x, ws: int):
    b, h, w, c = x.shape
    return x.view(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, c)


def _unwindow(win, ws: int, b: int, h: int, w: int):
    return win.view(b, h // ws, w // ws, ws, ws, -1).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, -1)


class _SwinBlock(nn.Module):
    """Swin block: (shifted) window attention with a relative-position bias table indexed by an index made in
    forward, the shifted-window mask built by slice assignment and masked_fill -100, torch.roll back."""

    def __init__(self, d: int, ws: int, heads: int, shift: int):
        super().__init__()
        self.ws, self.heads, self.shift = ws, heads, shift
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.table = nn.Parameter(torch.randn((2 * ws - 1) ** 2, heads) * 0.02)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def _mask(self, h: int, w: int, device):
        ws, s = self.ws, self.shift
        img = torch.zeros(1, h, w, 1, device=device)
        cnt = 0
        for hs in (slice(0, -ws), slice(-ws, -s), slice(-s, None)):
            for wsl in (slice(0, -ws), slice(-ws, -s), slice(-s, None)):
                img[:, hs, wsl, :] = cnt
                cnt += 1
        mw = _windows(img, ws).squeeze(-1)
        diff = mw.unsqueeze(1) - mw.unsqueeze(2)
        return diff.masked_fill(diff != 0, -100.0).masked_fill(diff == 0, 0.0)

    def _bias(self, device):
        ws, n = self.ws, self.ws * self.ws
        coords = torch.stack(
            torch.meshgrid(torch.arange(ws, device=device), torch.arange(ws, device=device), indexing="ij")
        ).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (ws - 1)
        idx = rel[..., 0] * (2 * ws - 1) + rel[..., 1]
        return self.table[idx.reshape(-1)].view(n, n, -1).permute(2, 0, 1)

    def forward(self, x):  # (B, H, W, C)
        b, h, w, c = x.shape
        y = self.norm1(x)
        if self.shift:
            y = torch.roll(y, shifts=(-self.shift, -self.shift), dims=(1, 2))
        win = _windows(y, self.ws)
        nb, n, _ = win.shape
        qkv = self.qkv(win).reshape(nb, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q * (c // self.heads) ** -0.5) @ k.transpose(-2, -1) + self._bias(x.device).unsqueeze(0)
        if self.shift:
            mask = self._mask(h, w, x.device)
            nw = mask.shape[0]
            attn = (attn.view(nb // nw, nw, self.heads, n, n) + mask.unsqueeze(1).unsqueeze(0)).view(
                -1, self.heads, n, n
            )
        out = self.proj((attn.softmax(-1) @ v).transpose(1, 2).reshape(nb, n, c))
        out = _unwindow(out, self.ws, b, h, w)
        if self.shift:
            out = torch.roll(out, shifts=(self.shift, self.shift), dims=(1, 2))
        x = x + out
        return x + self.mlp(self.norm2(x))


class _Swin(nn.Module):
    """Swin-T in miniature: 2/2 patch embedding, a regular and a shifted window block, patch merging by
    strided slicing and concatenation, mean pooling, a classifier."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Conv2d(3, 16, 2, stride=2)
        self.blocks = nn.Sequential(_SwinBlock(16, 4, 2, 0), _SwinBlock(16, 4, 2, 2))
        self.merge_norm, self.merge = nn.LayerNorm(64), nn.Linear(64, 32, bias=False)
        self.head = nn.Linear(32, 4)

    def forward(self, img, labels):
        x = self.blocks(self.embed(img).permute(0, 2, 3, 1))
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1)
        logits = self.head(self.merge(self.merge_norm(x)).mean((1, 2)))
        return {"loss": F.cross_entropy(logits, labels), "logits": logits}


def swin_shifted_window():
    torch.manual_seed(0)
    return _Swin(), (torch.randn(2, 3, 16, 16), torch.tensor([1, 3]))


class _TSMBlur(nn.Module):
    """Video classifier: a temporal shift (a quarter of the channels one frame back, a quarter forward) by
    slice assignment into zeros_like, per-frame convs, MaxBlurPool (MaxPool2d stride 1, reflect-padded
    binomial depthwise conv stride 2), AvgPool3d over an odd frame count with ceil_mode, and a trilinear
    align_corners saliency map upsampled back to the clip's size."""

    def __init__(self, c: int = 8):
        super().__init__()
        self.c = c
        self.conv1 = nn.Conv2d(3, c, 3, padding=1)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)
        self.sal = nn.Conv3d(c, 1, 1)
        self.fc = nn.Linear(c, 4)

    def forward(self, clip):  # (B, T, 3, H, W)
        b, t, _, h, w = clip.shape
        f = F.relu(self.conv1(clip.flatten(0, 1))).view(b, t, self.c, h, w)
        fold = self.c // 4
        out = torch.zeros_like(f)
        out[:, :-1, :fold] = f[:, 1:, :fold]
        out[:, 1:, fold : 2 * fold] = f[:, :-1, fold : 2 * fold]
        out[:, :, 2 * fold :] = f[:, :, 2 * fold :]
        g = F.relu(self.conv2(out.flatten(0, 1)))
        g = F.max_pool2d(g, 2, stride=1)
        taps = torch.tensor([1.0, 3.0, 3.0, 1.0], device=clip.device)
        k2 = taps[:, None] * taps[None, :]
        g = F.conv2d(
            F.pad(g, (1, 2, 1, 2), mode="reflect"), (k2 / k2.sum()).expand(self.c, 1, 4, 4), stride=2, groups=self.c
        )
        g = g.view(b, t, self.c, g.shape[-2], g.shape[-1]).transpose(1, 2)
        g = F.avg_pool3d(g, (2, 1, 1), stride=(2, 1, 1), ceil_mode=True)
        sal = F.interpolate(self.sal(g), size=(t, h, w), mode="trilinear", align_corners=True)
        return self.fc(g.mean((2, 3, 4))), sal.squeeze(1)


def video_tsm_blurpool():
    torch.manual_seed(0)
    return _TSMBlur(), (torch.randn(2, 5, 3, 8, 10),)


# ---------------------------------------------------------------- sequence


class _S4DLayer(nn.Module):
    """S4D: a diagonal complex state matrix; the convolution kernel is made in forward by a Vandermonde
    product in complex arithmetic (exp of dtA * arange, einsum, real part), applied by FFT convolution
    (rfft to n = 2L, product, irfft, truncation), with a D skip, GELU and a GLU 1x1 conv out."""

    def __init__(self, h: int = 8, n: int = 4):
        super().__init__()
        self.log_dt = nn.Parameter(torch.rand(h) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
        self.c = nn.Parameter(torch.randn(h, n, 2) * 0.5)
        self.log_a_real = nn.Parameter(torch.full((h, n), math.log(0.5)))
        self.a_imag = nn.Parameter(math.pi * torch.arange(n).float().repeat(h, 1))
        self.d = nn.Parameter(torch.randn(h))
        self.out = nn.Conv1d(h, 2 * h, 1)

    def forward(self, u):  # (B, H, L)
        length = u.shape[-1]
        dt = torch.exp(self.log_dt)
        a = -torch.exp(self.log_a_real) + 1j * self.a_imag
        dta = a * dt.unsqueeze(-1)
        c = torch.view_as_complex(self.c) * (torch.exp(dta) - 1.0) / a
        vander = torch.exp(dta.unsqueeze(-1) * torch.arange(length, device=u.device))
        k = 2 * torch.einsum("hn,hnl->hl", c, vander).real
        y = torch.fft.irfft(torch.fft.rfft(u, n=2 * length) * torch.fft.rfft(k, n=2 * length), n=2 * length)
        y = F.gelu(y[..., :length] + u * self.d.unsqueeze(-1))
        return F.glu(self.out(y), dim=1)


class _S4D(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(3, 8)
        self.layers = nn.ModuleList([_S4DLayer(), _S4DLayer()])
        self.norms = nn.ModuleList([nn.LayerNorm(8), nn.LayerNorm(8)])
        self.dec = nn.Linear(8, 2)

    def forward(self, x, target):  # (B, L, 3)
        h = self.enc(x)
        for layer, norm in zip(self.layers, self.norms):
            h = norm(h + layer(h.transpose(1, 2)).transpose(1, 2))
        pred = self.dec(h.mean(1))
        return {"loss": F.mse_loss(pred, target), "pred": pred}


def s4d_fft_kernel():
    torch.manual_seed(0)
    return _S4D(), (torch.randn(2, 16, 3), torch.randn(2, 2))


class _MambaBlock(nn.Module):
    """Mamba block: in-projection split into x and gate z, causal depthwise Conv1d (pad k-1, slice), SiLU,
    input-dependent delta (softplus), B and C; the selective scan either as a Python loop over time or in
    parallel by cumprod of the discretised A and cumsum of the rescaled inputs."""

    def __init__(self, d: int = 8, n: int = 4, parallel: bool = False):
        super().__init__()
        di, self.n, self.r, self.parallel = 2 * d, n, 2, parallel
        self.in_proj = nn.Linear(d, 2 * di, bias=False)
        self.conv = nn.Conv1d(di, di, 4, groups=di, padding=3)
        self.x_proj = nn.Linear(di, self.r + 2 * n, bias=False)
        self.dt_proj = nn.Linear(self.r, di)
        self.a_log = nn.Parameter(torch.log(torch.arange(1, n + 1).float().repeat(di, 1)))
        self.d = nn.Parameter(torch.ones(di))
        self.out_proj = nn.Linear(di, d, bias=False)

    def forward(self, x):  # (B, L, d)
        b, length, _ = x.shape
        xi, z = self.in_proj(x).chunk(2, -1)
        xi = F.silu(self.conv(xi.transpose(1, 2))[..., :length].transpose(1, 2))
        dt, bm, cm = self.x_proj(xi).split([self.r, self.n, self.n], -1)
        delta = F.softplus(self.dt_proj(dt))
        da = torch.exp(torch.einsum("bld,dn->bldn", delta, -torch.exp(self.a_log)))
        dbu = torch.einsum("bld,bln,bld->bldn", delta, bm, xi)
        if self.parallel:
            p = torch.cumprod(da, dim=1)
            hs = p * torch.cumsum(dbu / p, dim=1)
            y = torch.einsum("bldn,bln->bld", hs, cm)
        else:
            h, ys = x.new_zeros(b, xi.shape[-1], self.n), []
            for t in range(length):
                h = da[:, t] * h + dbu[:, t]
                ys.append(torch.einsum("bdn,bn->bd", h, cm[:, t]))
            y = torch.stack(ys, 1)
        return self.out_proj((y + xi * self.d) * F.silu(z))


class _MambaLM(nn.Module):
    def __init__(self, vocab: int = 16):
        super().__init__()
        self.emb = nn.Embedding(vocab, 8)
        self.blocks = nn.ModuleList([_MambaBlock(parallel=False), _MambaBlock(parallel=True)])
        self.norms = nn.ModuleList([nn.RMSNorm(8), nn.RMSNorm(8)])
        self.final = nn.RMSNorm(8)

    def forward(self, tokens):
        h = self.emb(tokens)
        for block, norm in zip(self.blocks, self.norms):
            h = h + block(norm(h))
        logits = self.final(h) @ self.emb.weight.t()
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        return {"loss": loss, "logits": logits}


def mamba_selective_scan():
    torch.manual_seed(0)
    return _MambaLM(), (torch.randint(0, 16, (2, 7)),)


class _PointerNet(nn.Module):
    """Pointer network (ordering points): LSTM encoder, LSTMCell decoder fed the embedding of the last chosen
    point, additive attention logits over the inputs (10 tanh clipping), chosen inputs masked by scatter into
    a bool mask and masked_fill -inf, teacher-forced NLL on the target order, the greedy order by argmax."""

    def __init__(self, d: int = 12):
        super().__init__()
        self.d = d
        self.embed = nn.Linear(2, d)
        self.enc = nn.LSTM(d, d, batch_first=True)
        self.cell = nn.LSTMCell(d, d)
        self.w1, self.w2 = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, 1, bias=False)
        self.start = nn.Parameter(torch.randn(1, d) * 0.1)

    def forward(self, pts, order):  # pts (B, N, 2), order (B, N)
        b, n, _ = pts.shape
        e = self.embed(pts)
        enc, (h, c) = self.enc(e)
        h, c = h[0], c[0]
        inp = self.start.expand(b, -1)
        visited = torch.zeros(b, n, dtype=torch.bool, device=pts.device)
        logps, greedy = [], []
        for t in range(n):
            h, c = self.cell(inp, (h, c))
            u = 10 * torch.tanh(self.v(torch.tanh(self.w1(enc) + self.w2(h).unsqueeze(1))).squeeze(-1))
            logp = F.log_softmax(u.masked_fill(visited, float("-inf")), -1)
            logps.append(logp)
            greedy.append(logp.argmax(-1))
            idx = order[:, t]
            visited = visited.scatter(1, idx.unsqueeze(1), True)
            inp = torch.gather(e, 1, idx.view(b, 1, 1).expand(-1, 1, self.d)).squeeze(1)
        logps = torch.stack(logps, 1)
        loss = F.nll_loss(logps.reshape(-1, n), order.reshape(-1))
        return {"loss": loss, "probs": logps.exp(), "greedy": torch.stack(greedy, 1)}


def pointer_net_mask():
    torch.manual_seed(0)
    order = torch.tensor([[2, 0, 4, 1, 3], [1, 3, 0, 2, 4], [4, 3, 2, 1, 0]])
    return _PointerNet(), (torch.rand(3, 5, 2), order)


# ---------------------------------------------------------------- audio, fft, complex


class _WaveNet(nn.Module):
    """WaveNet: mu-law companding (sign, log1p, abs) and quantisation of the waveform to 64 classes by
    truncation to long, one_hot inputs, a causal conv by left F.pad, dilated gated tanh*sigmoid units with
    residual and skip 1x1 convs, cross_entropy on the next sample, mu-law decoding of the argmax."""

    def __init__(self, q: int = 64, c: int = 12, dilations=(1, 2, 4, 8)):
        super().__init__()
        self.q, self.dilations = q, dilations
        self.causal = nn.Conv1d(q, c, 2)
        self.filt = nn.ModuleList([nn.Conv1d(c, c, 2, dilation=d) for d in dilations])
        self.gate = nn.ModuleList([nn.Conv1d(c, c, 2, dilation=d) for d in dilations])
        self.res = nn.ModuleList([nn.Conv1d(c, c, 1) for _ in dilations])
        self.skip = nn.ModuleList([nn.Conv1d(c, c, 1) for _ in dilations])
        self.post1, self.post2 = nn.Conv1d(c, c, 1), nn.Conv1d(c, q, 1)

    def forward(self, wav):  # (B, T) in (-1, 1)
        mu = self.q - 1
        y = torch.sign(wav) * torch.log1p(mu * wav.abs()) / math.log1p(mu)
        classes = ((y + 1) / 2 * mu + 0.5).long().clamp(0, mu)
        x = F.one_hot(classes[:, :-1], self.q).float().transpose(1, 2)
        h = self.causal(F.pad(x, (1, 0)))
        skip = torch.zeros_like(h)
        for d, filt, gate, res, sk in zip(self.dilations, self.filt, self.gate, self.res, self.skip):
            hp = F.pad(h, (d, 0))
            z = torch.tanh(filt(hp)) * torch.sigmoid(gate(hp))
            skip = skip + sk(z)
            h = h + res(z)
        logits = self.post2(F.relu(self.post1(F.relu(skip + h))))
        yhat = 2 * logits.argmax(1).float() / mu - 1
        decoded = torch.sign(yhat) * ((1 + mu) ** yhat.abs() - 1) / mu
        return {"loss": F.cross_entropy(logits, classes[:, 1:]), "logits": logits, "decoded": decoded}


def wavenet_mulaw():
    torch.manual_seed(0)
    return _WaveNet(), (torch.rand(2, 40) * 1.8 - 0.9,)


class _SpectralStats(nn.Module):
    """Spectral descriptors of a learned-FIR-filtered waveform: stft (periodic Hann, normalized) magnitude,
    rfftfreq centroid and bandwidth, roll-off bin by cumsum threshold and argmax, flatness, the real
    cepstrum by irfft of the log magnitude, a modulation spectrum by rfftn over (freq, time) with
    norm='forward', fftfreq-weighted energy; an MLP on the statistics."""

    def __init__(self, n_fft: int = 64):
        super().__init__()
        self.n_fft = n_fft
        self.fir = nn.Conv1d(1, 1, 9, padding=4)
        self.mlp = nn.Sequential(nn.Linear(4 + 8 + 12 + 1, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, wav):  # (B, T)
        x = self.fir(wav.unsqueeze(1)).squeeze(1)
        win = torch.hann_window(self.n_fft, periodic=True, device=wav.device)
        spec = torch.stft(x, self.n_fft, hop_length=16, window=win, normalized=True, return_complex=True)
        mag = spec.abs() + 1e-6  # (B, F, frames)
        freqs = torch.fft.rfftfreq(self.n_fft, d=1 / 8000, device=wav.device)[:, None]
        total = mag.sum(1)
        centroid = (mag * freqs).sum(1) / total
        bandwidth = ((mag * (freqs - centroid.unsqueeze(1)) ** 2).sum(1) / total).sqrt()
        cum = mag.cumsum(1)
        roll_bin = (cum >= 0.85 * cum[:, -1:]).float().argmax(1)
        flatness = torch.exp(torch.log(mag).mean(1)) / mag.mean(1)
        ceps = torch.fft.irfft(torch.log(mag), dim=1)[:, 1:9].mean(-1)
        mod = torch.fft.rfftn(torch.log(mag), dim=(1, 2), norm="forward").abs()[:, :3, :4].flatten(1)
        signed = torch.fft.fftfreq(x.shape[-1], device=wav.device)
        energy = (torch.fft.fft(x).abs() ** 2 * signed.abs()).mean(-1, keepdim=True)
        stats = torch.stack(
            [centroid.mean(1) / 4000, bandwidth.mean(1) / 4000, flatness.mean(1), roll_bin.float().mean(1) / 33], 1
        )
        out = self.mlp(torch.cat([stats, ceps, mod, energy], 1))
        return out, roll_bin


def spectral_stats():
    torch.manual_seed(0)
    return _SpectralStats(), (torch.randn(2, 256),)


class _Hilbert(nn.Module):
    """Envelope and instantaneous frequency by the Hilbert transform: fft of learned-filtered signals, a
    one-sided step made in forward by slice assignment, ifft to the analytic signal (complex), abs, angle,
    diff and remainder phase unwrapping, fftshift of the magnitude spectrum; a linear head."""

    def __init__(self, c: int = 2, n: int = 64):
        super().__init__()
        self.fir = nn.Conv1d(c, 4, 7, padding=3)
        self.head = nn.Linear(4 * 3 + 4 * 8, 2)

    def forward(self, x):  # (B, C, T)
        h = self.fir(x)
        n = h.shape[-1]
        spec = torch.fft.fft(h, dim=-1)
        step = torch.zeros(n, device=x.device)
        step[0] = 1.0
        step[1 : n // 2] = 2.0
        step[n // 2] = 1.0
        analytic = torch.fft.ifft(spec * step, dim=-1)
        env = analytic.abs()
        dphi = torch.diff(torch.angle(analytic), dim=-1)
        inst = torch.remainder(dphi + math.pi, 2 * math.pi) - math.pi
        centre = torch.fft.fftshift(spec.abs(), dim=-1)[..., n // 2 - 4 : n // 2 + 4]
        feats = torch.cat([env.mean(-1), env.std(-1), inst.mean(-1), centre.flatten(1) / n], 1)
        return self.head(feats), env


def hilbert_envelope():
    torch.manual_seed(0)
    return _Hilbert(), (torch.randn(2, 2, 64),)


# ---------------------------------------------------------------- losses


def _lovasz_grad(gt_sorted):
    gts = gt_sorted.sum()
    inter = gts - gt_sorted.cumsum(0)
    union = gts + (1 - gt_sorted).cumsum(0)
    jac = 1.0 - inter / union
    return torch.cat([jac[:1], jac[1:] - jac[:-1]])


class _LovaszSeg(nn.Module):
    """Binary segmentation trained with the Lovasz hinge (per image: signs, errors, sort descending, labels
    permuted by the sort, Jaccard gradient by cumsum, dot with relu of the sorted errors) plus BCE-with-logits."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(8, 8, 3, padding=2, dilation=2),
            nn.ReLU(),
            nn.Conv2d(8, 1, 1),
        )

    def forward(self, img, labels):  # labels float 0/1 (B, H, W)
        logits = self.net(img).squeeze(1)
        losses = []
        for lg, lb in zip(logits, labels):
            lg, lb = lg.reshape(-1), lb.reshape(-1)
            errors = 1.0 - lg * (2.0 * lb - 1.0)
            errors_sorted, perm = torch.sort(errors, descending=True)
            losses.append(torch.dot(F.relu(errors_sorted), _lovasz_grad(lb[perm])))
        loss = torch.stack(losses).mean() + 0.5 * F.binary_cross_entropy_with_logits(logits, labels)
        return {"loss": loss, "logits": logits}


def lovasz_hinge():
    torch.manual_seed(0)
    return _LovaszSeg(), (torch.randn(2, 3, 6, 7), torch.randint(0, 2, (2, 6, 7)).float())


class _CLIP(nn.Module):
    """CLIP and SigLIP heads: a conv image tower, a text tower pooled at the end-of-text token (argmax of the
    token ids, advanced indexing), normalize, learnable logit scale exp().clamp(max=100), symmetric cross
    entropy over arange labels, the sigmoid loss with a 2*eye-1 target and a learnable bias, accuracy."""

    def __init__(self, vocab: int = 30, d: int = 16):
        super().__init__()
        self.img = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.GELU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, d)
        )
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(6, d) * 0.1)
        self.txt = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d))
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))
        self.sig_t = nn.Parameter(torch.tensor(math.log(10.0)))
        self.sig_b = nn.Parameter(torch.tensor(-10.0))

    def forward(self, images, tokens):
        b = images.shape[0]
        im = F.normalize(self.img(images), dim=-1)
        t = self.txt(self.tok(tokens) + self.pos)
        tx = F.normalize(t[torch.arange(b, device=tokens.device), tokens.argmax(-1)], dim=-1)
        logits = self.logit_scale.exp().clamp(max=100) * im @ tx.t()
        labels = torch.arange(b, device=images.device)
        clip = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2
        target = 2 * torch.eye(b, device=images.device) - 1
        sig = -F.logsigmoid(target * (im @ tx.t() * self.sig_t.exp() + self.sig_b)).sum() / b
        acc = (logits.argmax(1) == labels).float().mean()
        return {"loss": clip + sig, "logits": logits, "acc": acc}


def clip_contrastive():
    torch.manual_seed(0)
    tokens = torch.tensor([[3, 7, 29, 0, 0, 0], [5, 2, 9, 11, 29, 0], [4, 29, 0, 0, 0, 0], [8, 8, 6, 1, 12, 29]])
    return _CLIP(), (torch.randn(4, 3, 8, 8), tokens)


class _Sinkhorn(nn.Module):
    """Optimal-transport matching loss between two point sets: a shared MLP encoder, squared-distance cost by
    broadcasting, 20 log-domain Sinkhorn iterations (logsumexp over each axis), the transport plan by exp,
    the OT cost sum(P * C) and the plan's row argmax as a matching."""

    def __init__(self, eps: float = 0.1, iters: int = 20):
        super().__init__()
        self.eps, self.iters = eps, iters
        self.enc = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 4))

    def forward(self, x, y):  # (B, N, 2), (B, M, 2)
        fx, fy = self.enc(x), self.enc(y)
        cost = ((fx.unsqueeze(2) - fy.unsqueeze(1)) ** 2).sum(-1)
        b, n, m = cost.shape
        log_mu, log_nu = -math.log(n), -math.log(m)
        f, g = cost.new_zeros(b, n), cost.new_zeros(b, m)
        for _ in range(self.iters):
            f = self.eps * (log_mu - torch.logsumexp((g.unsqueeze(1) - cost) / self.eps, dim=2))
            g = self.eps * (log_nu - torch.logsumexp((f.unsqueeze(2) - cost) / self.eps, dim=1))
        plan = torch.exp((f.unsqueeze(2) + g.unsqueeze(1) - cost) / self.eps)
        return {"loss": (plan * cost).sum((1, 2)).mean(), "plan": plan, "match": plan.argmax(2)}


def sinkhorn_ot():
    torch.manual_seed(0)
    return _Sinkhorn(), (torch.randn(2, 5, 2), torch.randn(2, 6, 2))


def _soft_dtw(dist, gamma: float):
    """Soft-DTW by its dynamic programme: a grid of per-batch tensors, softmin by -gamma * logsumexp."""
    b, n, m = dist.shape
    big = dist.new_full((b,), 1e6)
    r = [[big] * (m + 1) for _ in range(n + 1)]
    r[0][0] = dist.new_zeros(b)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            prev = torch.stack([r[i - 1][j - 1], r[i - 1][j], r[i][j - 1]], -1)
            r[i][j] = dist[:, i - 1, j - 1] - gamma * torch.logsumexp(-prev / gamma, -1)
    return r[n][m]


class _SoftDTW(nn.Module):
    """Sequence alignment loss: Conv1d encoders, pairwise squared distances, the soft-DTW divergence
    sdtw(x, y) - (sdtw(x, x) + sdtw(y, y)) / 2 by nested Python loops."""

    def __init__(self, gamma: float = 0.1):
        super().__init__()
        self.gamma = gamma
        self.enc = nn.Sequential(nn.Conv1d(2, 6, 3, padding=1), nn.Tanh(), nn.Conv1d(6, 3, 1))

    def forward(self, x, y):  # (B, 2, N), (B, 2, M)
        a, c = self.enc(x).transpose(1, 2), self.enc(y).transpose(1, 2)

        def dist(p, q):
            return ((p.unsqueeze(2) - q.unsqueeze(1)) ** 2).sum(-1)

        div = _soft_dtw(dist(a, c), self.gamma) - 0.5 * (
            _soft_dtw(dist(a, a), self.gamma) + _soft_dtw(dist(c, c), self.gamma)
        )
        return {"loss": div.mean(), "divergence": div}


def soft_dtw():
    torch.manual_seed(0)
    return _SoftDTW(), (torch.randn(2, 2, 5), torch.randn(2, 2, 6))


# ---------------------------------------------------------------- embedding, sparse


class _QRHashBags(nn.Module):
    """Hashed categorical features by the quotient-remainder trick: a multiplicative hash on int64 ids
    (multiply, bitwise and / xor / right shift), floor division and remainder into two tables, a sum
    EmbeddingBag with learned per_sample_weights (sigmoid of a per-field weight) times a max EmbeddingBag on
    int32 ids and offsets; an MLP and BCE-with-logits."""

    def __init__(self, m: int = 16, nq: int = 8, fields: int = 3, d: int = 8):
        super().__init__()
        self.m, self.nq = m, nq
        self.bag_q = nn.EmbeddingBag(nq, d, mode="sum")
        self.bag_r = nn.EmbeddingBag(m, d, mode="max")
        self.field_w = nn.Parameter(torch.randn(fields))
        self.mlp = nn.Sequential(nn.Linear(d, 8), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, ids, fields, offsets, labels):
        h = (ids * 2654435761) & 0xFFFFFFFF
        h = torch.bitwise_xor(h, h >> 16)
        q = torch.div(h, self.m, rounding_mode="floor") % self.nq
        r = (h % self.m).to(torch.int32)
        psw = torch.sigmoid(self.field_w[fields])
        e = self.bag_q(q, offsets, per_sample_weights=psw) * self.bag_r(r, offsets.to(torch.int32))
        logit = self.mlp(e).squeeze(-1)
        return {"loss": F.binary_cross_entropy_with_logits(logit, labels), "logit": logit, "bucket": q}


def qr_hash_embedding():
    torch.manual_seed(0)
    ids = torch.randint(0, 10**6, (11,))
    fields = torch.tensor([0, 1, 2, 0, 1, 0, 1, 2, 2, 0, 1])
    offsets = torch.tensor([0, 3, 4, 8])
    return _QRHashBags(), (ids, fields, offsets, torch.tensor([1.0, 0.0, 1.0, 0.0]))


class _SparseGAT(nn.Module):
    """Graph attention on a sparse COO adjacency built in forward from an edge list with learned edge scores
    (leaky_relu of gathered source/target terms), torch.sparse.softmax over rows, torch.sparse.mm; a second
    layer by a CSR adjacency (to_sparse_csr) with row degrees from torch.sparse.sum."""

    def __init__(self, fin: int = 5, d: int = 8, classes: int = 3):
        super().__init__()
        self.lin = nn.Linear(fin, d, bias=False)
        self.att_src, self.att_dst = nn.Parameter(torch.randn(d) * 0.3), nn.Parameter(torch.randn(d) * 0.3)
        self.lin2 = nn.Linear(d, classes)

    def forward(self, x, edges, labels):  # edges (2, E): source, target
        n = x.shape[0]
        h = self.lin(x)
        score = F.leaky_relu((h * self.att_src).sum(-1)[edges[0]] + (h * self.att_dst).sum(-1)[edges[1]], 0.2)
        adj = torch.sparse_coo_tensor(edges.flip(0), score, (n, n))
        attn = torch.sparse.softmax(adj, dim=1)
        h = F.elu(torch.sparse.mm(attn, h))
        ones = torch.sparse_coo_tensor(edges.flip(0), torch.ones(edges.shape[1], device=x.device), (n, n)).coalesce()
        deg = torch.sparse.sum(ones, dim=1).to_dense()
        h2 = (ones.to_sparse_csr() @ self.lin2(h)) / deg.unsqueeze(1)
        return {"loss": F.cross_entropy(h2, labels), "logits": h2}


def sparse_gat_softmax():
    torch.manual_seed(0)
    src = torch.tensor([0, 1, 2, 3, 4, 5, 0, 1, 1, 2, 3, 4, 5, 0])
    dst = torch.tensor([0, 1, 2, 3, 4, 5, 1, 0, 2, 3, 4, 5, 0, 3])
    return _SparseGAT(), (torch.randn(6, 5), torch.stack([src, dst]), torch.tensor([0, 1, 2, 0, 1, 2]))


# ---------------------------------------------------------------- integer and bool


class _VoxelPool(nn.Module):
    """Point-cloud voxel pooling: int32 voxel coordinates (floor, to int32, clamp), a key by int32 shifts and
    bitwise or, scatter_reduce amax / amin / mean (include_self=False) into a voxel grid, index_reduce prod,
    int32 occupancy counts by index_add, bucketize out_int32 height bins, searchsorted with a sorter."""

    def __init__(self, fin: int = 2, d: int = 6, grid: int = 4):
        super().__init__()
        self.grid, self.voxels = grid, 1 << 12
        self.mlp = nn.Sequential(nn.Linear(3 + fin, d), nn.ReLU(), nn.Linear(d, d))
        self.register_buffer("levels", torch.tensor([0.7, 0.2, 0.5, 0.9]))
        self.height = nn.Embedding(5, d)
        self.head = nn.Linear(3 * d, 2)

    def forward(self, pts, feats):  # pts (N, 3) in [0, 1)
        f = self.mlp(torch.cat([pts, feats], 1))
        vox = torch.floor(pts * self.grid).to(torch.int32).clamp(0, self.grid - 1)
        key = (vox[:, 0] << 8) | (vox[:, 1] << 4) | vox[:, 2]
        lin = key.long()
        idx = lin.unsqueeze(1).expand(-1, f.shape[1])
        empty = f.new_zeros(self.voxels, f.shape[1])
        vmax = empty.scatter_reduce(0, idx, f, "amax", include_self=False)
        vmin = empty.scatter_reduce(0, idx, f, "amin", include_self=False)
        vmean = empty.scatter_reduce(0, idx, f, "mean", include_self=False)
        vprod = f.new_ones(self.voxels, f.shape[1]).index_reduce(0, lin, torch.sigmoid(f), "prod")
        counts = torch.zeros(self.voxels, dtype=torch.int32, device=pts.device).index_add(0, lin, torch.ones_like(key))
        bins = torch.bucketize(
            pts[:, 2].contiguous(), torch.tensor([0.25, 0.5, 0.75], device=pts.device), out_int32=True
        )
        level = torch.searchsorted(self.levels, pts[:, 1].contiguous(), sorter=torch.argsort(self.levels))
        per_point = torch.cat(
            [vmax[lin] - vmin[lin], vmean[lin] * vprod[lin], self.height(bins.long() + (level > 2).long())], 1
        )
        return self.head(per_point).mean(0), counts, level


def voxel_scatter_pool():
    torch.manual_seed(0)
    return _VoxelPool(), (torch.rand(24, 3), torch.randn(24, 2))


class _SignSTE(torch.autograd.Function):
    """sign() forward, a clipped straight-through gradient (|x| <= 1) backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sign(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x.abs() <= 1).to(grad.dtype)


class _XNORNet(nn.Module):
    """Binary (XNOR) layer: weights and activations binarised by a straight-through sign Function, scaled by
    the mean |w|; the same products again on packed bits (int32 words of 16 bits by left shifts and an int32
    sum, uint8 bytes, xor, bitwise not, mask, popcount by right shifts and and), checked equal to the float
    product as a bool output."""

    def __init__(self, d: int = 32, out: int = 5):
        super().__init__()
        self.fc0 = nn.Linear(10, d)
        self.bn = nn.BatchNorm1d(d)
        self.w = nn.Parameter(torch.randn(out, d) * 0.5)
        self.scale = nn.Parameter(torch.ones(out))

    @staticmethod
    def _pack16(bits):  # (R, 32) int32 0/1 -> (R, 2) int32
        shifts = torch.arange(16, dtype=torch.int32, device=bits.device)
        return (bits.view(bits.shape[0], 2, 16) << shifts).sum(-1, dtype=torch.int32)

    def forward(self, x, labels):
        xb = _SignSTE.apply(self.bn(self.fc0(x)))
        wb = _SignSTE.apply(self.w)
        alpha = self.w.abs().mean(1)
        dot = xb @ wb.t()
        logits = dot * alpha * self.scale
        px = self._pack16((xb.detach() > 0).to(torch.int32))
        pw = self._pack16((wb.detach() > 0).to(torch.int32))
        same = ~(px.unsqueeze(1) ^ pw.unsqueeze(0)) & 0xFFFF  # (B, O, 2)
        pop = torch.zeros_like(same)
        for i in range(16):
            pop = pop + ((same >> i) & 1)
        bitdot = 2 * pop.sum(-1, dtype=torch.int32) - xb.shape[1]
        bytes_ = (
            (xb.detach() > 0).to(torch.uint8).view(-1, 4, 8) << torch.arange(8, dtype=torch.uint8, device=x.device)
        ).sum(-1, dtype=torch.uint8)
        agree = (bitdot.to(dot.dtype) == dot.detach()).all()
        return {
            "loss": F.cross_entropy(logits, labels),
            "logits": logits,
            "bitdot": bitdot,
            "bytes": bytes_,
            "agree": agree,
        }


def xnor_bitpack():
    torch.manual_seed(0)
    return _XNORNet(), (torch.randn(6, 10), torch.tensor([0, 1, 2, 3, 4, 0]))


# ---------------------------------------------------------------- linalg, special functions, einsum


class _GP(nn.Module):
    """Exact Gaussian-process regression in float64 on learned features: RBF kernel (softplus lengthscale,
    outputscale and noise), linalg.cholesky, cholesky_solve for the weights, logdet from the Cholesky
    diagonal, predictive mean and variance by linalg.solve_triangular; the negative marginal likelihood."""

    def __init__(self):
        super().__init__()
        self.feat = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 3)).double()
        self.raw = nn.Parameter(torch.tensor([0.5, 0.0, -2.0], dtype=torch.float64))

    def forward(self, x, y, xs):
        ls, os_, noise = F.softplus(self.raw).unbind(0)
        f, fs = self.feat(x), self.feat(xs)

        def rbf(a, b):
            return os_ * torch.exp(-0.5 * ((a.unsqueeze(1) - b.unsqueeze(0)) ** 2).sum(-1) / ls**2)

        n = x.shape[0]
        k = rbf(f, f) + (noise + 1e-6) * torch.eye(n, dtype=x.dtype, device=x.device)
        chol = torch.linalg.cholesky(k)
        alpha = torch.cholesky_solve(y.unsqueeze(-1), chol)
        nll = 0.5 * (y @ alpha.squeeze(-1)) + torch.log(torch.diagonal(chol)).sum() + 0.5 * n * math.log(2 * math.pi)
        ks = rbf(fs, f)
        v = torch.linalg.solve_triangular(chol, ks.t(), upper=False)
        return {"loss": nll / n, "mean": (ks @ alpha).squeeze(-1), "var": os_ - (v * v).sum(0)}


def gp_cholesky_f64():
    torch.manual_seed(0)
    x = torch.randn(12, 2, dtype=torch.float64)
    return _GP(), (x, torch.randn(12, dtype=torch.float64), torch.randn(5, 2, dtype=torch.float64))


class _SpecialLik(nn.Module):
    """A multi-head likelihood model written with special functions: negative binomial (lgamma, xlogy,
    xlog1py), Student-t (lgamma, log1p), Beta (lgamma, betaln by hand), von Mises (log i0e), a Gamma entropy
    (digamma), a trigamma Fisher term (polygamma(1)), a Gaussian copula (erfinv, ndtri, log_ndtr) and
    multigammaln."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 16), nn.Tanh())
        self.head = nn.Linear(16, 8)

    def forward(self, x, counts, yt, yb, angle, u):
        p = self.head(self.body(x))
        r, logit_p = F.softplus(p[:, 0]) + 0.1, p[:, 1]
        prob = torch.sigmoid(logit_p)
        nb = (
            torch.lgamma(counts + r)
            - torch.lgamma(r)
            - torch.lgamma(counts + 1)
            + torch.xlogy(counts, prob)
            + torch.special.xlog1py(r, -prob)
        )
        nu, loc, scale = F.softplus(p[:, 2]) + 2.0, p[:, 3], F.softplus(p[:, 4]) + 0.1
        z = (yt - loc) / scale
        st = (
            torch.lgamma((nu + 1) / 2)
            - torch.lgamma(nu / 2)
            - 0.5 * torch.log(nu * math.pi)
            - torch.log(scale)
            - (nu + 1) / 2 * torch.log1p(z**2 / nu)
        )
        a, b = F.softplus(p[:, 5]) + 0.5, F.softplus(p[:, 6]) + 0.5
        beta = (
            (a - 1) * torch.log(yb)
            + (b - 1) * torch.log1p(-yb)
            - (torch.lgamma(a) + torch.lgamma(b) - torch.lgamma(a + b))
        )
        kappa = F.softplus(p[:, 7]) + 0.1
        vm = kappa * torch.cos(angle - loc) - math.log(2 * math.pi) - (torch.log(torch.special.i0e(kappa)) + kappa)
        ent = a - torch.log(b) + torch.lgamma(a) + (1 - a) * torch.digamma(a)
        fisher = torch.polygamma(1, a).mean()
        g = torch.erfinv(2 * u - 1) * math.sqrt(2)
        copula = (g * torch.special.ndtri(u)).mean() + torch.special.log_ndtr(loc).mean()
        mvg = torch.special.multigammaln(a + 2.0, 3).mean()
        loss = -(nb + st + beta + vm).mean() - 0.01 * ent.mean() + 0.01 * (fisher + copula + mvg)
        return {"loss": loss, "params": p, "i0": torch.i0(kappa)}


def special_dist_nll():
    torch.manual_seed(0)
    return _SpecialLik(), (
        torch.randn(6, 4),
        torch.tensor([0.0, 3.0, 1.0, 7.0, 2.0, 0.0]),
        torch.randn(6),
        torch.rand(6) * 0.8 + 0.1,
        torch.rand(6) * 6.0 - 3.0,
        torch.rand(6) * 0.9 + 0.05,
    )


class _InvConvLU(nn.Module):
    """Glow's invertible 1x1 conv, LU-parametrised: W = P (L + I) (U + diag(sign * exp(log_s))) with masks
    made in forward (tril / triu), log|det| = H W sum(log_s); the inverse by solve_triangular."""

    def __init__(self, c: int):
        super().__init__()
        self.register_buffer("perm", torch.eye(c)[torch.randperm(c)])
        self.register_buffer("sign", torch.tensor([1.0, -1.0] * (c // 2)))
        self.lower = nn.Parameter(torch.randn(c, c) * 0.1)
        self.upper = nn.Parameter(torch.randn(c, c) * 0.1)
        self.log_s = nn.Parameter(torch.randn(c) * 0.1)

    def parts(self):
        eye = torch.eye(self.lower.shape[0], device=self.lower.device)
        low = torch.tril(self.lower, -1) + eye
        up = torch.triu(self.upper, 1) + torch.diag(self.sign * torch.exp(self.log_s))
        return low, up

    def forward(self, x):
        low, up = self.parts()
        w = self.perm @ low @ up
        return F.conv2d(x, w.view(*w.shape, 1, 1)), x.shape[2] * x.shape[3] * self.log_s.sum()

    def inverse(self, z):
        low, up = self.parts()
        b, c, h, w = z.shape
        flat = z.permute(1, 0, 2, 3).reshape(c, -1)
        y = torch.linalg.solve_triangular(low, self.perm.t() @ flat, upper=False, unitriangular=True)
        x = torch.linalg.solve_triangular(up, y, upper=True)
        return x.reshape(c, b, h, w).permute(1, 0, 2, 3)


class _Glow(nn.Module):
    """One Glow step on a squeezed image: space-to-depth by view/permute, ActNorm (log-scale), the LU 1x1
    conv, an affine coupling (sigmoid scale, conv net with zero-ish last layer), the standard-normal prior,
    bits per dim; the reconstruction error of the inverse pass out too."""

    def __init__(self, c: int = 4):
        super().__init__()
        self.loc, self.logs = nn.Parameter(torch.randn(1, c, 1, 1) * 0.1), nn.Parameter(torch.randn(1, c, 1, 1) * 0.1)
        self.inv = _InvConvLU(c)
        self.nn = nn.Sequential(nn.Conv2d(c // 2, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, c, 3, padding=1))

    def forward(self, img):  # (B, 1, H, W)
        b, ch, h, w = img.shape
        x = img.view(b, ch, h // 2, 2, w // 2, 2).permute(0, 1, 3, 5, 2, 4).reshape(b, 4 * ch, h // 2, w // 2)
        hw = x.shape[2] * x.shape[3]
        y = (x + self.loc) * torch.exp(self.logs)
        logdet = hw * self.logs.sum()
        z, ld = self.inv(y)
        za, zb = z.chunk(2, 1)
        st = self.nn(za)
        scale = torch.sigmoid(st[:, 0::2] + 2.0)
        zb = (zb + st[:, 1::2]) * scale
        logdet = logdet + ld + torch.log(scale).flatten(1).sum(1)
        out = torch.cat([za, zb], 1)
        prior = (-0.5 * (out**2 + math.log(2 * math.pi))).flatten(1).sum(1)
        bpd = -(prior + logdet) / (math.log(2.0) * out[0].numel())
        back = self.inv.inverse(torch.cat([za, zb / scale - st[:, 1::2]], 1))
        recon = ((back * torch.exp(-self.logs) - self.loc) - x).abs().max()
        return {"loss": bpd.mean(), "z": out, "recon": recon}


def glow_lu_flow():
    torch.manual_seed(0)
    return _Glow(), (torch.randn(2, 1, 6, 8),)


class _TTNet(nn.Module):
    """A tensor-train linear layer (32 -> 24 through three cores contracted by einsum chains), a Tucker
    bilinear fusion by tensordot, einsum in sublist form, diagonal and batched-trace einsums, linalg.multi_dot."""

    def __init__(self, rank: int = 3):
        super().__init__()
        self.g1 = nn.Parameter(torch.randn(4, 2, rank) * 0.3)
        self.g2 = nn.Parameter(torch.randn(rank, 4, 3, rank) * 0.3)
        self.g3 = nn.Parameter(torch.randn(rank, 2, 4) * 0.3)
        self.core = nn.Parameter(torch.randn(5, 6, 7) * 0.2)
        self.pa, self.pb = nn.Linear(24, 5), nn.Linear(6, 6)
        self.m1, self.m2, self.m3 = (
            nn.Parameter(torch.randn(7, 9) * 0.3),
            nn.Parameter(torch.randn(9, 4) * 0.3),
            nn.Parameter(torch.randn(4, 3) * 0.3),
        )
        self.sq = nn.Parameter(torch.randn(6, 6))

    def forward(self, x, q):  # x (B, 32), q (B, 6)
        b = x.shape[0]
        t = x.view(b, 4, 4, 2)
        t = torch.einsum("bijk,ipr->bjkpr", t, self.g1)
        t = torch.einsum("bjkpr,rjqs->bkpqs", t, self.g2)
        y = torch.einsum("bkpqs,sku->bpqu", t, self.g3).reshape(b, 24)
        fused = torch.tensordot(self.pa(y), self.core, dims=([1], [0]))  # (B, 6, 7)
        fused = torch.einsum(fused, [0, 1, 2], self.pb(q), [0, 1], [0, 2])  # (B, 7)
        out = fused @ torch.linalg.multi_dot([self.m1, self.m2, self.m3])
        diag = torch.einsum("ii->i", self.sq)
        gram = torch.einsum("bi,bj->bij", q, q) + self.sq
        trace = torch.einsum("bii->b", gram)
        return out + diag[:3] + trace.unsqueeze(1) * 0.01, y


def tt_linear_einsum():
    torch.manual_seed(0)
    return _TTNet(), (torch.randn(3, 32), torch.randn(3, 6))


# ---------------------------------------------------------------- autograd


class _SoftClip(torch.autograd.Function):
    """A new-style Function (forward without ctx, setup_context) with a non-tensor argument."""

    @staticmethod
    def forward(x, limit):
        return limit * torch.tanh(x / limit)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.limit = inputs[1]
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * (1 - (out / ctx.limit) ** 2), None


class _InplaceLeaky(torch.autograd.Function):
    """An in-place Function (mark_dirty) saving a bool mask."""

    @staticmethod
    def forward(ctx, x, slope):
        pos = x > 0
        x.mul_(torch.where(pos, 1.0, slope))
        ctx.mark_dirty(x)
        ctx.save_for_backward(pos)
        ctx.slope = slope
        return x

    @staticmethod
    def backward(ctx, grad):
        (pos,) = ctx.saved_tensors
        return grad * torch.where(pos, 1.0, ctx.slope), None


class _TwoOut(torch.autograd.Function):
    """Two outputs, the second unused by the loss: set_materialize_grads(False) passes None for it."""

    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x)
        return x * x, x.abs()

    @staticmethod
    def backward(ctx, g_sq, g_abs):
        (x,) = ctx.saved_tensors
        out = torch.zeros_like(x) if g_sq is None else 2 * x * g_sq
        return out if g_abs is None else out + torch.sign(x) * g_abs


class _Ckpt(nn.Module):
    """Gradient checkpointing (utils.checkpoint use_reentrant=False, checkpoint_sequential) around blocks that
    call custom Functions: a setup_context soft clip, an in-place leaky ReLU with mark_dirty, a two-output
    Function with set_materialize_grads(False)."""

    def __init__(self, d: int = 12):
        super().__init__()
        self.inp = nn.Linear(6, d)
        self.block = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d))
        self.seq = nn.Sequential(nn.Linear(d, d), nn.Tanh(), nn.Linear(d, d), nn.SiLU(), nn.Linear(d, d))
        self.out = nn.Linear(d, 3)

    def _fn(self, h):
        y = _InplaceLeaky.apply(self.block(h), 0.1)
        return _SoftClip.apply(y, 2.0)

    def forward(self, x):
        h = self.inp(x)
        h = h + ckpt.checkpoint(self._fn, h, use_reentrant=False)
        h = ckpt.checkpoint_sequential(self.seq, 2, h, use_reentrant=False)
        sq, mag = _TwoOut.apply(h)
        return self.out(sq), mag.detach().sum(-1)


def checkpoint_custom_fn():
    torch.manual_seed(0)
    return _Ckpt(), (torch.randn(4, 6),)


# ---------------------------------------------------------------- generative


class _Critic(nn.Module):
    def __init__(self):
        super().__init__()
        sn = nn.utils.spectral_norm
        self.net = nn.Sequential(
            sn(nn.Conv2d(1, 8, 3, stride=2, padding=1)),
            nn.LeakyReLU(0.2),
            sn(nn.Conv2d(8, 16, 3, stride=2, padding=1)),
            nn.LeakyReLU(0.2),
            nn.Flatten(),
        )
        self.fc = nn.utils.weight_norm(nn.Linear(16 * 2 * 2, 1))

    def forward(self, x):
        return self.fc(self.net(x)).squeeze(-1)


class _WGANGP(nn.Module):
    """A GAN step: a Linear + ConvTranspose2d generator, a critic with hook-style spectral_norm convs (power
    iteration buffers updated in training) and a weight_norm head, hinge critic loss, a gradient penalty on
    interpolates (autograd.grad with create_graph, a gradient of a gradient) when training, generator loss."""

    def __init__(self, zdim: int = 6):
        super().__init__()
        self.gen_fc = nn.Linear(zdim, 8 * 4 * 4)
        self.gen = nn.Sequential(nn.ReLU(), nn.ConvTranspose2d(8, 1, 4, stride=2, padding=1), nn.Tanh())
        self.critic = _Critic()

    def forward(self, z, real, eps):
        fake = self.gen(self.gen_fc(z).view(-1, 8, 4, 4))
        loss_d = F.relu(1 - self.critic(real)).mean() + F.relu(1 + self.critic(fake.detach())).mean()
        if self.training and torch.is_grad_enabled():
            inter = (eps * real + (1 - eps) * fake.detach()).requires_grad_(True)
            (g,) = torch.autograd.grad(self.critic(inter).sum(), inter, create_graph=True)
            loss_d = loss_d + 10 * ((g.flatten(1).norm(2, dim=1) - 1) ** 2).mean()
        loss_g = -self.critic(fake).mean()
        return {"loss": loss_d + loss_g, "fake": fake}


def wgan_gp_spectral():
    torch.manual_seed(0)
    return _WGANGP(), (torch.randn(3, 6), torch.randn(3, 1, 8, 8), torch.rand(3, 1, 1, 1))


MODELS = {
    "deform_conv_gather": (
        "vision",
        "modulated deformable conv by hand: conv-predicted offsets and sigmoid masks, floor/long/clamp, validity masks, gather on the flattened image, bilinear weights, matmul",
    ),
    "convnext_v2_grn": (
        "vision",
        "ConvNeXt V2: 4/4 patchify stem, channels-first LayerNorm by hand (rsqrt), depthwise 7x7, permute to channels-last, GELU, global response norm (norm over H, W), layer scale, 2/2 downsample",
    ),
    "swin_shifted_window": (
        "attention",
        "Swin: window partition by view/permute, relative-position bias table indexed in forward, shifted windows by torch.roll, mask by slice assignment and masked_fill -100, patch merging by strided slices",
    ),
    "video_tsm_blurpool": (
        "vision",
        "video net: temporal shift by slice assignment into zeros_like, MaxPool2d stride 1 + binomial depthwise conv stride 2 on reflect pad (BlurPool), AvgPool3d ceil_mode over 5 frames, trilinear align_corners to a size",
    ),
    "s4d_fft_kernel": (
        "sequence",
        "S4D: complex diagonal state matrix (1j * param), Vandermonde kernel by complex exp and einsum, .real, FFT convolution rfft n=2L / irfft / truncate, D skip, GELU, GLU",
    ),
    "mamba_selective_scan": (
        "sequence",
        "Mamba LM: causal depthwise Conv1d, softplus delta, einsum discretisation, selective scan as a Python loop and in parallel by cumprod/cumsum, RMSNorm, tied embedding head",
    ),
    "pointer_net_mask": (
        "rnn",
        "pointer network: LSTM encoder, LSTMCell decoder, additive attention over inputs, bool visited mask by scatter, masked_fill -inf, log_softmax, NLL on the order, argmax greedy order",
    ),
    "wavenet_mulaw": (
        "audio/fft",
        "WaveNet: mu-law companding (sign, log1p), truncation to long classes, one_hot, left-padded causal and dilated gated convs, skip sums, cross_entropy, mu-law decoding by pow(scalar, tensor)",
    ),
    "spectral_stats": (
        "audio/fft",
        "spectral descriptors: stft periodic Hann normalized, rfftfreq centroid/bandwidth, cumsum roll-off argmax, flatness, cepstrum by irfft, rfftn norm=forward modulation spectrum, fftfreq",
    ),
    "hilbert_envelope": (
        "complex",
        "Hilbert transform: fft, one-sided step by slice assignment, ifft to a complex analytic signal, abs envelope, angle, diff, remainder unwrapping, fftshift",
    ),
    "lovasz_hinge": (
        "loss",
        "Lovasz hinge segmentation loss: per-image sort descending, labels permuted by the sort indices, Jaccard gradient by cumsum, dot, plus BCE-with-logits",
    ),
    "clip_contrastive": (
        "loss",
        "CLIP + SigLIP: text pooled at argmax token by advanced indexing, normalize, logit_scale.exp().clamp(max), symmetric cross_entropy, logsigmoid with 2*eye-1, accuracy",
    ),
    "sinkhorn_ot": (
        "loss",
        "optimal transport: squared-distance cost, 20 log-domain Sinkhorn iterations of logsumexp, transport plan by exp, OT cost, argmax matching",
    ),
    "soft_dtw": (
        "loss",
        "soft-DTW divergence: Conv1d encoders, pairwise squared distances, the DP over a Python grid with stack and -gamma*logsumexp softmin, three alignments",
    ),
    "qr_hash_embedding": (
        "embedding",
        "hashed features: int64 multiplicative hash (and, xor, right shift), floor div / remainder (quotient-remainder trick), EmbeddingBag sum with learned per_sample_weights times EmbeddingBag max on int32 ids/offsets",
    ),
    "sparse_gat_softmax": (
        "sparse",
        "GAT on a sparse COO adjacency with learned values made in forward, torch.sparse.softmax, torch.sparse.mm, coalesce, torch.sparse.sum degrees, CSR matmul (to_sparse_csr)",
    ),
    "voxel_scatter_pool": (
        "integer",
        "voxel pooling: int32 voxel coords, int32 shift/or keys, scatter_reduce amax/amin/mean include_self=False, index_reduce prod, int32 index_add counts, bucketize out_int32, searchsorted sorter",
    ),
    "xnor_bitpack": (
        "integer",
        "XNOR net: sign straight-through Function, int32 bit packing by shifts and an int32 sum, uint8 bytes, xor, bitwise not, popcount by shifts, bool all() agreement output",
    ),
    "gp_cholesky_f64": (
        "linalg",
        "float64 Gaussian process: RBF kernel, linalg.cholesky, cholesky_solve, log of the Cholesky diagonal, linalg.solve_triangular predictive variance, marginal NLL",
    ),
    "special_dist_nll": (
        "special",
        "likelihoods by special functions: lgamma, xlogy, xlog1py, log1p, i0e, i0, digamma, polygamma(1), erfinv, ndtri, log_ndtr, multigammaln",
    ),
    "glow_lu_flow": (
        "linalg",
        "Glow step: squeeze by view/permute, ActNorm, LU-parametrised 1x1 conv (tril/triu/diag/exp, permutation buffer), affine coupling, bits per dim, inverse by solve_triangular unitriangular",
    ),
    "tt_linear_einsum": (
        "math",
        "tensor-train linear by chained einsums, tensordot Tucker fusion, sublist einsum, 'ii->i' and 'bii->b' einsums, linalg.multi_dot",
    ),
    "checkpoint_custom_fn": (
        "autograd",
        "utils.checkpoint (non-reentrant) and checkpoint_sequential around custom Functions: setup_context style, in-place mark_dirty, two outputs with set_materialize_grads(False)",
    ),
    "wgan_gp_spectral": (
        "generative",
        "GAN step: ConvTranspose2d generator, hook-style spectral_norm convs and weight_norm head, hinge loss, gradient penalty by autograd.grad create_graph (double backward)",
    ),
}

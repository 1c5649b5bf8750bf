"""The EIGHTH set of plain ``torch.nn`` user models: written after the tuning set (``nn_models.py``), the
held-out set (``nn_heldout.py``), the fresh set (``nn_fresh.py``), the unseen set (``nn_unseen.py``) and the
fifth, sixth and seventh sets (``nn_fifth.py``, ``nn_sixth.py``, ``nn_seventh.py``), and written without
reading how opcov judges models. It holds small models of kinds users write that none of the earlier sets
holds (a PWC-Net cost volume, a deep guided filter by integral images, DeepLab ASPP with OHEM in
channels_last, integral keypoint regression, StyleGAN2 modulated convolution, a DDPM training step, a
rational-quadratic spline flow, NeRF volume rendering with inverse-CDF resampling, rotations by the 6-D
representation, PointNet++ farthest point sampling and ball query, SchNet with forces by autograd,
Transformer-XL relative attention, Reformer LSH attention, a Perceiver with Fourier features, a KV-cache decode
with grouped-query attention, a Conformer block, an RNN-T loss by its lattice, Tacotron 2 location-sensitive
attention, GRU beam search, PPO with GAE, C51 distributional projection, a Switch MoE with expert capacity,
DP-SGD per-sample gradients by torch.func, a neural ODE by RK4). It measures opcov's verdicts on PyTorch/XLA;
nothing may be tuned on it.

The same contract as the other sets: each factory ``NAME()`` returns ``(model, inputs)``, seeded inside,
small, callable under ``torch.device("meta")`` (no tensor built from another's values in the factory;
tables a model needs, such as grids, schedules, supports, frequency bands, caches and masks, are made in
``forward``); a floating output depends on the parameters; no complex output; no randomness on the compared
path (random samples a model needs, such as diffusion noise, ray jitter, hash rotations and DP noise, are
inputs). Some models take data-dependent paths on purpose (``aspp_ohem_channels_last`` branches on a loss
value as OHEM does, ``schnet_forces`` builds its edges by nonzero, ``c51_projection`` fixes its bins by
in-place masked updates and index_add) and some return integers (``beam_search_gru`` and
``kv_cache_gqa_decode`` decode tokens by topk and argmax).

    PYTHONPATH=scripts/reality opcov trace nn_eighth:nerf_volume_render --mode training --out x.yaml
    PJRT_DEVICE=CPU .envs/xla/bin/python scripts/envs/nn_reality.py --set eighth --models nerf_volume_render

``MODELS`` names each factory: name -> (family, one-line description).
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------- vision


def _cost_volume(f1, f2, d):
    """Local correlation of f1 with f2 shifted by every (dy, dx) in [-d, d]^2, channel-averaged."""
    _, _, h, w = f1.shape
    f2p = F.pad(f2, (d, d, d, d))
    vols = [(f1 * f2p[:, :, dy : dy + h, dx : dx + w]).mean(1) for dy in range(2 * d + 1) for dx in range(2 * d + 1)]
    return F.leaky_relu(torch.stack(vols, 1), 0.1)


def _warp(x, flow):
    """Backward warp by a flow field with grid_sample; a validity mask from warping ones."""
    b, _, h, w = x.shape
    gy, gx = torch.meshgrid(
        torch.arange(h, device=x.device, dtype=x.dtype), torch.arange(w, device=x.device, dtype=x.dtype), indexing="ij"
    )
    vx = 2 * (gx + flow[:, 0]) / max(w - 1, 1) - 1
    vy = 2 * (gy + flow[:, 1]) / max(h - 1, 1) - 1
    grid = torch.stack([vx, vy], -1)
    out = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
    mask = F.grid_sample(torch.ones_like(x[:, :1]), grid, mode="bilinear", padding_mode="zeros", align_corners=True)
    return out * (mask > 0.999).to(x.dtype)


class _PWCLite(nn.Module):
    """A two-level PWC-Net: a shared strided feature pyramid, a cost volume (max displacement 2) at the coarse
    level, a conv flow estimator on [cost, features], flow upsampled by bilinear interpolate x2 (and doubled),
    the second image's features warped by it, a second cost volume and a residual flow; multi-scale endpoint
    error (vector norm over the flow channels) against ground truth avg-pooled to each level."""

    def __init__(self, c: int = 8, d: int = 2):
        super().__init__()
        self.d = d
        self.l1 = nn.Sequential(nn.Conv2d(3, c, 3, stride=2, padding=1), nn.LeakyReLU(0.1))
        self.l2 = nn.Sequential(nn.Conv2d(c, c, 3, stride=2, padding=1), nn.LeakyReLU(0.1))
        k = (2 * d + 1) ** 2
        self.est2 = nn.Sequential(nn.Conv2d(k + c, 16, 3, padding=1), nn.LeakyReLU(0.1), nn.Conv2d(16, 2, 3, padding=1))
        self.est1 = nn.Sequential(
            nn.Conv2d(k + c + 2, 16, 3, padding=1), nn.LeakyReLU(0.1), nn.Conv2d(16, 2, 3, padding=1)
        )

    def forward(self, img1, img2, gt_flow):
        a1, b1 = self.l1(img1), self.l1(img2)
        a2, b2 = self.l2(a1), self.l2(b1)
        flow2 = self.est2(torch.cat([_cost_volume(a2, b2, self.d), a2], 1))
        up = 2 * F.interpolate(flow2, scale_factor=2, mode="bilinear", align_corners=False)
        cost1 = _cost_volume(a1, _warp(b1, up), self.d)
        flow1 = up + self.est1(torch.cat([cost1, a1, up], 1))
        full = 2 * F.interpolate(flow1, size=img1.shape[-2:], mode="bilinear", align_corners=False)
        loss = 0
        for weight, flow, scale in ((0.32, flow2, 4), (0.08, flow1, 2)):
            gt = F.avg_pool2d(gt_flow, scale) / scale
            loss = loss + weight * torch.linalg.vector_norm(flow - gt, dim=1).mean()
        epe = torch.linalg.vector_norm(full - gt_flow, dim=1).mean()
        return {"loss": loss, "flow": full, "epe": epe}


def pwc_cost_volume():
    torch.manual_seed(0)
    return _PWCLite(), (torch.randn(2, 3, 16, 16), torch.randn(2, 3, 16, 16), torch.randn(2, 2, 16, 16))


def _box(x, r):
    """Box sum of radius r over H and W by integral images (cumsum and shifted differences), as the
    guided-filter reference code writes it."""

    def along(t, dim):
        c = t.cumsum(dim)
        n = t.shape[dim]
        left = c.narrow(dim, r, r + 1)
        mid = c.narrow(dim, 2 * r + 1, n - 2 * r - 1) - c.narrow(dim, 0, n - 2 * r - 1)
        right = c.narrow(dim, n - 1, 1) - c.narrow(dim, n - 2 * r - 1, r)
        return torch.cat([left, mid, right], dim)

    return along(along(x, 2), 3)


class _DeepGuidedFilter(nn.Module):
    """Deep guided filter: a low-resolution conv net maps the downsampled image to an output, a learned 1x1
    guidance map of the full-resolution image (and of the low-resolution one); the guided filter's linear
    coefficients A, b from box means by integral images (the count map from ones_like), a learned eps by
    softplus, A and b upsampled by bilinear align_corners=True to full size; Charbonnier + L1 loss."""

    def __init__(self, r: int = 2):
        super().__init__()
        self.r = r
        self.lr_net = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=2, dilation=2), nn.ReLU(),
            nn.Conv2d(16, 3, 1),
        )  # fmt: skip
        self.guide = nn.Sequential(nn.Conv2d(3, 8, 1), nn.ReLU(), nn.Conv2d(8, 3, 1))
        self.eps = nn.Parameter(torch.tensor(-4.0))

    def forward(self, hr, target):
        lr = F.interpolate(hr, scale_factor=0.5, mode="bilinear", align_corners=False)
        y = self.lr_net(lr)
        gx_lr, gx_hr = self.guide(lr), self.guide(hr)
        n = _box(torch.ones_like(gx_lr[:, :1]), self.r)
        mean_x, mean_y = _box(gx_lr, self.r) / n, _box(y, self.r) / n
        cov = _box(gx_lr * y, self.r) / n - mean_x * mean_y
        var = _box(gx_lr * gx_lr, self.r) / n - mean_x * mean_x
        a = cov / (var + F.softplus(self.eps))
        b = mean_y - a * mean_x
        size = hr.shape[-2:]
        a_hr = F.interpolate(a, size=size, mode="bilinear", align_corners=True)
        b_hr = F.interpolate(b, size=size, mode="bilinear", align_corners=True)
        out = a_hr * gx_hr + b_hr
        diff = out - target
        loss = torch.sqrt(diff * diff + 1e-6).mean() + 0.1 * F.l1_loss(y, F.avg_pool2d(target, 2))
        return {"loss": loss, "out": out}


def guided_filter_boxsum():
    torch.manual_seed(0)
    return _DeepGuidedFilter(), (torch.rand(2, 3, 24, 24), torch.rand(2, 3, 24, 24))


class _ASPPNet(nn.Module):
    """DeepLabV3 in channels_last: the input made channels_last in forward (the model converted by
    .to(memory_format=...)), a strided backbone, ASPP (1x1, 3x3 at dilations 2, 4 and 6, an image-pooling branch
    by adaptive_avg_pool2d(1) -> 1x1 conv -> BatchNorm -> bilinear back to the map), concat, projection, logits
    upsampled by bilinear align_corners=True; OHEM cross-entropy with ignore_index 255 as the segmentation repos
    write it: per-pixel losses sorted descending, then a Python branch on one loss value picks the hard pixels
    by a threshold mask or the top n_min."""

    def __init__(self, classes: int = 4, c: int = 16):
        super().__init__()
        self.n_min, self.thresh = 64, -math.log(0.7)
        self.backbone = nn.Sequential(
            nn.Conv2d(3, c, 3, stride=2, padding=1), nn.BatchNorm2d(c), nn.ReLU(),
            nn.Conv2d(c, c, 3, stride=2, padding=1), nn.BatchNorm2d(c), nn.ReLU(),
        )  # fmt: skip
        self.branches = nn.ModuleList(
            [nn.Conv2d(c, 8, 1)] + [nn.Conv2d(c, 8, 3, padding=r, dilation=r) for r in (2, 4, 6)]
        )
        self.pool_branch = nn.Sequential(nn.Conv2d(c, 8, 1), nn.BatchNorm2d(8), nn.ReLU())
        self.project = nn.Sequential(nn.Conv2d(40, 16, 1), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, classes, 1))

    def forward(self, img, labels):
        x = self.backbone(img.contiguous(memory_format=torch.channels_last))
        feats = [F.relu(b(x)) for b in self.branches]
        pooled = self.pool_branch(F.adaptive_avg_pool2d(x, 1))
        feats.append(F.interpolate(pooled, size=x.shape[-2:], mode="bilinear", align_corners=False))
        logits = self.project(torch.cat(feats, 1))
        logits = F.interpolate(logits, size=img.shape[-2:], mode="bilinear", align_corners=True)
        pix = F.cross_entropy(logits, labels, ignore_index=255, reduction="none").view(-1)
        pix, _ = torch.sort(pix, descending=True)
        if pix[self.n_min] > self.thresh:
            hard = pix[pix > self.thresh]
        else:
            hard = pix[: self.n_min]
        return {"loss": hard.mean(), "pred": logits.argmax(1), "logits": logits}


def aspp_ohem_channels_last():
    torch.manual_seed(0)
    model = _ASPPNet().to(memory_format=torch.channels_last)
    labels = torch.cat([torch.randint(0, 4, (2, 12, 16)), torch.full((2, 4, 16), 255)], 1)
    return model, (torch.randn(2, 3, 16, 16), labels)


class _IntegralPose(nn.Module):
    """Keypoints by integral regression: a one-level hourglass (max_pool2d down, nearest up, skip add),
    K heatmaps, a spatial softmax with a learned temperature (softplus), expected x and y by linspace
    coordinate tables made in forward, an L1 loss masked by per-keypoint visibility, a heatmap-variance
    penalty; hard coordinates by argmax and torch.unravel_index with the peak values."""

    def __init__(self, k: int = 4, c: int = 16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU())
        self.down = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.ReLU())
        self.inner = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.ReLU())
        self.skip = nn.Conv2d(c, c, 1)
        self.head = nn.Conv2d(c, k, 1)
        self.beta = nn.Parameter(torch.tensor(1.0))

    def forward(self, img, coords, visible):
        x = self.stem(img)
        low = self.inner(self.down(F.max_pool2d(x, 2)))
        x = self.skip(x) + F.interpolate(low, scale_factor=2, mode="nearest")
        heat = self.head(x)
        b, k, h, w = heat.shape
        prob = F.softmax(heat.view(b, k, -1) * F.softplus(self.beta), -1).view(b, k, h, w)
        xs = torch.linspace(-1, 1, w, device=img.device, dtype=img.dtype)
        ys = torch.linspace(-1, 1, h, device=img.device, dtype=img.dtype)
        ex, ey = (prob.sum(2) * xs).sum(-1), (prob.sum(3) * ys).sum(-1)
        pred = torch.stack([ex, ey], -1)
        var = (prob.sum(2) * (xs - ex[..., None]) ** 2).sum(-1) + (prob.sum(3) * (ys - ey[..., None]) ** 2).sum(-1)
        vis = visible.to(img.dtype)
        loss = ((pred - coords).abs().sum(-1) * vis).sum() / vis.sum().clamp(min=1) + 0.1 * var.mean()
        peak, flat = heat.view(b, k, -1).max(-1)
        row, col = torch.unravel_index(flat, (h, w))
        return {"loss": loss, "coords": pred, "peak": peak, "hard": torch.stack([col, row], -1)}


def soft_argmax_keypoints():
    torch.manual_seed(0)
    visible = torch.tensor([[True, True, False, True], [True, False, True, True]])
    return _IntegralPose(), (torch.randn(2, 3, 16, 16), torch.rand(2, 4, 2) * 2 - 1, visible)


# ---------------------------------------------------------------- generative


class _EqLinear(nn.Module):
    """StyleGAN's equalised-learning-rate linear: the weight scaled at run time by 1/sqrt(fan_in) * lr_mul."""

    def __init__(self, i: int, o: int, lr_mul: float = 1.0, bias_init: float = 0.0):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(o, i) / lr_mul)
        self.bias = nn.Parameter(torch.full((o,), bias_init))
        self.scale, self.lr_mul = lr_mul / math.sqrt(i), lr_mul

    def forward(self, x):
        return F.linear(x, self.weight * self.scale, self.bias * self.lr_mul)


class _ModConv(nn.Module):
    """A modulated conv: per-sample weights scaled by the style, demodulated by rsqrt of their squared sum,
    run as one grouped conv over the batch (groups = B), or transposed (stride 2) then blurred by a [1, 3, 3, 1]
    binomial depthwise kernel made in forward, for the upsampling layer."""

    def __init__(self, i: int, o: int, k: int, w_dim: int, demod: bool = True, up: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(o, i, k, k))
        self.affine = _EqLinear(w_dim, i, bias_init=1.0)
        self.i, self.o, self.k, self.demod, self.up = i, o, k, demod, up
        self.scale = 1 / math.sqrt(i * k * k)

    def forward(self, x, w):
        b, _, h, wd = x.shape
        style = self.affine(w)
        weight = self.scale * self.weight[None] * style[:, None, :, None, None]
        if self.demod:
            weight = weight * torch.rsqrt(weight.pow(2).sum([2, 3, 4]) + 1e-8)[:, :, None, None, None]
        x = x.reshape(1, b * self.i, h, wd)
        if not self.up:
            out = F.conv2d(x, weight.view(b * self.o, self.i, self.k, self.k), padding=self.k // 2, groups=b)
            return out.view(b, self.o, h, wd)
        wt = weight.transpose(1, 2).reshape(b * self.i, self.o, self.k, self.k)
        out = F.conv_transpose2d(x, wt, stride=2, groups=b)
        out = out.view(b, self.o, out.shape[-2], out.shape[-1])
        k1 = torch.tensor([1.0, 3.0, 3.0, 1.0], device=x.device, dtype=x.dtype)
        blur = (k1[:, None] * k1[None, :]) / 16
        out = F.pad(out, (1, 1, 1, 1))
        out = F.conv2d(out, blur.expand(self.o, 1, 4, 4), groups=self.o)
        return out[..., : 2 * h, : 2 * wd]


class _StyleGAN2(nn.Module):
    """StyleGAN2 at 8x8: a mapping net (pixel norm by rsqrt, equalised linears with lr_mul 0.01, leaky_relu(0.2)
    * sqrt(2)), a learned constant repeated over the batch, modulated/demodulated convs, an upsampling modulated
    transposed conv with blur, per-layer noise injection (noise images are inputs), toRGB 1x1 without demod
    and a bilinear-upsampled RGB skip; a small discriminator with the minibatch-stddev layer (group 2, view,
    sqrt of the group variance, repeat) and the non-saturating softplus generator loss."""

    def __init__(self, z: int = 16, c: int = 16):
        super().__init__()
        self.mapping = nn.ModuleList([_EqLinear(z, z, lr_mul=0.01) for _ in range(3)])
        self.const = nn.Parameter(torch.randn(1, c, 4, 4))
        self.conv0 = _ModConv(c, c, 3, z)
        self.up = _ModConv(c, c, 3, z, up=True)
        self.conv1 = _ModConv(c, c, 3, z)
        self.rgb0, self.rgb1 = _ModConv(c, 3, 1, z, demod=False), _ModConv(c, 3, 1, z, demod=False)
        self.noise_strength = nn.Parameter(torch.full((3,), 0.1))
        self.d_conv = nn.Conv2d(4, 16, 3, stride=2, padding=1)
        self.d_out = nn.Linear(16 * 4 * 4, 1)

    def forward(self, z, n0, n1, n2):
        w = z * torch.rsqrt(z.pow(2).mean(1, keepdim=True) + 1e-8)
        for layer in self.mapping:
            w = F.leaky_relu(layer(w), 0.2) * math.sqrt(2)
        b = z.shape[0]
        x = self.const.repeat(b, 1, 1, 1)
        x = F.leaky_relu(self.conv0(x, w) + self.noise_strength[0] * n0, 0.2) * math.sqrt(2)
        rgb = self.rgb0(x, w)
        x = F.leaky_relu(self.up(x, w) + self.noise_strength[1] * n1, 0.2) * math.sqrt(2)
        x = F.leaky_relu(self.conv1(x, w) + self.noise_strength[2] * n2, 0.2) * math.sqrt(2)
        img = self.rgb1(x, w) + F.interpolate(rgb, scale_factor=2, mode="bilinear", align_corners=False)
        g = 2
        y = img.view(g, -1, *img.shape[1:])
        y = torch.sqrt((y - y.mean(0)).square().mean(0) + 1e-8).mean([1, 2, 3])
        y = y.view(-1, 1, 1, 1).repeat(g, 1, img.shape[2], img.shape[3])
        d = F.leaky_relu(self.d_conv(torch.cat([img, y], 1)), 0.2)
        score = self.d_out(d.flatten(1))
        return {"loss": F.softplus(-score).mean(), "img": img}


def stylegan2_modconv():
    torch.manual_seed(0)
    return _StyleGAN2(), (torch.randn(4, 16), torch.randn(4, 1, 4, 4), torch.randn(4, 1, 8, 8), torch.randn(4, 1, 8, 8))


class _DDPM(nn.Module):
    """A DDPM training step: a linear beta schedule made in forward (linspace, cumprod), alpha-bar gathered
    at integer timesteps, x_t from the given noise, a small time-conditioned U-Net (sinusoidal embedding by exp
    and arange, SiLU MLP, FiLM scale/shift after GroupNorm, avg_pool2d down, nearest up, skip concat),
    epsilon MSE with min-SNR-5 weights; one ancestral sampling step (x0 clamped, the posterior mean, the
    log-variance clipped, the given z masked where t == 0)."""

    def __init__(self, c: int = 16, steps: int = 100, emb: int = 16):
        super().__init__()
        self.steps, self.emb = steps, emb
        self.t_mlp = nn.Sequential(nn.Linear(emb, 32), nn.SiLU(), nn.Linear(32, 4 * c))
        self.inc = nn.Conv2d(3, c, 3, padding=1)
        self.gn1, self.gn2 = nn.GroupNorm(4, c), nn.GroupNorm(4, c)
        self.mid = nn.Conv2d(c, c, 3, padding=1)
        self.dec = nn.Conv2d(2 * c, c, 3, padding=1)
        self.out = nn.Conv2d(c, 3, 3, padding=1)

    def eps(self, x, t):
        half = self.emb // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=x.device, dtype=x.dtype) / half)
        args = t[:, None].to(x.dtype) * freqs
        s1, b1, s2, b2 = self.t_mlp(torch.cat([torch.cos(args), torch.sin(args)], -1))[..., None, None].chunk(4, 1)
        h = self.inc(x)
        skip = F.silu(self.gn1(h) * (1 + s1) + b1)
        m = F.silu(self.gn2(self.mid(F.avg_pool2d(skip, 2))) * (1 + s2) + b2)
        return self.out(F.silu(self.dec(torch.cat([skip, F.interpolate(m, scale_factor=2, mode="nearest")], 1))))

    def forward(self, x0, t, noise, z):
        betas = torch.linspace(1e-4, 0.02, self.steps, device=x0.device, dtype=x0.dtype)
        abar = torch.cumprod(1 - betas, 0)
        abar_prev = F.pad(abar[:-1], (1, 0), value=1.0)
        a = abar.gather(0, t)[:, None, None, None]
        x_t = a.sqrt() * x0 + (1 - a).sqrt() * noise
        eps = self.eps(x_t, t)
        snr = a / (1 - a)
        weight = snr.clamp(max=5.0) / snr
        loss = (weight * (eps - noise) ** 2).mean()
        ap, beta = abar_prev[t][:, None, None, None], betas[t][:, None, None, None]
        x0_hat = ((x_t - (1 - a).sqrt() * eps) / a.sqrt()).clamp(-1, 1)
        mean = (ap.sqrt() * beta / (1 - a)) * x0_hat + ((1 - beta).sqrt() * (1 - ap) / (1 - a)) * x_t
        post_var = beta * (1 - ap) / (1 - a)
        log_var = torch.log(post_var.clamp(min=1e-20))
        nonzero = (t != 0).to(x0.dtype)[:, None, None, None]
        x_prev = mean + nonzero * torch.exp(0.5 * log_var) * z
        return {"loss": loss, "x_prev": x_prev}


def ddpm_eps_step():
    torch.manual_seed(0)
    t = torch.tensor([0, 17, 58, 99])
    return _DDPM(), (torch.rand(4, 3, 8, 8) * 2 - 1, t, torch.randn(4, 3, 8, 8), torch.randn(4, 3, 8, 8))


def _knots(u, min_size, bound):
    """Bin sizes by softmax (at least min_size), knots by cumsum padded by F.pad and pinned to +-bound."""
    k = u.shape[-1]
    sizes = min_size + (1 - min_size * k) * F.softmax(u, -1)
    cum = 2 * bound * F.pad(torch.cumsum(sizes, -1), (1, 0), value=0.0) - bound
    cum = torch.cat([torch.full_like(cum[..., :1], -bound), cum[..., 1:-1], torch.full_like(cum[..., :1], bound)], -1)
    return cum, cum[..., 1:] - cum[..., :-1]


def _rq_spline(x, uw, uh, ud, bound=3.0, min_w=1e-3, min_h=1e-3, min_d=1e-3):
    """The rational-quadratic spline of Durkan et al. (neural spline flows) with linear tails: bins by
    softmax and cumsum padded by F.pad, the bin of each input by searchsorted, its parameters by gather."""
    inside = (x >= -bound) & (x <= bound)
    k = uw.shape[-1]
    cumw, widths = _knots(uw, min_w, bound)
    cumh, heights = _knots(uh, min_h, bound)
    const = math.log(math.exp(1 - min_d) - 1)
    derivs = min_d + F.softplus(F.pad(ud, (1, 1), value=const))
    xc = x.clamp(-bound, bound)
    idx = (torch.searchsorted(cumw[..., 1:-1].contiguous(), xc[..., None].contiguous(), right=True)).clamp(0, k - 1)

    def at(t):
        return t.gather(-1, idx)[..., 0]

    in_cw, in_w, in_ch, in_h = at(cumw), at(widths), at(cumh), at(heights)
    delta = in_h / in_w
    d0, d1 = at(derivs), derivs[..., 1:].gather(-1, idx)[..., 0]
    theta = (xc - in_cw) / in_w
    tt = theta * (1 - theta)
    numer = in_h * (delta * theta.pow(2) + d0 * tt)
    denom = delta + (d0 + d1 - 2 * delta) * tt
    y = in_ch + numer / denom
    dnum = delta.pow(2) * (d1 * theta.pow(2) + 2 * delta * tt + d0 * (1 - theta).pow(2))
    logdet = torch.log(dnum) - 2 * torch.log(denom)
    return torch.where(inside, y, x), torch.where(inside, logdet, torch.zeros_like(logdet))


class _SplineFlow(nn.Module):
    """A neural spline flow: coupling layers where an MLP on one half gives each other-half dimension K bin
    widths, K heights and K - 1 knot derivatives, the rational-quadratic spline with linear tails outside
    [-3, 3], halves swapped by flip between layers, the log-det summed, the standard normal base log-density;
    loss: negative log-likelihood in nats per dimension."""

    def __init__(self, dim: int = 4, k: int = 6, layers: int = 3):
        super().__init__()
        self.half, self.k = dim // 2, k
        self.nets = nn.ModuleList(
            nn.Sequential(nn.Linear(self.half, 32), nn.ReLU(), nn.Linear(32, self.half * (3 * k - 1)))
            for _ in range(layers)
        )

    def forward(self, x):
        logdet = torch.zeros(x.shape[0], device=x.device, dtype=x.dtype)
        for net in self.nets:
            a, b = x[:, : self.half], x[:, self.half :]
            p = net(a).view(x.shape[0], self.half, 3 * self.k - 1) / math.sqrt(32)
            uw, uh, ud = p[..., : self.k], p[..., self.k : 2 * self.k], p[..., 2 * self.k :]
            b, ld = _rq_spline(b, uw, uh, ud)
            logdet = logdet + ld.sum(-1)
            x = torch.cat([a, b], 1).flip(1)
        base = -0.5 * (x.pow(2) + math.log(2 * math.pi)).sum(-1)
        log_prob = base + logdet
        return {"loss": -log_prob.mean() / x.shape[1], "z": x, "log_prob": log_prob}


def neural_spline_flow():
    torch.manual_seed(0)
    return _SplineFlow(), (torch.randn(16, 4) * 1.5,)


# ---------------------------------------------------------------- geometric and point clouds


def _posenc(x, bands):
    freqs = 2.0 ** torch.arange(bands, device=x.device, dtype=x.dtype)
    xb = (x[..., None] * freqs).flatten(-2)
    return torch.cat([x, torch.sin(xb), torch.cos(xb)], -1)


class _TinyNeRF(nn.Module):
    """NeRF: stratified depths along each ray (linspace made in forward, mid-points, the given jitter),
    positional encoding by powers of two (sin, cos), a density/colour MLP with a view-direction branch,
    volume rendering (deltas with a 1e10 last step times the ray norm, alpha = 1 - exp(-relu(sigma) delta),
    transmittance by an exclusive cumprod, weights, colour/depth/accumulation), hierarchical resampling
    by inverse-CDF (detached weights, cumsum, searchsorted right, gathers of the CDF and the bins, a guarded
    denominator by where), sorted merged depths, a fine pass; loss: coarse + fine MSE, PSNR by log10."""

    def __init__(self, n_coarse: int = 8, n_fine: int = 8, bands: int = 4, dbands: int = 2, hidden: int = 32):
        super().__init__()
        self.nc, self.nf, self.bands, self.dbands = n_coarse, n_fine, bands, dbands
        self.near, self.far = 2.0, 6.0
        din, ddir = 3 + 6 * bands, 3 + 6 * dbands
        self.trunk = nn.Sequential(nn.Linear(din, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.sigma = nn.Linear(hidden, 1)
        self.feat = nn.Linear(hidden, hidden)
        self.rgb = nn.Sequential(nn.Linear(hidden + ddir, hidden // 2), nn.ReLU(), nn.Linear(hidden // 2, 3))

    def render(self, rays_o, rays_d, z):
        pts = rays_o[:, None, :] + rays_d[:, None, :] * z[..., None]
        h = self.trunk(_posenc(pts, self.bands))
        sigma = self.sigma(h)[..., 0]
        dirs = F.normalize(rays_d, dim=-1)[:, None, :].expand_as(pts)
        rgb = torch.sigmoid(self.rgb(torch.cat([self.feat(h), _posenc(dirs, self.dbands)], -1)))
        deltas = torch.cat([z[:, 1:] - z[:, :-1], torch.full_like(z[:, :1], 1e10)], -1)
        deltas = deltas * torch.linalg.vector_norm(rays_d, dim=-1, keepdim=True)
        alpha = 1 - torch.exp(-F.relu(sigma) * deltas)
        trans = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha + 1e-10], -1), -1)[:, :-1]
        w = alpha * trans
        return (w[..., None] * rgb).sum(1), (w * z).sum(1), w.sum(1), w

    def forward(self, rays_o, rays_d, jitter, u, target):
        t = torch.linspace(0, 1, self.nc, device=rays_o.device, dtype=rays_o.dtype)
        z = self.near * (1 - t) + self.far * t
        mids = 0.5 * (z[1:] + z[:-1])
        upper, lower = torch.cat([mids, z[-1:]]), torch.cat([z[:1], mids])
        z = lower + (upper - lower) * jitter
        rgb_c, _, _, w = self.render(rays_o, rays_d, z)
        bins = 0.5 * (z[:, 1:] + z[:, :-1])
        pdf = w[:, 1:-1].detach() + 1e-5
        pdf = pdf / pdf.sum(-1, keepdim=True)
        cdf = torch.cat([torch.zeros_like(pdf[:, :1]), torch.cumsum(pdf, -1)], -1)
        inds = torch.searchsorted(cdf, u.contiguous(), right=True)
        below, above = (inds - 1).clamp(min=0), inds.clamp(max=cdf.shape[-1] - 1)
        cdf_b, cdf_a = cdf.gather(1, below), cdf.gather(1, above)
        bins_b, bins_a = bins.gather(1, below), bins.gather(1, above)
        denom = cdf_a - cdf_b
        denom = torch.where(denom < 1e-5, torch.ones_like(denom), denom)
        fine = bins_b + (u - cdf_b) / denom * (bins_a - bins_b)
        z_all, _ = torch.sort(torch.cat([z, fine.detach()], -1), -1)
        rgb_f, depth, acc, _ = self.render(rays_o, rays_d, z_all)
        mse_f = F.mse_loss(rgb_f, target)
        loss = F.mse_loss(rgb_c, target) + mse_f
        return {"loss": loss, "rgb": rgb_f, "depth": depth, "acc": acc, "psnr": -10 * torch.log10(mse_f)}


def nerf_volume_render():
    torch.manual_seed(0)
    return _TinyNeRF(), (
        torch.randn(6, 3) * 0.1,
        torch.randn(6, 3),
        torch.rand(6, 8),
        torch.rand(6, 8),
        torch.rand(6, 3),
    )


def _rodrigues(v):
    """Axis-angle to rotation matrices (the ground truth is given as axis-angle vectors)."""
    theta = torch.linalg.vector_norm(v, dim=-1, keepdim=True).clamp(min=1e-8)
    k = v / theta
    zero = torch.zeros_like(k[..., 0])
    kx, ky, kz = k.unbind(-1)
    km = torch.stack([zero, -kz, ky, kz, zero, -kx, -ky, kx, zero], -1).view(*k.shape[:-1], 3, 3)
    eye = torch.eye(3, device=v.device, dtype=v.dtype).expand_as(km)
    s, c = torch.sin(theta)[..., None], torch.cos(theta)[..., None]
    return eye + s * km + (1 - c) * (km @ km)


def _matrix_to_quat(m):
    """Rotation matrix to a unit quaternion (w, x, y, z), the four Shepperd branches picked by argmax."""
    m00, m11, m22 = m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]
    q_abs = torch.sqrt(
        F.relu(torch.stack([1 + m00 + m11 + m22, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22], -1))
    )
    m01, m02, m10, m12, m20, m21 = m[..., 0, 1], m[..., 0, 2], m[..., 1, 0], m[..., 1, 2], m[..., 2, 0], m[..., 2, 1]
    cands = torch.stack(
        [
            torch.stack([q_abs[..., 0] ** 2, m21 - m12, m02 - m20, m10 - m01], -1),
            torch.stack([m21 - m12, q_abs[..., 1] ** 2, m10 + m01, m02 + m20], -1),
            torch.stack([m02 - m20, m10 + m01, q_abs[..., 2] ** 2, m12 + m21], -1),
            torch.stack([m10 - m01, m20 + m02, m21 + m12, q_abs[..., 3] ** 2], -1),
        ],
        -2,
    ) / (2.0 * q_abs[..., None].clamp(min=0.1))
    best = q_abs.argmax(-1)
    return cands.gather(-2, best[..., None, None].expand(*best.shape, 1, 4))[..., 0, :]


class _PoseNet6D(nn.Module):
    """Object pose regression: an MLP over a global feature predicts the continuous 6-D rotation
    representation and a translation; Gram-Schmidt (normalize, projection, linalg.cross) to a rotation
    matrix; the geodesic loss by acos of the clamped (trace - 1) / 2 of R_pred R_gt^T (trace by diagonal);
    the ADD metric on model points (R p + t, distances); quaternions of both by the Shepperd branches and an
    antipodal-invariant 1 - |<q, q_gt>| term."""

    def __init__(self, d: int = 24):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.rot, self.trans = nn.Linear(64, 6), nn.Linear(64, 3)

    def forward(self, feat, gt_axis_angle, gt_t, points):
        h = self.net(feat)
        a1, a2 = self.rot(h).view(-1, 2, 3).unbind(1)
        b1 = F.normalize(a1, dim=-1)
        b2 = F.normalize(a2 - (b1 * a2).sum(-1, keepdim=True) * b1, dim=-1)
        b3 = torch.linalg.cross(b1, b2, dim=-1)
        r = torch.stack([b1, b2, b3], -1)
        t = self.trans(h)
        r_gt = _rodrigues(gt_axis_angle)
        m = r @ r_gt.transpose(-1, -2)
        cos = (torch.diagonal(m, dim1=-2, dim2=-1).sum(-1) - 1) / 2
        geo = torch.acos(cos.clamp(-1 + 1e-6, 1 - 1e-6))
        p_pred = points @ r.transpose(-1, -2) + t[:, None]
        p_gt = points @ r_gt.transpose(-1, -2) + gt_t[:, None]
        add = torch.linalg.vector_norm(p_pred - p_gt, dim=-1).mean(-1)
        q, q_gt = _matrix_to_quat(r), _matrix_to_quat(r_gt)
        qloss = 1 - (q * q_gt).sum(-1).abs()
        loss = geo.mean() + add.mean() + qloss.mean()
        return {"loss": loss, "rotation": r, "translation": t, "angle_deg": torch.rad2deg(geo)}


def rotation_6d_geodesic():
    torch.manual_seed(0)
    return _PoseNet6D(), (torch.randn(4, 24), torch.randn(4, 3), torch.randn(4, 3), torch.randn(4, 10, 3))


def _sqdist(a, b):
    return (a[:, :, None, :] - b[:, None, :, :]).pow(2).sum(-1)


def _index_points(x, idx):
    """x (B, N, C) picked at idx (B, ...) by batched advanced indexing."""
    batch = torch.arange(x.shape[0], device=x.device).view(-1, *([1] * (idx.dim() - 1)))
    return x[batch, idx]


class _PointNet2(nn.Module):
    """PointNet++ (SSG) with a segmentation head: farthest point sampling as a Python loop (running minimum
    distance, argmax, batched indexing from index 0), ball query (squared distances, out-of-radius indices
    set to N by a bool mask, sort, the first neighbour filled in), grouped coordinates made local and
    concatenated with features, shared 1x1 Conv2d + BatchNorm2d MLPs, max over neighbours; a global
    set-abstraction by max over points; feature propagation by 3-NN inverse-distance interpolation (sort,
    reciprocal, normalised weights, gathered features); class and per-point cross-entropy."""

    def __init__(self, npoint: int = 8, radius: float = 0.8, nsample: int = 6, classes: int = 3, parts: int = 4):
        super().__init__()
        self.npoint, self.r2, self.nsample = npoint, radius**2, nsample
        self.sa1 = nn.Sequential(
            nn.Conv2d(3 + 3, 16, 1), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 32, 1), nn.ReLU()
        )
        self.sa2 = nn.Sequential(nn.Linear(3 + 32, 64), nn.ReLU())
        self.cls = nn.Linear(64, classes)
        self.fp = nn.Sequential(nn.Conv1d(32 + 3, 32, 1), nn.BatchNorm1d(32), nn.ReLU(), nn.Conv1d(32, parts, 1))

    def fps(self, xyz):
        b, n, _ = xyz.shape
        dist = torch.full((b, n), 1e10, device=xyz.device, dtype=xyz.dtype)
        far = torch.zeros(b, dtype=torch.long, device=xyz.device)
        batch = torch.arange(b, device=xyz.device)
        picked = []
        for _ in range(self.npoint):
            picked.append(far)
            centroid = xyz[batch, far][:, None, :]
            dist = torch.minimum(dist, (xyz - centroid).pow(2).sum(-1))
            far = dist.argmax(-1)
        return torch.stack(picked, 1)

    def forward(self, xyz, feats, label, part_labels):
        b, n, _ = xyz.shape
        new_xyz = _index_points(xyz, self.fps(xyz))
        d = _sqdist(new_xyz, xyz)
        group = torch.arange(n, device=xyz.device).view(1, 1, n).repeat(b, self.npoint, 1)
        group[d > self.r2] = n
        group = group.sort(-1)[0][:, :, : self.nsample]
        first = group[:, :, :1].repeat(1, 1, self.nsample)
        group = torch.where(group == n, first, group)
        g_xyz = _index_points(xyz, group) - new_xyz[:, :, None]
        g = torch.cat([g_xyz, _index_points(feats, group)], -1).permute(0, 3, 2, 1)
        l1 = self.sa1(g).amax(2).transpose(1, 2)  # (B, S, 32)
        glob = self.sa2(torch.cat([new_xyz, l1], -1)).amax(1)
        dd, nn_idx = _sqdist(xyz, new_xyz).sort(-1)
        recip = 1.0 / (dd[:, :, :3] + 1e-8)
        wts = recip / recip.sum(-1, keepdim=True)
        interp = (_index_points(l1, nn_idx[:, :, :3]) * wts[..., None]).sum(2)
        seg = self.fp(torch.cat([interp, feats], -1).transpose(1, 2))
        loss = F.cross_entropy(self.cls(glob), label) + F.cross_entropy(seg, part_labels)
        return {"loss": loss, "seg": seg, "class_logits": self.cls(glob)}


def pointnet2_fps_ballquery():
    torch.manual_seed(0)
    return _PointNet2(), (
        torch.rand(2, 32, 3) * 2 - 1,
        torch.randn(2, 32, 3),
        torch.tensor([0, 2]),
        torch.randint(0, 4, (2, 32)),
    )


class _ShiftedSoftplus(nn.Module):
    def forward(self, x):
        return F.softplus(x) - math.log(2.0)


class _SchNet(nn.Module):
    """SchNet with forces: a radius graph inside each molecule (same-batch mask, no self loops, distance
    cutoff, nonzero edge list), Gaussian RBF distance expansion (centres by linspace), a cosine cutoff,
    continuous-filter convolutions (filter MLP with shifted softplus, messages at the sources gathered and
    summed into the targets by index_add), atomwise energies summed per molecule by index_add; forces as
    -dE/dpos by autograd.grad under enable_grad (create_graph while training); energy + force MSE."""

    def __init__(self, hidden: int = 16, rbf: int = 12, cutoff: float = 2.5, interactions: int = 2):
        super().__init__()
        self.rbf, self.cutoff = rbf, cutoff
        self.embed = nn.Embedding(10, hidden)
        self.filters = nn.ModuleList(
            nn.Sequential(nn.Linear(rbf, hidden), _ShiftedSoftplus(), nn.Linear(hidden, hidden))
            for _ in range(interactions)
        )
        self.in2f = nn.ModuleList(nn.Linear(hidden, hidden, bias=False) for _ in range(interactions))
        self.f2out = nn.ModuleList(
            nn.Sequential(nn.Linear(hidden, hidden), _ShiftedSoftplus(), nn.Linear(hidden, hidden))
            for _ in range(interactions)
        )
        self.out = nn.Sequential(nn.Linear(hidden, hidden // 2), _ShiftedSoftplus(), nn.Linear(hidden // 2, 1))

    def energy(self, z, pos, batch, n_mol):
        same = (batch[:, None] == batch[None, :]) & ~torch.eye(len(batch), dtype=torch.bool, device=pos.device)
        dist_all = torch.linalg.vector_norm(pos[:, None] - pos[None, :] + 1e-9, dim=-1)
        src, dst = (same & (dist_all < self.cutoff)).nonzero(as_tuple=True)
        d = torch.linalg.vector_norm(pos[src] - pos[dst], dim=-1)
        mu = torch.linspace(0, self.cutoff, self.rbf, device=pos.device, dtype=pos.dtype)
        expansion = torch.exp(-10.0 * (d[:, None] - mu) ** 2)
        cut = 0.5 * (torch.cos(d * math.pi / self.cutoff) + 1) * (d < self.cutoff).to(pos.dtype)
        h = self.embed(z)
        for filt, lin, out in zip(self.filters, self.in2f, self.f2out):
            w = filt(expansion) * cut[:, None]
            msg = lin(h)[src] * w
            agg = torch.zeros_like(h).index_add(0, dst, msg)
            h = h + out(agg)
        atom_e = self.out(h)[:, 0]
        return torch.zeros(n_mol, device=pos.device, dtype=pos.dtype).index_add(0, batch, atom_e)

    def forward(self, z, pos, batch, e_target, f_target):
        with torch.enable_grad():
            pos = pos.detach().requires_grad_(True)
            e = self.energy(z, pos, batch, e_target.shape[0])
            forces = -torch.autograd.grad(e.sum(), pos, create_graph=self.training)[0]
        loss = F.mse_loss(e, e_target) + 10.0 * F.mse_loss(forces, f_target)
        return {"loss": loss, "energy": e, "forces": forces}


def schnet_forces():
    torch.manual_seed(0)
    z = torch.tensor([6, 1, 1, 1, 1, 8, 1, 1, 7, 1])
    batch = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    return _SchNet(), (z, torch.randn(10, 3), batch, torch.randn(2), torch.randn(10, 3))


# ---------------------------------------------------------------- attention


def _rel_shift(x):
    """Transformer-XL's relative shift: a zero column padded in front, the (q, k + 1) view, the first row
    dropped, viewed back."""
    q, k = x.shape[0], x.shape[1]
    zero = torch.zeros((q, 1, *x.shape[2:]), device=x.device, dtype=x.dtype)
    padded = torch.cat([zero, x], 1).view(k + 1, q, *x.shape[2:])
    return padded[1:].view_as(x)


class _XLLayer(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.r_net = nn.Linear(d, d, bias=False)
        self.r_w_bias = nn.Parameter(torch.randn(heads, d // heads) * 0.02)
        self.r_r_bias = nn.Parameter(torch.randn(heads, d // heads) * 0.02)
        self.o = nn.Linear(d, d, bias=False)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))

    def forward(self, h, mem, pos_emb):
        qlen, b, d = h.shape
        cat = torch.cat([mem, h], 0)
        klen, mlen = cat.shape[0], mem.shape[0]
        q, k, v = self.qkv(cat).chunk(3, -1)
        q = q[-qlen:].view(qlen, b, self.h, self.dh)
        k, v = k.view(klen, b, self.h, self.dh), v.view(klen, b, self.h, self.dh)
        r = self.r_net(pos_emb).view(klen, self.h, self.dh)
        ac = torch.einsum("ibnd,jbnd->ijbn", q + self.r_w_bias, k)
        bd = _rel_shift(torch.einsum("ibnd,jnd->ijbn", q + self.r_r_bias, r))
        score = (ac + bd) / math.sqrt(self.dh)
        mask = torch.triu(torch.ones(qlen, klen, device=h.device), diagonal=1 + mlen).bool()[:, :, None, None]
        prob = score.masked_fill(mask, float("-inf")).softmax(1)
        out = self.o(torch.einsum("ijbn,jbnd->ibnd", prob, v).reshape(qlen, b, d))
        h = self.ln1(h + out)
        return self.ln2(h + self.ff(h))


class _TransformerXL(nn.Module):
    """Transformer-XL LM over two segments: the hidden states of each segment kept (detached) as the next
    one's memory, the relative sinusoid from arange(klen - 1, -1, -1.0) and inverse frequencies made in forward,
    content and position scores with the two global biases by einsum, the relative shift by pad/view, a causal
    triu mask offset by the memory length filled with -inf, post-norm; cross_entropy per segment."""

    def __init__(self, vocab: int = 20, d: int = 16, heads: int = 2, layers: int = 2):
        super().__init__()
        self.d = d
        self.emb = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(_XLLayer(d, heads) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens, targets):
        seg = tokens.shape[0] // 2
        mems = [torch.zeros(0, tokens.shape[1], self.d, device=tokens.device) for _ in self.layers]
        inv_freq = 1 / (10000 ** (torch.arange(0.0, self.d, 2.0, device=tokens.device) / self.d))
        loss, logits_all = 0, []
        for s in range(2):
            h = self.emb(tokens[s * seg : (s + 1) * seg]) * math.sqrt(self.d)
            klen = seg + mems[0].shape[0]
            pos_seq = torch.arange(klen - 1, -1, -1.0, device=tokens.device)
            sinusoid = pos_seq[:, None] * inv_freq[None]
            pos_emb = torch.cat([sinusoid.sin(), sinusoid.cos()], -1)
            new_mems = []
            for layer, mem in zip(self.layers, mems):
                new_mems.append(h.detach())
                h = layer(h, mem, pos_emb)
            mems = new_mems
            logits = self.head(h)
            loss = loss + F.cross_entropy(
                logits.view(-1, logits.shape[-1]), targets[s * seg : (s + 1) * seg].reshape(-1)
            )
            logits_all.append(logits)
        return {"loss": loss / 2, "logits": torch.cat(logits_all, 0)}


def transformer_xl_relshift():
    torch.manual_seed(0)
    return _TransformerXL(), (torch.randint(0, 20, (12, 2)), torch.randint(0, 20, (12, 2)))


class _LSHAttention(nn.Module):
    """Reformer LSH attention (one hash round): shared query/key projection, buckets by argmax of the
    rotated vectors and their negation (the random rotations are an input), a stable sort key bucket * L +
    position, argsort and its inverse by argsort, gathers into sorted order, chunks with one chunk looked back
    (torch.roll), unit-normalised keys, attention to oneself masked to -5e4, the softmax by logsumexp, outputs
    un-sorted by gather; a two-layer classifier with reversible-free residuals and mean pooling."""

    def __init__(self, vocab: int = 30, d: int = 16, chunk: int = 4, classes: int = 3, layers: int = 2):
        super().__init__()
        self.d, self.chunk = d, chunk
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(16, d) * 0.02)
        self.qk = nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(layers))
        self.v = nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(layers))
        self.ff = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d)) for _ in range(layers)
        )
        self.norm = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def attend(self, x, qk_proj, v_proj, rotations):
        b, n, d = x.shape
        qk, v = qk_proj(x), v_proj(x)
        rotated = qk @ rotations
        buckets = torch.cat([rotated, -rotated], -1).argmax(-1)
        pos = torch.arange(n, device=x.device)
        ticker = buckets * n + pos
        order = ticker.argsort(-1)
        undo = order.argsort(-1)
        sqk = qk.gather(1, order[..., None].expand(-1, -1, d))
        sv = v.gather(1, order[..., None].expand(-1, -1, d))
        spos = pos[order]
        c = n // self.chunk
        bq, bv, bp = sqk.view(b, c, self.chunk, d), sv.view(b, c, self.chunk, d), spos.view(b, c, self.chunk)
        bk = F.normalize(bq, dim=-1)
        bk = torch.cat([bk, torch.roll(bk, 1, dims=1)], 2)
        bv = torch.cat([bv, torch.roll(bv, 1, dims=1)], 2)
        kp = torch.cat([bp, torch.roll(bp, 1, dims=1)], 2)
        dots = bq @ bk.transpose(-1, -2) / math.sqrt(d)
        dots = dots.masked_fill(bp[..., :, None] == kp[..., None, :], -5e4)
        logits = dots - torch.logsumexp(dots, -1, keepdim=True)
        out = (torch.exp(logits) @ bv).view(b, n, d)
        return out.gather(1, undo[..., None].expand(-1, -1, d))

    def forward(self, tokens, rotations, labels):
        x = self.emb(tokens) + self.pos[: tokens.shape[1]]
        for i in range(len(self.qk)):
            x = x + self.attend(self.norm[i](x), self.qk[i], self.v[i], rotations[i])
            x = x + self.ff[i](x)
        logits = self.head(x.mean(1))
        return {"loss": F.cross_entropy(logits, labels), "logits": logits}


def lsh_bucket_attention():
    torch.manual_seed(0)
    return _LSHAttention(), (torch.randint(0, 30, (2, 16)), torch.randn(2, 16, 2), torch.tensor([1, 2]))


class _Perceiver(nn.Module):
    """Perceiver for images: pixels flattened to an array, Fourier position features made in forward
    (meshgrid of linspace, frequency bands by linspace, sin/cos, concatenated and expanded over the batch),
    learned latents expanded over the batch, cross-attention written out (pre-LayerNorm query and key/value,
    different widths), a latent self-attention block applied twice with shared weights
    (scaled_dot_product_attention over split heads), GEGLU feed-forwards (chunk, gelu gate), a decoder query
    cross-attending to the latents; cross_entropy."""

    def __init__(self, d: int = 32, n_lat: int = 8, bands: int = 4, heads: int = 4, classes: int = 5):
        super().__init__()
        self.bands, self.heads = bands, heads
        kv_dim = 3 + 2 + 2 * 2 * bands
        self.latents = nn.Parameter(torch.randn(n_lat, d) * 0.2)
        self.q_norm, self.kv_norm = nn.LayerNorm(d), nn.LayerNorm(kv_dim)
        self.q, self.k, self.v, self.o = nn.Linear(d, d), nn.Linear(kv_dim, d), nn.Linear(kv_dim, d), nn.Linear(d, d)
        self.sa_norm, self.sa_qkv, self.sa_o = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff_norm, self.ff_in, self.ff_out = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(2 * d, d)
        self.query = nn.Parameter(torch.randn(1, d) * 0.2)
        self.dec_q, self.dec_kv = nn.Linear(d, d), nn.Linear(d, 2 * d)
        self.cls = nn.Linear(d, classes)

    def geglu(self, x):
        a, g = self.ff_in(self.ff_norm(x)).chunk(2, -1)
        return x + self.ff_out(a * F.gelu(g))

    def forward(self, img, labels):
        b, c, h, w = img.shape
        ys, xs = torch.meshgrid(
            torch.linspace(-1, 1, h, device=img.device), torch.linspace(-1, 1, w, device=img.device), indexing="ij"
        )
        pos = torch.stack([ys, xs], -1).view(h * w, 2)
        freqs = torch.linspace(1.0, h / 2, self.bands, device=img.device)
        ang = (pos[..., None] * freqs * math.pi).view(h * w, -1)
        enc = torch.cat([pos, ang.sin(), ang.cos()], -1)
        arr = torch.cat([img.flatten(2).transpose(1, 2), enc.expand(b, -1, -1)], -1)
        lat = self.latents.expand(b, -1, -1)
        kv = self.kv_norm(arr)
        att = (self.q(self.q_norm(lat)) @ self.k(kv).transpose(1, 2) / math.sqrt(lat.shape[-1])).softmax(-1)
        lat = self.geglu(lat + self.o(att @ self.v(kv)))
        for _ in range(2):
            q, k, v = self.sa_qkv(self.sa_norm(lat)).view(b, -1, 3, self.heads, lat.shape[-1] // self.heads).unbind(2)
            y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
            lat = self.geglu(lat + self.sa_o(y.transpose(1, 2).reshape(b, -1, lat.shape[-1])))
        dk, dv = self.dec_kv(lat).chunk(2, -1)
        q = self.dec_q(self.query).expand(b, -1, -1)
        out = ((q @ dk.transpose(1, 2)) / math.sqrt(lat.shape[-1])).softmax(-1) @ dv
        logits = self.cls(out[:, 0])
        return {"loss": F.cross_entropy(logits, labels), "logits": logits}


def perceiver_fourier_latents():
    torch.manual_seed(0)
    return _Perceiver(), (torch.randn(2, 3, 8, 8), torch.tensor([4, 1]))


class _GQADecoder(nn.Module):
    """A tiny decoder LM served with a preallocated KV cache: grouped-query attention (4 query heads, 2
    key/value heads widened by repeat_interleave), RMSNorm by rsqrt, the prompt written into zero caches made in
    forward by slice assignment, then greedy steps that write one position by index_copy_, attend over the
    cache with an arange <= position mask, take the argmax token and its log-probability; the teacher-forced
    prompt loss by scaled_dot_product_attention(is_causal=True) is the training loss."""

    def __init__(self, vocab: int = 24, d: int = 16, heads: int = 4, kv_heads: int = 2, max_len: int = 12):
        super().__init__()
        self.h, self.kvh, self.dh, self.max_len = heads, kv_heads, d // heads, max_len
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.q = nn.Linear(d, d, bias=False)
        self.kv = nn.Linear(d, 2 * kv_heads * (d // heads), bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.g1, self.g2 = nn.Parameter(torch.ones(d)), nn.Parameter(torch.ones(d))
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.SiLU(), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, vocab, bias=False)

    def rms(self, x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g

    def qkv(self, x):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.h, self.dh).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 2, self.kvh, self.dh).permute(2, 0, 3, 1, 4)
        return q, k, v

    def block(self, x, attend):
        a = self.rms(x, self.g1)
        x = x + self.o(attend(*self.qkv(a)).transpose(1, 2).reshape(x.shape))
        return x + self.mlp(self.rms(x, self.g2))

    def forward(self, prompt, new_tokens: int = 4):
        b, t = prompt.shape
        rep = self.h // self.kvh
        x = self.emb(prompt) + self.pos(torch.arange(t, device=prompt.device))

        def causal(q, k, v):
            kr, vr = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
            return F.scaled_dot_product_attention(q, kr, vr, is_causal=True)

        logits = self.head(self.block(x, causal))
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), prompt[:, 1:].reshape(-1))
        k_cache = torch.zeros(b, self.kvh, self.max_len, self.dh, device=prompt.device, dtype=x.dtype)
        v_cache = torch.zeros_like(k_cache)
        _, k0, v0 = self.qkv(self.rms(x, self.g1))
        k_cache[:, :, :t] = k0
        v_cache[:, :, :t] = v0
        tok = logits[:, -1].argmax(-1)
        out_tokens, out_logp = [], []
        slots = torch.arange(self.max_len, device=prompt.device)
        for step in range(new_tokens):
            p = torch.tensor([t + step], device=prompt.device)
            xs = self.emb(tok)[:, None] + self.pos(p)

            def cached(q, k, v, p=p):
                k_cache.index_copy_(2, p, k)
                v_cache.index_copy_(2, p, v)
                kr, vr = k_cache.repeat_interleave(rep, 1), v_cache.repeat_interleave(rep, 1)
                mask = (slots <= p)[None, None, None, :]
                s = (q @ kr.transpose(-1, -2)) / math.sqrt(self.dh)
                return s.masked_fill(~mask, float("-inf")).softmax(-1) @ vr

            logp = F.log_softmax(self.head(self.block(xs, cached))[:, 0], -1)
            lp, tok = logp.max(-1)
            out_tokens.append(tok)
            out_logp.append(lp)
        return {"loss": loss, "tokens": torch.stack(out_tokens, 1), "logprobs": torch.stack(out_logp, 1)}


def kv_cache_gqa_decode():
    torch.manual_seed(0)
    return _GQADecoder(), (torch.randint(0, 24, (2, 6)),)


# ---------------------------------------------------------------- speech and recurrent decoders


class _ConformerBlock(nn.Module):
    def __init__(self, d: int, heads: int, kernel: int = 7):
        super().__init__()
        self.ff1 = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d))
        self.ff2 = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d))
        self.att_norm = nn.LayerNorm(d)
        self.att = nn.MultiheadAttention(d, heads, batch_first=True)
        self.conv_norm = nn.LayerNorm(d)
        self.pw1 = nn.Conv1d(d, 2 * d, 1)
        self.dw = nn.Conv1d(d, d, kernel, padding=kernel // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pw2 = nn.Conv1d(d, d, 1)
        self.out_norm = nn.LayerNorm(d)

    def forward(self, x, pad_mask):
        x = x + 0.5 * self.ff1(x)
        a = self.att_norm(x)
        x = x + self.att(a, a, a, key_padding_mask=pad_mask, need_weights=False)[0]
        c = F.glu(self.pw1(self.conv_norm(x).transpose(1, 2)), dim=1)
        c = c.masked_fill(pad_mask[:, None, :], 0.0)
        c = self.pw2(F.silu(self.bn(self.dw(c))))
        x = x + c.transpose(1, 2)
        return self.out_norm(x + 0.5 * self.ff2(x))


class _ConformerClassifier(nn.Module):
    """A Conformer keyword classifier: Conv2dSubsampling (two 3x3 stride-2 convs over (time, mel), ReLU,
    flattened channels x mel into a Linear), output lengths by the ((L - 1) // 2 - 1) // 2 arithmetic on the
    integer lengths, a padding mask from arange >= lengths, SpecAugment masks given as inputs, Conformer blocks
    (macaron half-step feed-forwards with SiLU, MultiheadAttention with key_padding_mask, the conv module:
    pointwise Conv1d, GLU, depthwise Conv1d, BatchNorm1d, SiLU, pointwise), masked mean pooling;
    cross_entropy."""

    def __init__(self, mels: int = 16, d: int = 16, heads: int = 2, blocks: int = 2, classes: int = 6):
        super().__init__()
        self.sub = nn.Sequential(nn.Conv2d(1, 8, 3, stride=2), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2), nn.ReLU())
        self.proj = nn.Linear(8 * (((mels - 1) // 2 - 1) // 2), d)
        self.blocks = nn.ModuleList(_ConformerBlock(d, heads) for _ in range(blocks))
        self.cls = nn.Linear(d, classes)

    def forward(self, feats, lengths, spec_mask, labels):
        x = self.sub((feats * spec_mask)[:, None])
        b, c, t, f = x.shape
        x = self.proj(x.permute(0, 2, 1, 3).reshape(b, t, c * f))
        out_len = ((lengths - 1) // 2 - 1) // 2
        pad = torch.arange(t, device=feats.device)[None, :] >= out_len[:, None]
        for block in self.blocks:
            x = block(x, pad)
        keep = (~pad).to(x.dtype)[..., None]
        pooled = (x * keep).sum(1) / keep.sum(1)
        logits = self.cls(pooled)
        return {"loss": F.cross_entropy(logits, labels), "logits": logits}


def conformer_block():
    torch.manual_seed(0)
    spec_mask = torch.ones(3, 40, 16)
    spec_mask[0, 10:16] = 0.0
    spec_mask[1, :, 3:6] = 0.0
    return _ConformerClassifier(), (
        torch.randn(3, 40, 16),
        torch.tensor([40, 31, 23]),
        spec_mask,
        torch.tensor([0, 5, 2]),
    )


class _RNNT(nn.Module):
    """An RNN-T (transducer): a strided Conv1d + Linear encoder, a prediction network (Embedding of the
    targets with the blank prepended by F.pad, an LSTM), the joint (broadcast add, tanh, Linear, log_softmax
    over T x (U + 1) x V), and the transducer loss by its forward variables written out: the blank and the
    label log-probabilities gathered, alpha over the lattice by logaddexp cell by cell, each utterance's final
    alpha picked at its own lengths by advanced indexing plus the last blank; the mean negative
    log-likelihood."""

    def __init__(self, feat: int = 12, d: int = 16, vocab: int = 6):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv1d(feat, d, 3, stride=2, padding=1), nn.ReLU(), nn.Conv1d(d, d, 3, padding=1))
        self.embed = nn.Embedding(vocab, d)
        self.pred = nn.LSTM(d, d, batch_first=True)
        self.j_enc, self.j_pred = nn.Linear(d, d), nn.Linear(d, d, bias=False)
        self.j_out = nn.Linear(d, vocab)

    def forward(self, feats, feat_lens, targets, target_lens):
        enc = self.enc(feats.transpose(1, 2)).transpose(1, 2)
        t_lens = (feat_lens + 1) // 2
        pred, _ = self.pred(self.embed(F.pad(targets, (1, 0), value=0)))
        joint = torch.tanh(self.j_enc(enc)[:, :, None] + self.j_pred(pred)[:, None])
        logp = F.log_softmax(self.j_out(joint), -1)
        b, t, u1, _ = logp.shape
        blank = logp[..., 0]
        emit = logp[:, :, :-1].gather(-1, targets[:, None, :, None].expand(-1, t, -1, 1))[..., 0]
        rows = []
        for ti in range(t):
            row = []
            for ui in range(u1):
                if ti == 0 and ui == 0:
                    row.append(torch.zeros(b, device=feats.device, dtype=logp.dtype))
                    continue
                paths = []
                if ti > 0:
                    paths.append(rows[ti - 1][ui] + blank[:, ti - 1, ui])
                if ui > 0:
                    paths.append(row[ui - 1] + emit[:, ti, ui - 1])
                row.append(paths[0] if len(paths) == 1 else torch.logaddexp(paths[0], paths[1]))
            rows.append(row)
        alpha = torch.stack([torch.stack(r, 1) for r in rows], 1)
        idx = torch.arange(b, device=feats.device)
        ll = alpha[idx, t_lens - 1, target_lens] + blank[idx, t_lens - 1, target_lens]
        return {"loss": -ll.mean(), "alpha": alpha}


def rnnt_joint_loss():
    torch.manual_seed(0)
    return _RNNT(), (
        torch.randn(2, 12, 12),
        torch.tensor([12, 9]),
        torch.tensor([[3, 1, 4], [2, 5, 0]]),
        torch.tensor([3, 2]),
    )


class _Tacotron2Decoder(nn.Module):
    """Tacotron 2 with location-sensitive attention: an Embedding + Conv1d/BatchNorm1d encoder, a decoder
    loop over teacher-forced mel frames (a ReLU prenet, an attention LSTMCell, location features by a Conv1d
    over the previous and cumulative attention weights, additive energies masked by the text lengths with -inf,
    softmax, context by bmm, a decoder LSTMCell, mel and stop-token projections), a tanh Conv1d postnet with a
    residual; mel MSE before and after the postnet plus BCE-with-logits on stop targets made from the mel
    lengths."""

    def __init__(self, vocab: int = 12, d: int = 16, mel: int = 8, att: int = 12):
        super().__init__()
        self.d, self.mel = d, mel
        self.embed = nn.Embedding(vocab, d)
        self.enc = nn.Sequential(nn.Conv1d(d, d, 5, padding=2), nn.BatchNorm1d(d), nn.ReLU())
        self.prenet = nn.Sequential(nn.Linear(mel, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU())
        self.att_rnn = nn.LSTMCell(16 + d, d)
        self.query, self.memory = nn.Linear(d, att, bias=False), nn.Linear(d, att, bias=False)
        self.loc_conv = nn.Conv1d(2, 4, 7, padding=3, bias=False)
        self.loc_dense = nn.Linear(4, att, bias=False)
        self.v = nn.Linear(att, 1, bias=False)
        self.dec_rnn = nn.LSTMCell(2 * d, d)
        self.proj, self.stop = nn.Linear(2 * d, mel), nn.Linear(2 * d, 1)
        self.postnet = nn.Sequential(nn.Conv1d(mel, 16, 5, padding=2), nn.Tanh(), nn.Conv1d(16, mel, 5, padding=2))

    def forward(self, text, text_lens, mels, mel_lens):
        b, n = text.shape
        memory = self.enc(self.embed(text).transpose(1, 2)).transpose(1, 2)
        pm = self.memory(memory)
        text_mask = torch.arange(n, device=text.device)[None] >= text_lens[:, None]
        zeros = memory.new_zeros(b, self.d)
        h_a, c_a, h_d, c_d, ctx = zeros, zeros, zeros, zeros, zeros
        w, w_cum = memory.new_zeros(b, n), memory.new_zeros(b, n)
        go = mels.new_zeros(b, 1, self.mel)
        frames = self.prenet(torch.cat([go, mels[:, :-1]], 1))
        outs, stops, aligns = [], [], []
        for i in range(mels.shape[1]):
            h_a, c_a = self.att_rnn(torch.cat([frames[:, i], ctx], -1), (h_a, c_a))
            loc = self.loc_dense(self.loc_conv(torch.stack([w, w_cum], 1)).transpose(1, 2))
            energy = self.v(torch.tanh(self.query(h_a)[:, None] + loc + pm))[..., 0]
            w = energy.masked_fill(text_mask, float("-inf")).softmax(-1)
            w_cum = w_cum + w
            ctx = torch.bmm(w[:, None], memory)[:, 0]
            h_d, c_d = self.dec_rnn(torch.cat([h_a, ctx], -1), (h_d, c_d))
            hc = torch.cat([h_d, ctx], -1)
            outs.append(self.proj(hc))
            stops.append(self.stop(hc)[:, 0])
            aligns.append(w)
        mel_out = torch.stack(outs, 1)
        post = mel_out + self.postnet(mel_out.transpose(1, 2)).transpose(1, 2)
        stop = torch.stack(stops, 1)
        stop_target = (torch.arange(mels.shape[1], device=text.device)[None] >= mel_lens[:, None] - 1).to(stop.dtype)
        loss = (
            F.mse_loss(mel_out, mels) + F.mse_loss(post, mels) + F.binary_cross_entropy_with_logits(stop, stop_target)
        )
        return {"loss": loss, "mel": post, "alignments": torch.stack(aligns, 1)}


def tacotron_location_attn():
    torch.manual_seed(0)
    return _Tacotron2Decoder(), (
        torch.randint(1, 12, (2, 7)),
        torch.tensor([7, 5]),
        torch.randn(2, 6, 8),
        torch.tensor([6, 4]),
    )


class _BeamSearchSeq2Seq(nn.Module):
    """A GRU encoder-decoder trained by teacher forcing and decoded by beam search in forward: beams kept as
    (B * K) rows, scores initialised to [0, -inf, ...], each step's log_softmax added to the beam scores, the
    top K over K x V by topk on the flattened scores, beam origin and token by // and %, hidden states
    reordered by index_select with batch offsets, finished beams forced to EOS by masked_fill, GNMT length
    penalty ((5 + len) / 6) ** alpha, the best sequence per batch by argmax and gather."""

    def __init__(self, vocab: int = 16, d: int = 16, beam: int = 3, steps: int = 5, eos: int = 1, bos: int = 0):
        super().__init__()
        self.vocab, self.beam, self.steps, self.eos, self.bos = vocab, beam, steps, eos, bos
        self.src_emb, self.tgt_emb = nn.Embedding(vocab, d), nn.Embedding(vocab, d)
        self.encoder = nn.GRU(d, d, batch_first=True)
        self.cell = nn.GRUCell(d, d)
        self.out = nn.Linear(d, vocab)

    def forward(self, src, tgt):
        _, h = self.encoder(self.src_emb(src))
        h = h[0]
        b = src.shape[0]
        bos = torch.full((b, 1), self.bos, dtype=torch.long, device=src.device)
        dec_in = torch.cat([bos, tgt[:, :-1]], 1)
        hs, ht = [], h
        for i in range(tgt.shape[1]):
            ht = self.cell(self.tgt_emb(dec_in[:, i]), ht)
            hs.append(ht)
        logits = self.out(torch.stack(hs, 1))
        loss = F.cross_entropy(logits.reshape(-1, self.vocab), tgt.reshape(-1))
        k, v = self.beam, self.vocab
        hb = h.repeat_interleave(k, 0)
        scores = torch.full((b, k), float("-inf"), device=src.device, dtype=h.dtype)
        scores[:, 0] = 0.0
        tok = torch.full((b * k,), self.bos, dtype=torch.long, device=src.device)
        finished = torch.zeros(b * k, dtype=torch.bool, device=src.device)
        seqs = torch.zeros(b * k, 0, dtype=torch.long, device=src.device)
        offsets = (torch.arange(b, device=src.device) * k)[:, None]
        for _ in range(self.steps):
            hb = self.cell(self.tgt_emb(tok), hb)
            logp = F.log_softmax(self.out(hb), -1)
            eos_only = torch.full_like(logp, float("-inf"))
            eos_only[:, self.eos] = 0.0
            logp = torch.where(finished[:, None], eos_only, logp)
            cand = (scores.view(b * k, 1) + logp).view(b, k * v)
            scores, flat = cand.topk(k, -1)
            origin, tok_b = flat // v, flat % v
            rows = (origin + offsets).view(-1)
            hb, seqs, finished = hb.index_select(0, rows), seqs.index_select(0, rows), finished.index_select(0, rows)
            tok = tok_b.view(-1)
            seqs = torch.cat([seqs, tok[:, None]], 1)
            finished = finished | (tok == self.eos)
        lengths = (seqs != self.eos).sum(-1).clamp(min=1).view(b, k).to(h.dtype) + 1
        normed = scores / ((5 + lengths) / 6) ** 0.6
        best = normed.argmax(-1)
        best_seq = seqs.view(b, k, -1).gather(1, best[:, None, None].expand(-1, 1, seqs.shape[-1]))[:, 0]
        return {"loss": loss, "best": best_seq, "best_score": normed.gather(1, best[:, None])[:, 0]}


def beam_search_gru():
    torch.manual_seed(0)
    return _BeamSearchSeq2Seq(), (torch.randint(2, 16, (2, 7)), torch.randint(1, 16, (2, 5)))


# ---------------------------------------------------------------- reinforcement learning


class _PPO(nn.Module):
    """A PPO update on a rollout: a shared tanh torso with policy and value heads, the bootstrap value of the
    last observation detached, generalized advantage estimation by a reverse Python loop over time (done
    masks), returns, advantages normalised by mean/std, log-probabilities of the taken actions by
    log_softmax + gather, the clipped surrogate (exp of the log-ratio, clamp, minimum), the clipped value loss
    (maximum of two squared errors), the entropy bonus, approx-KL and the clip fraction."""

    def __init__(self, obs: int = 6, actions: int = 4, hidden: int = 32, gamma: float = 0.99, lam: float = 0.95):
        super().__init__()
        self.gamma, self.lam, self.clip = gamma, lam, 0.2
        self.torso = nn.Sequential(nn.Linear(obs, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.pi, self.v = nn.Linear(hidden, actions), nn.Linear(hidden, 1)

    def forward(self, obs, actions, rewards, dones, old_logp, old_values, last_obs, last_done):
        with torch.no_grad():
            next_value = self.v(self.torso(last_obs))[:, 0]
        steps = rewards.shape[0]
        adv = torch.zeros_like(rewards)
        last = torch.zeros_like(rewards[0])
        for t in reversed(range(steps)):
            if t == steps - 1:
                nonterminal, nv = 1.0 - last_done, next_value
            else:
                nonterminal, nv = 1.0 - dones[t + 1], old_values[t + 1]
            delta = rewards[t] + self.gamma * nv * nonterminal - old_values[t]
            last = delta + self.gamma * self.lam * nonterminal * last
            adv[t] = last
        returns = adv + old_values
        h = self.torso(obs)
        logits, value = self.pi(h), self.v(h)[..., 0]
        logp_all = F.log_softmax(logits, -1)
        logp = logp_all.gather(-1, actions[..., None])[..., 0]
        entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
        a = ((adv - adv.mean()) / (adv.std() + 1e-8)).flatten()
        log_ratio = (logp - old_logp).flatten()
        ratio = log_ratio.exp()
        pg = torch.max(-a * ratio, -a * ratio.clamp(1 - self.clip, 1 + self.clip)).mean()
        v_clipped = old_values + (value - old_values).clamp(-self.clip, self.clip)
        v_loss = 0.5 * torch.max((value - returns) ** 2, (v_clipped - returns) ** 2).mean()
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clipfrac = ((ratio - 1).abs() > self.clip).to(ratio.dtype).mean()
        loss = pg + 0.5 * v_loss - 0.01 * entropy
        return {"loss": loss, "approx_kl": approx_kl, "clipfrac": clipfrac, "value": value}


def ppo_gae_loss():
    torch.manual_seed(0)
    t, n = 8, 3
    dones = torch.zeros(t, n)
    dones[5, 1] = 1.0
    return _PPO(), (
        torch.randn(t, n, 6),
        torch.randint(0, 4, (t, n)),
        torch.randn(t, n),
        dones,
        torch.randn(t, n) * 0.1 - 1.4,
        torch.randn(t, n),
        torch.randn(n, 6),
        torch.tensor([0.0, 1.0, 0.0]),
    )


class _C51(nn.Module):
    """A C51 distributional double-DQN update: online and target nets (a deep copy with requires_grad False),
    the support by linspace in forward, Q as the expectation of the softmax distribution, next actions by the
    online argmax, the target's next distribution picked by them, the Bellman-projected support clamped to
    [vmin, vmax], floor/ceil bins as long with the two in-place masked fixes for l == u, the projection by
    index_add into a flat zeros with per-row offsets, the cross-entropy with the taken actions'
    log-distributions."""

    def __init__(self, obs: int = 8, actions: int = 3, atoms: int = 11, vmin: float = -5.0, vmax: float = 5.0):
        super().__init__()
        self.a, self.atoms, self.vmin, self.vmax, self.gamma = actions, atoms, vmin, vmax, 0.9
        self.online = nn.Sequential(nn.Linear(obs, 32), nn.ReLU(), nn.Linear(32, actions * atoms))
        self.target = copy.deepcopy(self.online)
        for p in self.target.parameters():
            p.requires_grad_(False)

    def dist(self, net, x):
        return F.log_softmax(net(x).view(-1, self.a, self.atoms), -1)

    def forward(self, obs, actions, rewards, next_obs, dones):
        b = obs.shape[0]
        support = torch.linspace(self.vmin, self.vmax, self.atoms, device=obs.device)
        dz = (self.vmax - self.vmin) / (self.atoms - 1)
        logp = self.dist(self.online, obs)
        q = (logp.exp() * support).sum(-1)
        with torch.no_grad():
            next_a = (self.dist(self.online, next_obs).exp() * support).sum(-1).argmax(-1)
            next_p = self.dist(self.target, next_obs).exp()[torch.arange(b, device=obs.device), next_a]
            tz = (rewards[:, None] + self.gamma * (1 - dones[:, None]) * support).clamp(self.vmin, self.vmax)
            bpos = (tz - self.vmin) / dz
            lo, up = bpos.floor().long(), bpos.ceil().long()
            lo[(up > 0) & (lo == up)] -= 1
            up[(lo < self.atoms - 1) & (lo == up)] += 1
            offset = (torch.arange(b, device=obs.device) * self.atoms)[:, None].expand(b, self.atoms)
            proj = torch.zeros(b * self.atoms, device=obs.device)
            proj.index_add_(0, (lo + offset).reshape(-1), (next_p * (up.to(bpos.dtype) - bpos)).reshape(-1))
            proj.index_add_(0, (up + offset).reshape(-1), (next_p * (bpos - lo.to(bpos.dtype))).reshape(-1))
            proj = proj.view(b, self.atoms)
        taken = logp[torch.arange(b, device=obs.device), actions]
        loss = -(proj * taken).sum(-1).mean()
        return {"loss": loss, "q": q, "target_dist": proj}


def c51_projection():
    torch.manual_seed(0)
    rewards = torch.tensor([1.0, -0.5, 0.0, 5.0, -7.0, 0.25])
    dones = torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    return _C51(), (torch.randn(6, 8), torch.tensor([0, 2, 1, 1, 0, 2]), rewards, torch.randn(6, 8), dones)


# ---------------------------------------------------------------- routing, autograd transforms and solvers


class _SwitchMoE(nn.Module):
    """A Switch Transformer layer with expert capacity: a router softmax, top-1 expert by argmax, the
    position of each token in its expert by cumsum of the one-hot mask, tokens over capacity dropped (their
    residual passes), the (tokens, experts, capacity) dispatch by one_hot of the position and the combine
    weights, expert inputs and outputs by einsum with batched expert weights (GELU), the load-balancing
    auxiliary loss and the router z-loss (logsumexp squared); next to a causal self-attention; cross_entropy
    plus the router losses, the dropped fraction reported."""

    def __init__(self, vocab: int = 20, d: int = 16, experts: int = 4, ff: int = 32, cf: float = 1.0):
        super().__init__()
        self.e, self.cf = experts, cf
        self.emb = nn.Embedding(vocab, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.router = nn.Linear(d, experts, bias=False)
        self.w_in = nn.Parameter(torch.randn(experts, d, ff) / math.sqrt(d))
        self.w_out = nn.Parameter(torch.randn(experts, ff, d) / math.sqrt(ff))
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens, targets):
        b, n = tokens.shape
        x = self.emb(tokens)
        a = self.ln1(x)
        causal = torch.triu(torch.ones(n, n, dtype=torch.bool, device=tokens.device), 1)
        x = x + self.attn(a, a, a, attn_mask=causal, need_weights=False)[0]
        h = self.ln2(x).reshape(b * n, -1)
        logits = self.router(h)
        probs = logits.softmax(-1)
        gate, expert = probs.max(-1)
        mask = F.one_hot(expert, self.e)
        capacity = int(math.ceil(b * n / self.e * self.cf))
        position = torch.cumsum(mask, 0) * mask
        kept = mask * (position <= capacity).to(mask.dtype)
        slot = F.one_hot((position - 1).clamp(0, capacity - 1), capacity) * kept[..., None]
        dispatch = slot.to(h.dtype)
        combine = dispatch * gate[:, None, None]
        expert_in = torch.einsum("tec,td->ecd", dispatch, h)
        expert_out = torch.einsum(
            "ecf,efd->ecd", F.gelu(torch.einsum("ecd,edf->ecf", expert_in, self.w_in)), self.w_out
        )
        y = torch.einsum("tec,ecd->td", combine, expert_out)
        x = x + y.view(b, n, -1)
        out = self.head(x)
        aux = self.e * (mask.to(h.dtype).mean(0) * probs.mean(0)).sum()
        z_loss = torch.logsumexp(logits, -1).pow(2).mean()
        loss = F.cross_entropy(out.view(b * n, -1), targets.view(-1)) + 0.01 * aux + 0.001 * z_loss
        dropped = 1 - kept.sum() / (b * n)
        return {"loss": loss, "logits": out, "dropped": dropped}


def switch_moe_capacity():
    torch.manual_seed(0)
    return _SwitchMoE(), (torch.randint(0, 20, (2, 10)), torch.randint(0, 20, (2, 10)))


class _DPSGD(nn.Module):
    """DP-SGD's per-sample gradients by torch.func: the parameters detached into a dict, a per-example
    loss through functional_call, vmap(grad(...)) over the batch, per-sample norms over all parameters,
    clip factors min(1, C / norm), the clipped sum plus Gaussian noise (given as input) scaled by sigma * C,
    averaged; the model's ordinary batch loss is the training loss, the noisy update and the norms are
    outputs."""

    def __init__(self, d: int = 10, classes: int = 3, clip: float = 1.0, sigma: float = 0.5):
        super().__init__()
        self.clip, self.sigma = clip, sigma
        self.net = nn.Sequential(nn.Linear(d, 16), nn.Tanh(), nn.Linear(16, classes))

    def forward(self, x, y, noise):
        params = {k: v.detach() for k, v in self.net.named_parameters()}

        def per_example(p, xi, yi):
            out = torch.func.functional_call(self.net, p, (xi[None],))
            return F.cross_entropy(out, yi[None])

        grads = torch.func.vmap(torch.func.grad(per_example), in_dims=(None, 0, 0))(params, x, y)
        flat = torch.cat([g.flatten(1) for g in grads.values()], 1)
        norms = torch.linalg.vector_norm(flat, dim=1)
        factor = (self.clip / (norms + 1e-6)).clamp(max=1.0)
        update = ((flat * factor[:, None]).sum(0) + self.sigma * self.clip * noise) / x.shape[0]
        loss = F.cross_entropy(self.net(x), y)
        return {"loss": loss, "per_sample_norms": norms, "noisy_update": update}


def dpsgd_vmap_grad():
    torch.manual_seed(0)
    n_params = 10 * 16 + 16 + 16 * 3 + 3
    return _DPSGD(), (torch.randn(8, 10), torch.randint(0, 3, (8,)), torch.randn(n_params))


class _NeuralODE(nn.Module):
    """A neural ODE classifier/regressor: the state augmented with zeros by F.pad (ANODE), a time-dependent
    vector field (the time concatenated as a feature, tanh MLP), fixed-step classic RK4 over a time grid
    made by linspace, the trajectory stacked, a kinetic-energy regulariser from the stage derivatives, MSE
    of the projected trajectory against observed states at the grid points and cross_entropy of the final
    state."""

    def __init__(self, d: int = 4, aug: int = 2, hidden: int = 32, steps: int = 8, classes: int = 3):
        super().__init__()
        self.aug, self.steps = aug, steps
        self.f = nn.Sequential(
            nn.Linear(d + aug + 1, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, d + aug)
        )
        self.readout = nn.Linear(d + aug, d)
        self.cls = nn.Linear(d + aug, classes)

    def field(self, t, h):
        return self.f(torch.cat([h, t.expand(h.shape[0], 1)], -1))

    def forward(self, x0, observed, labels):
        h = F.pad(x0, (0, self.aug))
        ts = torch.linspace(0.0, 1.0, self.steps + 1, device=x0.device, dtype=x0.dtype)
        traj, kinetic = [h], 0
        for i in range(self.steps):
            t, dt = ts[i], ts[i + 1] - ts[i]
            k1 = self.field(t, h)
            k2 = self.field(t + dt / 2, h + dt / 2 * k1)
            k3 = self.field(t + dt / 2, h + dt / 2 * k2)
            k4 = self.field(t + dt, h + dt * k3)
            h = h + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            kinetic = kinetic + (k1.pow(2).sum(-1) * dt).mean()
            traj.append(h)
        traj = torch.stack(traj, 1)
        logits = self.cls(h)
        loss = F.mse_loss(self.readout(traj), observed) + F.cross_entropy(logits, labels) + 0.01 * kinetic
        return {"loss": loss, "trajectory": traj, "logits": logits}


def neural_ode_rk4():
    torch.manual_seed(0)
    return _NeuralODE(), (torch.randn(5, 4), torch.randn(5, 9, 4), torch.tensor([0, 1, 2, 1, 0]))


MODELS = {
    "pwc_cost_volume": (
        "vision",
        "PWC-Net optical flow: strided feature pyramid, local correlation cost volume (F.pad, shifted slices, channel mean, stack), flow upsampled by bilinear x2, backward warp by grid_sample with a validity mask, multi-scale EPE by vector_norm",
    ),
    "guided_filter_boxsum": (
        "vision",
        "deep guided filter: box filter by integral images (cumsum, narrow, shifted differences, cat), guided-filter A and b with a softplus eps, A/b upsampled by bilinear align_corners=True, Charbonnier loss by sqrt",
    ),
    "aspp_ohem_channels_last": (
        "vision",
        "DeepLabV3 in channels_last (model .to(memory_format), input .contiguous(memory_format)): ASPP with dilations 2/4/6 and an image-pooling branch, bilinear align_corners=True logits, OHEM CE ignore_index 255 (sort, Python branch on a value, bool-mask select)",
    ),
    "soft_argmax_keypoints": (
        "vision",
        "integral keypoint regression: hourglass (max_pool2d, nearest up, skip add), spatial softmax with a softplus temperature, expected x/y over linspace tables, visibility-masked L1, heatmap variance, argmax + torch.unravel_index",
    ),
    "stylegan2_modconv": (
        "generative",
        "StyleGAN2 generator: pixel norm by rsqrt, equalised-lr linears, modulated/demodulated convs as grouped conv (groups = batch), grouped conv_transpose2d + [1,3,3,1] blur, noise injection, RGB skips; minibatch-stddev discriminator, softplus G loss",
    ),
    "ddpm_eps_step": (
        "generative",
        "DDPM step: linspace betas, cumprod alpha-bar gathered at integer timesteps, sinusoidal time embedding, FiLM after GroupNorm in a tiny U-Net, min-SNR weighted epsilon MSE, posterior mean and clipped log-variance, t == 0 mask",
    ),
    "neural_spline_flow": (
        "generative",
        "neural spline flow: rational-quadratic spline couplings (softmax widths/heights, cumsum + F.pad knots, softplus derivatives, searchsorted bins, gather), linear tails by where, flip permutations, log-det and normal base NLL",
    ),
    "nerf_volume_render": (
        "geometric",
        "NeRF: stratified depths with given jitter, positional encoding by powers of two, density/colour MLP, alpha compositing with an exclusive cumprod, inverse-CDF resampling (cumsum, searchsorted right, gather, where), sort, fine pass, PSNR",
    ),
    "rotation_6d_geodesic": (
        "geometric",
        "pose regression: 6-D rotation by Gram-Schmidt (normalize, linalg.cross), ground truth by Rodrigues, geodesic loss by acos of the clamped trace (diagonal), ADD on model points, quaternions by Shepperd branches (relu/sqrt, argmax, gather)",
    ),
    "pointnet2_fps_ballquery": (
        "pointcloud",
        "PointNet++: farthest point sampling as a loop (minimum, argmax, batched indexing), ball query (bool-mask index_put, sort, where), grouped 1x1 Conv2d + BN MLP, max over neighbours, 3-NN inverse-distance feature propagation",
    ),
    "schnet_forces": (
        "graph",
        "SchNet: radius graph by a same-molecule mask and nonzero, Gaussian RBF and cosine cutoff, continuous-filter convs with shifted softplus and index_add, per-molecule energy by index_add, forces by autograd.grad under enable_grad (double backward)",
    ),
    "transformer_xl_relshift": (
        "attention",
        "Transformer-XL LM over two segments: detached memory concatenation, relative sinusoid made in forward, content/position einsum scores with global biases, relative shift by zero-pad + view, causal triu mask offset by the memory",
    ),
    "lsh_bucket_attention": (
        "attention",
        "Reformer LSH attention: buckets by argmax of rotations (an input), sort key bucket * L + position, argsort and inverse argsort, gathers, chunked look-one-back by roll, self mask -5e4, softmax via logsumexp, unsort by gather",
    ),
    "perceiver_fourier_latents": (
        "attention",
        "Perceiver: Fourier position features (meshgrid of linspace, linspace bands, sin/cos), learned latents expanded, hand-written cross-attention with different widths, weight-shared latent SDPA blocks, GEGLU, a decoder query",
    ),
    "kv_cache_gqa_decode": (
        "attention",
        "decoder LM served with a preallocated KV cache: grouped-query attention by repeat_interleave, RMSNorm, prefill by slice assignment, greedy decode steps writing by index_copy_, arange <= position mask, argmax tokens and log-probs",
    ),
    "conformer_block": (
        "speech",
        "Conformer classifier: Conv2dSubsampling, integer length arithmetic, padding mask, SpecAugment masks as input, macaron SiLU feed-forwards, MultiheadAttention with key_padding_mask, GLU + depthwise Conv1d + BatchNorm1d conv module, masked mean",
    ),
    "rnnt_joint_loss": (
        "loss",
        "RNN-T: Conv1d encoder, Embedding + LSTM predictor over F.pad-ed targets, broadcast joint with tanh and log_softmax, blank/label gathers, the transducer forward variables by logaddexp over the lattice, per-utterance final alpha by indexing",
    ),
    "tacotron_location_attn": (
        "rnn",
        "Tacotron 2 decoder: prenet, attention LSTMCell, location-sensitive attention (Conv1d over previous and cumulative weights, additive energies, -inf text mask), bmm context, decoder LSTMCell, tanh Conv1d postnet, stop-token BCE",
    ),
    "beam_search_gru": (
        "rnn",
        "GRU seq2seq: teacher-forced GRUCell CE, then beam search in forward: -inf initial beams, flattened topk, // and % back-pointers, index_select reordering, EOS forcing by where, GNMT length penalty, argmax best sequence",
    ),
    "ppo_gae_loss": (
        "rl",
        "PPO update: GAE by a reverse Python loop with done masks, normalised advantages, log_softmax + gather log-probs, clipped surrogate (exp, clamp, max), clipped value loss, entropy, approx-KL, clip fraction",
    ),
    "c51_projection": (
        "rl",
        "C51 double DQN: frozen target copy, support by linspace, expected Q, online argmax, Bellman-projected support clamped, floor/ceil to long with in-place masked fixes, projection by index_add with row offsets, cross-entropy",
    ),
    "switch_moe_capacity": (
        "routing",
        "Switch Transformer layer: top-1 router, token positions per expert by cumsum of one_hot, capacity drop, dispatch/combine tensors by one_hot, expert einsums with batched weights, load-balance and z-loss (logsumexp^2), causal MHA",
    ),
    "dpsgd_vmap_grad": (
        "autograd",
        "DP-SGD per-sample gradients: torch.func.functional_call on detached params, vmap(grad(...)), per-sample norms, clip factors, clipped sum + given Gaussian noise; the ordinary batch loss trains",
    ),
    "neural_ode_rk4": (
        "math",
        "neural ODE: zero-augmented state by F.pad, time-dependent tanh vector field, fixed-step RK4 over a linspace grid in a Python loop, stacked trajectory, kinetic-energy regulariser, trajectory MSE + CE",
    ),
}

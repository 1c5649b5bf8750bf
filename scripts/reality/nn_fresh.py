"""The FRESH set of plain ``torch.nn`` user models: a third set, written after the tuning set
(``nn_models.py``) and the held-out set (``nn_heldout.py``) had both been seen by the people who tune
opcov's rules, and written without reading how opcov judges models. It holds whole small architectures of
kinds users write (a UNet, a temporal conv net, an MLP-mixer, a ConvLSTM, a GRU seq2seq with additive
attention, a point-cloud EdgeConv, capsules, a VAE, a Siamese net, a dense graph net, CBAM, a RoPE block,
a top-2 mixture of experts...) and layers or argument values neither earlier set uses. It measures opcov's
verdicts on PyTorch/XLA beyond the models it was tuned on; nothing may be tuned on it.

The same contract as the other sets: each factory ``NAME()`` returns ``(model, inputs)``, seeded inside,
small, callable under ``torch.device("meta")`` (no tensor built from another's values in the factory;
tables a model needs, such as rotary angles, are made in ``forward``); a floating output depends on the
parameters; no complex output; no randomness on the compared path (the VAE's noise is an input). Two
models are data-dependent on purpose (``run_length_pool``: unique_consecutive and masked_select;
``moe_top2_loop``: torch.where over an expert mask).

    PYTHONPATH=scripts/reality opcov trace nn_fresh:unet_small --mode training --out x.yaml
    PJRT_DEVICE=CPU .envs/xla/bin/python scripts/envs/nn_reality.py --set fresh --models unet_small

``MODELS`` names each factory: name -> (family, one-line description).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------- vision


def _double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class _UNetSmall(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1, self.enc2, self.mid = _double_conv(3, 8), _double_conv(8, 16), _double_conv(16, 16)
        self.pool = nn.MaxPool2d(2)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.dec2, self.dec1 = _double_conv(32, 8), _double_conv(16, 8)
        self.out = nn.Conv2d(8, 2, 1)

    def _up_cat(self, x, skip):
        x = self.up(x)
        dh, dw = skip.shape[-2] - x.shape[-2], skip.shape[-1] - x.shape[-1]
        x = F.pad(x, (dw // 2, dw - dw // 2, dh // 2, dh - dh // 2))  # odd sizes: pad the upsampled map
        return torch.cat([skip, x], dim=1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        m = self.mid(self.pool(e2))
        d2 = self.dec2(self._up_cat(m, e2))
        return self.out(self.dec1(self._up_cat(d2, e1)))


def unet_small():
    torch.manual_seed(0)
    return _UNetSmall(), (torch.randn(2, 3, 13, 11),)


class _Espcn(nn.Module):
    def __init__(self, r=3):
        super().__init__()
        self.r = r
        self.c1 = nn.Conv2d(3, 16, 5, padding=2)
        self.c2 = nn.Conv2d(16, 8, 3, padding=1)
        self.c3 = nn.Conv2d(8, 3 * r * r, 3, padding=1)
        self.shuffle = nn.PixelShuffle(r)

    def forward(self, x):
        y = self.shuffle(self.c3(torch.tanh(self.c2(torch.tanh(self.c1(x))))))
        base = F.interpolate(x, scale_factor=self.r, mode="bilinear", align_corners=False)
        return (y + base).clamp(0.0, 1.0)


def espcn_superres():
    torch.manual_seed(0)
    return _Espcn(), (torch.rand(2, 3, 6, 6),)


class _Mixer(nn.Module):
    def __init__(self, patches=16, ch=12):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(ch), nn.LayerNorm(ch)
        self.token = nn.Sequential(nn.Linear(patches, 2 * patches), nn.GELU(), nn.Linear(2 * patches, patches))
        self.channel = nn.Sequential(nn.Linear(ch, 2 * ch), nn.GELU(), nn.Linear(2 * ch, ch))

    def forward(self, x):  # (B, P, C)
        x = x + self.token(self.ln1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel(self.ln2(x))


class _MlpMixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 12, 4, stride=4)
        self.layers = nn.Sequential(_Mixer(), _Mixer())
        self.norm = nn.LayerNorm(12)
        self.head = nn.Linear(12, 5)

    def forward(self, x):
        p = self.stem(x).flatten(2).transpose(1, 2)  # (B, 16 patches, 12)
        return self.head(self.norm(self.layers(p)).mean(1))


def mlp_mixer():
    torch.manual_seed(0)
    return _MlpMixer(), (torch.randn(2, 3, 16, 16),)


class _Cbam(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.mlp = nn.Sequential(nn.Conv2d(8, 2, 1, bias=False), nn.ReLU(), nn.Conv2d(2, 8, 1, bias=False))
        self.avg, self.mx = nn.AdaptiveAvgPool2d(1), nn.AdaptiveMaxPool2d(1)
        self.spatial = nn.Conv2d(2, 1, 7, padding=3, bias=False)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        y = self.conv(x)
        y = y * torch.sigmoid(self.mlp(self.avg(y)) + self.mlp(self.mx(y)))  # channel attention
        sa = torch.sigmoid(self.spatial(torch.cat([y.mean(1, keepdim=True), y.amax(1, keepdim=True)], 1)))
        y = y * sa  # spatial attention
        return self.head(F.adaptive_avg_pool2d(y, 1).flatten(1)), sa


def cbam_attention():
    torch.manual_seed(0)
    return _Cbam(), (torch.randn(2, 3, 9, 9),)


# ---------------------------------------------------------------- sequence and recurrent


class _TemporalBlock(nn.Module):
    def __init__(self, cin, cout, k, d):
        super().__init__()
        self.pad = (k - 1) * d
        self.c1 = nn.Conv1d(cin, cout, k, dilation=d, padding=self.pad)  # padded both sides, chomped
        self.c2 = nn.Conv1d(cout, cout, k, dilation=d)  # padded on the left only
        self.down = nn.Conv1d(cin, cout, 1) if cin != cout else None

    def forward(self, x):
        y = F.relu(self.c1(x)[:, :, : -self.pad])
        y = F.relu(self.c2(F.pad(y, (self.pad, 0))))
        return F.relu(y + (x if self.down is None else self.down(x)))


class _Tcn(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(_TemporalBlock(3, 6, 3, 1), _TemporalBlock(6, 6, 3, 2), _TemporalBlock(6, 8, 2, 4))
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        y = self.blocks(x)
        return self.head(y[:, :, -1]), y.mean(1)


def tcn_causal():
    torch.manual_seed(0)
    return _Tcn(), (torch.randn(2, 3, 20),)


class _ConvLstm(nn.Module):
    def __init__(self, cin=2, hid=4):
        super().__init__()
        self.hid = hid
        self.gates = nn.Conv2d(cin + hid, 4 * hid, 3, padding=1)
        self.head = nn.Conv2d(hid, 1, 1)

    def forward(self, x):  # (N, T, C, H, W)
        n, t, _, h, w = x.shape
        hs = x.new_zeros(n, self.hid, h, w)
        cs = x.new_zeros(n, self.hid, h, w)
        outs = []
        for i in range(t):
            ig, fg, gg, og = self.gates(torch.cat([x[:, i], hs], 1)).chunk(4, 1)
            cs = torch.sigmoid(fg) * cs + torch.sigmoid(ig) * torch.tanh(gg)
            hs = torch.sigmoid(og) * torch.tanh(cs)
            outs.append(hs)
        return self.head(hs), torch.stack(outs, 1)


def conv_lstm():
    torch.manual_seed(0)
    return _ConvLstm(), (torch.randn(2, 4, 2, 6, 6),)


class _Seq2SeqAttn(nn.Module):
    def __init__(self, src_vocab=20, tgt_vocab=15, emb=8, hid=6):
        super().__init__()
        self.emb_src = nn.Embedding(src_vocab, emb, padding_idx=0)
        self.enc = nn.GRU(emb, hid, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(2 * hid, hid)
        self.emb_tgt = nn.Embedding(tgt_vocab, emb)
        self.dec = nn.GRUCell(emb + 2 * hid, hid)
        self.w_h = nn.Linear(2 * hid, hid, bias=False)
        self.w_s = nn.Linear(hid, hid)
        self.v = nn.Linear(hid, 1, bias=False)
        self.out = nn.Linear(hid + 2 * hid, tgt_vocab)

    def forward(self, src, src_mask, tgt_in):
        enc_out, h = self.enc(self.emb_src(src))  # (B, S, 2H)
        s = torch.tanh(self.bridge(torch.cat([h[0], h[1]], -1)))
        keys = self.w_h(enc_out)
        logits, attns = [], []
        for t in range(tgt_in.shape[1]):  # teacher forcing
            e = self.v(torch.tanh(keys + self.w_s(s).unsqueeze(1))).squeeze(-1)  # Bahdanau (additive) scores
            a = torch.softmax(e.masked_fill(~src_mask, float("-inf")), -1)
            ctx = torch.bmm(a.unsqueeze(1), enc_out).squeeze(1)
            s = self.dec(torch.cat([self.emb_tgt(tgt_in[:, t]), ctx], -1), s)
            logits.append(self.out(torch.cat([s, ctx], -1)))
            attns.append(a)
        return F.log_softmax(torch.stack(logits, 1), -1), torch.stack(attns, 1)


def gru_seq2seq_bahdanau():
    torch.manual_seed(0)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    return _Seq2SeqAttn(), (torch.randint(1, 20, (2, 6)), mask, torch.randint(0, 15, (2, 4)))


# ---------------------------------------------------------------- attention


class _MhaKdimVdim(nn.Module):
    def __init__(self):
        super().__init__()
        self.cross = nn.MultiheadAttention(12, 4, batch_first=True, kdim=8, vdim=6)
        self.self_ = nn.MultiheadAttention(12, 2, bias=False, add_bias_kv=True, add_zero_attn=True)

    def forward(self, q, k, v, pad):
        o1, w1 = self.cross(q, k, v, key_padding_mask=pad, need_weights=True, average_attn_weights=True)
        x = o1.transpose(0, 1)  # the second one is sequence-first
        o2, w2 = self.self_(x, x, x, need_weights=True, average_attn_weights=False)
        return o1, w1, o2, w2


def mha_kdim_bias_kv():
    torch.manual_seed(0)
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[0, 5:] = True
    return _MhaKdimVdim(), (torch.randn(2, 5, 12), torch.randn(2, 7, 8), torch.randn(2, 7, 6), pad)


def _rope(x, pos):
    """Rotary position embedding (rotate-half form); the angle table is made here, from the positions."""
    half = x.shape[-1] // 2
    inv = 1.0 / (10000 ** (torch.arange(0, half, device=x.device, dtype=torch.float32) / half))
    ang = pos[:, None].float() * inv[None]
    cos, sin = ang.cos().repeat(1, 2), ang.sin().repeat(1, 2)
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


class _RopeBlock(nn.Module):
    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.heads, self.hd = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.w1, self.w2 = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.ones(dim))
        self.gate, self.up = nn.Linear(dim, 2 * dim, bias=False), nn.Linear(dim, 2 * dim, bias=False)
        self.down = nn.Linear(2 * dim, dim, bias=False)

    @staticmethod
    def _rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    def forward(self, x, keep):  # keep: (B, T) bool, False at padding
        b, t, d = x.shape
        q, k, v = self.qkv(self._rms(x, self.w1)).view(b, t, 3, self.heads, self.hd).permute(2, 0, 3, 1, 4)
        pos = torch.arange(t, device=x.device)
        q, k = _rope(q, pos), _rope(k, pos)
        causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        padded = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :], scale=0.25)
        h = x + self.o((causal + padded).transpose(1, 2).reshape(b, t, d))
        g = self._rms(h, self.w2)
        return h + self.down(F.silu(self.gate(g)) * self.up(g))


def rope_sdpa_block():
    torch.manual_seed(0)
    keep = torch.ones(2, 6, dtype=torch.bool)
    keep[1, 4:] = False
    return _RopeBlock(), (torch.randn(2, 6, 16), keep)


class _EinsumAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Parameter(torch.randn(3, 2, 8, 4) * 0.3)  # (q/k/v, heads, model dim, head dim)
        self.core = nn.Parameter(torch.randn(5, 4, 4) * 0.2)

    def forward(self, x):  # (B, T, 8)
        q, k, v = torch.einsum("btd,shde->sbhte", x, self.qkv).unbind(0)
        att = torch.einsum("bhqe,bhke->bhqk", q, k).mul(0.5).softmax(-1)
        o = torch.einsum("bhqk,bhke->bqhe", att, v).flatten(2)  # (B, T, 8)
        bil = torch.einsum("bti,oij,btj->bto", o[..., :4], self.core, o[..., 4:])
        gram = torch.einsum("...ti,...si->...ts", o, o)
        diag = torch.einsum("bii->bi", gram)
        trace = torch.einsum("bii->b", gram)
        return bil, diag, torch.einsum("bt,b->bt", diag, trace)


def einsum_attention():
    torch.manual_seed(0)
    return _EinsumAttention(), (torch.randn(2, 5, 8),)


# ---------------------------------------------------------------- geometric, graphs, capsules


class _EdgeConvNet(nn.Module):
    def __init__(self, k=4):
        super().__init__()
        self.k = k
        self.edge = nn.Sequential(nn.Conv2d(6, 16, 1, bias=False), nn.BatchNorm2d(16), nn.LeakyReLU(0.2))
        self.point = nn.Conv1d(3 + 16, 32, 1)
        self.head = nn.Linear(32, 5)

    def forward(self, pts):  # (B, N, 3)
        b, n, _ = pts.shape
        inner = -2 * torch.matmul(pts, pts.transpose(2, 1))
        sq = (pts**2).sum(-1, keepdim=True)
        idx = (-sq - inner - sq.transpose(2, 1)).topk(self.k, dim=-1).indices  # k nearest, self included
        nbr = torch.gather(pts.unsqueeze(1).expand(b, n, n, 3), 2, idx.unsqueeze(-1).expand(b, n, self.k, 3))
        center = pts.unsqueeze(2).expand(b, n, self.k, 3)
        e = self.edge(torch.cat([nbr - center, center], -1).permute(0, 3, 1, 2)).max(dim=-1).values  # (B, 16, N)
        f = self.point(torch.cat([pts.transpose(1, 2), e], 1))
        return self.head(f.max(dim=-1).values), idx  # max over the points


def pointcloud_edgeconv():
    torch.manual_seed(0)
    return _EdgeConvNet(), (torch.randn(2, 16, 3),)


class _DenseGraphNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.gcn = nn.Linear(5, 8)
        self.gat = nn.Linear(8, 8, bias=False)
        self.att_src = nn.Parameter(torch.randn(8) * 0.3)
        self.att_dst = nn.Parameter(torch.randn(8) * 0.3)
        self.out = nn.Linear(8, 3)

    def forward(self, x, adj):  # x (B, N, 5), adj (B, N, N) bool, not symmetric
        n = adj.shape[-1]
        a = (adj | adj.transpose(-1, -2)).float() + torch.eye(n, device=adj.device)
        dinv = a.sum(-1).pow(-0.5)
        h = F.relu((dinv.unsqueeze(-1) * a * dinv.unsqueeze(-2)) @ self.gcn(x))  # GCN, symmetric normalisation
        g = self.gat(h)
        e = F.leaky_relu((g @ self.att_src).unsqueeze(-1) + (g @ self.att_dst).unsqueeze(-2), 0.2)
        alpha = torch.softmax(e.masked_fill(a == 0, float("-inf")), -1)  # GAT over the neighbours
        return self.out(F.elu(alpha @ g).mean(1)), alpha


def dense_gcn_gat():
    torch.manual_seed(0)
    return _DenseGraphNet(), (torch.randn(2, 6, 5), torch.rand(2, 6, 6) > 0.6)


def _squash(s, dim=-1):
    n2 = (s**2).sum(dim, keepdim=True)
    return n2 / (1 + n2) * s / torch.sqrt(n2 + 1e-8)


class _CapsNet(nn.Module):
    def __init__(self, classes=3):
        super().__init__()
        self.classes = classes
        self.primary = nn.Conv2d(1, 4 * 8, 5, stride=2)  # 12x12 -> 4x4: 4 maps of 8-d capsules
        self.W = nn.Parameter(torch.randn(1, 64, classes, 6, 8) * 0.1)

    def forward(self, x, y):
        b = x.shape[0]
        u = _squash(self.primary(x).view(b, 4, 8, 4, 4).permute(0, 1, 3, 4, 2).reshape(b, 64, 8))
        u_hat = (self.W @ u[:, :, None, :, None]).squeeze(-1)  # (B, 64, classes, 6)
        logits = u_hat.new_zeros(b, 64, self.classes)
        for i in range(3):  # routing by agreement
            c = F.softmax(logits, dim=2)
            v = _squash((c.unsqueeze(-1) * u_hat).sum(1))  # (B, classes, 6)
            if i < 2:
                logits = logits + (u_hat * v.unsqueeze(1)).sum(-1)
        lengths = torch.linalg.vector_norm(v, dim=-1)
        t = F.one_hot(y, self.classes).float()
        margin = t * F.relu(0.9 - lengths) ** 2 + 0.5 * (1 - t) * F.relu(lengths - 0.1) ** 2
        return margin.sum(1).mean(), lengths


def capsule_routing():
    torch.manual_seed(0)
    return _CapsNet(), (torch.randn(2, 1, 12, 12), torch.tensor([0, 2]))


# ---------------------------------------------------------------- sampling and generative


class _StnClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.loc = nn.Sequential(
            nn.Conv2d(1, 4, 5),
            nn.MaxPool2d(2, stride=2),
            nn.ReLU(True),
            nn.Conv2d(4, 6, 3),
            nn.MaxPool2d(2),
            nn.ReLU(True),
        )
        self.fc_loc = nn.Sequential(nn.Linear(6 * 3 * 3, 16), nn.ReLU(True), nn.Linear(16, 6))
        with torch.no_grad():  # start near a slight zoom and shift
            self.fc_loc[2].weight.zero_()
            self.fc_loc[2].bias.copy_(torch.tensor([0.8, 0.0, 0.1, 0.0, 0.8, -0.1]))
        self.cls = nn.Linear(10 * 10, 4)

    def forward(self, x):  # (N, 1, 20, 20)
        theta = self.fc_loc(self.loc(x).flatten(1)).view(-1, 2, 3)
        grid = F.affine_grid(theta, [x.shape[0], 1, 10, 10], align_corners=True)  # a smaller output than input
        out = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
        return F.log_softmax(self.cls(out.flatten(1)), 1), out


def stn_localization():
    torch.manual_seed(0)
    return _StnClassifier(), (torch.randn(2, 1, 20, 20),)


class _ConvVae(nn.Module):
    def __init__(self, z=4):
        super().__init__()
        self.enc = nn.Sequential(
            nn.Conv2d(1, 8, 4, 2, 1), nn.LeakyReLU(0.1), nn.Conv2d(8, 16, 4, 2, 1), nn.LeakyReLU(0.1), nn.Flatten()
        )
        self.mu, self.logvar = nn.Linear(144, z), nn.Linear(144, z)
        self.dec = nn.Sequential(
            nn.Linear(z, 144),
            nn.Unflatten(1, (16, 3, 3)),
            nn.ConvTranspose2d(16, 8, 4, 2, 1),
            nn.ReLU(),
            nn.ConvTranspose2d(8, 1, 4, 2, 1),
        )

    def forward(self, x, eps):  # eps: the noise, given (reparameterisation without randomness here)
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h).clamp(-6.0, 6.0)
        recon = torch.sigmoid(self.dec(mu + torch.exp(0.5 * logvar) * eps))
        bce = F.binary_cross_entropy(recon, x, reduction="sum") / x.shape[0]
        kld = -0.5 * torch.mean(torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), dim=1))
        return {"loss": bce + kld, "recon": recon, "mu": mu}


def vae_conv():
    torch.manual_seed(0)
    return _ConvVae(), (torch.rand(2, 1, 12, 12), torch.randn(2, 4))


# ---------------------------------------------------------------- metric learning


def _cosine_distance(a, b):
    return 1.0 - F.cosine_similarity(a, b)


class _Siamese(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(
            nn.Conv2d(1, 6, 3), nn.BatchNorm2d(6), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(24, 8)
        )
        self.trip = nn.TripletMarginWithDistanceLoss(distance_function=_cosine_distance, margin=0.3, swap=True)

    def forward(self, a, p, n, same, rank):
        ea, ep, en = self.enc(a), self.enc(p), self.enc(n)
        return (
            F.triplet_margin_loss(ea, ep, en, margin=0.5, p=1, swap=True, reduction="sum")
            + self.trip(ea, ep, en)
            + F.cosine_embedding_loss(ea, en, same, margin=-0.2, reduction="none").mean()
            + F.margin_ranking_loss(
                F.pairwise_distance(ea, en), F.pairwise_distance(ea, ep), rank, margin=0.1, reduction="sum"
            )
        )


def siamese_metric_losses():
    torch.manual_seed(0)
    return _Siamese(), (
        torch.randn(4, 1, 7, 7),
        torch.randn(4, 1, 7, 7),
        torch.randn(4, 1, 7, 7),
        torch.tensor([1.0, -1.0, -1.0, 1.0]),
        torch.tensor([1.0, 1.0, -1.0, 1.0]),
    )


# ---------------------------------------------------------------- layers, norms, activations


class _PatchBilinear(nn.Module):
    def __init__(self):
        super().__init__()
        geom = dict(kernel_size=(2, 3), dilation=(1, 2), stride=(2, 1))
        self.unfold = nn.Unfold(**geom)
        self.fold = nn.Fold(output_size=(6, 8), **geom)
        self.bil = nn.Bilinear(12, 12, 12)  # over (B, L, 12): extra leading dims
        self.unflat = nn.Unflatten(1, (2, 6))

    def forward(self, x, y):  # (B, 2, 6, 8) each: 12 patches of 12 values
        z = self.bil(self.unfold(x).transpose(1, 2), self.unfold(y).transpose(1, 2))
        return self.fold(z.transpose(1, 2)), self.unflat(z.mean(1))


def patch_bilinear_fold():
    torch.manual_seed(0)
    return _PatchBilinear(), (torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8))


class _NormZoo(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 6, 3, padding=1)
        self.lrn = nn.LocalResponseNorm(5, alpha=1e-3, beta=0.9, k=2.0)
        self.inorm = nn.InstanceNorm2d(6, affine=True, track_running_stats=True, momentum=0.2)
        self.gn = nn.GroupNorm(3, 6, eps=1e-4, affine=False)
        self.bn = nn.BatchNorm2d(6, track_running_stats=False)
        self.ln = nn.LayerNorm(5, bias=False)

    def forward(self, x):
        y = self.conv(x)
        return self.lrn(y), self.inorm(y), self.gn(y), self.bn(y), self.ln(y)


def norm_zoo_2d():
    torch.manual_seed(0)
    return _NormZoo(), (torch.randn(3, 2, 4, 5),)


class _TextActs(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8, max_norm=1.5, norm_type=1.0, sparse=False)
        self.fc1, self.fc2 = nn.Linear(8, 8), nn.Linear(8, 8)
        self.prelu = nn.PReLU()  # one shared slope
        self.elu = nn.ELU(alpha=0.3, inplace=True)
        self.celu = nn.CELU(alpha=2.0)
        self.gelu = nn.GELU(approximate="tanh")

    def forward(self, ids):
        h = self.elu(self.prelu(self.fc1(self.emb(ids).mean(1))))
        return self.celu(self.fc2(h)), self.gelu(h)


def embedding_renorm_acts():
    torch.manual_seed(0)
    return _TextActs(), (torch.randint(0, 20, (3, 5)),)


# ---------------------------------------------------------------- masks, scans, sorting, statistics


class _MaskedScores(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.lo = nn.Parameter(torch.full((6,), -0.5))
        self.hi = nn.Parameter(torch.full((6,), 0.7))

    def forward(self, x, mask):
        y = self.fc(x)
        m = y.masked_fill(~mask, float("-inf"))
        sm = torch.where(mask, torch.softmax(m, 1), torch.zeros_like(y))
        return (
            torch.clamp(y, min=self.lo, max=self.hi),  # tensor bounds
            torch.logsumexp(m, dim=1),
            sm,
            torch.cumprod(1 - torch.sigmoid(y), dim=1),  # survival
            torch.flip(torch.cumsum(torch.flip(sm, [1]), 1), [1]),  # reverse cumsum
            torch.where(y > 0, y, 0.1 * y).clamp_min(-0.2),
            torch.logaddexp(y, y.flip(1)),
        )


def masked_scores():
    torch.manual_seed(0)
    mask = torch.rand(4, 6) > 0.4
    mask[:, 0] = True
    return _MaskedScores(), (torch.randn(4, 6), mask)


class _BucketEmbed(nn.Module):
    def __init__(self):
        super().__init__()
        self.raw = nn.Parameter(torch.randn(7))  # learnable boundaries, sorted in forward
        self.register_buffer("edges", torch.tensor([-1.5, -0.5, 0.0, 0.5, 1.5]))
        self.emb = nn.Embedding(8, 4)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):  # (B, 5)
        bucket = torch.bucketize(x, self.edges, right=False)  # 0..5
        bounds, _ = torch.sort(self.raw)
        found = torch.searchsorted(bounds.detach(), x.contiguous(), side="right")  # 0..7
        ranked, perm = torch.sort(x, dim=1, descending=True)
        rank = torch.argsort(perm, dim=1)  # the inverse permutation
        soft = torch.sigmoid((x.unsqueeze(-1) - bounds) * 4).sum(-1)  # a differentiable count below
        h = self.emb(bucket) + self.emb(found)
        return self.fc(h.mean(1)), ranked * soft.mean(), rank, soft


def bucketize_searchsorted():
    torch.manual_seed(0)
    return _BucketEmbed(), (torch.randn(3, 5),)


class _RunLengthPool(nn.Module):
    """Pools the embeddings of each run of repeated ids: the number of runs depends on the values."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.fc = nn.Linear(4, 3)

    def forward(self, ids):  # 1-d
        uniq, inverse, counts = torch.unique_consecutive(ids, return_inverse=True, return_counts=True)
        e = self.emb(ids)
        pooled = e.new_zeros(uniq.shape[0], 4).index_add(0, inverse, e) / counts.unsqueeze(1)
        return self.fc(pooled), counts, torch.masked_select(e[:, 0], ids > 4)


def run_length_pool():
    torch.manual_seed(0)
    return _RunLengthPool(), (torch.tensor([1, 1, 3, 3, 3, 7, 2, 2, 9, 9, 9, 9, 0]),)


class _StatsHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(2, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 9, 3)

    def forward(self, x):  # (B, 2, 16)
        y = self.conv(x)
        q = torch.quantile(y, torch.tensor([0.1, 0.5, 0.9], device=y.device), dim=-1)  # (3, B, 4), linear
        qn = torch.quantile(y, 0.25, dim=-1, interpolation="nearest")
        med, med_i = y.median(dim=-1)
        mode, _ = torch.round(y * 2).mode(dim=-1)
        var, mean = torch.var_mean(y, dim=-1, correction=0)
        std = y.std(dim=-1)
        feats = torch.cat([q.permute(1, 2, 0), torch.stack([qn, med, mode, var, mean, std], -1)], -1)
        return self.fc(feats.flatten(1)), med_i


def stats_head():
    torch.manual_seed(0)
    return _StatsHead(), (torch.randn(2, 2, 16),)


class _MoeTop2Loop(nn.Module):
    """Top-2 gating with a loop over experts picking their tokens by torch.where, as many MoE layers do."""

    def __init__(self, dim=6, experts=4):
        super().__init__()
        self.experts_n = experts
        self.gate = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, 12), nn.GELU(), nn.Linear(12, dim)) for _ in range(experts)
        )

    def forward(self, x):  # (N, dim)
        probs = self.gate(x).softmax(-1)
        weight, chosen = probs.topk(2, dim=-1)
        weight = weight / weight.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        mask = F.one_hot(chosen, self.experts_n).permute(2, 1, 0)  # (E, 2, N)
        for e, expert in enumerate(self.experts):
            slot, token = torch.where(mask[e])
            out = out.index_add(0, token, expert(x[token]) * weight[token, slot, None])
        aux = (F.one_hot(chosen[:, 0], self.experts_n).float().mean(0) * probs.mean(0)).sum() * self.experts_n
        return out, aux


def moe_top2_loop():
    torch.manual_seed(0)
    return _MoeTop2Loop(), (torch.randn(10, 6),)


# ---------------------------------------------------------------- the table

MODELS = {
    "unet_small": (
        "vision",
        "UNet encoder/decoder: MaxPool2d, bilinear nn.Upsample, F.pad to odd skip sizes, skip concatenation",
    ),
    "espcn_superres": ("vision", "ESPCN super-resolution: tanh convs, PixelShuffle(3), bilinear x3 residual, clamp"),
    "mlp_mixer": ("vision", "MLP-mixer: patchify conv stride 4, token and channel MLPs (exact GELU), LayerNorm"),
    "cbam_attention": ("vision", "CBAM: avg+max pooled channel MLP, mean/amax spatial map, 7x7 conv, sigmoid gates"),
    "tcn_causal": ("sequence", "temporal conv net: dilated Conv1d, chomped and left-padded causal convs, residuals"),
    "conv_lstm": ("rnn", "ConvLSTM cell looped over time: conv on [x, h], chunked gates, stacked states"),
    "gru_seq2seq_bahdanau": (
        "rnn",
        "bidirectional GRU encoder, GRUCell decoder, Bahdanau additive attention (tanh, masked softmax, bmm)",
    ),
    "mha_kdim_bias_kv": (
        "attention",
        "MultiheadAttention kdim/vdim with key_padding_mask averaged weights; bias=False add_bias_kv add_zero_attn per-head weights",
    ),
    "rope_sdpa_block": (
        "attention",
        "rotary embeddings made in forward, scaled_dot_product_attention causal and with a bool mask and scale, RMS norm, SwiGLU",
    ),
    "einsum_attention": ("math", "einsum attention, bilinear form, ellipsis gram, diagonal and trace"),
    "pointcloud_edgeconv": (
        "geometric",
        "EdgeConv point net: pairwise distances, topk neighbours, torch.gather, max over neighbours and points",
    ),
    "dense_gcn_gat": ("graph", "dense GCN (degree^-1/2 normalisation) and a GAT layer: leaky_relu, masked softmax"),
    "capsule_routing": (
        "capsule",
        "primary capsules, squash, dynamic routing (3 iterations), vector_norm, margin loss",
    ),
    "stn_localization": (
        "sampling",
        "spatial transformer with a conv localisation net: affine_grid to a smaller size, grid_sample align_corners",
    ),
    "vae_conv": (
        "generative",
        "conv VAE: reparameterisation with given noise, ConvTranspose2d, BCE sum + KL, dict out",
    ),
    "siamese_metric_losses": (
        "loss",
        "Siamese encoder: triplet_margin p=1 swap, TripletMarginWithDistanceLoss cosine, cosine_embedding, margin_ranking",
    ),
    "patch_bilinear_fold": ("layer", "nn.Unfold/Fold with dilation and non-square kernel, 3-d Bilinear, Unflatten"),
    "norm_zoo_2d": (
        "norm",
        "LocalResponseNorm size 5, InstanceNorm2d affine with running stats, GroupNorm no affine, BatchNorm no stats, LayerNorm no bias",
    ),
    "embedding_renorm_acts": (
        "embedding",
        "Embedding max_norm with norm_type 1, PReLU one slope, ELU inplace, CELU alpha 2, GELU tanh",
    ),
    "masked_scores": (
        "math",
        "clamp with tensor bounds, masked_fill -inf, logsumexp, where, cumprod, reverse cumsum, logaddexp",
    ),
    "bucketize_searchsorted": (
        "sorting",
        "bucketize, sort of learnable boundaries, searchsorted side=right, descending sort, argsort inverse",
    ),
    "run_length_pool": (
        "data-dependent",
        "unique_consecutive with inverse and counts, index_add pooling, masked_select",
    ),
    "stats_head": ("statistics", "quantile linear and nearest, median with indices, mode, var_mean, std"),
    "moe_top2_loop": (
        "routing",
        "top-2 mixture of experts: softmax gate, topk, one_hot, torch.where per expert, index_add",
    ),
}

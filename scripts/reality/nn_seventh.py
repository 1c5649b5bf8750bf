"""The SEVENTH set of plain ``torch.nn`` user models: written after the tuning set (``nn_models.py``), the
held-out set (``nn_heldout.py``), the fresh set (``nn_fresh.py``), the unseen set (``nn_unseen.py``), the fifth
set (``nn_fifth.py``) and the sixth set (``nn_sixth.py``), and written without reading how opcov judges
models. It holds small models of kinds users write that none of the earlier sets holds (RoIAlign by
grid_sample, an FPN RetinaNet head with sigmoid focal loss, CenterNet decoding, a YOLO head with GIoU and Fast
NMS, a GRU classifier over pad_sequence with attention pooling, a QRNN, T5 relative-position buckets with
ALiBi, causal linear attention, Conv-TasNet with PIT, SincNet, PCEN with autocorrelation pitch, generalized
dice with focal Tversky, learning-to-rank losses, probabilistic regression losses, ViT position embeddings
resized by bicubic interpolation, adaptive softmax, equal-frequency binning, GeM and 3-d pooling, AdaIN with
conditional BatchNorm and weight standardisation, a Laplacian pyramid, module and tensor hooks with custom
Functions, bfloat16 and float64 casts, int8 quantisation by hand and a Monarch block-diagonal layer). It
measures opcov's verdicts on PyTorch/XLA; nothing may be tuned on it.

The same contract as the other sets: each factory ``NAME()`` returns ``(model, inputs)``, seeded inside,
small, callable under ``torch.device("meta")`` (no tensor built from another's values in the factory;
tables a model needs, such as grids, windows, filters, masks and bucket indices, are made in ``forward``); a
floating output depends on the parameters; no complex output; no randomness on the compared path (random
samples a model needs are inputs). Some models are integer- or bool-heavy on purpose (``centernet_decode``
decodes peaks by // and %, ``yolo_fast_nms`` keeps boxes by a bool IoU mask, ``equal_freq_binning`` bins by
searchsorted and filters by isin, ``int8_w8a8_linear`` multiplies int8 values in int32), and
``bf16_f64_mixed`` has bfloat16 and float64 parameters' paths side by side.

    PYTHONPATH=scripts/reality opcov trace nn_seventh:roi_align_grid_sample --mode training --out x.yaml
    PJRT_DEVICE=CPU .envs/xla/bin/python scripts/envs/nn_reality.py --set seventh --models roi_align_grid_sample

``MODELS`` names each factory: name -> (family, one-line description).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

# ---------------------------------------------------------------- vision: detection and dense heads


class _RoIAlignHead(nn.Module):
    """A Faster R-CNN box head: a two-conv backbone (stride 2), RoIAlign written with grid_sample (aligned: the
    box scaled to the feature map, minus half a pixel; sr x sr samples per output bin at bin-centre fractions
    made by arange, normalised for align_corners=False; each RoI's image picked by index_select on its batch
    index), avg_pool2d over the samples, an MLP, class logits and class-specific box deltas picked by advanced
    indexing with the labels."""

    def __init__(self, out: int = 3, sr: int = 2, classes: int = 3):
        super().__init__()
        self.out, self.sr, self.scale = out, sr, 0.5
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU()
        )
        self.fc = nn.Sequential(nn.Flatten(), nn.Linear(8 * out * out, 24), nn.ReLU())
        self.cls, self.box = nn.Linear(24, classes), nn.Linear(24, 4 * classes)

    def forward(self, img, rois, labels, box_targets):
        feat = self.backbone(img)
        _, _, h, w = feat.shape
        n = self.out * self.sr
        x1, y1, x2, y2 = (rois[:, 1:] * self.scale - 0.5).unbind(1)
        t = (torch.arange(n, device=img.device, dtype=img.dtype) + 0.5) / n
        xs = x1[:, None] + (x2 - x1)[:, None] * t
        ys = y1[:, None] + (y2 - y1)[:, None] * t
        gx, gy = (2 * xs + 1) / w - 1, (2 * ys + 1) / h - 1
        grid = torch.stack(torch.broadcast_tensors(gx[:, None, :], gy[:, :, None]), dim=-1)
        per_roi = feat.index_select(0, rois[:, 0].long())
        sampled = F.grid_sample(per_roi, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        hid = self.fc(F.avg_pool2d(sampled, self.sr))
        logits = self.cls(hid)
        deltas = self.box(hid).view(len(rois), -1, 4)[torch.arange(len(rois), device=img.device), labels]
        loss = F.cross_entropy(logits, labels) + F.smooth_l1_loss(deltas, box_targets, beta=1 / 9)
        return {"loss": loss, "scores": logits.softmax(-1)}


def roi_align_grid_sample():
    torch.manual_seed(0)
    rois = torch.tensor(
        [[0, 1.0, 2.0, 9.0, 11.0], [1, 0.0, 0.0, 15.0, 15.0], [0, 4.5, 3.2, 12.0, 8.0], [1, 6.0, 7.0, 10.0, 14.0]]
    )
    return _RoIAlignHead(), (torch.randn(2, 3, 16, 16), rois, torch.tensor([0, 2, 1, 2]), torch.randn(4, 4))


class _FPNRetina(nn.Module):
    """RetinaNet: three strided conv stages (C3..C5), FPN lateral 1x1 convs, top-down F.interpolate nearest to
    the lateral's size, 3x3 output convs, P6 by max_pool2d(1, stride 2) as torchvision's LastLevelMaxPool, a
    class and a box conv head shared over the four levels, per-level predictions permuted and reshaped to
    (B, anchors, K) and concatenated, sigmoid focal loss (alpha 0.25, gamma 2) on one-hot targets with ignored
    anchors (-1) masked out, L1 box loss on the positive anchors picked by a bool mask."""

    def __init__(self, d: int = 8, anchors: int = 2, classes: int = 3):
        super().__init__()
        self.a, self.k = anchors, classes
        self.c3 = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU())
        self.c4 = nn.Sequential(nn.Conv2d(8, 12, 3, stride=2, padding=1), nn.ReLU())
        self.c5 = nn.Sequential(nn.Conv2d(12, 16, 3, stride=2, padding=1), nn.ReLU())
        self.lat = nn.ModuleList([nn.Conv2d(c, d, 1) for c in (8, 12, 16)])
        self.smooth = nn.ModuleList([nn.Conv2d(d, d, 3, padding=1) for _ in range(3)])
        self.cls_head = nn.Sequential(
            nn.Conv2d(d, d, 3, padding=1), nn.ReLU(), nn.Conv2d(d, anchors * classes, 3, padding=1)
        )
        self.box_head = nn.Sequential(nn.Conv2d(d, d, 3, padding=1), nn.ReLU(), nn.Conv2d(d, anchors * 4, 3, padding=1))

    def _flat(self, t, k):
        b, _, h, w = t.shape
        return t.view(b, self.a, k, h, w).permute(0, 3, 4, 1, 2).reshape(b, -1, k)

    def forward(self, img, labels, box_targets):
        c3 = self.c3(img)
        c4 = self.c4(c3)
        c5 = self.c5(c4)
        lats = [lat(c) for lat, c in zip(self.lat, (c3, c4, c5))]
        tops = [lats[2]]
        for lat in (lats[1], lats[0]):
            tops.insert(0, lat + F.interpolate(tops[0], size=lat.shape[-2:], mode="nearest"))
        feats = [s(t) for s, t in zip(self.smooth, tops)]
        feats.append(F.max_pool2d(feats[-1], 1, stride=2))
        logits = torch.cat([self._flat(self.cls_head(f), self.k) for f in feats], 1)
        boxes = torch.cat([self._flat(self.box_head(f), 4) for f in feats], 1)
        valid, pos = labels >= 0, labels > 0
        target = F.one_hot(labels.clamp(min=0), self.k + 1)[..., 1:].to(logits.dtype)
        p = torch.sigmoid(logits)
        ce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
        p_t = p * target + (1 - p) * (1 - target)
        alpha_t = 0.25 * target + 0.75 * (1 - target)
        focal = (alpha_t * ce * (1 - p_t) ** 2).sum(-1)
        n_pos = pos.sum().clamp(min=1)
        loss_cls = focal[valid].sum() / n_pos
        loss_box = F.l1_loss(boxes[pos], box_targets[pos], reduction="sum") / n_pos
        return {"loss": loss_cls + loss_box, "scores": p.amax(-1)}


def fpn_retina_focal():
    torch.manual_seed(0)
    n = 2 * (64 + 16 + 4 + 1)
    return _FPNRetina(), (torch.randn(2, 3, 16, 16), torch.randint(-1, 4, (2, n)), torch.randn(2, n, 4))


class _CenterNet(nn.Module):
    """CenterNet: a strided conv backbone with a ConvTranspose2d up stage, heatmap (sigmoid clamped to
    [1e-4, 1 - 1e-4]), size and offset heads; the penalty-reduced focal loss on a Gaussian heatmap target made
    in forward from integer centres (exp of squared distances, one_hot classes, amax over objects, eq(1) peaks);
    sizes gathered at the centres' flat indices (L1); decoding: 3x3 max_pool2d peak test (hmax == heat), topk
    over class x position, integer // and % into class, row and column, gathers of sizes and offsets."""

    def __init__(self, classes: int = 3, k: int = 5):
        super().__init__()
        self.c, self.k = classes, k
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1),
            nn.ReLU(),
        )
        self.heat = nn.Conv2d(8, classes, 3, padding=1)
        self.wh, self.off = nn.Conv2d(8, 2, 3, padding=1), nn.Conv2d(8, 2, 3, padding=1)

    def forward(self, img, centres, cls, sizes, offsets):
        f = self.backbone(img)
        heat = torch.sigmoid(self.heat(f)).clamp(1e-4, 1 - 1e-4)
        wh, off = self.wh(f), self.off(f)
        b, c, h, w = heat.shape
        yy = torch.arange(h, device=img.device, dtype=img.dtype).view(1, 1, h, 1)
        xx = torch.arange(w, device=img.device, dtype=img.dtype).view(1, 1, 1, w)
        cy, cx = centres[..., 0, None, None].to(img.dtype), centres[..., 1, None, None].to(img.dtype)
        g = torch.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * 1.0**2))  # (B, N, H, W)
        onehot = F.one_hot(cls, c).to(img.dtype)  # (B, N, C)
        target = (g[:, :, None] * onehot[..., None, None]).amax(1)
        pos = target.eq(1)
        pos_loss = torch.log(heat) * (1 - heat) ** 2 * pos
        neg_loss = torch.log(1 - heat) * heat**2 * (1 - target) ** 4 * ~pos
        n_pos = pos.sum().clamp(min=1)
        loss_heat = -(pos_loss + neg_loss).sum() / n_pos
        idx = centres[..., 0] * w + centres[..., 1]
        at = idx[:, None, :].expand(-1, 2, -1)
        wh_at, off_at = wh.view(b, 2, h * w).gather(2, at), off.view(b, 2, h * w).gather(2, at)
        loss = loss_heat + 0.1 * F.l1_loss(wh_at.transpose(1, 2), sizes) + F.l1_loss(off_at.transpose(1, 2), offsets)
        hmax = F.max_pool2d(heat, 3, stride=1, padding=1)
        peaks = heat * (hmax == heat).to(heat.dtype)
        scores, inds = peaks.view(b, -1).topk(self.k)
        kind, pix = inds // (h * w), inds % (h * w)
        ys, xs = pix // w, pix % w
        wh_k = wh.view(b, 2, -1).gather(2, pix[:, None, :].expand(-1, 2, -1))
        off_k = off.view(b, 2, -1).gather(2, pix[:, None, :].expand(-1, 2, -1))
        cxk, cyk = xs.to(img.dtype) + off_k[:, 0], ys.to(img.dtype) + off_k[:, 1]
        boxes = torch.stack(
            [cxk - wh_k[:, 0] / 2, cyk - wh_k[:, 1] / 2, cxk + wh_k[:, 0] / 2, cyk + wh_k[:, 1] / 2], -1
        )
        return {"loss": loss, "boxes": boxes, "scores": scores, "classes": kind}


def centernet_decode():
    torch.manual_seed(0)
    centres = torch.tensor([[[1, 2], [5, 6], [3, 7]], [[0, 0], [7, 3], [4, 4]]])
    cls = torch.tensor([[0, 2, 1], [1, 1, 0]])
    return _CenterNet(), (torch.randn(2, 3, 16, 16), centres, cls, torch.rand(2, 3, 2) * 4, torch.rand(2, 3, 2))


def _box_area(b):
    return (b[..., 2] - b[..., 0]).clamp(min=0) * (b[..., 3] - b[..., 1]).clamp(min=0)


class _YOLOHead(nn.Module):
    """A YOLOv3-style head: conv predictions per anchor (view/permute to B, A, H, W, 5 + C), a cell grid by
    meshgrid, centres sigmoid + grid times the stride, sizes exp times anchor sizes made in forward, cxcywh to
    xyxy; GIoU loss against target boxes (intersection by maximum/minimum, clamp, enclosing box), BCE
    objectness on an integer target cast in forward, class cross_entropy; YOLACT's Fast NMS per image: top-k
    by score, pairwise IoU, triu(1), column max <= 0.5 as a bool keep mask, kept scores by where."""

    def __init__(self, classes: int = 3, anchors: int = 2, stride: int = 4, topk: int = 8):
        super().__init__()
        self.c, self.a, self.stride, self.topk = classes, anchors, stride, topk
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1),
            nn.LeakyReLU(0.1),
            nn.Conv2d(8, 16, 3, stride=2, padding=1),
            nn.LeakyReLU(0.1),
        )
        self.pred = nn.Conv2d(16, anchors * (5 + classes), 1)

    def forward(self, img, raw_targets, obj_target, cls_target):
        p = self.pred(self.body(img))
        b, _, h, w = p.shape
        p = p.view(b, self.a, 5 + self.c, h, w).permute(0, 1, 3, 4, 2)
        gy, gx = torch.meshgrid(torch.arange(h, device=img.device), torch.arange(w, device=img.device), indexing="ij")
        grid = torch.stack([gx, gy], -1).to(p.dtype)
        anchor_wh = torch.tensor([[3.0, 4.0], [6.0, 5.0]], device=img.device).view(1, self.a, 1, 1, 2)
        xy = (torch.sigmoid(p[..., :2]) + grid) * self.stride
        wh = torch.exp(p[..., 2:4].clamp(max=4)) * anchor_wh
        boxes = torch.cat([xy - wh / 2, xy + wh / 2], -1).reshape(b, -1, 4)
        obj = p[..., 4].reshape(b, -1)
        cls_logits = p[..., 5:].reshape(b, -1, self.c)
        t_lo = raw_targets[..., :2] * 16
        tgt = torch.cat([t_lo, t_lo + 1 + raw_targets[..., 2:] * 8], -1)
        lt, rb = torch.maximum(boxes[..., :2], tgt[..., :2]), torch.minimum(boxes[..., 2:], tgt[..., 2:])
        inter = (rb - lt).clamp(min=0).prod(-1)
        union = _box_area(boxes) + _box_area(tgt) - inter
        iou = inter / union
        elt, erb = torch.minimum(boxes[..., :2], tgt[..., :2]), torch.maximum(boxes[..., 2:], tgt[..., 2:])
        enclose = (erb - elt).prod(-1)
        giou = iou - (enclose - union) / enclose
        objf = obj_target.to(p.dtype)
        loss = ((1 - giou) * objf).sum() / objf.sum().clamp(min=1)
        loss = (
            loss
            + F.binary_cross_entropy_with_logits(obj, objf)
            + F.cross_entropy(cls_logits.transpose(1, 2), cls_target)
        )
        score = torch.sigmoid(obj) * cls_logits.softmax(-1).amax(-1)
        top, order = score.topk(self.topk, dim=1)
        cand = boxes.gather(1, order[..., None].expand(-1, -1, 4))
        lt2 = torch.maximum(cand[:, :, None, :2], cand[:, None, :, :2])
        rb2 = torch.minimum(cand[:, :, None, 2:], cand[:, None, :, 2:])
        inter2 = (rb2 - lt2).clamp(min=0).prod(-1)
        area = _box_area(cand)
        iou2 = torch.triu(inter2 / (area[:, :, None] + area[:, None, :] - inter2), diagonal=1)
        keep = iou2.amax(1) <= 0.5
        return {"loss": loss, "kept": torch.where(keep, top, torch.zeros_like(top)), "keep": keep, "order": order}


def yolo_fast_nms():
    torch.manual_seed(0)
    n = 2 * 4 * 4
    return _YOLOHead(), (
        torch.randn(2, 3, 16, 16),
        torch.rand(2, n, 4),
        torch.randint(0, 2, (2, n)),
        torch.randint(0, 3, (2, n)),
    )


# ---------------------------------------------------------------- sequence


class _GRUAttnPool(nn.Module):
    """A sentence classifier: sentences split from one token stream by fixed lengths, pad_sequence
    (batch_first, the pad id 0), Embedding padding_idx 0, a 3-layer bidirectional GRU with dropout 0.0 over the
    padded batch (not packed), attention pooling (tanh Linear scores, a mask from arange < lengths made in
    forward, masked_fill -inf, softmax over time, weighted sum), cross_entropy."""

    LENS = (5, 3, 7, 4)

    def __init__(self, vocab: int = 20, d: int = 8, hid: int = 6, classes: int = 3):
        super().__init__()
        self.emb = nn.Embedding(vocab, d, padding_idx=0)
        self.gru = nn.GRU(d, hid, num_layers=3, bidirectional=True, batch_first=True, dropout=0.0)
        self.score = nn.Sequential(nn.Linear(2 * hid, hid), nn.Tanh(), nn.Linear(hid, 1, bias=False))
        self.out = nn.Linear(2 * hid, classes)

    def forward(self, stream, labels):
        padded = pad_sequence(list(torch.split(stream, self.LENS)), batch_first=True, padding_value=0)
        lengths = torch.tensor(self.LENS, device=stream.device)
        hs, _ = self.gru(self.emb(padded))
        mask = torch.arange(padded.shape[1], device=stream.device)[None, :] < lengths[:, None]
        att = self.score(hs).squeeze(-1).masked_fill(~mask, float("-inf")).softmax(-1)
        pooled = torch.bmm(att.unsqueeze(1), hs).squeeze(1)
        logits = self.out(pooled)
        return {"loss": F.cross_entropy(logits, labels), "attention": att}


def gru_attn_pool_padseq():
    torch.manual_seed(0)
    return _GRUAttnPool(), (torch.randint(1, 20, (19,)), torch.tensor([0, 2, 1, 2]))


class _QRNNLayer(nn.Module):
    """A quasi-recurrent layer: a causal Conv1d (left pad by F.pad) gives Z, F, O gates (tanh, sigmoid,
    sigmoid), fo-pooling c_t = f_t c_{t-1} + (1 - f_t) z_t over time in a Python loop of unbind, h = o * c."""

    def __init__(self, din: int, d: int, k: int = 2):
        super().__init__()
        self.k = k
        self.conv = nn.Conv1d(din, 3 * d, k)

    def forward(self, x):  # (B, T, C)
        g = self.conv(F.pad(x.transpose(1, 2), (self.k - 1, 0))).transpose(1, 2)
        z, f, o = g.chunk(3, -1)
        z, f, o = torch.tanh(z), torch.sigmoid(f), torch.sigmoid(o)
        c = torch.zeros_like(z[:, 0])
        cs = []
        for zt, ft in zip(z.unbind(1), f.unbind(1)):
            c = ft * c + (1 - ft) * zt
            cs.append(c)
        return o * torch.stack(cs, 1)


class _QRNNLM(nn.Module):
    """A two-layer QRNN language model with a residual between layers, a LayerNorm, log_softmax and nll_loss
    on next tokens."""

    def __init__(self, vocab: int = 16, d: int = 10):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.l1, self.l2 = _QRNNLayer(d, d), _QRNNLayer(d, d)
        self.norm, self.out = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, tokens):
        h = self.l1(self.emb(tokens[:, :-1]))
        h = self.norm(h + self.l2(h))
        logp = F.log_softmax(self.out(h), -1)
        return {"loss": F.nll_loss(logp.reshape(-1, logp.shape[-1]), tokens[:, 1:].reshape(-1)), "logp": logp}


def qrnn_fo_pool():
    torch.manual_seed(0)
    return _QRNNLM(), (torch.randint(0, 16, (3, 9)),)


def _t5_bucket(rel, bidirectional: bool, num_buckets: int = 8, max_distance: int = 16):
    """T5's relative-position bucket: exact buckets near zero, log-spaced ones beyond, capped by torch.min."""
    buckets = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (rel > 0).to(torch.long) * num_buckets
        rel = torch.abs(rel)
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    exact = num_buckets // 2
    small = rel < exact
    large = exact + (torch.log(rel.float() / exact) / math.log(max_distance / exact) * (num_buckets - exact)).to(
        torch.long
    )
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(small, rel, large)


class _T5Alibi(nn.Module):
    """An encoder-decoder: the encoder's self-attention biased by T5 relative-position buckets (integer log
    bucketing, abs, torch.min, where; an Embedding of buckets x heads; no 1/sqrt(d) scaling), T5's RMS
    LayerNorm (pow(2).mean, rsqrt, no bias); the decoder's causal self-attention biased by ALiBi (slopes
    2^(-8 i / H) made in forward, distances by arange, a bool triu mask), cross-attention, cross_entropy."""

    def __init__(self, vocab: int = 24, d: int = 16, heads: int = 4):
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.emb = nn.Embedding(vocab, d)
        self.rel = nn.Embedding(8, heads)
        self.enc_qkv, self.dec_qkv = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, 3 * d, bias=False)
        self.cross_q, self.cross_kv = nn.Linear(d, d, bias=False), nn.Linear(d, 2 * d, bias=False)
        self.o1, self.o2, self.o3 = (nn.Linear(d, d, bias=False) for _ in range(3))
        self.g1, self.g2, self.g3 = (nn.Parameter(torch.ones(d)) for _ in range(3))
        self.out = nn.Linear(d, vocab, bias=False)

    def _rms(self, x, g):
        return g * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    def _heads(self, x):
        b, n, _ = x.shape
        return x.view(b, n, self.h, self.dh).transpose(1, 2)

    def _attend(self, q, k, v, bias, o):
        a = (self._heads(q) @ self._heads(k).transpose(-1, -2) + bias).softmax(-1)
        y = (a @ self._heads(v)).transpose(1, 2)
        return o(y.reshape(y.shape[0], y.shape[1], -1))

    def forward(self, src, tgt_in, tgt_out):
        dev = src.device
        s, t = src.shape[1], tgt_in.shape[1]
        pos_s = torch.arange(s, device=dev)
        bucket = _t5_bucket(pos_s[None, :] - pos_s[:, None], bidirectional=True)
        enc_bias = self.rel(bucket).permute(2, 0, 1).unsqueeze(0)
        x = self.emb(src)
        x = x + self._attend(*self.enc_qkv(self._rms(x, self.g1)).chunk(3, -1), enc_bias, self.o1)
        mem = x
        slopes = torch.pow(2.0, -8.0 * torch.arange(1, self.h + 1, device=dev, dtype=x.dtype) / self.h)
        pos_t = torch.arange(t, device=dev)
        dist = (pos_t[None, :] - pos_t[:, None]).to(x.dtype)
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=dev), diagonal=1)
        dec_bias = (slopes.view(-1, 1, 1) * dist).masked_fill(causal, float("-inf")).unsqueeze(0)
        y = self.emb(tgt_in)
        y = y + self._attend(*self.dec_qkv(self._rms(y, self.g2)).chunk(3, -1), dec_bias, self.o2)
        k, v = self.cross_kv(mem).chunk(2, -1)
        y = y + self._attend(self.cross_q(self._rms(y, self.g3)), k, v, 0.0, self.o3)
        logits = self.out(y)
        return {"loss": F.cross_entropy(logits.transpose(1, 2), tgt_out), "buckets": bucket}


def t5_relbucket_alibi():
    torch.manual_seed(0)
    return _T5Alibi(), (torch.randint(0, 24, (2, 20)), torch.randint(0, 24, (2, 6)), torch.randint(0, 24, (2, 6)))


class _LinearAttnBlock(nn.Module):
    """Causal linear attention (Katharopoulos et al.): feature map elu + 1, the running key-value state as a
    cumsum of per-step outer products (einsum), the normaliser a cumsum of keys, division with eps; pre-norm,
    a ReLU MLP."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        q, k = F.elu(q) + 1, F.elu(k) + 1
        kv = torch.einsum("bhnd,bhne->bhnde", k, v).cumsum(2)
        num = torch.einsum("bhnd,bhnde->bhne", q, kv)
        den = torch.einsum("bhnd,bhnd->bhn", q, k.cumsum(2))
        y = (num / (den.unsqueeze(-1) + 1e-6)).transpose(1, 2).reshape(b, n, d)
        x = x + self.proj(y)
        return x + self.mlp(self.norm2(x))


class _LinearAttnLM(nn.Module):
    def __init__(self, vocab: int = 20, d: int = 16):
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.randn(12, d) * 0.02)
        self.blocks = nn.Sequential(_LinearAttnBlock(d, 4), _LinearAttnBlock(d, 4))
        self.out = nn.Linear(d, vocab)

    def forward(self, tokens):
        x = self.emb(tokens[:, :-1]) + self.pos[: tokens.shape[1] - 1]
        logits = self.out(self.blocks(x))
        return {"loss": F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()), "logits": logits}


def causal_linear_attention():
    torch.manual_seed(0)
    return _LinearAttnLM(), (torch.randint(0, 20, (2, 11)),)


# ---------------------------------------------------------------- audio


class _TasNetBlock(nn.Module):
    def __init__(self, b: int, h: int, dilation: int):
        super().__init__()
        self.inp = nn.Conv1d(b, h, 1)
        self.act1, self.act2 = nn.PReLU(), nn.PReLU()
        self.norm1, self.norm2 = nn.GroupNorm(1, h), nn.GroupNorm(1, h)
        self.dw = nn.Conv1d(h, h, 3, dilation=dilation, padding=dilation, groups=h)
        self.res, self.skip = nn.Conv1d(h, b, 1), nn.Conv1d(h, b, 1)

    def forward(self, x):
        y = self.norm2(self.act2(self.dw(self.norm1(self.act1(self.inp(x))))))
        return x + self.res(y), self.skip(y)


class _ConvTasNet(nn.Module):
    """Conv-TasNet for two speakers: a strided Conv1d encoder (no bias) with ReLU, global layer norm as
    GroupNorm(1, C), a bottleneck, TCN blocks of 1x1 conv, PReLU, gLN, dilated depthwise Conv1d (1, 2, 4), residual
    and skip 1x1 convs, sigmoid masks, a ConvTranspose1d decoder, SI-SNR (zero-mean, projection, log10) and
    the permutation-invariant loss as the best of the two speaker orders (stack, amax)."""

    def __init__(self, n: int = 16, b: int = 8, h: int = 12, win: int = 8, speakers: int = 2):
        super().__init__()
        self.s, self.n = speakers, n
        self.enc = nn.Conv1d(1, n, win, stride=win // 2, bias=False)
        self.gln = nn.GroupNorm(1, n)
        self.bottleneck = nn.Conv1d(n, b, 1)
        self.blocks = nn.ModuleList([_TasNetBlock(b, h, d) for d in (1, 2, 4)])
        self.mask = nn.Conv1d(b, speakers * n, 1)
        self.dec = nn.ConvTranspose1d(n, 1, win, stride=win // 2, bias=False)

    @staticmethod
    def _si_snr(est, ref):
        est, ref = est - est.mean(-1, keepdim=True), ref - ref.mean(-1, keepdim=True)
        proj = (est * ref).sum(-1, keepdim=True) * ref / (ref.pow(2).sum(-1, keepdim=True) + 1e-8)
        noise = est - proj
        return 10 * torch.log10(proj.pow(2).sum(-1) / (noise.pow(2).sum(-1) + 1e-8) + 1e-8)

    def forward(self, mix, refs):
        w = F.relu(self.enc(mix))
        x = self.bottleneck(self.gln(w))
        skips = 0
        for blk in self.blocks:
            x, s = blk(x)
            skips = skips + s
        m = torch.sigmoid(self.mask(F.prelu(skips, torch.full((1,), 0.25, device=mix.device)))).view(
            mix.shape[0], self.s, self.n, -1
        )
        est = self.dec((w.unsqueeze(1) * m).flatten(0, 1)).view(mix.shape[0], self.s, -1)
        perms = torch.stack([self._si_snr(est, refs).mean(-1), self._si_snr(est, refs.flip(1)).mean(-1)], -1)
        best, which = perms.max(-1)
        return {"loss": -best.mean(), "estimates": est, "perm": which}


def conv_tasnet_pit():
    torch.manual_seed(0)
    return _ConvTasNet(), (torch.randn(2, 1, 64), torch.randn(2, 2, 64))


class _SincConv(nn.Module):
    """SincNet's band-pass filters made in forward from learned low and band frequencies (abs, clamp): a
    Hamming window by cos of linspace, (sin(2 pi f_high t) - sin(2 pi f_low t)) / (t / 2) by matmul of the
    frequencies with the time axis, the centre tap 2 * band, flip for the right half, cat, conv1d."""

    def __init__(self, out: int = 6, k: int = 15, sr: int = 800):
        super().__init__()
        self.k, self.sr = k, sr
        self.low_hz = nn.Parameter(torch.linspace(30.0, 250.0, out).view(-1, 1))
        self.band_hz = nn.Parameter(torch.full((out, 1), 60.0))

    def forward(self, x):
        half = (self.k - 1) // 2
        dev, dt = x.device, x.dtype
        n_lin = torch.linspace(0, (self.k / 2) - 1, steps=half, device=dev, dtype=dt)
        window = 0.54 - 0.46 * torch.cos(2 * math.pi * n_lin / self.k)
        n = 2 * math.pi * torch.arange(-half, 0, device=dev, dtype=dt).view(1, -1) / self.sr
        low = 10.0 + torch.abs(self.low_hz)
        high = torch.clamp(low + 20.0 + torch.abs(self.band_hz), 10.0, self.sr / 2)
        band = (high - low)[:, 0]
        left = ((torch.sin(high @ n) - torch.sin(low @ n)) / (n / 2)) * window
        centre = 2 * band.view(-1, 1)
        filt = torch.cat([left, centre, torch.flip(left, dims=[1])], dim=1) / (2 * band[:, None])
        return F.conv1d(x, filt.view(-1, 1, self.k))


class _SincNet(nn.Module):
    """SincNet speaker classifier: SincConv, abs and log compression, max_pool1d 3, LayerNorm over channels by
    transpose, leaky_relu, a Conv1d, global mean, cross_entropy."""

    def __init__(self, classes: int = 4):
        super().__init__()
        self.sinc = _SincConv()
        self.norm = nn.LayerNorm(6)
        self.conv = nn.Conv1d(6, 8, 5)
        self.out = nn.Linear(8, classes)

    def forward(self, wav, labels):
        y = F.max_pool1d(torch.log1p(torch.abs(self.sinc(wav))), 3)
        y = F.leaky_relu(self.norm(y.transpose(1, 2)).transpose(1, 2), 0.2)
        logits = self.out(F.leaky_relu(self.conv(y), 0.2).mean(-1))
        return {"loss": F.cross_entropy(logits, labels), "logits": logits}


def sincnet_frontend():
    torch.manual_seed(0)
    return _SincNet(), (torch.randn(3, 1, 120), torch.tensor([0, 3, 1]))


class _PCENPitch(nn.Module):
    """Framed audio (Tensor.unfold, periodic Hann), rfft n=128 with the power taken as .real**2 + .imag**2;
    autocorrelation by irfft of the power, normalised by lag 0, a lag search by argmax over lags 4..31 (a long
    lag), parabolic refinement by gather at lag - 1, lag, lag + 1, f0 = sr / lag; a learned softplus filterbank
    by matmul; PCEN (a first-order IIR smoother over frames in a Python loop, learned alpha, delta, r as exp of
    log parameters, pow of tensors); a classifier on the PCEN mean and the pitch."""

    def __init__(self, bands: int = 10, classes: int = 3, sr: float = 1000.0):
        super().__init__()
        self.sr = sr
        self.fbank = nn.Parameter(torch.randn(65, bands) * 0.1)
        self.log_alpha = nn.Parameter(torch.full((bands,), math.log(0.9)))
        self.log_delta = nn.Parameter(torch.full((bands,), math.log(2.0)))
        self.log_r = nn.Parameter(torch.full((bands,), math.log(0.5)))
        self.out = nn.Linear(bands + 1, classes)

    def forward(self, wav):
        frames = wav.unfold(-1, 64, 32)  # (B, F, 64)
        win = torch.hann_window(64, periodic=True, device=wav.device, dtype=wav.dtype)
        spec = torch.fft.rfft(frames * win, n=128)
        power = spec.real**2 + spec.imag**2
        ac = torch.fft.irfft(power, n=128)[..., :64]
        ac = ac / (ac[..., :1] + 1e-8)
        lag = ac[..., 4:32].argmax(-1) + 4
        near = torch.stack([lag - 1, lag, lag + 1], -1)
        a, b, c = ac.gather(-1, near).unbind(-1)
        shift = 0.5 * (a - c) / (a - 2 * b + c - 1e-8)
        f0 = self.sr / (lag.to(wav.dtype) + shift.clamp(-1, 1))
        energy = F.softplus(power @ self.fbank)  # (B, F, bands)
        alpha, delta, r = self.log_alpha.exp(), self.log_delta.exp(), self.log_r.exp()
        m = energy[:, 0]
        pcen = []
        for e in energy.unbind(1):
            m = 0.96 * m + 0.04 * e
            pcen.append((e / (1e-6 + m) ** alpha + delta) ** r - delta**r)
        feats = torch.cat([torch.stack(pcen, 1).mean(1), (f0.mean(1, keepdim=True) / 100.0)], -1)
        return self.out(feats), lag


def pcen_autocorr_pitch():
    torch.manual_seed(0)
    return _PCENPitch(), (torch.randn(2, 256),)


# ---------------------------------------------------------------- losses


class _SegLosses(nn.Module):
    """A small segmentation net scored by the generalized dice loss (class weights 1 / (sum of the one-hot
    target)^2 clamped) and the focal Tversky loss (alpha 0.7, beta 0.3, gamma 0.75) on softmax probabilities
    against a one_hot target permuted to NCHW, plus a foreground sigmoid branch with BCE and soft dice on the
    union of foreground classes."""

    def __init__(self, classes: int = 3):
        super().__init__()
        self.c = classes
        self.net = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=2, dilation=2), nn.ReLU()
        )
        self.head, self.fg = nn.Conv2d(8, classes, 1), nn.Conv2d(8, 1, 1)

    def forward(self, img, target):
        f = self.net(img)
        p = self.head(f).softmax(1)
        t = F.one_hot(target, self.c).permute(0, 3, 1, 2).to(p.dtype)
        dims = (0, 2, 3)
        w = 1.0 / t.sum(dims).pow(2).clamp(min=1.0)
        inter, total = (p * t).sum(dims), (p + t).sum(dims)
        gdice = 1 - 2 * (w * inter).sum() / (w * total).sum()
        tp, fn, fp = inter, ((1 - p) * t).sum(dims), (p * (1 - t)).sum(dims)
        tversky = (tp + 1) / (tp + 0.7 * fn + 0.3 * fp + 1)
        ftl = (1 - tversky).pow(0.75).mean()
        fg_logit = self.fg(f).squeeze(1)
        fg_t = (target > 0).to(p.dtype)
        fg_p = torch.sigmoid(fg_logit)
        dice = 1 - (2 * (fg_p * fg_t).sum() + 1) / (fg_p.sum() + fg_t.sum() + 1)
        loss = gdice + ftl + dice + F.binary_cross_entropy_with_logits(fg_logit, fg_t)
        return {"loss": loss, "probs": p}


def seg_tversky_gdice():
    torch.manual_seed(0)
    return _SegLosses(), (torch.randn(2, 3, 12, 12), torch.randint(0, 3, (2, 12, 12)))


class _Ranker(nn.Module):
    """Learning to rank: an MLP scores documents per query; ListNet (softmax cross entropy against
    softmax of the graded labels), LambdaRank's pairwise logistic loss weighted by |delta NDCG| (ranks by argsort
    of argsort, gains 2^rel - 1, discounts 1 / log2(rank + 2), ideal DCG by sort descending, weights detached),
    and NDCG@3 of the current order as a metric."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(d, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, feats, rel):
        s = self.mlp(feats).squeeze(-1)  # (Q, N)
        relf = rel.to(s.dtype)
        listnet = -(relf.softmax(-1) * s.log_softmax(-1)).sum(-1).mean()
        rank = torch.argsort(torch.argsort(s, dim=-1, descending=True, stable=True), dim=-1, stable=True)
        gains = torch.pow(2.0, relf) - 1
        disc = 1.0 / torch.log2(rank.to(s.dtype) + 2)
        ideal = (
            torch.sort(gains, -1, descending=True).values
            / torch.log2(torch.arange(s.shape[-1], device=s.device, dtype=s.dtype) + 2)
        ).sum(-1)
        delta = (
            (gains[:, :, None] - gains[:, None, :]).abs() * (disc[:, :, None] - disc[:, None, :]).abs()
        ) / ideal.clamp(min=1e-6)[:, None, None]
        better = (rel[:, :, None] > rel[:, None, :]).to(s.dtype)
        pair = F.softplus(-(s[:, :, None] - s[:, None, :])) * better * delta.detach()
        lambda_loss = pair.sum() / better.sum().clamp(min=1)
        dcg3 = (gains * disc * (rank < 3).to(s.dtype)).sum(-1)
        ideal3 = (
            torch.sort(gains, -1, descending=True).values[:, :3]
            / torch.log2(torch.arange(3, device=s.device, dtype=s.dtype) + 2)
        ).sum(-1)
        return {"loss": listnet + lambda_loss, "ndcg3": dcg3 / ideal3.clamp(min=1e-6), "rank": rank}


def ranking_listnet_lambda():
    torch.manual_seed(0)
    return _Ranker(), (torch.randn(3, 6, 8), torch.randint(0, 4, (3, 6)))


class _ProbRegressor(nn.Module):
    """Probabilistic regression heads: three quantiles sorted (monotone rearrangement) and scored by the
    pinball loss (maximum of q e and (q - 1) e) plus a crossing penalty; a Gaussian head scored by the closed
    form CRPS (erf, exp, 1/sqrt(pi)); a Tweedie deviance (power 1.5, pow of a tensor base) on a softplus mean;
    log-cosh on the Gaussian mean."""

    def __init__(self, d: int = 6):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, 16), nn.Tanh())
        self.q, self.gauss, self.tw = nn.Linear(16, 3), nn.Linear(16, 2), nn.Linear(16, 1)

    def forward(self, x, y, counts):
        h = self.body(x)
        raw_q = self.q(h)
        qs = torch.sort(raw_q, -1).values
        levels = torch.tensor([0.1, 0.5, 0.9], device=x.device, dtype=x.dtype)
        e = y[:, None] - qs
        pinball = torch.maximum(levels * e, (levels - 1) * e).mean()
        crossing = F.relu(raw_q[:, :-1] - raw_q[:, 1:]).mean()
        mu, log_sigma = self.gauss(h).unbind(-1)
        sigma = log_sigma.exp()
        z = (y - mu) / sigma
        cdf = 0.5 * (1 + torch.erf(z / math.sqrt(2)))
        pdf = torch.exp(-0.5 * z**2) / math.sqrt(2 * math.pi)
        crps = (sigma * (z * (2 * cdf - 1) + 2 * pdf - 1 / math.sqrt(math.pi))).mean()
        tw_mu = F.softplus(self.tw(h)).squeeze(-1) + 1e-4
        cf = counts.to(x.dtype)
        p = 1.5
        tweedie = (-cf * tw_mu.pow(1 - p) / (1 - p) + tw_mu.pow(2 - p) / (2 - p)).mean()
        logcosh = torch.log(torch.cosh(mu - y)).mean()
        return {"loss": pinball + crossing + crps + tweedie + logcosh, "quantiles": qs, "sigma": sigma}


def probabilistic_reg_losses():
    torch.manual_seed(0)
    return _ProbRegressor(), (torch.randn(8, 6), torch.randn(8), torch.randint(0, 5, (8,)))


# ---------------------------------------------------------------- embedding


class _ViTResized(nn.Module):
    """A ViT run at a resolution other than its training one: patch embedding Conv2d 4/4 on a 12x16 image, a
    learned 4x4 position grid resized to 3x4 by bicubic interpolation (align_corners False) and flattened, a
    class token by expand and cat, segment embeddings from Embedding.from_pretrained(freeze=False), a pre-norm
    attention block written out, the class token's head plus a mean-pooled auxiliary head."""

    def __init__(self, d: int = 16, heads: int = 2, classes: int = 5):
        super().__init__()
        self.h = heads
        self.patch = nn.Conv2d(3, d, 4, stride=4)
        self.pos = nn.Parameter(torch.randn(1, d, 4, 4) * 0.02)
        self.cls_pos = nn.Parameter(torch.zeros(1, 1, d))
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.seg = nn.Embedding.from_pretrained(torch.randn(2, d) * 0.02, freeze=False)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.head, self.aux = nn.Linear(d, classes), nn.Linear(d, classes)

    def forward(self, img, segments):
        x = self.patch(img)
        b, d, gh, gw = x.shape
        pos = F.interpolate(self.pos, size=(gh, gw), mode="bicubic", align_corners=False)
        x = x.flatten(2).transpose(1, 2) + pos.flatten(2).transpose(1, 2)
        x = torch.cat([(self.cls + self.cls_pos).expand(b, -1, -1), x], 1) + self.seg(segments)
        n = x.shape[1]
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        a = (q @ k.transpose(-1, -2) / math.sqrt(d // self.h)).softmax(-1)
        x = x + self.proj((a @ v).transpose(1, 2).reshape(b, n, d))
        x = x + self.mlp(self.norm2(x))
        return self.head(x[:, 0]), self.aux(x[:, 1:].mean(1))


def vit_posembed_resize():
    torch.manual_seed(0)
    return _ViTResized(), (torch.randn(2, 3, 12, 16), torch.randint(0, 2, (2, 13)))


class _AdaptiveLM(nn.Module):
    """An LSTM language model over a 60-word vocabulary with nn.AdaptiveLogSoftmaxWithLoss (cutoffs 8 and
    24, div_value 2, head bias): its loss and per-target log-probabilities, the full log_prob table and
    predict's argmax words."""

    def __init__(self, vocab: int = 60, d: int = 16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, d, batch_first=True)
        self.asm = nn.AdaptiveLogSoftmaxWithLoss(d, vocab, cutoffs=[8, 24], div_value=2.0, head_bias=True)

    def forward(self, tokens):
        h, _ = self.lstm(self.emb(tokens[:, :-1]))
        flat = h.reshape(-1, h.shape[-1])
        res = self.asm(flat, tokens[:, 1:].reshape(-1))
        return {
            "loss": res.loss,
            "target_logp": res.output,
            "log_prob": self.asm.log_prob(flat),
            "predict": self.asm.predict(flat),
        }


def adaptive_logsoftmax():
    torch.manual_seed(0)
    tokens = torch.tensor(
        [[0, 3, 9, 30, 2, 45, 7, 12, 59], [1, 8, 25, 4, 4, 33, 0, 23, 10], [5, 50, 6, 24, 2, 9, 17, 41, 3]]
    )
    return _AdaptiveLM(), (tokens,)


# ---------------------------------------------------------------- integer and bool paths


class _EqualFreqBins(nn.Module):
    """A tabular model: equal-frequency bin edges per numeric feature from the batch (sort along the batch,
    edge positions by integer arange * B // bins), batched searchsorted on the transposed values, bin ids offset
    per feature into one Embedding; a categorical column filtered by isin against a known-id list (unknown to an
    OOV id by where); the two nearest learned prototypes by topk(largest=False) on cdist; bin occupancy by
    bincount with weights and minlength."""

    def __init__(self, feats: int = 3, bins: int = 4, cats: int = 10, d: int = 6, protos: int = 5):
        super().__init__()
        self.f, self.bins = feats, bins
        self.bin_emb = nn.Embedding(feats * bins, d)
        self.cat_emb = nn.Embedding(cats + 1, d)
        self.protos = nn.Parameter(torch.randn(protos, feats))
        self.proto_val = nn.Parameter(torch.randn(protos, d) * 0.1)
        self.out = nn.Linear(3 * d + bins, 2)

    def forward(self, x, cat):
        bsz = x.shape[0]
        srt = x.sort(0).values  # (B, F)
        pos = torch.arange(1, self.bins, device=x.device) * bsz // self.bins
        edges = srt[pos].t().contiguous()  # (F, bins - 1)
        ids = torch.searchsorted(edges, x.t().contiguous(), right=True).t()  # (B, F)
        ids = ids + torch.arange(self.f, device=x.device) * self.bins
        known = torch.tensor([1, 2, 3, 5, 8], device=x.device)
        cat_ids = torch.where(torch.isin(cat, known), cat, torch.full_like(cat, self.cat_emb.num_embeddings - 1))
        dist = torch.cdist(x, self.protos)
        near_d, near = dist.topk(2, dim=-1, largest=False)
        w = torch.softmax(-near_d, -1)
        proto = (self.proto_val[near] * w[..., None]).sum(1)
        occ = torch.bincount(ids[:, 0], weights=x[:, 0].abs(), minlength=self.bins)[: self.bins]
        feats = torch.cat([self.bin_emb(ids).mean(1), self.cat_emb(cat_ids), proto, occ.expand(bsz, -1)], -1)
        return self.out(feats), near, ids


def equal_freq_binning():
    torch.manual_seed(0)
    return _EqualFreqBins(), (torch.randn(12, 3), torch.randint(0, 10, (12,)))


class _W8A8(nn.Module):
    """Int8 weight and activation quantisation by hand: per-output-channel symmetric weight scales (amax / 127),
    round, clamp, to int8; a per-tensor activation scale; the product in int32 (matmul of int32 casts), back to
    float by the two scales; an asymmetric uint8 path (min/max, zero point by round, to uint8) dequantised; a
    LayerNorm and a float head."""

    def __init__(self, d: int = 12, hid: int = 16):
        super().__init__()
        self.fc = nn.Linear(d, hid)
        self.norm = nn.LayerNorm(hid)
        self.head = nn.Linear(hid, 3)

    def forward(self, x):
        w = self.fc.weight
        s_w = w.abs().amax(1, keepdim=True).clamp(min=1e-8) / 127
        qw = torch.round(w / s_w).clamp(-128, 127).to(torch.int8)
        s_x = x.abs().amax().clamp(min=1e-8) / 127
        qx = torch.round(x / s_x).clamp(-127, 127).to(torch.int8)
        acc = torch.matmul(qx.to(torch.int32), qw.to(torch.int32).t())
        y = acc.to(x.dtype) * s_x * s_w.t() + self.fc.bias
        h = self.norm(F.relu(y))
        lo, hi = h.amin(), h.amax()
        scale = (hi - lo).clamp(min=1e-8) / 255
        zp = torch.round(-lo / scale).clamp(0, 255)
        qh = torch.clamp(torch.round(h / scale) + zp, 0, 255).to(torch.uint8)
        deq = (qh.to(h.dtype) - zp) * scale
        return self.head(deq + (h - h.detach())), qw, qh


def int8_w8a8_linear():
    torch.manual_seed(0)
    return _W8A8(), (torch.randn(5, 12),)


# ---------------------------------------------------------------- pooling, normalisation, interpolation


class _PoolZoo(nn.Module):
    """Pooling a user reaches for less often: GeM pooling with a learned exponent (clamp, pow of a tensor
    exponent, avg_pool2d over the whole map, pow 1/p), LPPool3d, fractional_max_pool3d to an output size with
    the samples given as an input, AdaptiveMaxPool1d with indices on an odd length into MaxUnpool1d with an
    output_size, AvgPool1d ceil_mode with padding and count_include_pad False."""

    def __init__(self):
        super().__init__()
        self.conv3 = nn.Conv3d(2, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.conv1 = nn.Conv1d(3, 4, 3, padding=1)
        self.p = nn.Parameter(torch.tensor(3.0))
        self.lp = nn.LPPool3d(2, 2, stride=2)
        self.amax = nn.AdaptiveMaxPool1d(5, return_indices=True)
        self.unpool = nn.MaxUnpool1d(2, stride=2)
        self.avg = nn.AvgPool1d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
        self.out = nn.Linear(4 + 4 * 2 * 3 * 3 + 4 * 2 * 2 * 2 + 4 * 6, 3)

    def forward(self, vol, samples, sig):
        v = F.relu(self.conv3(vol))  # (B, 4, 6, 8, 8)
        img = F.relu(self.conv2(v.mean(2)))  # (B, 4, 8, 8)
        gem = F.avg_pool2d(img.clamp(min=1e-6).pow(self.p), img.shape[-2:]).pow(1.0 / self.p).flatten(1)
        frac = F.fractional_max_pool3d(v, 2, output_size=(2, 3, 3), _random_samples=samples).flatten(1)
        lp = self.lp(v[:, :, :4, :4, :4]).flatten(1)
        s = self.conv1(sig)  # (B, 4, 11)
        pooled, idx = self.amax(s)
        un = self.unpool(pooled, idx, output_size=[s.shape[-1]])
        avg = self.avg(un + s).flatten(1)
        return self.out(torch.cat([gem, frac, lp, avg], 1)), idx


def pooling_zoo_gem():
    torch.manual_seed(0)
    return _PoolZoo(), (torch.randn(2, 2, 6, 8, 8), torch.rand(2, 4, 3), torch.randn(2, 3, 11))


class _WSConv2d(nn.Conv2d):
    """Weight standardisation (BiT): the kernel centred and scaled per output channel in forward."""

    def forward(self, x):
        w = self.weight
        mean = w.mean((1, 2, 3), keepdim=True)
        var = w.var((1, 2, 3), keepdim=True, unbiased=False)
        return F.conv2d(x, (w - mean) / torch.sqrt(var + 1e-5), self.bias, self.stride, self.padding)


class _StyleNorms(nn.Module):
    """Normalisations of style and conditional nets: weight-standardised convs with F.group_norm, conditional
    BatchNorm (BatchNorm2d affine=False, per-class gamma and beta from an Embedding), AdaIN (F.instance_norm
    of the content, style statistics by var_mean over H, W unbiased=False), F.batch_norm with the module's own
    running buffers and training flag."""

    def __init__(self, c: int = 8, classes: int = 3):
        super().__init__()
        self.c = c
        self.enc = _WSConv2d(3, c, 3, padding=1)
        self.gn_w, self.gn_b = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c))
        self.style = nn.Sequential(nn.Conv2d(3, c, 3, stride=2, padding=1), nn.ReLU())
        self.bn = nn.BatchNorm2d(c, affine=False)
        self.cond = nn.Embedding(classes, 2 * c)
        self.dec = nn.Conv2d(c, 3, 3, padding=1)
        self.register_buffer("rm", torch.zeros(3))
        self.register_buffer("rv", torch.ones(3))
        self.bn_w, self.bn_b = nn.Parameter(torch.ones(3)), nn.Parameter(torch.zeros(3))

    def forward(self, content, style, cls, target):
        x = F.relu(F.group_norm(self.enc(content), 4, self.gn_w, self.gn_b))
        gamma, beta = self.cond(cls).view(-1, 2, self.c, 1, 1).unbind(1)
        x = self.bn(x) * (1 + gamma) + beta
        s = self.style(style)
        s_var, s_mean = torch.var_mean(s, dim=(2, 3), keepdim=True, unbiased=False)
        x = F.instance_norm(x) * torch.sqrt(s_var + 1e-5) + s_mean
        y = F.batch_norm(self.dec(x), self.rm, self.rv, self.bn_w, self.bn_b, training=self.training, momentum=0.1)
        return {"loss": F.mse_loss(y, target), "image": y}


def adain_condbn_ws():
    torch.manual_seed(0)
    return _StyleNorms(), (
        torch.randn(2, 3, 10, 10),
        torch.randn(2, 3, 12, 12),
        torch.tensor([2, 0]),
        torch.randn(2, 3, 10, 10),
    )


class _LaplacianPyramid(nn.Module):
    """A Laplacian-pyramid image enhancer on a 15x18 image: levels by bicubic antialias downsampling at scale
    0.5, band-pass residuals against bicubic align_corners=True upsampling to the finer size, a conv per band,
    reconstruction coarse to fine by bilinear upsampling to size, a guide by area interpolation, and an output
    resized by bilinear antialias at scale (1.5, 0.75) (up in one dimension, down in the other); L1 on every
    pyramid level."""

    def __init__(self, levels: int = 3):
        super().__init__()
        self.levels = levels
        self.band = nn.ModuleList([nn.Conv2d(3, 3, 3, padding=1) for _ in range(levels)])
        self.guide = nn.Conv2d(3, 3, 1)

    def forward(self, img, target):
        gauss = [img]
        for _ in range(self.levels - 1):
            gauss.append(
                F.interpolate(gauss[-1], scale_factor=0.5, mode="bicubic", antialias=True, align_corners=False)
            )
        bands = [
            g - F.interpolate(nxt, size=g.shape[-2:], mode="bicubic", align_corners=True)
            for g, nxt in zip(gauss, gauss[1:])
        ] + [gauss[-1]]
        out = self.band[-1](bands[-1])
        for i in range(self.levels - 2, -1, -1):
            out = F.interpolate(out, size=bands[i].shape[-2:], mode="bilinear", align_corners=False) + self.band[i](
                bands[i]
            )
        guide = self.guide(F.interpolate(img, size=(5, 6), mode="area"))
        out = out + F.interpolate(guide, size=out.shape[-2:], mode="nearest")
        loss = F.l1_loss(out, target)
        t = target
        for _ in range(self.levels - 1):
            t = F.interpolate(t, scale_factor=0.5, mode="bicubic", antialias=True, align_corners=False)
            out_small = F.interpolate(out, size=t.shape[-2:], mode="area")
            loss = loss + F.l1_loss(out_small, t)
        resized = F.interpolate(out, scale_factor=(1.5, 0.75), mode="bilinear", antialias=True, align_corners=False)
        return {"loss": loss, "resized": resized}


def laplacian_pyramid():
    torch.manual_seed(0)
    return _LaplacianPyramid(), (torch.rand(2, 3, 15, 18), torch.rand(2, 3, 15, 18))


# ---------------------------------------------------------------- autograd, hooks, dtypes, misc


class _MemSwish(torch.autograd.Function):
    """Memory-efficient Swish: saves only the input, recomputes the sigmoid in backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad * (s * (1 + x * (1 - s)))


class _ClipGradRows(torch.autograd.Function):
    """Identity forward; backward rescales each row's gradient to a norm of at most ``c``."""

    @staticmethod
    def forward(ctx, x, c: float):
        ctx.c = c
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        norm = grad.norm(dim=-1, keepdim=True).clamp(min=ctx.c)
        return grad * (ctx.c / norm), None


def _scale_input(module, args):
    return (args[0] * 0.5,)


def _add_skip(module, args, out):
    return out + args[0].mean(-1, keepdim=True)


def _shrink_grad(module, grad_in, grad_out):
    return tuple(None if g is None else g * 0.9 for g in grad_in)


class _HookedNet(nn.Module):
    """Hooks and custom Functions: a forward pre-hook that halves a layer's input, a forward hook that adds a
    skip to its output, a full backward hook that scales the gradient leaving a layer, a tensor hook (register_hook)
    on an activation, a memory-efficient Swish Function and a per-row gradient-clipping Function."""

    def __init__(self, d: int = 10):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(6, d), nn.Linear(d, d), nn.Linear(d, 3)
        self.fc2.register_forward_pre_hook(_scale_input)
        self.fc2.register_forward_hook(_add_skip)
        self.fc3.register_full_backward_hook(_shrink_grad)

    def forward(self, x):
        h = _MemSwish.apply(self.fc1(x))
        if h.requires_grad:
            h.register_hook(lambda g: g * 2.0)
        h = _ClipGradRows.apply(_MemSwish.apply(self.fc2(h)), 0.05)
        return self.fc3(h)


def hooks_memswish_gradclip():
    torch.manual_seed(0)
    return _HookedNet(), (torch.randn(5, 6),)


class _MixedPrecision(nn.Module):
    """Mixed dtypes by hand, no autocast: a float32 trunk, a bfloat16 layer (activations, weight and bias cast
    to bfloat16, GELU in bfloat16, back to float32), a float16 round trip of the features, a float64 head
    (a Linear made .double()), log_softmax and nll_loss in float64, float32 probabilities out."""

    def __init__(self, d: int = 8, hid: int = 16, classes: int = 4):
        super().__init__()
        self.inp = nn.Linear(d, hid)
        self.mid = nn.Linear(hid, hid)
        self.norm = nn.LayerNorm(hid)
        self.head = nn.Linear(hid, classes).double()

    def forward(self, x, labels):
        h = F.relu(self.inp(x))
        hb = F.linear(h.to(torch.bfloat16), self.mid.weight.to(torch.bfloat16), self.mid.bias.to(torch.bfloat16))
        h = self.norm(h + F.gelu(hb).float())
        h = h.half().float()
        logits = self.head(h.double())
        logp = F.log_softmax(logits, -1)
        return {"loss": F.nll_loss(logp, labels), "logits64": logits, "probs": logp.exp().float()}


def bf16_f64_mixed():
    torch.manual_seed(0)
    return _MixedPrecision(), (torch.randn(6, 8), torch.tensor([0, 3, 1, 2, 2, 0]))


class _Monarch(nn.Module):
    """A Monarch-style structured linear layer: a block-diagonal matrix by torch.block_diag of learned blocks
    (unbind), a stride permutation by reshape/transpose, a second block-diagonal factor by a batched einsum,
    a learned diagonal by diag_embed, a tridiagonal correction read with torch.diagonal(offset=1) and rebuilt by
    diag_embed with offset; a GELU MLP head."""

    def __init__(self, nb: int = 4, bs: int = 4):
        super().__init__()
        self.nb, self.bs = nb, bs
        self.blocks1 = nn.Parameter(torch.randn(nb, bs, bs) / math.sqrt(bs))
        self.blocks2 = nn.Parameter(torch.randn(nb, bs, bs) / math.sqrt(bs))
        n = nb * bs
        self.diag = nn.Parameter(torch.ones(n))
        self.band = nn.Parameter(torch.randn(n, n) * 0.05)
        self.head = nn.Sequential(nn.Linear(n, 8), nn.GELU(), nn.Linear(8, 2))

    def forward(self, x):
        b, n = x.shape
        y = x @ torch.block_diag(*self.blocks1.unbind(0)).t()
        y = y.view(b, self.nb, self.bs).transpose(1, 2).reshape(b, self.bs, self.nb)
        y = torch.einsum("bki,kij->bkj", y, self.blocks2).transpose(1, 2).reshape(b, n)
        upper = torch.diagonal(self.band, offset=1)
        tri = torch.diag_embed(upper, offset=1) + torch.diag_embed(upper, offset=-1)
        y = y @ torch.diag_embed(self.diag) + x @ tri
        return self.head(y)


def monarch_blockdiag():
    torch.manual_seed(0)
    return _Monarch(), (torch.randn(5, 16),)


MODELS = {
    "roi_align_grid_sample": (
        "vision",
        "Faster R-CNN box head: RoIAlign by grid_sample (aligned boxes, bin-centre samples by arange, index_select of each RoI's image, avg_pool2d), class-specific deltas by advanced indexing, CE + smooth_l1",
    ),
    "fpn_retina_focal": (
        "vision",
        "RetinaNet: FPN laterals, top-down nearest interpolate to size, P6 by max_pool2d(1, 2), shared heads, permute/reshape/cat, sigmoid focal loss with ignored anchors, L1 on bool-masked positives",
    ),
    "centernet_decode": (
        "vision",
        "CenterNet: ConvTranspose2d up stage, Gaussian heatmap target made in forward, penalty-reduced focal loss, gather at centres, max_pool2d peak NMS (hmax == heat), topk, // and % decoding",
    ),
    "yolo_fast_nms": (
        "vision",
        "YOLOv3 head: view/permute per anchor, meshgrid cells, sigmoid/exp decoding, GIoU loss (maximum/minimum/clamp), BCE objectness, Fast NMS by topk, pairwise IoU, triu, amax <= 0.5 bool keep",
    ),
    "gru_attn_pool_padseq": (
        "rnn",
        "sentence classifier: torch.split of a token stream, pad_sequence, Embedding padding_idx, 3-layer bidirectional GRU dropout 0 (not packed), attention pooling with arange < lengths mask, bmm",
    ),
    "qrnn_fo_pool": (
        "sequence",
        "QRNN language model: left-padded causal Conv1d gates (tanh, sigmoid), fo-pooling as a Python loop over unbind, residual, LayerNorm, log_softmax + nll_loss",
    ),
    "t5_relbucket_alibi": (
        "attention",
        "encoder-decoder: T5 relative-position buckets (log bucketing to long, abs, torch.min, where, bucket Embedding), T5 RMS norm, ALiBi slopes by pow(2, tensor), causal triu bool mask, cross-attention",
    ),
    "causal_linear_attention": (
        "attention",
        "linear-transformer LM: elu + 1 feature maps, causal key-value state by cumsum of einsum outer products, cumsum normaliser, pre-norm blocks, cross_entropy",
    ),
    "conv_tasnet_pit": (
        "audio/fft",
        "Conv-TasNet: strided Conv1d encoder, gLN as GroupNorm(1, C), dilated depthwise Conv1d TCN with PReLU, sigmoid masks, ConvTranspose1d decoder, SI-SNR with log10, permutation-invariant max",
    ),
    "sincnet_frontend": (
        "audio/fft",
        "SincNet: band-pass filters made in forward (abs, clamp, sin of matmul, Hamming by cos, flip, cat), conv1d with them, log1p abs, max_pool1d, LayerNorm by transpose, leaky_relu",
    ),
    "pcen_autocorr_pitch": (
        "audio/fft",
        "Tensor.unfold framing, rfft power by .real/.imag, autocorrelation by irfft, argmax lag, parabolic refinement by gather, learned filterbank, PCEN with an IIR loop and pow of tensors",
    ),
    "seg_tversky_gdice": (
        "loss",
        "segmentation losses: generalized dice (1/sum^2 class weights), focal Tversky (pow 0.75), one_hot permuted to NCHW, foreground sigmoid soft dice + BCE-with-logits",
    ),
    "ranking_listnet_lambda": (
        "loss",
        "learning to rank: ListNet softmax cross entropy, LambdaRank pairwise softplus weighted by |delta NDCG| (argsort of argsort stable, pow(2, rel), log2 discounts, sort descending), NDCG@3",
    ),
    "probabilistic_reg_losses": (
        "loss",
        "probabilistic regression: sorted quantiles with pinball loss (maximum), crossing penalty, Gaussian CRPS by erf/exp, Tweedie deviance (pow of a tensor base), log-cosh",
    ),
    "vit_posembed_resize": (
        "embedding",
        "ViT at a new resolution: patch Conv2d, learned position grid resized by bicubic interpolate to a non-square size, class token expand/cat, Embedding.from_pretrained(freeze=False), attention written out",
    ),
    "adaptive_logsoftmax": (
        "embedding",
        "LSTM language model with nn.AdaptiveLogSoftmaxWithLoss (cutoffs, div_value, head_bias): loss, target log-probs, log_prob table, predict",
    ),
    "equal_freq_binning": (
        "integer",
        "tabular: equal-frequency edges by sort and integer index arithmetic, batched searchsorted right, per-feature offsets into an Embedding, isin with an OOV where, cdist topk(largest=False), bincount weights",
    ),
    "int8_w8a8_linear": (
        "integer",
        "int8 quantisation by hand: per-channel amax scales, round/clamp/to(int8), int32 matmul of int8 values, dequantise by scales, asymmetric uint8 with a zero point, int8 and uint8 outputs",
    ),
    "pooling_zoo_gem": (
        "vision",
        "pooling: GeM (clamp, pow with a learned exponent, avg_pool2d, pow 1/p), LPPool3d, fractional_max_pool3d with given samples, AdaptiveMaxPool1d indices into MaxUnpool1d output_size, AvgPool1d ceil no-pad-count",
    ),
    "adain_condbn_ws": (
        "norm",
        "style/conditional norms: weight-standardised conv (var unbiased=False), F.group_norm, conditional BatchNorm2d affine=False with Embedding gamma/beta, AdaIN by F.instance_norm and var_mean, F.batch_norm with buffers",
    ),
    "laplacian_pyramid": (
        "interpolation",
        "Laplacian pyramid: bicubic antialias scale 0.5 on odd sizes, bicubic align_corners=True to size, bilinear to size, area guide and area to size, nearest to size, bilinear antialias at scale (1.5, 0.75)",
    ),
    "hooks_memswish_gradclip": (
        "autograd",
        "hooks and Functions: forward pre-hook and forward hook changing values, full backward hook scaling grads, tensor register_hook, memory-efficient Swish Function, per-row grad-clipping Function",
    ),
    "bf16_f64_mixed": (
        "dtype",
        "mixed dtypes without autocast: bfloat16 casts of activations, weight and bias with GELU in bfloat16, a float16 round trip, a .double() Linear head, float64 log_softmax + nll_loss",
    ),
    "monarch_blockdiag": (
        "math",
        "Monarch structured linear: torch.block_diag of unbound parameter blocks, stride permutation by reshape/transpose, batched einsum blocks, diag_embed (offsets), torch.diagonal offset=1",
    ),
}

"""torch.nn building blocks as traceable models (``opcov trace nn:NAME``): the layers that
models without a transformers class are made of (recurrent nets, plain CNNs, nn.Transformer).
"""

from __future__ import annotations

import contextlib

from opcov.errors import UsageError
from opcov.torchenv import import_torch

BLOCKS = ("transformer", "lstm", "gru", "convnet")
WIDTH = 64


def build(name: str, sizes, *, real: bool) -> tuple:
    """(model, inputs, config) of block ``name`` with inputs of ``sizes`` (batch, seq, image), on meta
    unless ``real``; opcov.sources.models makes the traceable record of it."""
    if name not in BLOCKS:
        raise UsageError(f"unknown torch.nn block {name!r}; expected one of {', '.join(BLOCKS)}")
    torch = import_torch()
    nn = torch.nn
    b, s = sizes.batch, sizes.seq
    with contextlib.nullcontext() if real else torch.device("meta"):
        if name == "transformer":
            model = nn.Transformer(
                d_model=WIDTH,
                nhead=4,
                num_encoder_layers=2,
                num_decoder_layers=2,
                dim_feedforward=2 * WIDTH,
                batch_first=True,
            )
            inputs = (torch.randn(b, s, WIDTH), torch.randn(b, s, WIDTH))
            config = {"d_model": WIDTH, "nhead": 4, "layers": "2+2", "dim_feedforward": 2 * WIDTH}
        elif name in ("lstm", "gru"):
            cls = nn.LSTM if name == "lstm" else nn.GRU
            model = cls(WIDTH, WIDTH, num_layers=2, batch_first=True, dropout=0.1)
            inputs = (torch.randn(b, s, WIDTH),)
            config = {"input_size": WIDTH, "hidden_size": WIDTH, "num_layers": 2, "dropout": 0.1}
        else:
            size = sizes.image or 32
            model = _convnet(nn)
            inputs = (torch.randn(b, 3, size, size),)
            config = {"channels": [16, 32], "image": size}
    config.update(batch=b, seq=s)
    return model, inputs, config


def _convnet(nn):
    """A small CNN with the usual layers: conv, batch norm, relu, max pool, dropout, linear."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(0.1),
        nn.Linear(32, 10),
    )

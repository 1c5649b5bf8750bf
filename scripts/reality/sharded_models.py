"""A model for scripts/distributed_reality.py whose sharded step must fail: its tensor-parallel plan shards a
Linear layer's weight, and its forward sends that DTensor to searchsorted, which DTensor has no sharding
strategy for in torch 2.13 (a verdict of 'fails' checked against a real run, not only 'runs')."""

import torch


class Bucketed(torch.nn.Module):
    base_model_tp_plan = {"proj": "colwise", "out": "rowwise"}

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 32)
        self.out = torch.nn.Linear(32, 16)

    def forward(self, x):
        edges = self.proj.weight.sort(dim=-1).values
        torch.searchsorted(edges, edges)
        return self.out(torch.relu(self.proj(x)))


def bucketed():
    return Bucketed(), (torch.randn(4, 16),)

"""A few lines in the shape of TorchTPU's tests/distributed/collective_ops_test.py (for opcov's tests)."""

import os

import torch
from absl.testing import absltest
from tests.distributed import distributed_utils
from torch import distributed as dist


def _test_wrapper(test_fn, *args, **kwargs):
    dist.init_process_group(backend="tpu_dist")
    try:
        test_fn(*args, **kwargs)
    finally:
        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()


def run_all_reduce(reduce_op, expected):
    x = torch.tensor([0.0, 1.0], device="tpu")
    handle = torch.distributed.all_reduce(x, op=reduce_op, async_op=True)
    handle.wait()


def run_reduce_scatter_tensor_avg():
    output = torch.zeros((3, 4), device="tpu")
    torch.distributed.reduce_scatter_tensor(
        output, torch.zeros((24, 4), device="tpu"), op=torch.distributed.ReduceOp.AVG
    )


def run_send_recv():
    rank = int(os.environ["RANK"])
    torch.ops.torch_tpu.experimental_send([torch.ones(2, device="tpu")], dst=rank + 1, tag=rank).wait()


def run_barrier_blocking(async_op):
    torch.distributed.barrier(async_op=async_op)


class CollectiveOpsTest(absltest.TestCase):
    def test_all_reduce_sum(self):
        distributed_utils.dist_run(
            fn=_test_wrapper, test_fn=run_all_reduce, reduce_op=torch.distributed.ReduceOp.SUM, expected=[0.0, 8.0]
        )

    def test_all_reduce_max(self):
        distributed_utils.dist_run(
            fn=_test_wrapper, test_fn=run_all_reduce, reduce_op=torch.distributed.ReduceOp.MAX, expected=[0.0, 1.0]
        )

    def test_reduce_scatter_tensor_avg(self):
        distributed_utils.dist_run(fn=_test_wrapper, test_fn=run_reduce_scatter_tensor_avg)

    def test_send_recv(self):
        distributed_utils.dist_run(fn=run_send_recv)

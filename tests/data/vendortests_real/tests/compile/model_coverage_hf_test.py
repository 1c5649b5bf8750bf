"""A few lines in the shape of TorchTPU's tests/compile/model_coverage_hf_test.py (for opcov's tests)."""

import enum

import torch
from absl.testing import parameterized
from torch_tpu._internal import compile as torch_tpu_compile


class ModelSize(enum.StrEnum):
    TINY = enum.auto()
    SMALL = enum.auto()


class ModelCoverageHFTest(parameterized.TestCase):
    def _create_model(self, model):
        return torch.compile(model, dynamic=False, backend=torch_tpu_compile.TpuBackend())

    @parameterized.named_parameters(
        # dict(
        #     testcase_name="transformers/google/gemma-3-270m",
        #     module_name="google/gemma-3-270m",
        # ),
        dict(
            testcase_name="transformers/Qwen/Qwen3-0.6B",
            provider="transformers",
            module_name="Qwen/Qwen3-0.6B",
            model_size=ModelSize.SMALL,
            rtol=1e-3,
        ),
        dict(
            testcase_name="transformers/meta-llama/Llama-3.2-1B",
            provider="transformers",
            module_name="meta-llama/Llama-3.2-1B",
            model_size=ModelSize.SMALL,
        ),
    )
    def test_hf_transformers_training(self, provider, module_name, model_size, rtol=None):
        self._check_model_size(provider, module_name, model_size)

    @parameterized.named_parameters(
        {"testcase_name": "llama", "provider": "transformers", "module_name": "meta-llama/Llama-3.2-1B"},
    )
    def test_hf_transformers_inference(self, provider, module_name, model_size):
        self._check_model_size(provider, module_name, model_size)

"""What serve mode runs: transformers' ``generate`` on a short prompt, once per KV cache kind and token choice.

Why here, below the producers: the tracer records these runs (``opcov.tracing.serve``), the probe replays the
calls they make (``opcov.probe.replay``: a serve op set's own calls, ``check --replay``), and a reality check
runs them for real; all three must run the same ones.
"""

from __future__ import annotations

from dataclasses import dataclass

PROMPT = 8  # prompt tokens per sequence
NEW_TOKENS = 4  # tokens generated: one from the prefill, then NEW_TOKENS - 1 decode steps
TOP_K = 4  # sampling keeps the TOP_K most likely tokens (so topk is called)


@dataclass(frozen=True)
class Run:
    """One generate call: which KV cache, and how the next token is chosen."""

    cache: str  # static | dynamic
    sample: bool  # sampling with top_k, else greedy

    @property
    def name(self) -> str:
        return f"{self.cache}-{'sample' if self.sample else 'greedy'}"

    def kwargs(self) -> dict:
        """generate()'s arguments for this run (the prompt aside)."""
        out: dict = {"max_new_tokens": NEW_TOKENS, "do_sample": self.sample, "num_beams": 1, "use_cache": True}
        if self.sample:
            out.update(top_k=TOP_K, top_p=1.0, temperature=1.0)
        if self.cache == "static":
            out["cache_implementation"] = "static"
        return out

    def args_text(self) -> str:
        """The run's root node's ``args=``."""
        picks = f"do_sample=True, top_k={TOP_K}" if self.sample else "do_sample=False (greedy: argmax)"
        return f"cache={self.cache}, {picks}, prompt={PROMPT}, max_new_tokens={NEW_TOKENS}"


RUNS = (Run("static", False), Run("static", True), Run("dynamic", False), Run("dynamic", True))


def prompt_inputs(torch, inputs, config) -> dict:
    """The prompt: ``input_ids`` of PROMPT tokens per sequence (the built inputs' first tokens, as many
    sequences as they have) and an all-ones ``attention_mask``."""
    ids = inputs.get("input_ids") if isinstance(inputs, dict) else None
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        vocab = int(getattr(config, "vocab_size", 0) or 256)
        ids = torch.randint(0, vocab, (2, PROMPT))
    if ids.shape[1] < PROMPT:
        ids = ids.repeat(1, -(-PROMPT // ids.shape[1]))
    ids = ids[:, :PROMPT].contiguous()
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

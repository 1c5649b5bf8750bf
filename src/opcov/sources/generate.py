"""What serve mode runs: transformers' ``generate`` on a short prompt, once per KV cache kind and token choice.

Why here, below the producers: the tracer records these runs (``opcov.tracing.serve``), the probe replays the
calls they make (``opcov.probe.replay``: a serve op set's own calls, ``check --replay``), and ``opcov run
--mode serve`` and the reality scripts run them for real (``run_values``); all must run the same ones.
"""

from __future__ import annotations

import contextlib
import warnings
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


@contextlib.contextmanager
def quiet():
    """transformers' generation warnings (pad token set to eos, flags unused in greedy runs) kept off the
    terminal while the runs last."""
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.set_verbosity(level)


def run_values(torch, model, prompt: dict, *, compile_with=None, sync=None) -> list:
    """(label, tensor on CPU) of each of RUNS on ``model`` for ``prompt`` (on the model's device), what a real
    serve run is compared with CPU by: a greedy run's tokens (equal) and each step's logits (within tolerance);
    a sampling run's tokens' shape alone (its draws come from each device's own random generator). With
    ``compile_with``, the model's forward is compiled with that torch.compile backend and dynamic=False afresh
    for each run, as compiled serve mode traces it and as transformers' docs compile generation
    (``model.forward = torch.compile(model.forward)``); token selection stays eager. ``sync``: the device's
    step barrier, called after each run."""
    got, forward, own = [], model.forward, "forward" in vars(model)
    model.eval()
    try:
        with torch.no_grad(), quiet():
            for i, run in enumerate(RUNS):
                if compile_with:
                    torch._dynamo.reset()
                    model.forward = torch.compile(forward, backend=compile_with, dynamic=False)
                torch.manual_seed(i)
                out = model.generate(**prompt, **run.kwargs(), return_dict_in_generate=True, output_logits=True)
                if sync:
                    sync()
                if run.sample:
                    got.append((f"{run.name}: tokens' shape", torch.tensor(list(out.sequences.shape))))
                    continue
                got.append((f"{run.name}: tokens", out.sequences))
                got += [(f"{run.name}: logits of step {j}", t) for j, t in enumerate(out.logits)]
    finally:
        if own:
            model.forward = forward
        elif "forward" in vars(model):  # the class's forward again
            del model.forward
    return [(label, t.detach().cpu().clone()) for label, t in got]

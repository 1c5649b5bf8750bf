"""Serving a text decoder: a prefill and decode steps through transformers' ``generate`` with a KV cache
(``opcov trace MODEL --mode serve``).

Why this shape:

* Generation is another program than one forward: the prompt's forward (prefill) fills a KV cache, then
  each new token is one short forward that updates the cache (``index_copy_`` into a static cache,
  ``cat`` onto a dynamic one), with position bookkeeping, logits processing, token selection (``argmax``
  greedy; ``topk``, ``softmax``, ``multinomial`` sampling) and stopping checks around it. So the op set
  is made by running ``generate`` itself, as a server would call it, once per cache kind and token
  selection (``RUNS``): static and dynamic cache, greedy and sampling with ``top_k``.
* Real values, always: ``generate`` reads token values on the host every step (has every sequence
  finished?), which fake tensors cannot answer. The trace runs on the computing stand-in (CPU payloads;
  composites take an accelerator's path), as ``--real`` does, or on CPU for ``--device cpu``.
* Prefill and decode apart, as phases: every call up to the second forward of the model is ``prefill``
  (the cache's allocation, the prompt's forward, the first token's selection); every later call is
  ``decode``. A verdict judges both as a forward (no backward), and says which phase needs each op.
* Where each call came from, as ``call`` nodes of the call tree (the verdict replaces a call node by its
  children, so they change no verdict): ``generate:<run>`` is the root of each run in each phase,
  ``generate:model`` the model's forward inside it, ``generate:cache-update`` the cache's ``update``
  inside that; what is under a run's root but outside the model is generate's own work (logits
  processing, token selection, stopping checks, bookkeeping).

Torch and transformers are passed in or imported here; the tracer (``trace.py``) owns the recording and
hands this module its call-tree builder and the phase (``rec.tree``, ``rec.phase``).
"""

from __future__ import annotations

import contextlib

from opcov.errors import UsageError
from opcov.sources.generate import NEW_TOKENS, PROMPT, RUNS, TOP_K, Run, prompt_inputs, quiet  # noqa: F401 - re-exported
from opcov.store.opset import CALL, SERVE_PHASES

# The curated zoo's decoders whose serve op sets the zoo holds (coverage/models/NAME/serve.yaml, made by
# scripts/make_serve_zoo.sh: 'opcov zoo trace --mode serve' traces these): 25-40 s each here.
ZOO = (
    "llama",
    "qwen2",
    "qwen3",
    "mistral",
    "mixtral",
    "qwen2_moe",
    "gemma",
    "gemma2",
    "phi3",
    "gpt2",
    "gpt_neox",
    "opt",
    "falcon",
    "bloom",
    "mamba",
)
PREFILL, DECODE = SERVE_PHASES
GENERATE = "generate:"  # a run's root call node: generate:<run name>
MODEL = "generate:model"  # the model's forward inside a run
CACHE_UPDATE = "generate:cache-update"  # the KV cache's update inside the model's forward
NONE_DTYPE = "none"  # a call node's dtype key (opcov.dtypes.NONE)


def check_model(model) -> None:
    """A model ``generate`` serves here: a transformers decoder that can generate; else one line why."""
    config = getattr(model, "config", None)
    can = getattr(model, "can_generate", None)
    if config is None or not callable(can) or not can():
        raise UsageError(
            f"--mode serve runs transformers' generate(); {type(model).__name__} cannot generate "
            "(serve a text decoder: a causal LM such as llama, qwen2, gpt2)"
        )
    if getattr(config, "is_encoder_decoder", False):
        raise UsageError(
            f"--mode serve: {type(model).__name__} is an encoder-decoder; serve mode traces decoder-only "
            "models for now (an encoder-decoder's generate, encoder outputs and cross-attention cache, is not "
            "traced yet)"
        )


def prepare(torch, built) -> None:
    """``built`` (opcov.sources.models.Built, built as for inference) made ready to serve: its inputs
    become the prompt (``prompt_inputs``) and its recorded sizes say so (``seq``: the prompt's length)."""
    built.inputs = prompt_inputs(torch, built.inputs, getattr(built.model, "config", None))
    ids = built.inputs["input_ids"]
    built.config = {**built.config, "batch": int(ids.shape[0]), "seq": int(ids.shape[1])}


def header(steps: dict) -> dict:
    """The op set's ``serve`` record: the prompt, the new tokens, and per run its forwards (1 prefill,
    the rest decode steps) and the class of the cache generate made (a state-space model's is its own)."""
    return {
        "prompt": PROMPT,
        "new_tokens": NEW_TOKENS,
        "runs": {
            run.name: {
                "args": run.args_text(),
                "forwards": steps.get(run.name, (0, ""))[0],
                "cache_class": steps.get(run.name, (0, ""))[1] or "none",
            }
            for run in RUNS
        },
    }


def note(steps: dict) -> str:
    """The op set's note saying what was run."""
    runs = ", ".join(
        f"{name} ({n} forwards: 1 prefill, {max(n - 1, 0)} decode; {cache or 'no cache'})"
        for name, (n, cache) in steps.items()
    )
    return (
        f"serve: transformers generate() run with real values, prompt {PROMPT} tokens, {NEW_TOKENS} new tokens, "
        f"top_k={TOP_K} when sampling; runs: {runs}. Phase prefill: every call up to the model's second forward "
        "(the cache's allocation, the prompt's forward, the first token's selection); decode: every later call. "
        f"Call nodes {GENERATE}<run>, {MODEL} and {CACHE_UPDATE} say where each call came from"
    )


def run_all(torch, rec, module, state: dict, kwargs: dict, *, close, keep) -> dict:
    """Each of RUNS on ``module`` with ``state`` (its parameters and buffers on the device) and the prompt
    ``kwargs``, recorded into ``rec`` (``rec.tree``, ``rec.phase``); ``close(idx, args)`` closes a call node,
    ``keep(obj)`` says that what generate returned is read (by its caller). Returns run name -> (the model's
    forwards in it, the class name of the cache generate made)."""
    from torch.nn.utils.stateless import _reparametrize_module

    check_model(module)
    steps: dict = {}
    was = module.training
    module.eval()
    try:
        with torch.no_grad(), quiet(), _reparametrize_module(module, state, tie_weights=False), _cache_nodes(rec):
            for i, run in enumerate(RUNS):
                torch.manual_seed(i)
                steps[run.name] = _generate(rec, module, kwargs, run, close, keep)
    finally:
        module.train(was)
    short = [name for name, (n, _) in steps.items() if n < 2]
    if short:
        raise UsageError(
            f"--mode serve: generate stopped after the prefill in run(s) {', '.join(short)} (every sequence "
            "ended at once); there is no decode step to record"
        )
    return steps


def _generate(rec, module, kwargs: dict, run: Run, close, keep) -> tuple[int, str]:
    """One generate call, its calls filed under the run's root node of the phase they belong to: (the
    model's forwards, the class name of the cache the model was given)."""
    tree = rec.tree
    rec.phase = PREFILL
    root = [tree.open(GENERATE + run.name, PREFILL, CALL)]
    forwards = [0]
    cache = [""]
    open_models: list = []

    def before(mod, args, kw):
        forwards[0] += 1
        given = kw.get("past_key_values", kw.get("cache"))
        cache[0] = cache[0] or ("" if given is None else type(given).__name__)
        if forwards[0] == 2:  # the first decode step: the prefill's root ends, the decode's begins
            close(root[0], run.args_text())
            rec.phase = DECODE
            root[0] = tree.open(GENERATE + run.name, DECODE, CALL)
        open_models.append(tree.open(MODEL, rec.phase, CALL))

    def after(mod, args, kw, out):
        if open_models:
            close(open_models.pop(), "")

    hooks = [
        module.register_forward_pre_hook(before, with_kwargs=True),
        module.register_forward_hook(after, with_kwargs=True, always_call=True),
    ]
    try:
        keep(module.generate(**kwargs, **run.kwargs()))
    finally:
        for hook in hooks:
            hook.remove()
        close(root[0], run.args_text())
        rec.phase = PREFILL
    return forwards[0], cache[0]


# transformers' Cache methods that write the cache (each cache layer's own update runs under one of them): the
# keys and values of attention layers, and a state-space or linear-attention layer's conv and recurrent states.
CACHE_WRITES = ("update", "update_conv_state", "update_recurrent_state", "update_indexer")


@contextlib.contextmanager
def _cache_nodes(rec):
    """Every write of a KV cache (transformers' ``Cache.update`` and the other ``CACHE_WRITES``) as a
    ``generate:cache-update`` call node while the runs last."""
    from transformers import cache_utils

    originals = {name: getattr(cache_utils.Cache, name) for name in CACHE_WRITES if hasattr(cache_utils.Cache, name)}

    def wrapped(original):
        def write(self, *args, **kwargs):
            idx = rec.tree.open(CACHE_UPDATE, rec.phase, CALL)
            try:
                return original(self, *args, **kwargs)
            finally:
                rec.tree.close(idx, dtype=NONE_DTYPE, on_device=False)

        return write

    for name, original in originals.items():
        setattr(cache_utils.Cache, name, wrapped(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(cache_utils.Cache, name, original)

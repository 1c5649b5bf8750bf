"""Running one case on the device against the CPU reference: the record of what it found.

A case runs on CPU first (recording the overloads it dispatches, ``probe.record``), in float64
where it can (the reference, ``probe.compare``), then on the device: the forward, the same call
with ``out=`` on an OpInfo's first sample, the backward; a harder case of an input tier
(``probe.tiers``) runs forward only, its inputs laid out on the device as on CPU, and the layout
tiers judge the outputs' memory format too. A failure the recorded overloads cannot pin on one of
them is localised by replaying the case's calls one at a time. The value judgement
(``probe.compare``) gets the op family, for its usable precision tier. Before each step
(the CPU run, the device forward, the backward) the case's partial record is written into the
flight recorder (``probe.flight``), so that when the process dies or hangs the parent knows
which case and which phase to record it against, without a message per step.

This module knows nothing of processes or pipes: ``probe.worker`` is the process shell around it.
"""

from __future__ import annotations

import os
import time

from opcov.catalog import overload_name
from opcov.dtypes import call_dtype
from opcov.probe import FAILURES, lazy
from opcov.probe.caserecord import REFERENCE, CaseRecord
from opcov.probe.compare import family_of, identical, judge
from opcov.probe.record import Calls, Captured, Spot, _dtypes, capturing, recording, seeded_random, spotting
from opcov.probe.results import needs_localizing
from opcov.probe.sample import _Call
from opcov.probe.tiers import LAYOUT_TIERS, copy_exact, layout_problem
from opcov.sources.opinfo import seed_host, seed_of
from opcov.trees import leaves, map_indexed, map_leaves

LOCALIZE_MAX_CALLS = 200  # op calls of one failing case replayed one at a time (the rest are not)
FLOATING = ("float64", "float32", "bfloat16", "float16", "complex128", "complex64")
# Ops whose values are not comparable across implementations: ties (which index), duplicate
# indices (which write wins), sign/phase ambiguity of decompositions, uninitialised memory.
AMBIGUOUS_BASES = frozenset(
    {
        "sort",
        "argsort",
        "topk",
        "kthvalue",
        "mode",
        "median",
        "nanmedian",
        "max",
        "min",
        "argmax",
        "argmin",
        "unique",
        "_unique",
        "_unique2",
        "unique_consecutive",
        "unique_dim",
        "msort",
        "scatter",
        "scatter_",
        "scatter_reduce",
        "index_put",
        "index_put_",
        "_index_put_impl_",
        "index_copy",
        "index_copy_",
        "put",
        "put_",
        "masked_scatter",
        "index_reduce",
        "linalg_eig",
        "linalg_eigh",
        "_linalg_eigh",
        "linalg_svd",
        "_linalg_svd",
        "svd",
        "eig",
        "linalg_eigvals",
        "linalg_qr",
        "geqrf",
        "_linalg_eigvals",
        "pca_lowrank",
        "svd_lowrank",
        "lobpcg",
        "histc",
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "empty_permuted",
        "resize_",
        "resize_as_",
    }
)


def aliasing(torch, inputs, outputs) -> list:
    """For each output tensor, the input tensors it shares storage with (a view or the mutated input).

    A view op must return a view on the device too (code relies on writes through it), and a
    functional op must not return its input's storage; the storage identity (StorageImpl) tells.
    """

    def sid(t):
        if (key := lazy.alias_key(t)) is not None:  # XLA tensors have no storage
            return key
        try:
            return t.untyped_storage()._cdata
        except (RuntimeError, NotImplementedError):  # sparse and other storage-less layouts
            return None

    ins = [sid(t) if isinstance(t, torch.Tensor) else None for t in leaves(inputs)]
    outs = [t for t in leaves(outputs) if isinstance(t, torch.Tensor)]
    return [[i for i, s in enumerate(ins) if s is not None and s == sid(o)] for o in outs]


def widen(torch, t):
    """A float64 (complex128) copy of a floating (complex) tensor for the reference run; other
    tensors copied as they are."""
    if t.is_complex():
        w = t.detach().to(torch.complex128)
    elif t.is_floating_point():
        w = t.detach().to(torch.float64)
    else:
        return t.detach().clone()
    return w.requires_grad_(t.requires_grad)


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message``, at most 300 characters: what a record's ``why`` says."""
    text = str(exc).strip().splitlines()
    line = text[0] if text else ""
    return f"{type(exc).__name__}: {line}"[:300]


def classify_exception(exc: BaseException) -> tuple[str, str]:
    """(status, why) for an exception raised by the device run."""
    import re

    import torch

    why = first_line(exc)
    lazy.forget()  # what fell back in the failed step is not the next step's
    if isinstance(exc, torch.OutOfMemoryError):
        return "error", f"out of memory: {why}"
    text = str(exc)
    if isinstance(exc, NotImplementedError) or re.search(
        r"[Cc]ould not run .* with arguments from the .* backend|not implemented for '|"
        r"no kernel for|is not implemented for|not supported on",
        text,
    ):
        return "unsupported", why
    return "error", why


def pick_device(torch, device_type: str, device: str | None = None, worker_index: int = 0):
    """The device cases run on: ``device`` when given; else, where the backend has several,
    device ``worker_index`` mod their count (``--jobs`` counts devices)."""
    dev = torch.device(device or device_type)
    if device is None and device_type not in ("cpu", "meta"):
        mod = getattr(torch, device_type, None)
        count = mod.device_count() if hasattr(mod, "device_count") else 1
        if count > 1:
            dev = torch.device(device_type, int(worker_index) % count)
    return dev


class Executor:
    """Runs cases on one device; ``suspect`` is set after a device error (the device may be broken)."""

    def __init__(
        self, device_type: str, device: str | None = None, *, worker_index: int = 0, flight=None, timeout: float = 60.0
    ):
        import torch

        self.torch = torch
        self.device_type = device_type
        self.dev = pick_device(torch, device_type, device, worker_index)
        self.flight = flight  # the case in flight, for the parent (None: nobody is watching)
        self.timeout = timeout  # each step of a case must end within this many seconds
        self.suspect = False
        # Seconds to wait before each case: lets tests interrupt a run mid-way (not a user option).
        self.delay = float(os.environ.get("OPCOV_PROBE_CASE_DELAY") or 0)
        if device_type == "cpu":
            self._sync = torch.cpu.synchronize
        else:
            self._sync = getattr(getattr(torch, device_type, None), "synchronize", None)
        self._sync = lazy.sync_for(device_type, self._sync)  # xla: the lazy graph's sync

    def seed(self, seed: int) -> None:
        """Seed the RNGs a case can draw from: on cpu and meta the CPU generator alone (see
        opinfo.seed_host for why not torch.manual_seed); on a device, every generator."""
        if self.device_type in ("cpu", "meta"):
            seed_host(seed)
        else:
            self.torch.manual_seed(seed)

    def step(self, phase: str, rec: CaseRecord) -> None:
        """The case in flight enters a step (each step gets the per-phase timeout)."""
        if self.flight is not None:
            self.flight.write(rec.in_flight(phase), self.timeout)

    def sync(self) -> None:
        if self._sync is not None:
            self._sync()

    # ---------------------------------------------------------------- trees

    def _map(self, sample, fn):
        tensor = self.torch.Tensor
        return map_leaves(lambda x: fn(x) if isinstance(x, tensor) else x, (sample.input, sample.args, sample.kwargs))

    def clone(self, sample):
        if sample.keep_layout:
            return self._map(sample, lambda t: copy_exact(self.torch, t, t.device))
        return self._map(sample, lambda t: t.detach().clone().requires_grad_(t.requires_grad))

    def to_device(self, sample):
        """A copy of the sample on the device, but for the leaves its OpInfo keeps on CPU (with the
        inputs' strides for a sample whose layout is the point, ``Sample.keep_layout``)."""

        def move(t, dev):
            if sample.keep_layout:
                return copy_exact(self.torch, t, dev)
            d = t.detach().to(dev, copy=True)  # a copy even on cpu: never the sample itself
            return d.requires_grad_(t.requires_grad) if t.requires_grad else d

        host = getattr(sample, "host_leaves", ())
        tensor = self.torch.Tensor
        inp, args, kwargs = map_indexed(
            lambda i, x: move(x, "cpu" if i in host else self.dev) if isinstance(x, tensor) else x,
            (sample.input, sample.args, sample.kwargs),
        )
        if sample.device_kw:  # a factory op: it makes its result on the device named
            kwargs = dict(kwargs, **{sample.device_kw: self.dev})
        return inp, args, kwargs

    def to64(self, sample):
        return self._map(sample, lambda t: widen(self.torch, t))

    # ---------------------------------------------------------------- one case

    def run_case(self, loaded, sample, cid: str, group: dict) -> CaseRecord:
        """Run one case; a failure of the harness itself is recorded as the case's ``error``."""
        rec = CaseRecord.start(cid, group, loaded.aten_of(sample), sample.tier)
        self.step("fwd", rec)
        if self.delay:
            time.sleep(self.delay)
        try:
            self._run(loaded, sample, rec, group["backward"] and sample.tier is None)
        except Exception as exc:  # noqa: BLE001 - a harness failure is recorded, not fatal
            rec = CaseRecord.start(cid, group, loaded.aten_of(sample), sample.tier)
            rec.fail("fwd", "error", f"harness: {first_line(exc)}")
        return rec

    def _run(self, loaded, sample, rec: CaseRecord, backward: bool) -> None:
        torch = self.torch
        cid, dtype = rec.case, rec.dtype
        seed = seed_of(cid)
        fn = sample.fn or loaded.fn
        calls = Calls()
        cpu_in = self.clone(sample)
        leaves_cpu = leaves(cpu_in)
        versions = [t._version if isinstance(t, torch.Tensor) else None for t in leaves_cpu]
        rec.fwd = {"ops": [], REFERENCE: True}  # a death from here on is CPU's, not the device's
        self.step("fwd", rec)
        self.seed(seed)
        try:
            with recording(calls):
                cpu_out = fn(cpu_in[0], *cpu_in[1], **cpu_in[2])
        except Exception as exc:  # noqa: BLE001 - the reference itself failed
            rec.fwd = {
                "status": "no_reference",
                "why": f"cpu reference failed: {first_line(exc)}",
                "ops": calls.pairs(),
                "sigs": calls.sig_list(),
            }
            return
        called = getattr(fn, "func", None)  # one op overload called as itself (probe.sample.op_call)
        if called is not None and overload_name(called) not in {name for name, _ in calls.calls}:
            # a composite op decomposes before the dispatch mode sees it: the call is still its evidence
            calls.add(called, cpu_in[0], cpu_in[2], cpu_out)
        mutated = [
            i for i, (t, v) in enumerate(zip(leaves_cpu, versions)) if isinstance(t, torch.Tensor) and t._version != v
        ]
        bases = {name.split("::")[1].split(".")[0] for name, _ in calls.calls}
        mode = "canary" if loaded.canary else "values"
        if (
            calls.seeded_random
            or loaded.nondeterministic
            or sample.unset
            or bases & AMBIGUOUS_BASES
            or any(b.startswith("empty") or b.startswith("new_empty") for b in bases)
        ):
            mode = "not_comparable"
        if self.device_type == "meta":
            mode = "meta"
        family = family_of(bases, calls.tags_about({a.split("::", 1)[1] for a in rec.aten}))
        wide = (
            mode in ("values", "canary")
            and dtype in FLOATING
            and dtype not in ("float64", "complex128")
            and loaded.float64_ok
            and not sample.no_wide
        )
        reference = _Reference(self, fn, sample, seed) if wide else None
        rec.fwd = {"ops": calls.pairs(), "sigs": calls.sig_list()}
        self.step("fwd", rec)

        dev_in = self.to_device(sample)
        spot = Spot()
        self.seed(seed)
        try:
            with spotting(spot):
                dev_out = fn(dev_in[0], *dev_in[1], **dev_in[2])
            self.sync()
        except Exception as exc:  # noqa: BLE001 - every device failure is data
            status, why = classify_exception(exc)
            rec.fwd.update(status=status, why=why)
            if spot.raised:
                rec.fwd["raised"] = [spot.raised, spot.dkey]
            self.suspect = True
            self.localize_if_needed(rec.aten, rec.fwd, fn, sample, seed)
            return

        def pick(tree_in, out):
            if not mutated:
                return (out, [])
            flat = leaves(tree_in)
            return (out, [flat[i] for i in mutated])

        def scale():
            mags = (
                _magnitudes(self, fn, sample, seed, {a.split("::", 1)[-1] for a in rec.aten})
                if mode == "values" and dtype in FLOATING
                else None
            )
            return None if mags is None or mutated else (mags, [])

        verdict = _judged(
            reference,
            pick(dev_in, dev_out),
            pick(cpu_in, cpu_out),
            lambda ref_in, ref_out: pick(ref_in, ref_out),
            dtype=dtype,
            mode=mode,
            family=family,
            scale=scale,
        )
        rec.fwd.update(verdict)
        alias_cpu, alias_dev = aliasing(torch, cpu_in, cpu_out), aliasing(torch, dev_in, dev_out)
        if (
            alias_cpu != alias_dev
            and rec.fwd.get("status") in ("pass", "pass_low_precision", "not_comparable")
            and (called is None or _declares_alias(called))
        ):
            rec.fwd.update(
                status="mismatch",
                why=f"view aliasing differs: output -> aliased inputs {alias_dev} on the device, {alias_cpu} on cpu",
            )
        if (
            sample.tier in LAYOUT_TIERS
            and mode != "meta"
            and rec.fwd.get("status") in ("pass", "pass_low_precision", "not_comparable")
        ):
            problem = layout_problem(torch, cpu_out, dev_out)
            if problem:
                rec.fwd.update(status="mismatch", why=problem)
        _keep_outputs(rec.fwd, verdict, fn, dev_out)
        lazy.mark(rec.fwd)  # xla: a step that ran through the CPU fallback is 'fallback'
        self.localize_if_needed(rec.aten, rec.fwd, fn, sample, seed)
        if (
            sample.tier is None
            and loaded.supports_out
            and cid.endswith("|0")
            and isinstance(cpu_out, torch.Tensor)
            and isinstance(dev_out, torch.Tensor)
            and not mutated
        ):
            rec.out = self.out_variant(fn, sample, cpu_out, dev_out, seed, dtype, mode, family, rec.aten)
        if not backward:
            return
        self.step("bwd", rec)
        self.backward(rec, sample, fn, seed, mode, family, (cpu_out, dev_out), (cpu_in, dev_in), reference)

    def out_variant(self, fn, sample, cpu_out, dev_out, seed, dtype, mode, family, aten):
        """The same call with ``out=``: it must write into the given tensor and return it, with the values
        of the functional call. Filed under the ``.out`` overload it dispatches (recorded on CPU).
        None when CPU itself refuses ``out=`` for this sample (nothing to compare with)."""
        torch = self.torch
        calls = Calls()
        cpu_in, cpu_into = self.clone(sample), torch.empty_like(cpu_out)
        self.seed(seed)
        try:
            with recording(calls):
                fn(cpu_in[0], *cpu_in[1], **cpu_in[2], out=cpu_into)
        except Exception:  # noqa: BLE001 - this sample does not take out= on CPU either
            return None
        part = {"ops": calls.pairs(), "sigs": calls.sig_list()}
        dev_in, dev_into = self.to_device(sample), torch.empty_like(dev_out)
        self.seed(seed)
        try:
            returned = fn(dev_in[0], *dev_in[1], **dev_in[2], out=dev_into)
            self.sync()
        except Exception as exc:  # noqa: BLE001 - every device failure is data
            status, why = classify_exception(exc)
            part.update(status=status, why=f"out=: {why}")
            self.suspect = True
            self.localize_if_needed(aten, part, fn, sample, seed, out_like=cpu_out)
            return part
        if not isinstance(returned, torch.Tensor) or aliasing(torch, [dev_into], [returned]) != [[0]]:
            part.update(status="mismatch", why="out=: the call did not return the out tensor it was given")
        else:
            verdict = judge((dev_into, []), (cpu_into, []), None, dtype=dtype, mode=mode, family=family)
            if verdict.get("why"):
                verdict["why"] = f"out=: {verdict['why']}"
            verdict.pop("outputs", None)  # the out= tensor's index is no output of the op's own call
            part.update(verdict)
        lazy.mark(part)
        self.localize_if_needed(aten, part, fn, sample, seed, out_like=cpu_out)
        return part

    def localize_if_needed(self, aten, part: dict, fn, sample, seed, out_like=None) -> None:
        """A failure the recorded ops cannot pin on one overload: replay them one at a time."""
        if needs_localizing(aten, part):
            found = self.localize(fn, sample, seed, out_like)
            if found is not None:
                part["localized"] = found

    def localize(self, fn, sample, seed, out_like=None) -> dict | None:
        """Run the case on CPU copying every op call, then each call alone on the device against
        its own CPU result: {"replayed": n, "failed": [[op, dtype key], ...]}. None when the CPU
        run cannot be captured, or made more calls than are kept and none kept failed alone (no
        telling). A failure that no single call reproduces is the composition's."""
        torch = self.torch
        cap = Captured(LOCALIZE_MAX_CALLS)
        cpu_in = self.clone(sample)
        extra = {"out": torch.empty_like(out_like)} if out_like is not None else {}
        self.seed(seed)
        try:
            with capturing(cap):
                fn(cpu_in[0], *cpu_in[1], **cpu_in[2], **extra)
        except Exception:  # noqa: BLE001 - nothing to replay
            return None

        def each(tree, fn):
            return map_leaves(lambda t: fn(t) if isinstance(t, torch.Tensor) else t, tree)

        failed: dict = {}
        for func, args, kwargs in cap.calls:
            if seeded_random(func, args, kwargs):
                continue
            # The CPU result of these very arguments (not the captured run's: a copy may lay a
            # strided view out anew, and strides count on meta); copies, as in-place ops write.
            cpu_args, cpu_kwargs = each((args, kwargs), lambda t: t.clone())
            try:
                cpu_out = func(*cpu_args, **cpu_kwargs)
            except Exception:  # noqa: BLE001 - not replayable alone (a view of a freed base...)
                continue
            key = (func.name(), call_dtype(_dtypes((args, kwargs)), _dtypes(cpu_out)))
            if key in failed:
                continue
            ref_out = None
            if self.device_type != "meta" and key[1] in FLOATING and key[1] not in ("float64", "complex128"):
                try:
                    wide = each((args, kwargs), lambda t: widen(torch, t))
                    ref_out = func(*wide[0], **wide[1])
                except Exception:  # noqa: BLE001 - judged at the call's dtype instead
                    ref_out = None
            dev_args, dev_kwargs = each((args, kwargs), lambda t: t.to(self.dev))
            try:
                dev_out = func(*dev_args, **dev_kwargs)
                self.sync()
            except Exception as exc:  # noqa: BLE001 - this call fails alone
                failed[key] = first_line(exc)
                self.suspect = True
                continue
            base = key[0].split("::")[1].split(".")[0]
            verdict = judge(
                (dev_out, []),
                (cpu_out, []),
                (ref_out, []) if ref_out is not None else None,
                dtype=key[1],
                mode="meta" if self.device_type == "meta" else "values",
                family=family_of({base}, [{t.name for t in func.tags}]),
            )
            if verdict["status"] in FAILURES:
                failed[key] = verdict.get("why", "")
        if cap.truncated and not failed:
            return None
        return {"replayed": len(cap.calls), "failed": [list(k) for k in failed]}

    def backward(self, rec: CaseRecord, sample, fn, seed, mode, family, outs, ins, reference) -> None:
        """The backward on the device against CPU's (and float64's, ``reference``, made only when the
        gradients differ from CPU's): ``rec.bwd``, left None when the sample has nothing differentiable."""
        torch = self.torch
        dtype = rec.dtype
        cpu_out, dev_out = outs
        cpu_in, dev_in = ins
        process = sample.output_process_fn_grad

        def diff_outputs(out):
            return leaves(process(out))

        try:
            c_outs = diff_outputs(cpu_out)
        except Exception:  # noqa: BLE001
            return
        keep = [i for i, t in enumerate(c_outs) if isinstance(t, torch.Tensor) and t.requires_grad]
        # An output CPU's autograd differentiates that the device's does not (an op the backend runs at its
        # own autograd key, as xla's native_group_norm, whose mean and rstd carry no gradient there): both
        # backwards go through the outputs the two differentiate, and the case says which were left out.
        # Where the device differentiates none of them, all stay, and its backward fails as a model's would.
        try:
            d_diff = diff_outputs(dev_out)
        except Exception:  # noqa: BLE001 - judged below, where the device backward meets it
            d_diff = None
        both = [i for i in keep if d_diff is not None and i < len(d_diff) and _grad_tensor(torch, d_diff[i])]
        left_out = [i for i in keep if i not in both] if both else []
        keep = both or keep
        cpu_leaves = leaves(cpu_in)
        c_inputs = [t for t in cpu_leaves if isinstance(t, torch.Tensor) and t.requires_grad]
        if not keep or not c_inputs:
            return  # nothing differentiable in this sample
        idx_in = [i for i, t in enumerate(cpu_leaves) if isinstance(t, torch.Tensor) and t.requires_grad]
        gen = torch.Generator().manual_seed(seed_of(rec.case + "|grad"))
        gos = [torch.randn(c_outs[i].shape, dtype=c_outs[i].dtype, generator=gen) for i in keep]
        calls = Calls()
        rec.bwd = {"ops": [], REFERENCE: True}  # CPU's backward first: a death in it is CPU's
        self.step("bwd", rec)

        def plain_grads():
            """The bar without the mode, as the device backward runs, on the forward made anew."""
            again = self.clone(sample)
            self.seed(seed)
            a_outs = diff_outputs(fn(again[0], *again[1], **again[2]))
            a_leaves = leaves(again)
            return torch.autograd.grad([a_outs[i] for i in keep], [a_leaves[i] for i in idx_in], gos, allow_unused=True)

        recorded = True
        try:
            # One CPU backward, recorded, is both the bar and the evidence of the ops it dispatches,
            # run as the device's is: a graph's first backward, not retained (a retained graph can
            # dispatch more: a clone of a saved tensor). Under a Python mode autograd takes its
            # tensor-subclass paths (isTensorSubclassLike): on CPU they gave the same gradients,
            # bit for bit, in every backward case of a probe shard (4,746 of them).
            with recording(calls):
                c_grads = torch.autograd.grad([c_outs[i] for i in keep], c_inputs, gos, allow_unused=True)
        except Exception:  # noqa: BLE001 - the ops recorded up to there are still right
            try:
                c_grads, recorded = plain_grads(), False
            except Exception as exc:  # noqa: BLE001
                rec.bwd = {
                    "status": "no_reference",
                    "why": f"cpu reference backward failed: {first_line(exc)}",
                    "ops": calls.pairs(),
                    "sigs": calls.sig_list(),
                }
                return
        rec.bwd = bwd = {"ops": calls.pairs(), "sigs": calls.sig_list()}
        self.step("bwd", rec)
        # No dispatch mode around the device backward: in torch 2.13 an exception raised
        # through a Python dispatch mode on autograd's device thread terminates the process.
        try:
            d_outs = diff_outputs(dev_out)
            dev_leaves = leaves(dev_in)
            d_inputs = [dev_leaves[i] for i in idx_in]
            d_grads = torch.autograd.grad(
                [d_outs[i] for i in keep],
                d_inputs,
                [g.to(d_outs[i].device) for g, i in zip(gos, keep)],  # an output
                allow_unused=True,
            )  # may stay on CPU (to('cpu')): its grad there too
            self.sync()
        except Exception as exc:  # noqa: BLE001
            status, why = classify_exception(exc)
            bwd.update(status=status, why=why)
            self.suspect = True
            return

        def named(grads):
            return [g if g is not None else "no gradient" for g in grads]

        made = []  # the float64 gradients, once (the graph is spent by the first backward)

        def ref_grads(ref_in, ref_out):
            if not made:
                r_outs = diff_outputs(ref_out)
                ref_leaves = leaves(ref_in)
                r_inputs = [ref_leaves[i] for i in idx_in]
                wide = [g.to(torch.complex128 if g.is_complex() else torch.float64) for g in gos]
                made.append(named(torch.autograd.grad([r_outs[i] for i in keep], r_inputs, wide, allow_unused=True)))
            return made[0]

        # the float64 forward's graph, made now if the forward's judgement did not need it
        verdict = _judged(reference, named(d_grads), named(c_grads), ref_grads, dtype=dtype, mode=mode, family=family)
        if verdict.get("status") == "mismatch" and recorded:
            # The mode's tensor-subclass paths can take another formula than the device's plain
            # autograd (prod's float16 backward: finite under the mode, inf without it, on CPU too):
            # judged again against CPU's plain backward, which runs what the device ran.
            try:
                plain = plain_grads()
            except Exception:  # noqa: BLE001 - the recorded bar stands
                plain = None
            if plain is not None and not identical(named(plain), named(c_grads)):
                again = _judged(
                    reference, named(d_grads), named(plain), ref_grads, dtype=dtype, mode=mode, family=family
                )
                if again.get("status") != "mismatch":
                    verdict = again
        verdict.pop("outputs", None)  # gradients, not outputs a model's call returns
        if left_out:
            bwd["outputs_without_grad"] = left_out  # output indices the device's autograd does not differentiate
        bwd.update(verdict)
        lazy.mark(bwd)


def _grad_tensor(torch, t) -> bool:
    """Whether ``t`` is a tensor autograd differentiates."""
    return isinstance(t, torch.Tensor) and t.requires_grad


class _Reference:
    """The case's float64 forward, run on first use (``get``: (inputs, outputs), or None when it fails)."""

    def __init__(self, ex: Executor, fn, sample, seed):
        self.ex, self.fn, self.sample, self.seed = ex, fn, sample, seed
        self.made = False
        self.value = None

    def get(self):
        if not self.made:
            self.made = True
            ref_in = self.ex.to64(self.sample)
            self.ex.seed(self.seed)
            try:
                self.value = (ref_in, self.fn(ref_in[0], *ref_in[1], **ref_in[2]))
            except Exception:  # noqa: BLE001 - no float64 reference: judge at the case's dtype
                self.value = None
        return self.value


# Ops whose result adds its inputs up: their values are judged relative to the sum of the inputs'
# magnitudes (the op run on |inputs| in float64), not to a result that cancellation may bring near 0.
SUMMING = frozenset({"sum", "nansum", "mean", "nanmean", "cumsum", "sum_to_size"})


def _magnitudes(ex, fn, sample, seed, bases):
    """The op run on the magnitudes of its inputs, in float64, for a summing op (SUMMING); else None."""
    if not set(bases) & SUMMING:
        return None
    torch = ex.torch
    try:
        ref_in = map_leaves(
            lambda t: t.abs() if isinstance(t, torch.Tensor) and t.is_floating_point() else t, ex.to64(sample)
        )
        ex.seed(seed)
        return fn(ref_in[0], *ref_in[1], **ref_in[2])
    except Exception:  # noqa: BLE001 - no magnitudes: judged relative to the result, as any op
        return None


def _keep_outputs(part: dict, verdict: dict, fn, dev_out) -> None:
    """Keep the indices of the outputs that differ (``compare.judge``'s ``outputs``) on the case's part only
    where they are the outputs of the overload the case calls itself (a replayed or schema-made call,
    ``sample.op_call``) and the mismatch is the comparison's (not a later aliasing or layout finding): an
    OpInfo function's outputs, and the inputs it mutates (compared after its outputs), are not that
    overload's outputs. ``output_of`` names the overload, since a failure may be filed under another."""

    outputs = part.pop("outputs", None)
    if (
        outputs
        and part.get("status") == "mismatch"
        and part.get("why") == verdict.get("why")
        and isinstance(fn, _Call)
        and max(outputs) < len(leaves(dev_out))
    ):
        part["outputs"] = list(outputs)
        part["output_of"] = overload_name(fn.func)


def _judged(reference, dev, cpu, derive, *, dtype, mode, family, scale=None):
    """``judge`` with the float64 reference made only when ``dev`` differs from ``cpu``: an identical
    result passes the strict tier by construction (``tol`` ``same``, err [0, 0]: no worse than CPU;
    at any dtype, so float64 and integer results skip the value comparison too).
    ``derive(ref_in, ref_out)`` gives the reference outputs to compare (None: no float64 reference)."""
    if mode in ("values", "canary") and identical(dev, cpu):
        return judge(dev, cpu, None, dtype=dtype, mode=mode, family=family, same=True)
    ref = None
    if reference is not None and reference.get() is not None:
        try:
            ref = derive(*reference.get())
        except Exception:  # noqa: BLE001 - no float64 reference for this comparison
            ref = None
    return judge(dev, cpu, ref, dtype=dtype, mode=mode, family=family, scale=scale() if scale else None)


def _declares_alias(func) -> bool:
    """Whether an op overload's schema says an output may alias an input (``Tensor(a)``): only then is a view
    part of what it computes. A composite's decomposition may end in a view on CPU (einsum's diagonal) where a
    backend's own kernel makes a new tensor, as the schema allows."""
    try:
        return any(r.alias_info is not None for r in func._schema.returns)
    except AttributeError:
        return True

"""Third case source: inputs made from an op's schema, for functional overloads no OpInfo is about.

OpInfo is about roughly 600 aten base names; hundreds of functional overloads have none (``add.Scalar``,
``_softmax``, ``native_layer_norm``'s siblings, ``_reshape_alias``...), and a zoo trace reaches only
those its models call. For each functional aten overload that nothing intrinsic rules out
(``probe.disposition.intrinsic``), a ``schema.<k>`` group (one per dtype, ops spread over
``CHUNKS`` groups by a hash of their name) makes one case per op from its schema: a small tensor
of the group's dtype for each ``Tensor`` argument (int64 indices for index-like names, a bool mask
for ``mask``), lists of two for ``Tensor[]``, small integers and shapes chosen by argument name,
``None`` for optional arguments, defaults where the schema has them. Several candidate shapes are
tried on CPU; the first the CPU kernel accepts is the case, run and compared like any other
(forward only, float64 CPU reference). An op no candidate runs on CPU keeps no case and says so
(``schema_no_case``). A factory op's ``device=`` argument is set to the device for the device run.

These are the inputs a schema allows, not the inputs models use: a pass says the kernel agrees with
CPU on such a call, not that every call works; the cell names ``schema.<k>`` among its samples.
"""

from __future__ import annotations

import re
import zlib

from opcov.probe.sample import Loaded, op_call
from opcov.sources.opinfo import seed_of

SCHEMA_PREFIX = "schema."
CHUNKS = 16  # schema groups per dtype: a crash or hang costs one group's worth of cases at most
SCHEMA_DTYPES = ("float32",)  # dtypes schema cases are made at (those among the probe's --dtypes)
# Tensor argument shapes tried in turn (the first the CPU kernel accepts wins).
SHAPES = ((3, 4), (4, 4), (2, 3, 4, 5), (4,), (2, 4, 4), (2, 3, 4), ())
FALLBACK_DTYPE = "int64"  # tried when no candidate at the group's dtype runs (bitwise ops...)
INDEX_NAMES = re.compile(
    r"^(index|indices|target|targets|labels|offsets|lengths|idx|argmax|"
    r"indices_.*|.*_indices|.*_index|repeats|batch_sizes|counts)$"
)
MASK_NAMES = re.compile(r"mask")
# Overloads never made from a schema: they change process-wide state, wait on other processes or
# read uninitialised memory by design (judged nothing), or crash CPU itself on small made-up inputs
# (a crash would cost the other cases of their group).
EXCLUDE = re.compile(
    r"^aten::(_?assert|_print|_functional_assert|_make_dep_token|record_stream|_cufft|_cudnn|_mps|"
    r"_nested|_sparse|sparse_|_to_sparse|to_sparse|_coalesce|_mkldnn|mkldnn|_fbgemm|fbgemm|_use_cudnn|"
    r"_has_compatible|_validate|_nnpack|_cslt|_mixed_dtypes|_weight_int|_dyn_quant|_wrapped_|quantize|"
    r"dequantize|_saturate|q_|_make_per|int_repr|_empty_affine|_empty_per|_fake_quant|fake_quant|"
    r"_choose_qparams|choose_qparams|_transformer_encoder|_native_multi_head|_triton|_flash|_efficient|"
    r"_scaled_dot_product_(flash|efficient|cudnn|fused)|_fused_sdp|_chunk_cat|_foreach_|_amp_|"
    r"_jagged|_padded_dense|_histogramdd|lift|_lazy_clone|_new_zeros_with_same|_pin_memory|pin_memory|"
    r"is_pinned|_resize_output|_unsafe_index|_unsafe_masked|_embedding_bag|embedding_bag|"
    r"_ctc_loss|ctc_loss|_cdist|_thnn_|_pack_padded|_pad_packed|rnn_|_rnn|gru|lstm|"
    r"_fused_moving|_batch_norm_with_update|_native_batch_norm_legit_no_training|"
    r"segment_reduce|_segment_reduce|_linalg_check|_test_|_async|_dimI|_dimV|_nnz|_values|_indices|"
    r"ccol_|crow_|col_indices|row_indices|values|indices|_to_dense|to_dense|_autocast|"
    r"_propagate_xla|_conj_physical|align_|refine_names|rename|_dirichlet|_sample_dirichlet|"
    r"_standard_gamma|poisson|binomial|multinomial|_unique|unique|_local_scalar|item|_is_|is_|"
    # these crash CPU itself (SIGSEGV, SIGFPE) on made-up inputs in torch 2.13 (found by trying each)
    r"_batch_norm|batch_norm|native_batch_norm|_native_batch_norm|_convert_indices|_transform_bias_rescale|"
    # functorch internals (one asks for 256 GiB on made-up inputs); a helper that reads unset memory
    r"_add_batch_dim|_remove_batch_dim|_vmap|_compute_linear_combination)"
)


def targets(torch, catalog, facts: dict) -> list[str]:
    """The aten overloads schema cases are made for: functional (no ``out=``, in-place or mutating
    tag), no intrinsic fact (``facts``), not excluded (``EXCLUDE``), with a tensor among its
    arguments or a ``device`` argument (a factory). Sorted."""
    out = []
    for op in catalog:
        if op.namespace != "aten" or op.name in facts or EXCLUDE.search(op.name):
            continue
        if {"out", "inplace", "mutating", "inplace_view", "dynamic_output_shape", "data_dependent_output"} & set(
            op.tags
        ):
            continue
        try:
            schema = _overload(torch, op.name)._schema
        except (AttributeError, RuntimeError):
            continue
        if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
            continue
        if not any(_supported(a) for a in schema.arguments):
            continue
        if all(_makeable(a) for a in schema.arguments):
            out.append(op.name)
    return sorted(out)


def chunk_of(name: str) -> int:
    return zlib.crc32(name.encode()) % CHUNKS


def chunks(names) -> dict[str, list[str]]:
    """``schema.<k>`` source -> its ops (sorted), for the ops of ``names``."""
    out: dict[str, list[str]] = {}
    for n in sorted(names):
        out.setdefault(f"{SCHEMA_PREFIX}{chunk_of(n):02d}", []).append(n)
    return out


def _overload(torch, name: str):
    from opcov.catalog import resolve_overload

    return resolve_overload(torch, name)


def _optional(a) -> bool:
    return a.has_default_value() or str(a.type).endswith("?")


def _kind(t) -> str:
    """A schema type in the words ``make_args`` decides by: 'Tensor', 'Tensor[]', 'int', 'int[]',
    'float', 'float[]', 'bool', 'bool[]', 'Scalar', 'ScalarType', 'Device', 'Tensor?[]', 'optional',
    or the type's own name (nothing made for it)."""
    k = t.kind()
    if k == "OptionalType":
        return "optional"
    if k == "ListType":
        e = t.getElementType()
        ek = e.kind()
        if ek == "OptionalType" and e.getElementType().kind() == "TensorType":
            return "Tensor?[]"
        inner = _kind(e)
        return inner + "[]" if inner in ("Tensor", "int", "float", "bool", "Scalar") else str(t)
    return {
        "TensorType": "Tensor",
        "IntType": "int",
        "SymIntType": "int",
        "FloatType": "float",
        "BoolType": "bool",
        "NumberType": "Scalar",
        "ScalarTypeType": "ScalarType",
        "DeviceObjType": "Device",
    }.get(k, str(t))


MAKEABLE = (
    "Tensor",
    "Tensor[]",
    "Tensor?[]",
    "int",
    "int[]",
    "float",
    "float[]",
    "bool",
    "bool[]",
    "Scalar",
    "Scalar[]",
    "ScalarType",
    "optional",
)


def _makeable(a) -> bool:
    """Whether ``make_args`` can give argument ``a`` a value (or leave it to its default)."""
    return a.has_default_value() or _kind(a.real_type) in MAKEABLE or _is_device(a)


def _is_device(a) -> bool:
    return a.name == "device" and "Device" in str(a.real_type)


def _supported(a) -> bool:
    """Whether argument ``a`` is a tensor (list), or a factory's ``device``."""
    return _kind(a.real_type) in ("Tensor", "Tensor[]", "Tensor?[]") or _is_device(a)


# ---------------------------------------------------------------- making inputs (worker side)


def _tensor(torch, name: str, shape, dtype, gen):
    if INDEX_NAMES.match(name):
        hi = max(1, min(shape) if shape else 1)
        return torch.randint(0, hi, shape, generator=gen, dtype=torch.int64)
    if MASK_NAMES.search(name):
        return torch.rand(shape, generator=gen) > 0.5
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=gen).to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    return torch.randint(-4, 5, shape, generator=gen).to(dtype)


def _int_list(name: str, n: int, shape):
    if name == "normalized_shape":
        return list(shape[-1:]) or [1]
    if name in ("size", "shape", "sizes", "output_size", "new_size", "stride_", "output_shape"):
        return list(shape) if shape else [1]
    if name in ("stride", "dilation", "strides"):
        return [1] * (n or max(1, len(shape) - 2))
    if name in ("padding", "output_padding", "pad"):
        return [0] * (n or max(1, len(shape) - 2))
    if name == "kernel_size":
        return [1] * (n or max(1, len(shape) - 2))
    if name in ("dims", "dim", "perm", "permutation"):
        return list(range(len(shape)))[::-1] if name in ("perm", "dims", "permutation") else [0]
    return [1] * (n or 1)


def _int(name: str, shape, variant: int):
    if name in ("dim", "dim0", "start_dim", "axis", "dimension", "src_dim"):
        return (0, -1)[variant % 2] if shape else 0
    if name in ("dim1", "end_dim", "axis1", "dst_dim"):
        return -1 if shape else 0
    if name in (
        "groups",
        "step",
        "stride",
        "dilation",
        "size",
        "repeats",
        "chunks",
        "sections",
        "split_size",
        "n",
        "k",
        "N",
        "M",
        "num_groups",
        "diagonal_offset",
        "window_length",
    ):
        return 1 if name in ("groups", "num_groups") else 2
    return (1, 0)[variant % 2]


def make_args(torch, schema, shape, dtype, gen, variant: int = 0):
    """(args, kwargs, device argument named) for one candidate: every argument without a default is
    given a value; arguments with one keep it. None when an argument cannot be made."""
    args, kwargs, device_kw = [], {}, None
    positional = True
    floating = dtype.is_floating_point or dtype.is_complex
    for a in schema.arguments:
        k = _kind(a.real_type)
        if _is_device(a):
            device_kw = "device"
            positional = False
            continue
        if a.has_default_value():
            positional = False
            continue
        if k == "Tensor":
            v = _tensor(torch, a.name, shape, dtype, gen)
        elif k == "Tensor[]":
            v = [_tensor(torch, a.name, shape, dtype, gen) for _ in range(2)]
        elif k == "Tensor?[]":
            v = [_tensor(torch, "index", shape[:1], dtype, gen)]
        elif k == "optional":
            v = None
        elif k == "int":
            v = _int(a.name, shape, variant)
        elif k == "int[]":
            m = re.search(r"\[(\d+)\]", str(a.type))
            v = _int_list(a.name, int(m.group(1)) if m else 0, shape)
        elif k == "float":
            v = 0.5
        elif k == "float[]":
            v = [0.5] * max(1, len(shape) - 2)
        elif k == "bool":
            v = bool(variant % 2)
        elif k == "bool[]":
            v = [True] * 3
        elif k == "Scalar":
            v = 0.5 if floating else 2
        elif k == "Scalar[]":
            v = [0.5 if floating else 2]
        elif k == "ScalarType":
            v = dtype
        else:
            return None  # str, Dimname, Stream, a packed-params class...: nothing honest to make
        if positional and not a.kwarg_only:
            args.append(v)
        else:
            positional = False
            kwargs[a.name] = v
    return tuple(args), kwargs, device_kw


def candidates(torch, name: str, dtype, seed: int):
    """The (args, kwargs, device argument) candidates for op ``name``, in the order tried."""
    schema = _overload(torch, name)._schema
    gen = torch.Generator().manual_seed(seed)
    for variant in (0, 1):
        for shape in SHAPES:
            made = make_args(torch, schema, shape, dtype, gen, variant)
            if made is None:
                return
            yield made


def first_case(torch, name: str, dtype, seed: int):
    """The first candidate the CPU kernel accepts (it returns without raising) with a result that
    depends on its inputs alone (``reads_unset``), or None; at the group's dtype, then (for ops
    that take no floating tensor) at ``FALLBACK_DTYPE``. A case made at int64 files its cell under
    int64, as the dtype key of its call says. When every accepted candidate's result depends on
    memory the kernel never wrote (an output-sized argument of a shape the kernel does not check,
    ``empty``), the first accepted is the case, with ``unset`` True: its values are not compared.
    (func, args, kwargs, device argument, unset)."""
    func = _overload(torch, name)
    first = None
    for dt in dict.fromkeys((dtype, getattr(torch, FALLBACK_DTYPE))):
        for args, kwargs, device_kw in candidates(torch, name, dt, seed):
            try:
                torch.default_generator.manual_seed(seed)
                out = func(*_copy(torch, args), **_copy(torch, kwargs))
            except Exception:  # noqa: BLE001 - CPU refuses this candidate: try the next
                continue
            if not reads_unset(torch, func, args, kwargs, out, seed):
                return func, args, kwargs, device_kw, False
            first = first or (func, args, kwargs, device_kw, True)
    return first


POISON = (0xFF, 0x7B)  # byte patterns of freed blocks: 0xFF is NaN (-1 for integers), 0x7B a finite value


def reads_unset(torch, func, args, kwargs, out, seed: int) -> bool:
    """Whether ``out`` (the call's CPU result) depends on memory the kernel never wrote: the call is
    made again after freeing blocks of each output's and each input's size filled with each of
    ``POISON`` (the allocator hands a just-freed block of the size back first), with the same
    seed, and must give the same values each time (NaN where NaN). A kernel that takes an
    argument of the wrong shape without checking (``_weight_norm_interface``'s ``g`` the shape of
    ``v``) fills part of an output and leaves the rest as it found it."""
    sizes = sorted(
        {t.untyped_storage().nbytes() for t in _tensors(torch, (out, args, kwargs)) if t.layout == torch.strided},
        reverse=True,
    )
    for byte in POISON:
        blocks = [torch.full((n,), byte, dtype=torch.uint8) for n in sizes for _ in range(2)]
        del blocks
        try:
            torch.default_generator.manual_seed(seed)
            again = func(*_copy(torch, args), **_copy(torch, kwargs))
        except Exception:  # noqa: BLE001 - a call that fails on a second try depends on something unset
            return True
        if not _same(torch, out, again):
            return True
    return False


def _tensors(torch, tree):
    import torch.utils._pytree as pytree

    return [t for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _same(torch, a, b) -> bool:
    """Same structure, shapes, dtypes and values (NaN equal to NaN) in both results."""
    import torch.utils._pytree as pytree

    la, spec_a = pytree.tree_flatten(a)
    lb, spec_b = pytree.tree_flatten(b)
    if spec_a != spec_b:
        return False
    for x, y in zip(la, lb):
        if not isinstance(x, torch.Tensor):
            if x != y and x == x:  # NaN scalars are equal here
                return False
            continue
        if not isinstance(y, torch.Tensor) or x.shape != y.shape or x.dtype != y.dtype:
            return False
        x, y = (t.detach().to_dense() if t.layout != torch.strided else t.detach() for t in (x, y))
        if x.is_complex():
            x, y = torch.view_as_real(x.resolve_conj()), torch.view_as_real(y.resolve_conj())
        if x.is_floating_point():
            if not bool(((x == y) | (x.isnan() & y.isnan())).all()):
                return False
        elif not torch.equal(x, y):
            return False
    return True


def _copy(torch, tree):
    import torch.utils._pytree as pytree

    return pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, tree)


def load(group: dict) -> Loaded:
    """The Loaded group of a ``schema.<k>`` source: one sample per op of ``group['ops']`` that some
    candidate runs on CPU; the others have none (their disposition says so)."""
    import warnings

    import torch

    dtype = getattr(torch, group["dtype"])
    samples = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in group.get("ops", ()):
            found = first_case(torch, name, dtype, seed_of(f"{group['id']}|{name}"))
            if found is None:
                continue
            func, args, kwargs, device_kw, unset = found
            s = op_call(func, args, kwargs)
            s.device_kw = device_kw
            s.unset = unset
            # a ScalarType argument (view.dtype, _to_copy) means other things on float64 inputs
            s.no_wide = any(
                _kind(a.real_type) == "ScalarType" and not a.has_default_value() for a in func._schema.arguments
            )
            samples.append(s)
    return Loaded(None, samples, (), False, True, False)

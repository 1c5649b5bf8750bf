"""timm and torchvision models, built from their own registries with random weights (no downloads).

Why: users run these beside transformers, and accelerator teams track them (TorchTPU's CI runs a
timm suite). Both need torchvision, whose wheel for torch 2.13 is built against the CUDA torch and
does not import beside the CPU build, so they are traced in the CUDA torch environment
(``scripts/envs/vision.sh``); each op set's provenance names the torch that traced it. Tracing never
touches a device, so that environment needs no GPU.

* ``timm:NAME``: ``timm.create_model(NAME, pretrained=False)``; input (batch, *its pretrained
  config's ``input_size``), passed positionally;
* ``torchvision:NAME``: ``torchvision.models.get_model(NAME, weights=None)`` (on CPU where its
  constructor reads tensor values: regnet); the input by the module the model comes from, its side
  the crop size its weights' metadata names (vit_h_14: 518), else 224: images for classification and
  segmentation, clips of 16 frames (or the weights' minimum) for video, a pair of images for optical flow,
  a list of images (and, in training, one target per image: boxes, labels, masks or keypoints as
  the model's heads need) for detection; quantized models are left out (their kernels are CPU-only
  by design, nothing an accelerator is asked to run).
* The zoo (``zoo_archs``): one timm model per timm module (a family; ``_family_pick`` says which),
  and every torchvision model outside quantization, named ``timm-NAME`` and ``torchvision-NAME``.
"""

from __future__ import annotations

import contextlib

from opcov.errors import UsageError

PREFIXES = ("timm:", "torchvision:")
_TV_MODULES = ("detection", "segmentation", "video", "optical_flow")  # else classification


def is_spec(spec: str) -> bool:
    return spec.startswith(PREFIXES)


def arch_name(spec: str) -> str:
    """The zoo's folder name of a spec: timm:resnet18 -> timm-resnet18."""
    lib, _, name = spec.partition(":")
    return f"{lib}-{name}"


def _timm():
    try:
        import timm
    except Exception as exc:  # noqa: BLE001 - not installed, or torchvision does not import
        raise UsageError(
            f"timm does not import here ({type(exc).__name__}: {str(exc)[:120]}); timm and "
            "torchvision models are traced in the CUDA torch environment: scripts/envs/vision.sh"
        ) from None
    return timm


def _torchvision():
    try:
        import torchvision.models
    except Exception as exc:  # noqa: BLE001
        raise UsageError(
            f"torchvision does not import here ({type(exc).__name__}: {str(exc)[:120]}); it is "
            "built against the CUDA torch: trace in scripts/envs/vision.sh's environment"
        ) from None
    return torchvision.models


def zoo_archs() -> list[str]:
    """The specs of the whole-zoo run's timm and torchvision architectures (those that import here)."""
    specs = []
    with contextlib.suppress(UsageError):
        timm = _timm()
        for module in sorted(timm.list_modules()):
            names = sorted(timm.list_models(module=module))
            if names:
                specs.append(f"timm:{_family_pick(module, names)}")
    with contextlib.suppress(UsageError):
        tv = _torchvision()
        quantized = set(tv.list_models(module=tv.quantization))
        specs += [f"torchvision:{n}" for n in sorted(tv.list_models()) if n not in quantized]
    return specs


def _family_pick(module: str, names: list) -> str:
    """The model that stands for a timm module: the shortest name that starts with the module's (resnet:
    resnet18), else the first with "tiny", else with "small", else the first (names sorted)."""
    own = [n for n in names if n.startswith(module)]
    if own:
        return min(own, key=lambda n: (len(n), n))
    return next((n for n in names if "tiny" in n), None) or next((n for n in names if "small" in n), None) or names[0]


def build(spec: str, sizes, *, mode: str, real: bool):
    """(model, inputs, family, notes) of a timm: or torchvision: spec, on meta unless ``real``."""
    import torch

    lib, _, name = spec.partition(":")
    device = contextlib.nullcontext() if real else torch.device("meta")
    b = sizes.batch

    def floats(*shape):
        with device:
            return torch.rand(*shape) if real else torch.empty(*shape)

    if lib == "timm":
        timm = _timm()
        if name not in timm.list_models():
            raise UsageError(f"{spec}: not a timm {timm.__version__} model (timm.list_models() names them)")
        with device:
            model = timm.create_model(name, pretrained=False)
        size = tuple(model.pretrained_cfg.get("input_size") or (3, 224, 224))
        if sizes.image:
            size = size[:-2] + (sizes.image, sizes.image)
        return (
            model,
            (floats(b, *size),),
            "timm.classification",
            [
                f"timm {timm.__version__} {name} (module {_timm_module(timm, name)}) with random initialisation; "
                f"input {b}x{'x'.join(map(str, size))}"
            ],
        )
    tv = _torchvision()
    if name not in tv.list_models():
        raise UsageError(f"{spec}: not a torchvision model (torchvision.models.list_models() names them)")
    module = next((m for m in _TV_MODULES if name in tv.list_models(module=getattr(tv, m))), "classification")
    notes = []
    try:
        model = _tv_model(tv, name, device)
    except NotImplementedError as exc:  # a constructor that reads its own weights (regnet's widths): on CPU
        if "meta" not in str(exc) or real:
            raise
        model = _tv_model(tv, name, contextlib.nullcontext())
        notes.append("built on CPU with real random weights: its constructor reads tensor values, which meta has not")
    crop, frames = _tv_input_size(tv, name)
    side = sizes.image or crop or (128 if module == "optical_flow" else 112 if module == "video" else 224)
    if module == "video":
        inputs = (floats(b, 3, frames, side, side),)
    elif module == "optical_flow":
        inputs = {"image1": floats(b, 3, side, side), "image2": floats(b, 3, side, side)}
    elif module == "detection":
        inputs = {"images": [floats(3, side, side) for _ in range(b)]}
        if mode == "training":
            inputs["targets"] = [_target(torch, model, side, real) for _ in range(b)]
    else:
        inputs = (floats(b, 3, side, side),)
    return (
        model,
        inputs,
        f"torchvision.{module}",
        [
            f"torchvision {_tv_version()} {name} ({module}) with random initialisation; input side {side} "
            "(its weights' crop size where they name one)",
            *notes,
        ],
    )


def _tv_model(tv, name, device):
    with device:
        try:  # no pretrained backbone either (detection, segmentation): nothing is downloaded
            return tv.get_model(name, weights=None, weights_backbone=None)
        except TypeError:
            return tv.get_model(name, weights=None)


def _tv_input_size(tv, name) -> tuple:
    """(crop side, clip frames) that the model's weights metadata names (no download), else (None, 16)."""
    try:
        weights = tv.get_model_weights(name).DEFAULT
    except Exception:  # noqa: BLE001 - a model without published weights
        return None, 16
    crop = (getattr(weights.transforms, "keywords", None) or {}).get("crop_size")
    crop = crop[0] if isinstance(crop, (list, tuple)) else crop
    return (int(crop) if crop else None), max(16, int(weights.meta.get("min_temporal_size") or 0))


def _timm_module(timm, name: str) -> str:
    return next((m for m in timm.list_modules() if name in timm.list_models(module=m)), "unknown")


def _tv_version() -> str:
    import torchvision

    return torchvision.__version__


def _target(torch, model, side: int, real: bool) -> dict:
    """One detection target: two boxes inside the image, their labels, and masks or keypoints where
    the model has those heads (values: a box needs real corners, so fake traces meet the data check)."""
    boxes = torch.tensor([[10.0, 12.0, side * 0.6, side * 0.7], [side * 0.3, side * 0.2, side - 5.0, side - 8.0]])
    heads = getattr(model, "roi_heads", None)
    classes = getattr(getattr(getattr(heads, "box_predictor", None), "cls_score", None), "out_features", 3)
    target = {"boxes": boxes, "labels": torch.tensor([1, min(2, classes - 1)])}  # keypoint R-CNN: person only
    if getattr(heads, "mask_head", None) is not None:
        masks = torch.zeros(2, side, side, dtype=torch.uint8)
        masks[0, 12 : int(side * 0.7), 10 : int(side * 0.6)] = 1
        masks[1, int(side * 0.2) : side - 8, int(side * 0.3) : side - 5] = 1
        target["masks"] = masks
    if getattr(heads, "keypoint_head", None) is not None:
        kp = torch.zeros(2, 17, 3)
        kp[:, :, 0], kp[:, :, 1], kp[:, :, 2] = side * 0.4, side * 0.5, 1.0
        target["keypoints"] = kp
    if not real:
        target = {k: torch.empty_like(v, device="meta") for k, v in target.items()}
    return target

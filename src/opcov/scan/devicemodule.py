"""Whether a backend registers its device's own Python module (``torch.<device>``), and what of it checkpointing calls.

Why: gradient checkpointing (``torch.utils.checkpoint``), ``torch.random.fork_rng`` and
``torch.get_device_module`` fetch ``torch.<device type>`` by name on every device, before any op is
dispatched (opcov.tracing.devicemodule records where a model's run does). PyTorch/XLA registers no
``torch.xla``, so a checkpointed model raises there ("module 'torch' has no attribute 'xla'") whatever its
ops; TorchTPU registers ``torch.tpu`` with RNG state functions. Read after importing the backend's package,
as the registered scan does, without initialising the device: an attribute lookup, never a call.

``python -m opcov.scan.devicemodule FILE...`` adds the record to registered files made before it was
recorded (``provenance.device_module``), with the torch build and backend package installed here, which
must be the file's own (for core torch's devices, cuda or mps, any build: their modules are in every one,
and the record says which build read it); nothing else in the file changes.
"""

from __future__ import annotations

from opcov.scan.amend import amend

COMMAND = "python -m opcov.scan.devicemodule"
# what torch.utils.checkpoint calls on the module to save and restore a device's RNG state
NEEDS = ("device", "get_rng_state", "set_rng_state")
HOW = (
    "read as getattr(torch, device_type) after importing the backend's package, as torch.utils.checkpoint "
    "and torch.get_device_module look it up; the device is never initialised"
)


def record(torch, device_type: str) -> dict:
    """``{name, registered, has, how}``: ``torch.<device_type>`` exists or not, and which of NEEDS it has."""
    module = getattr(torch, device_type, None)
    out: dict = {"name": f"torch.{device_type}", "registered": module is not None}
    if module is not None:
        out["has"] = [name for name in NEEDS if hasattr(module, name)]
    out["how"] = HOW
    return out


def _block(doc: dict, path: str) -> dict:
    from opcov import backends as _backends
    from opcov.torchenv import import_torch

    backend = _backends.get_backend(doc["backend"]["name"])
    torch = _backends.load(backend) if backend.package else import_torch()  # cuda's module needs no CUDA build
    made = str(doc["provenance"].get("torch"))
    if made != str(torch.__version__) and backend.package:  # core torch's own device modules are in every build
        raise SystemExit(f"opcov: {path} was made with torch {made}; this is {torch.__version__}: rerun it there")
    block = record(torch, doc["backend"]["device_type"])
    if made != str(torch.__version__):
        block["read_with"] = f"torch {torch.__version__} (core torch's module, in every build)"
    return block


def main(argv=None) -> int:
    """Add the device module's record to registered files made before it was recorded."""
    return amend(
        argv,
        command=COMMAND,
        key="device_module",
        make=_block,
        said=lambda doc, b: f"{b['name']} {'registered' if b['registered'] else 'not registered'}",
    )


if __name__ == "__main__":
    raise SystemExit(main())

"""``--parallel`` and ``--world-size`` of ``opcov trace`` and ``opcov check``: a sharded training step
(opcov.tracing.distributed traces it, opcov.verdict.distributed judges it)."""

from __future__ import annotations

from opcov.activity import activity
from opcov.errors import EXIT_OK, UsageError
from opcov.store import layout, output

WORLD_SIZE = 8  # trace's default world size


def refusals(args) -> None:
    """What a sharded trace does not take, one line each, before any work."""
    if args.mode != "training":
        raise UsageError(f"--parallel traces a training step; leave out --mode {args.mode} (or --parallel)")
    for flag, given in (
        ("--path compile", args.path == "compile"),
        ("--on", bool(args.on)),
        ("--real", args.real),
        ("--autocast", args.autocast),
        (f"--device {args.device}", args.device != "accelerator"),
        ("--optimizer none", args.optimizer == "none"),
    ):
        if given:
            raise UsageError(
                f"--parallel {args.parallel} traces on the stand-in device with fake tensors and a fake process "
                f"group; it does not take {flag}"
            )


def trace(args, sizes, *, in_child, print_opset, recorded_out) -> int:
    """'opcov trace MODEL --parallel STYLE [--world-size N]': the op set of one sharded training step, traced
    here or, for a user's factory, by ``in_child`` (this command again in a child process)."""
    refusals(args)
    world = args.world_size or WORLD_SIZE
    if args.out:
        output.check_output(args.out, kind=output.OPSET, inputs=[args.model])
    with activity(f"tracing {args.model} (training, {args.parallel} over {world} ranks)"):
        if in_child is not None:
            result = in_child(args)
        else:
            from opcov.tracing.distributed import trace_parallel

            result = trace_parallel(
                args.model,
                style=args.parallel,
                world_size=world,
                dtype=args.dtype,
                optimizer=args.optimizer,
                sizes=sizes,
                out=recorded_out,
            )
    name = layout.folder_name(result.doc["model"]["name"])
    out = args.out or layout.parallel_opset_path(name, args.parallel, world)
    if not args.out:
        output.check_output(out, kind=output.OPSET, inputs=[args.model], within=layout.models_dir())
    result.save(out)
    print_opset(out, result.doc)
    collectives = sorted(op for op in result.doc["ops"] if op.split("::")[0] not in ("aten", "prims"))
    print(f"collectives and their ops: {', '.join(collectives) or 'none'}")
    print(f"wrote {out}")
    print(f"next: opcov check {out} -b BACKEND")
    return EXIT_OK

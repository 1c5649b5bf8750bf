"""Print the --ops pattern of the zoo ops that are not core ATen: every aten base name the committed
op sets (coverage/models/*/*.yaml) call, less the core ATen ops of the running torch, which
'opcov probe --core' covers. Used by scripts/envs/xla-data.sh; run with the venv that probes."""

import glob
import os
import re
import sys

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")


def main(root: str) -> None:
    import torch  # noqa: F401 - before opcov's catalogue, as the CLI does

    from opcov.catalog import build_catalog

    files = sorted(glob.glob(os.path.join(root, "coverage", "models", "*", "*.yaml")))
    if not files:
        sys.exit(f"xla_zoo_ops: no op sets under {root}/coverage/models; run from the repository root")
    bases = set()
    for path in files:
        with open(path, encoding="utf-8") as f:
            bases |= set(re.findall(r"aten::([A-Za-z0-9_]+)", f.read()))
    core = {op.base for op in build_catalog(()).core}
    print("^aten::(" + "|".join(sorted(bases - core)) + ")$")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")

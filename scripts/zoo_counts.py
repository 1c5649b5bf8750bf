"""How many transformers architectures the zoo traced, per mode, over every outcome table.

Why: the transformers run (coverage/zoo/outcomes.tsv, in .venv) cannot build the architectures that
need timm (or scipy); scripts/make_vision_zoo.sh traces those in the CUDA torch environment into
outcomes-needs-libraries.tsv. A (model, mode) counts as traced when any table says so; the denominator is
transformers' model types with a base model class.

    python scripts/zoo_counts.py            # per mode: traced / types (percent), and by table
"""

import glob
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

from opcov.tracing import zoorun  # noqa: E402


def main() -> None:
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "coverage", "zoo")
    types = set(zoorun.transformers_types())
    traced: dict = {}
    other: dict = {}
    kinds: dict = {}
    failed: dict = {}
    for path in sorted(glob.glob(os.path.join(root, "outcomes*.tsv"))):
        _, rows = zoorun.read_table(path)
        for row in rows:
            key = (row["model"], row["mode"])
            if row["model"] in types:
                if row["outcome"] == "traced":
                    traced.setdefault(key, os.path.basename(path))
                    kinds.setdefault(key, row.get("tracing") or "?")
                else:
                    failed.setdefault(key, (row["outcome"], bucket(row.get("reason") or "")))
            else:
                other.setdefault((os.path.basename(path), row["mode"], row["outcome"]), 0)
                other[(os.path.basename(path), row["mode"], row["outcome"])] += 1
    for mode in zoorun.MODES:
        done = [k for k in traced if k[1] == mode]
        by = {}
        for k in done:
            by[traced[k]] = by.get(traced[k], 0) + 1
        print(
            f"transformers {mode}: {len(done)} / {len(types)} traced ({100 * len(done) / len(types):.1f}%): "
            + ", ".join(f"{n} from {t}" for t, n in sorted(by.items()))
        )
        how: dict = {}
        for k in done:
            how[kinds[k]] = how.get(kinds[k], 0) + 1
        print("  traced with " + ", ".join(f"{t} {n}" for t, n in sorted(how.items())))
        why: dict = {}
        for k, v in failed.items():
            if k[1] == mode and k not in traced:
                why[v] = why.get(v, 0) + 1
        for (outcome, reason), n in sorted(why.items(), key=lambda x: -x[1]):
            print(f"  {outcome:13s} {n:3d}  {reason}")
    for (table, mode, outcome), n in sorted(other.items()):
        print(f"other architectures in {table}, {mode}: {outcome} {n}")


# Coarse reasons, first match wins (the table has each row's own one-line reason).
BUCKETS = (
    ("needs the ", "an optional library is missing"),
    ("no model class", "no model class in transformers"),
    ("no forward()", "no forward() (a pipeline that generate() runs)"),
    ("cannot make it from the config", "an input opcov cannot make (video-tracker session, task-specific inputs)"),
    ("over 8,192 MB", "data-dependent ops, and the real-valued run needs over 8 GB"),
    ("the real-valued trace failed too", "fails with real values too (inputs or sizes opcov gets wrong)"),
    ("cannot build", "the default config does not build"),
    ("the model's own code raised", "the model's own code refuses opcov's inputs"),
)


def bucket(reason: str) -> str:
    return next((label for needle, label in BUCKETS if needle in reason), "other")


if __name__ == "__main__":
    main()

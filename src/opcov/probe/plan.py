"""Shards balanced by recorded group times, and the job files that fan them out.

A probe is a list of groups (one OpInfo at one dtype, a canary, a replayed trace, a schema chunk),
and their costs differ by three orders of magnitude, so every Nth group (the old split) leaves one
shard running long after the others. Each probe records how long every group took in a sidecar
(``<out>.times.json``, beside the journal and the ledger); ``partition`` deals the groups out
longest first, each to the least loaded shard (the LPT rule), a group never timed counting as the
median of those that were. The deal depends only on the group ids and the times file, so every
shard of a CI matrix or a Kubernetes Indexed Job computes the same plan on its own and runs its
part: no scheduler, no shared state. ``opcov plan`` prints that plan and writes the GitHub Actions
matrix or the Indexed Job manifest; GitHub and Kubernetes do the distribution.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import shlex
import statistics

from opcov.errors import UsageError
from opcov.store.times import (  # noqa: F401 - the plan's callers (cli, runner) read the times file through it
    default_times,
    load_times,
    merge_times,
    save_times,
    times_path,
)

GITHUB_MAX_JOBS = 256  # GitHub Actions: at most 256 jobs per matrix
DEFAULT_COST = 1.0  # seconds a group counts for when no group has a recorded time


def costs(ids, times: dict[str, float]) -> dict[str, float]:
    """The cost of each group: its recorded time, else the median recorded time (else 1 s)."""
    known = [times[i] for i in ids if i in times]
    fill = statistics.median(known) if known else DEFAULT_COST
    return {i: times.get(i, fill) for i in ids}


def partition(ids, times: dict[str, float], n: int) -> list[list[str]]:
    """The groups of each of ``n`` shards (sorted ids): longest first, each to the least loaded
    shard (ties: the lower shard). Deterministic in (ids, times, n)."""
    if n < 1:
        raise UsageError(f"the shard count must be at least 1, not {n}")
    cost = costs(ids, times)
    heap = [(0.0, k) for k in range(n)]
    shards: list[list[str]] = [[] for _ in range(n)]
    for gid in sorted(cost, key=lambda i: (-cost[i], i)):
        load, k = heapq.heappop(heap)
        shards[k].append(gid)
        heapq.heappush(heap, (load + cost[gid], k))
    return [sorted(s) for s in shards]


def pick(groups, times: dict[str, float], shard) -> list:
    """The groups (``Group`` records, sorted by id) of shard (I, N) in the balanced plan."""
    if shard is None:
        return list(groups)
    ids = [g.id for g in groups]
    # beyond one shard per group every further shard is empty: deal to no more shards than there are groups
    n = min(shard[1], max(1, len(ids)))
    if shard[0] > n:
        return []
    mine = set(partition(ids, times, n)[shard[0] - 1])
    return [g for g in groups if g.id in mine]


def fingerprint(ids) -> str:
    """A short hash of a list of group ids: two shards ran one plan when their plans' hashes agree."""
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:16]


def figures(ids, times: dict[str, float], n: int) -> dict:
    """The plan's predicted load: per shard (groups, seconds), and slowest / mean."""
    cost = costs(ids, times)
    shards = partition(ids, times, n)
    loads = [sum(cost[g] for g in s) for s in shards]
    mean = sum(loads) / n if n else 0.0
    return {
        "shards": [
            {"shard": f"{k + 1}/{n}", "groups": len(s), "seconds": round(loads[k], 2), "plan": fingerprint(s)}
            for k, s in enumerate(shards)
        ],
        "groups": len(cost),
        "timed": sum(1 for i in cost if i in times),
        "total_s": round(sum(loads), 2),
        "max_over_mean": round(max(loads) / mean, 3) if mean else 1.0,
        "plan": fingerprint(cost),
    }


# ---------------------------------------------------------------- job files


def github_matrix(n: int, fig: dict | None = None) -> dict:
    """GitHub Actions matrices for ``n`` shards, in slices of at most 256 jobs (GitHub's limit per
    matrix): ``{"slices": k, "matrix": [{"include": [{"shard": "I/N", "index": I}, ...]}, ...]}``."""
    entries = []
    for k in range(n):
        e = {"shard": f"{k + 1}/{n}", "index": k + 1}
        if fig:
            e["expected_s"] = fig["shards"][k]["seconds"]
        entries.append(e)
    slices = [entries[i : i + GITHUB_MAX_JOBS] for i in range(0, n, GITHUB_MAX_JOBS)]
    return {"slices": len(slices), "matrix": [{"include": s} for s in slices]}


def github_outputs(n: int, fig: dict | None, runner: str, max_slices: int) -> str:
    """Lines for $GITHUB_OUTPUT: ``slices``, ``runner``, and ``matrix1`` .. ``matrix<max_slices>``
    (an empty slice is ``{"include": []}``, which a job guards with ``if``)."""
    m = github_matrix(n, fig)
    if m["slices"] > max_slices:
        raise UsageError(
            f"{n} shards need {m['slices']} matrices of at most {GITHUB_MAX_JOBS} jobs; the workflow has "
            f"{max_slices}: use at most {max_slices * GITHUB_MAX_JOBS} shards"
        )
    lines = [f"slices={m['slices']}", f"runner={runner}", f"shards={n}"]
    for k in range(max_slices):
        inc = m["matrix"][k] if k < m["slices"] else {"include": []}
        lines.append(f"matrix{k + 1}=" + json.dumps(inc, separators=(",", ":")))
    return "\n".join(lines) + "\n"


def k8s_manifest(
    backend: str,
    n: int,
    *,
    image: str,
    probe_args: str,
    name: str,
    claim: str,
    parallelism: int | None,
    workdir: str,
    resources: str | None,
    retries: int = 3,
) -> str:
    """A Kubernetes Indexed Job: pod k runs shard k+1 of ``n`` (``JOB_COMPLETION_INDEX``), writing
    its part and journal to the volume ``claim`` mounted at /results; a retried pod gets the same
    index, so it redoes the same shard and resumes its journal (``--resume``)."""
    out = f"/results/{backend}-shard-$I-of-{n}.yaml"
    script = (
        f'I=$((JOB_COMPLETION_INDEX + 1)); exec opcov probe {shlex.quote(backend)} --shard "$I/{n}" '
        f"{probe_args} --resume --out {out}".replace("  ", " ")
    )
    limits = ""
    if resources:
        key, _, val = resources.partition("=")
        limits = f"          resources:\n            limits:\n              {json.dumps(key)}: {json.dumps(val)}\n"
    return (
        "# Kubernetes Indexed Job written by 'opcov plan "
        f"{backend} --shards {n} --format k8s': one pod per shard; the completion index picks the\n"
        "# shard, so a retried pod redoes (resumes) the same one. Then: opcov merge /results/*.yaml --out FILE\n"
        "apiVersion: batch/v1\n"
        "kind: Job\n"
        "metadata:\n"
        f"  name: {name}\n"
        "spec:\n"
        "  completionMode: Indexed\n"
        f"  completions: {n}\n"
        f"  parallelism: {parallelism or n}\n"
        f"  backoffLimitPerIndex: {retries}\n"
        f"  maxFailedIndexes: {n}\n"
        "  template:\n"
        "    spec:\n"
        "      restartPolicy: Never\n"
        "      containers:\n"
        "        - name: probe\n"
        f"          image: {json.dumps(image)}\n"
        f"          workingDir: {json.dumps(workdir)}\n"
        f'          command: ["/bin/sh", "-c", {json.dumps(script)}]\n'
        f"{limits}"
        "          volumeMounts:\n"
        "            - name: results\n"
        "              mountPath: /results\n"
        "      volumes:\n"
        "        - name: results\n"
        "          persistentVolumeClaim:\n"
        f"            claimName: {json.dumps(claim)}\n"
    )

"""Hold opcov's verdicts on PyTorch/XLA against real runs of the nn reality sets (issue 42, item 9).

Usage, in the main venv (the judge needs no torch_xla unless --on-xla or --replay):

    .venv/bin/python scripts/nn_accuracy.py --set tuning|heldout|fresh|unseen|fifth|sixth|seventh|eighth [--on-xla] [--replay] [--models a,b]
        [--modes inference,training] [--jobs 2] [--reuse-traces] [--write-docs]

For each (model, mode) of the set (scripts/reality/nn_models.py, nn_heldout.py, nn_fresh.py, nn_unseen.py,
nn_fifth.py, nn_sixth.py, nn_seventh.py or nn_eighth.py) it traces the model with the opcov CLI, as a user would:

    traced here   PYTHONPATH=scripts/reality .venv/bin/opcov trace nn_models:NAME --mode MODE --out W/NAME/MODE.yaml
    --on-xla      the same with .envs/xla/bin/opcov ... --on xla (PJRT_DEVICE=CPU): recorded on the device

(training with --optimizer sgd: the real run's step is one SGD step)
then judges it with ``opcov check W/NAME -b xla --mode MODE --format json`` (main venv, --no-replay; with
--replay in the xla venv, where the model's own calls are replayed on the device) and compares the verdict
with the real outcome that scripts/envs/nn_reality.py recorded in docs/reality/nn-xla[-heldout|-fresh|-unseen|-fifth|-sixth|-seventh|-eighth].json
(never run here). A verdict agrees when

    runs                  <->  ran: values match CPU, no op through the CPU fallback
    runs_with_fallback    <->  fallback: values match CPU, and the verdict names exactly the ops that fell
                               back (overloads aside); the right verdict naming other ops is counted apart
    runs_with_value_note  <->  ran, fallback or wrong (it says the model runs and its values may differ)
    fails                 <->  raised

``unknown`` agrees with nothing, and a model the trace could not record is its own row (``not traced``).
It prints the confusion table (verdict x real outcome), the agreement, the false runs (``runs`` or
``runs_with_fallback`` for a model that raised or gave wrong values), the value notes on models whose
values matched CPU, the rows not traced; it keeps every row in docs/reality/nn-accuracy-SET[-WAY].json
(a whole-set run only) and with --write-docs rewrites its own section of docs/accuracy.md for that set
and way, nothing else. Traces go to build/nn-accuracy/SET-WAY/ (--reuse-traces judges the traces a
previous run left there instead of tracing again: for a change to the verdict alone).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REALITY = os.path.join(ROOT, "scripts", "reality")
sys.path.insert(0, REALITY)
from sets import REAL_RUNS, SETS, models_of  # noqa: E402 - the sets' one table (scripts/reality/sets.py)

MAIN_BIN = os.path.join(ROOT, ".venv", "bin")
XLA_BIN = os.path.join(ROOT, ".envs", "xla", "bin")
PAGE = os.path.join(ROOT, "docs", "accuracy.md")

VERDICTS = ("runs", "runs_with_fallback", "runs_with_value_note", "unknown", "fails", "not traced", "error")
REAL = ("ran", "fallback", "wrong", "raised")
REAL_LABEL = {
    "ran": "ran, matched CPU",
    "fallback": "ran with CPU fallback, matched",
    "wrong": "ran, wrong values",
    "raised": "raised",
    "cpu_failed": "CPU reference failed",
    "not run": "no real run saved",
}
WAYS = {
    "here": "traced on this machine (stand-in device)",
    "on-xla": "traced on xla (`opcov trace --on xla`)",
    "here-replay": "traced on this machine, judged with the model's calls replayed on xla (`check --replay`)",
    "on-xla-replay": "traced on xla (`--on xla`), judged with the model's calls replayed on xla (`check --replay`)",
}
OUTER_BEGIN = "<!-- nn-accuracy: begin (written by scripts/nn_accuracy.py; edits here are replaced) -->"
OUTER_END = "<!-- nn-accuracy: end -->"


def sub_markers(set_name: str, way: str) -> tuple[str, str]:
    return f"<!-- nn-accuracy {set_name} {way}: begin -->", f"<!-- nn-accuracy {set_name} {way}: end -->"


# ---------------------------------------------------------------- the set and its real runs


def real_runs(set_name: str) -> dict:
    path = os.path.join(ROOT, REAL_RUNS[set_name])
    if not os.path.exists(path):
        raise SystemExit(
            f"{REAL_RUNS[set_name]}: no real runs yet; make them with "
            f"'PJRT_DEVICE=CPU .envs/xla/bin/python scripts/envs/nn_reality.py --set {set_name}'"
        )
    with open(path) as f:
        return json.load(f)


# ---------------------------------------------------------------- trace and judge one (model, mode)


def _env(xla: bool) -> dict:
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = REALITY + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if xla:
        env["PJRT_DEVICE"] = env.get("PJRT_DEVICE", "CPU")
    return env


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    errs = [ln for ln in lines if ln.startswith("opcov: error")]
    return ((errs or lines or ["no output"])[-1])[:400]


def trace(module: str, name: str, mode: str, work: str, on_xla: bool, reuse: bool, timeout: int) -> dict:
    """Trace one (model, mode) into work/NAME/MODE.yaml; {'ok', 'seconds', 'error', 'command'}."""
    folder = os.path.join(work, name)
    out = os.path.join(folder, f"{mode}.yaml")
    failed = os.path.join(folder, f"{mode}.trace-error.json")
    if reuse and (os.path.exists(out) or os.path.exists(failed)):
        if os.path.exists(out):
            return {"ok": True, "seconds": 0.0, "reused": True}
        with open(failed) as f:
            return json.load(f) | {"reused": True}
    os.makedirs(folder, exist_ok=True)
    for stale in (out, failed):
        if os.path.exists(stale):
            os.remove(stale)
    cmd = [os.path.join(XLA_BIN if on_xla else MAIN_BIN, "opcov"), "trace", f"{module}:{name}", "--mode", mode]
    cmd += ["--optimizer", "sgd"] if mode == "training" else []  # the real run's step: one SGD step
    cmd += (["--on", "xla"] if on_xla else []) + ["--out", out]
    t0 = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=_env(on_xla), cwd=ROOT, timeout=timeout)
        ok, error = r.returncode == 0 and os.path.exists(out), _last_line(r.stderr or r.stdout)
    except subprocess.TimeoutExpired:
        ok, error = False, f"opcov trace timed out after {timeout} s"
    res = {"ok": ok, "seconds": round(time.time() - t0, 1)}
    if not ok:
        res["error"] = error
        with open(failed, "w") as f:
            json.dump(res, f)
    return res


def fallback_named(verdict: dict) -> list[str]:
    """The ops a verdict says run through the CPU fallback themselves: those with a forward-direction
    fallback finding. A fallback found on an op's backward is its backward kernel's, which the op set lists
    as an op of its own (its call in the backward phase) and which is named there."""
    return sorted(
        {
            name
            for o in verdict.get("ops", [])
            if o.get("outcome") == "fallback"
            and any(f.get("outcome") == "fallback" and f.get("direction") == "forward" for f in o.get("findings", []))
            for name in (o.get("fell") or [o["op"]])  # the kernels the counters named, where the verdict has them
        }
    )


def judge(name: str, mode: str, work: str, replay: bool, timeout: int) -> dict:
    """``opcov check WORK/NAME -b xla --mode MODE --format json``: verdict, what it says, the ops it names."""
    cmd = [os.path.join(XLA_BIN if replay else MAIN_BIN, "opcov"), "check", os.path.join(work, name)]
    cmd += ["-b", "xla", "--mode", mode, "--format", "json", "--coverage", os.path.join(ROOT, "coverage")]
    cmd += ["--replay", "--replay-dir", os.path.join(work, "replayed")] if replay else ["--no-replay"]
    t0 = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=_env(replay), cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"verdict": "error", "says": f"opcov check timed out after {timeout} s", "seconds": timeout}
    seconds = round(time.time() - t0, 1)
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        return {"verdict": "error", "says": _last_line(r.stderr or r.stdout), "seconds": seconds}
    found = [v for v in doc.get("verdicts", []) if v.get("backend") == "xla" and v.get("mode", mode) == mode]
    if not found:
        return {"verdict": "error", "says": "no xla verdict for this mode in opcov check's JSON", "seconds": seconds}
    v = found[0]
    out = {
        "verdict": v["verdict"],
        "says": str(v.get("says") or ""),
        "evidence": v.get("evidence"),
        "named_fallback": fallback_named(v),
        "value_notes": sorted({n.get("op", "?") for n in v.get("value_notes") or []}),
        "not_ok": sorted(f"{o['op']}: {o.get('outcome')}" for o in v.get("ops", []) if o.get("outcome") != "ok"),
        "seconds": seconds,
    }
    predicted = (v.get("observed") or {}).get("predicted")
    if isinstance(predicted, dict) and predicted.get("verdict"):
        # a committed observed run decides check's verdict; the verdict measured is the one from coverage data
        out.update(verdict=str(predicted["verdict"]), says=str(predicted.get("says") or ""), observed=True)
        out["named_fallback"] = sorted(predicted.get("fallback_ops") or [])
    return out


# ---------------------------------------------------------------- agreement


def base(op: str) -> str:
    """aten::addmm.default -> aten::addmm: torch_xla's counters name ops without their overload."""
    ns, _, rest = op.partition("::")
    return f"{ns}::{rest.split('.')[0]}" if rest else op


def classify(verdict: str, real: dict | None, named: list[str]) -> tuple[bool, str]:
    """(agrees, class): class says how a row agrees or not, for the summary."""
    if verdict == "not traced":
        return False, "not traced"
    if verdict == "error":
        return False, "check error"
    if real is None:
        return False, "no real run"
    actual = real["actual"]
    if actual == "cpu_failed":
        return False, "cpu reference failed"
    fell = {base(op) for op in real.get("fallback") or []}
    if verdict == "runs":
        return (True, "agree") if actual == "ran" else (False, f"runs for {actual}")
    if verdict == "runs_with_fallback":
        if actual == "fallback":
            return (True, "agree") if {base(op) for op in named} == fell else (False, "right verdict, wrong ops")
        return False, f"runs_with_fallback for {actual}"
    if verdict == "runs_with_value_note":
        return (True, "agree") if actual in ("ran", "fallback", "wrong") else (False, f"value note for {actual}")
    if verdict == "fails":
        return (True, "agree") if actual == "raised" else (False, f"fails for {actual}")
    return False, f"{verdict} for {actual}"


def summary(rows: list) -> dict:
    matched = [r for r in rows if r["real"] and r["real"]["actual"] in ("ran", "fallback")]
    return {
        "total": len(rows),
        "agree": sum(r["agree"] for r in rows),
        "false_runs": sum(
            r["verdict"] in ("runs", "runs_with_fallback")
            and bool(r["real"])
            and r["real"]["actual"] in ("raised", "wrong")
            for r in rows
        ),
        "wrong_ops": sum(r["class"] == "right verdict, wrong ops" for r in rows),
        "matched": len(matched),
        "value_notes_on_matched": sum(r["verdict"] == "runs_with_value_note" for r in matched),
        "not_traced": sum(r["verdict"] == "not traced" for r in rows),
        "unknown": sum(r["verdict"] == "unknown" for r in rows),
        "errors": sum(r["verdict"] == "error" for r in rows),
        "real": {a: sum(bool(r["real"]) and r["real"]["actual"] == a for r in rows) for a in REAL},
    }


def pct(n: int, d: int) -> str:
    return f"{100 * n / d:.1f}%" if d else "-"


def table(rows: list) -> list[str]:
    cols = list(REAL) + sorted({(r["real"] or {}).get("actual", "not run") for r in rows} - set(REAL))
    out = [
        "| verdict \\ real run | " + " | ".join(REAL_LABEL.get(c, c) for c in cols) + " | total |",
        "|---" * (len(cols) + 2) + "|",
    ]
    for v in VERDICTS + tuple(sorted({r["verdict"] for r in rows} - set(VERDICTS))):
        n = [sum(r["verdict"] == v and (r["real"] or {}).get("actual", "not run") == c for r in rows) for c in cols]
        if sum(n):
            out.append(f"| {v} | " + " | ".join(str(x) for x in n) + f" | {sum(n)} |")
    n = [sum((r["real"] or {}).get("actual", "not run") == c for r in rows) for c in cols]
    out.append("| total | " + " | ".join(str(x) for x in n) + f" | {len(rows)} |")
    return out


def figures(s: dict) -> list[str]:
    return [
        f"Agree: **{s['agree']} of {s['total']} ({pct(s['agree'], s['total'])})**; "
        f"`runs`/`runs_with_fallback` for a model that raised or gave wrong values: **{s['false_runs']}**; "
        f"right fallback verdict naming other ops than fell back: {s['wrong_ops']}; "
        f"value notes on models whose values matched CPU: **{s['value_notes_on_matched']} of {s['matched']} "
        f"({pct(s['value_notes_on_matched'], s['matched'])})**; not traced: **{s['not_traced']}**; "
        f"`unknown`: {s['unknown']}" + (f"; check errors: {s['errors']}" if s["errors"] else "") + ".",
        "",
        "Real outcomes: " + ", ".join(f"{a} {s['real'][a]}" for a in REAL) + ".",
    ]


# ---------------------------------------------------------------- the page


def row_line(r: dict) -> str:
    real = r["real"] or {}
    a = real.get("actual", "not run")
    what = a
    if a == "raised":
        what = f"raised at {real.get('stage')}: {real.get('exception')}: {real.get('message', '')[:120]}"
    elif a == "wrong":
        what = "wrong: " + ", ".join(d["value"] for d in real.get("differ", [])[:3])
    if real.get("fallback"):
        what += f"; fell back: {', '.join(real['fallback'])}"
    said = r["verdict"]
    if r["verdict"] == "not traced":
        said += f": {r['trace'].get('error', '')[:160]}"
    elif r.get("named_fallback"):
        said += f" (names {', '.join(r['named_fallback'])})"
    elif r["verdict"] in ("fails", "runs_with_value_note", "unknown") and r.get("not_ok"):
        said += f" ({'; '.join(r['not_ok'][:3])})"
    cells = (r["model"], r["mode"], said, what, r["class"])
    return "| " + " | ".join(c.replace("\n", " ").replace("|", "\\|") for c in cells) + " |"


def section(set_name: str, way: str, rows: list, meta: dict) -> str:
    begin, end = sub_markers(set_name, way)
    s = summary(rows)
    off = [r for r in rows if not r["agree"]]
    lines = [
        begin,
        f"### {set_name} set, {WAYS[way]}",
        "",
        *table(rows),
        "",
        *figures(s),
        "",
        f"Measured {meta['date']} by `{meta['command']}`; {meta['versions']}; real runs from "
        f"`{REAL_RUNS[set_name]}` ({meta['real_versions']}); {meta['machine']}; {meta['seconds']:.0f} s.",
        "",
    ]
    if off:
        lines += [
            f"<details><summary>The {len(off)} rows that do not agree</summary>",
            "",
            "| model | mode | verdict | real run | why |",
            "|---|---|---|---|---|",
            *[row_line(r) for r in off],
            "",
            "</details>",
            "",
        ]
    lines.append(end)
    return "\n".join(lines)


INTRO = """## Plain torch.nn models on PyTorch/XLA (the nn reality sets)

Eight sets of small plain `torch.nn` user models, made to find where the verdicts fail outside the curated
zoo: `scripts/reality/nn_models.py` (the tuning set), `scripts/reality/nn_heldout.py` (a held-out set of the
same kind, for measuring only, since seen by those who tune the rules), `scripts/reality/nn_fresh.py` (a
fresh set of whole small architectures and unused layer arguments, written after both, since seen too),
`scripts/reality/nn_unseen.py` (an unseen set of blocks and small models of the same kinds, written after
all three without reading how opcov judges), `scripts/reality/nn_fifth.py` (a fifth set of small models
of kinds none of the others holds, written after all four without reading how opcov judges, for measuring
only), `scripts/reality/nn_sixth.py` (a sixth set of the same kind, of kinds none of the five holds,
written after all five without reading how opcov judges, for measuring only), `scripts/reality/nn_seventh.py`
(a seventh set of kinds none of the six holds, written after all six without reading how opcov judges, for
measuring only) and `scripts/reality/nn_eighth.py` (an eighth set of kinds none of the seven holds, written
after all seven without reading how opcov judges, for measuring only).
Each (model, mode) ran for real on PyTorch/XLA 2.9's CPU client against CPU
(`scripts/envs/nn_reality.py`, records in `docs/reality/nn-xla*.json`): `ran` (every value matched CPU,
nothing through the CPU fallback), `fallback` (matched, with the ops that fell back named), `wrong`, or
`raised`. `python scripts/nn_accuracy.py --set SET [--on-xla] [--replay] --write-docs` traces each with
`opcov trace`, judges it with `opcov check -b xla`, and writes one table per set and way below: `runs`
agrees with `ran`; `runs_with_fallback` with `fallback` when it names exactly the ops that fell back (the
ops found to run through it themselves, by the kernels the probe's fallback counters named where the verdict has
them, as its JSON `fell`; a fallback found on an op's backward is named by its backward kernel's own row);
`runs_with_value_note` with any run that did not raise; `fails` with `raised`; `unknown` and a model not
traced agree with nothing. Rows per model: `docs/reality/nn-accuracy-SET[-WAY].json`."""


def write_docs(set_name: str, way: str, text: str, page: str = PAGE) -> None:
    """Replace this (set, way) section inside the script's own block of the page; add the block (at the end)
    or the section (in a fixed order) where missing; nothing outside the block changes."""
    old = open(page).read()
    if OUTER_BEGIN in old and OUTER_END in old:
        head, rest = old.split(OUTER_BEGIN, 1)
        inner, tail = rest.split(OUTER_END, 1)
    else:
        head, inner, tail = old.rstrip("\n") + "\n\n", "", "\n"
    parts = {}
    for s in SETS:
        for w in WAYS:
            b, e = sub_markers(s, w)
            if b in inner and e in inner:
                parts[(s, w)] = b + inner.split(b, 1)[1].split(e, 1)[0] + e
    parts[(set_name, way)] = text
    body = [INTRO] + [parts[(s, w)] for s in SETS for w in WAYS if (s, w) in parts]
    with open(page, "w") as f:
        f.write(head + OUTER_BEGIN + "\n" + "\n\n".join(body) + "\n" + OUTER_END + tail)


# ---------------------------------------------------------------- main


def versions_here(replay_or_xla: bool) -> str:
    def ver(bin_dir: str, dists: tuple) -> str:
        code = f"import importlib.metadata as m\nprint(', '.join(d + ' ' + m.version(d) for d in {dists!r}))"
        try:
            r = subprocess.run(
                [os.path.join(bin_dir, "python"), "-c", code], capture_output=True, text=True, timeout=60
            )
            return r.stdout.strip() or "?"
        except (OSError, subprocess.TimeoutExpired):
            return "?"

    out = f"main venv: {ver(MAIN_BIN, ('opcov', 'torch'))}"
    if replay_or_xla:
        out += f"; xla venv: {ver(XLA_BIN, ('opcov', 'torch', 'torch-xla'))}"
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--set", choices=sorted(SETS), default="tuning")
    p.add_argument("--on-xla", action="store_true", help="trace on xla itself (.envs/xla, PJRT_DEVICE=CPU)")
    p.add_argument("--replay", action="store_true", help="judge in .envs/xla with the model's calls replayed on xla")
    p.add_argument("--models", default="", help="comma-separated model names (default: the whole set)")
    p.add_argument("--modes", default="inference,training")
    p.add_argument("--jobs", type=int, default=2, help="(model, mode) pairs traced and judged at once (at most 2)")
    p.add_argument("--work", help="where traces go (default: build/nn-accuracy/SET-WAY)")
    p.add_argument("--reuse-traces", action="store_true", help="judge the traces a previous run left in --work")
    p.add_argument("--trace-timeout", type=int, default=900)
    p.add_argument("--check-timeout", type=int, default=900)
    p.add_argument("--rows", help="write the per-row JSON here (default for a whole-set run: docs/reality/...)")
    p.add_argument("--write-docs", action="store_true", help="rewrite this set and way's section of docs/accuracy.md")
    args = p.parse_args()
    way = ("on-xla" if args.on_xla else "here") + ("-replay" if args.replay else "")
    for need, why in ((MAIN_BIN, "the main venv (scripts/setup.sh)"),) + (
        ((XLA_BIN, "the xla venv (scripts/envs/xla.sh)"),) if args.on_xla or args.replay else ()
    ):
        if not os.path.exists(os.path.join(need, "opcov")):
            raise SystemExit(f"{need}/opcov: missing; make {why}")
    table_ = models_of(args.set)
    models = [m for m in args.models.split(",") if m] or list(table_)
    unknown = sorted(set(models) - set(table_))
    if unknown:
        raise SystemExit(f"not in the {args.set} set: {', '.join(unknown)}")
    whole = set(models) == set(table_) and args.modes == "inference,training"
    if args.write_docs and not whole:
        raise SystemExit("--write-docs needs the whole set in both modes (leave out --models and --modes)")
    realdoc = real_runs(args.set)
    runs = realdoc.get("runs", {})
    work = args.work or os.path.join(ROOT, "build", "nn-accuracy", f"{args.set}-{way}")
    if not args.reuse_traces and whole and os.path.isdir(work):
        replayed = os.path.join(work, "replayed")  # kept: replayed calls are reused by signature
        for entry in os.listdir(work):
            if os.path.join(work, entry) != replayed:
                shutil.rmtree(os.path.join(work, entry), ignore_errors=True)
    os.makedirs(work, exist_ok=True)
    module = SETS[args.set]
    pairs = [(m, mode) for m in models for mode in args.modes.split(",") if mode]
    lock = threading.Lock()
    start = time.time()

    def one(pair):
        name, mode = pair
        t0 = time.time()
        tr = trace(module, name, mode, work, args.on_xla, args.reuse_traces, args.trace_timeout)
        if tr["ok"]:
            j = judge(name, mode, work, args.replay, args.check_timeout)
        else:
            j = {"verdict": "not traced", "says": tr.get("error", ""), "seconds": 0.0}
        real = runs.get(f"{name}/{mode}")
        agree, cls = classify(j["verdict"], real, j.get("named_fallback", []))
        row = {"model": name, "mode": mode, "family": table_[name][0], **j, "trace": tr, "real": real}
        row.update(agree=agree, **{"class": cls})
        with lock:
            real_s = (real or {}).get("actual", "not run")
            fb = f" fell back {','.join(real['fallback'])}" if real and real.get("fallback") else ""
            named = f" names {','.join(j['named_fallback'])}" if j.get("named_fallback") else ""
            print(
                f"{name:28} {mode:9} {j['verdict']}{named} | real {real_s}{fb} | {cls} [{time.time() - t0:.0f} s]",
                flush=True,
            )
        return row

    with cf.ThreadPoolExecutor(max_workers=max(1, min(args.jobs, 2))) as pool:
        rows = list(pool.map(one, pairs))
    seconds = time.time() - start
    s = summary(rows)
    print("\n".join(table(rows)))
    print("\n".join(figures(s)).replace("**", ""))
    cmd = "python scripts/nn_accuracy.py " + " ".join(sys.argv[1:])
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": cmd,
        "versions": versions_here(args.on_xla or args.replay),
        "real_versions": ", ".join(f"{k} {v}" for k, v in sorted((realdoc.get("versions") or {}).items())),
        "machine": f"{platform.platform()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} when written",
        "seconds": seconds,
    }
    rows_path = args.rows or (
        os.path.join(ROOT, "docs", "reality", f"nn-accuracy-{args.set}{'' if way == 'here' else '-' + way}.json")
        if whole
        else None
    )
    if rows_path:
        with open(rows_path, "w") as f:
            json.dump({"meta": meta, "way": WAYS[way], "summary": s, "rows": rows}, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"rows: {os.path.relpath(rows_path, ROOT)}")
    if args.write_docs:
        write_docs(args.set, way, section(args.set, way, rows, meta))
        print(f"wrote the {args.set} {way} section of docs/accuracy.md")


if __name__ == "__main__":
    main()

"""``rolltape bench``: rolltape's speed and memory targets, each measured as a ratio against a
baseline that runs in the same invocation, on the same machine, right beside it.

Timed unit tests are flaky because machines differ; a ratio against a baseline measured a
moment earlier (or interleaved with it: A B B A ...) is not. Every benchmark returns a dict
with the raw timings, the judged ``value`` (a ratio; a difference for memory; seconds for
the one absolute budget, ``report_build``), the ``target`` and whether it was met;
:func:`run` writes them all to ``bench.json`` and draws ``bench.png``.

This module is the registry (:data:`BENCHMARKS`), the runner and the report (table and
chart). The benchmarks live in one module per family, all sharing
:mod:`rolltape.bench.common` (sizes, the run's context, child processes, worker tracking):
:mod:`~rolltape.bench.pass1`, :mod:`~rolltape.bench.pass2`, :mod:`~rolltape.bench.scale`
(more workers, Ray), :mod:`~rolltape.bench.artifacts` (gif, report),
:mod:`~rolltape.bench.suites` (benchmark suites), :mod:`~rolltape.bench.versus` (SB3, the
seed-000 way), :mod:`~rolltape.bench.served`
(``rolltape serve``), :mod:`~rolltape.bench.training` (recording during training),
:mod:`~rolltape.bench.export` (datasets) and :mod:`~rolltape.bench.branch` (``rolltape
branch``).

Benchmarks, in the order they run and are reported (module in brackets):

- ``pass1_overhead`` [pass1]: :func:`rolltape.pass1.rollout.record_episode` vs a bare
  act/step loop on the same env and policy (target: record / bare <= 1.05).
- ``pass1_video_requested`` [pass1]: pass-1 time of :func:`rolltape.evaluate` with
  ``video=0`` vs ``video=1`` (target: speed ratio >= 0.97); for contrast, rendering inline
  every step.
- ``mjwarp_pass1`` [pass1]: episodes/s of pass 1 on MuJoCo Warp (``--simulator mjwarp``,
  every episode a world of one batch) vs rolltape's CPU workers, one per core, same PPO,
  seeds and steps (target: >= 20x on 4,096 episodes on a GPU; informational on the CPU),
  with the flip report of the MJWarp tapes against CPU MuJoCo beside it.
- ``pass1_workers`` [scale]: pass-1 time with ``workers=1`` vs ``workers=2`` (target:
  speed-up >= 1.7); the tapes of both must be bitwise identical (checked, an error otherwise).
- ``ray_vs_local`` [scale]: a fresh process running :func:`rolltape.evaluate` with
  ``executor="ray"`` vs ``"local"``, Ray's start and shutdown included (target: <= 1.15;
  informational in ``--quick``).
- ``pass2_throughput`` [pass2]: frames/s of :func:`rolltape.render` vs a bare render+encode
  loop in a subprocess with the same ``MUJOCO_GL`` (target: >= 0.9).
- ``render_quality`` [pass2]: frames/s of :func:`rolltape.render` at each ``quality`` preset
  and of the bare loop (target: fast >= 6x full).
- ``pass2_workers`` [scale]: two tapes rendered on 1 vs 2 render workers (target: >= 1.7).
- ``pass2_segments`` [scale]: one episode rendered whole vs split across 2 workers and
  joined (target: >= 1.6; the joined video must have steps + 1 frames).
- ``render_rss`` [pass2]: peak RSS of the render worker for a short vs a long episode
  (target: difference <= 50 MB).
- ``batch_render`` [pass2]: frames/s of ``render --renderer mjwarp`` (every tape at once on
  MuJoCo Warp's batch renderer) vs :func:`rolltape.render` with one render worker per core,
  the same tapes at 128x128 (target: >= 10x on a GPU; informational on the CPU).
- ``gif_vs_mp4`` [artifacts]: writing the same real frames as gif vs mp4 (target: <= 2.0).
- ``report_build`` [artifacts]: :func:`rolltape.outputs.report.build_report` on a
  100-episode run with 3 videos (target: <= 10 s, an absolute budget, not a ratio).
- ``suite_workers`` [suites]: the built-in ``mazes`` suite (4 tasks x 25 episodes) with
  ``workers=1`` vs ``workers=2`` (target: speed-up >= 1.7; tapes bitwise identical).
- ``suite_aggregation`` [suites]: per-task/suite/overall aggregation and writing
  ``eval_info.json`` vs that suite's pass 1 (target: <= 0.01).
- ``pass1_vs_sb3_evaluate_policy`` [versus]: pass 1 vs SB3's ``evaluate_policy``
  (informational in ``--quick``).
- ``end_to_end`` [versus]: :func:`rolltape.evaluate` with its defaults vs "the seed-000
  way" (informational).
- ``small_job`` [versus]: ``rolltape eval`` vs seed 000's own script on its own workload
  (Pusher-v5 PPO + VecNormalize, 30 + 30 episodes of 100 steps, one verified 640x480
  video), each from a cold interpreter, interleaved; fixed costs weigh most (target:
  <= 0.8x; informational).
- ``served_step_overhead`` [served]: a step on a loopback ``rolltape serve`` minus the same
  step on a minimal pyzmq server of the same env (raw bytes, no protocol), HalfCheetah-v5,
  same actions, in the same run: rolltape's protocol cost (target: median <= 100 us; the
  local step and the absolute overhead, served - local, beside it).
- ``served_eval_pass1`` [served]: pass 1 of :func:`rolltape.evaluate` on
  ``tcp://.../HalfCheetah-v5`` vs locally, PPO MLP, one worker (target: <= 1.5x; tapes
  bitwise equal); served, the worker plays 4 episodes at once, one per session.
- ``served_vector`` [served]: batched pass 1 (PPO MLP, N = 8) on one vector session of
  ``rolltape serve --num-envs 8`` vs 8 local sub-env processes (target: >= 0.9x; tapes
  bitwise equal), with the per-env served step overhead for N = 1, 8, 32 beside it.
- ``served_concurrent_clients`` [served]: 4 clients on one server at once vs each alone
  (target: 0 episodes differ).
- ``served_policy_pass1`` [served]: pass 1 of :func:`rolltape.evaluate` with the PPO MLP
  served by ``rolltape serve-policy`` on loopback (openpi's protocol) vs loaded locally
  (target: <= 1.5x; tapes bitwise equal), with the per-call cost beyond a bare websocket
  round trip beside it.
- ``training_tapes`` [training]: PPO training throughput with a RecordTape tape of every
  episode vs no recording (target: >= 0.95).
- ``training_background_video`` [training]: the same with background videos of every 10th
  episode, next to Gymnasium's RecordVideo drawing them inline (informational).
- ``record_tape_step_cost`` [training]: microseconds RecordTape adds to a step when it is
  not recording (target: <= 2 us).
- ``export_obs`` [export]: ``rolltape export --to minari`` vs a bare gym.make + reset(seed)
  + step(actions) loop collecting the same arrays in a fresh interpreter (target: >= 0.9).
- ``export_camera`` [export]: ``rolltape export --to lerobot --camera default`` vs
  ``rolltape.render`` of the same episodes plus converting its videos to LeRobot's AV1
  (target: >= 0.9).
- ``export_rss`` [export]: peak RSS of an export of few vs many episodes, to Minari and
  to LeRobot with a camera (target: difference <= 50 MB).
- ``atari_pass1`` [atari]: pass 1 of a PPO CnnPolicy on Breakout (``--wrapper atari
  --frame-stack 4``, sampled actions) vs rl-zoo3's ``enjoy.py --no-render`` loop on the same
  episodes (target: >= 1.5x; the episodes must be equal).
- ``atari_pass2`` [atari]: rolltape.render of an Atari tape (ALE's screen) vs a bare
  ``env.render()`` + encode loop (target: >= 1.0).
- ``branch_step_cost`` [branch]: ``rolltape branch``'s work per branch step (a BranchJob in
  process: restore to continue, the noisy policy, recording, the tape) vs a bare
  ``mj_setState`` + act/step loop over the same branches of the bundled Pusher policy
  (target: <= 1.2).

The policy is an untrained SB3 PPO ``MlpPolicy`` (64x64) with fresh VecNormalize statistics,
made in a temporary folder: its inference cost is the same as a trained one's.

May import: anything of rolltape. Never imported by rolltape except by the ``bench`` verb.

Example (not run: it takes minutes):
    >>> report = run(quick=True, out="bench-out")          # or: rolltape bench --quick
    >>> report["benchmarks"]["pass1_overhead"]["ratio"]
    1.02...
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Sequence

from rolltape.bench.artifacts import bench_gif_vs_mp4, bench_report_build
from rolltape.bench.atari import bench_atari_pass1, bench_atari_pass2
from rolltape.bench.branch import bench_branch_step_cost
from rolltape.bench.common import ENV_ID, FULL, POLICY_NOTE, QUICK, SEED, Config, Context
from rolltape.bench.export import bench_export_camera, bench_export_obs, bench_export_rss
from rolltape.bench.pass1 import (
    bench_mjwarp_pass1,
    bench_pass1_overhead,
    bench_pass1_video_requested,
)
from rolltape.bench.pass2 import (
    bench_batch_render,
    bench_pass2_throughput,
    bench_render_quality,
    bench_render_rss,
)
from rolltape.bench.scale import (
    bench_pass1_workers,
    bench_pass2_segments,
    bench_pass2_workers,
    bench_ray_vs_local,
)
from rolltape.bench.served import (
    bench_served_concurrent_clients,
    bench_served_eval_pass1,
    bench_served_policy_pass1,
    bench_served_step_overhead,
    bench_served_vector,
)
from rolltape.bench.suites import bench_suite_aggregation, bench_suite_workers
from rolltape.bench.training import (
    bench_record_tape_step_cost,
    bench_training_background_video,
    bench_training_tapes,
)
from rolltape.bench.versus import (
    bench_end_to_end,
    bench_pass1_vs_sb3_evaluate_policy,
    bench_small_job,
)
from rolltape.errors import UsageError
from rolltape.files import write_text

BENCH_SCHEMA_VERSION = 1

BENCHMARKS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "pass1_overhead": bench_pass1_overhead,
    "pass1_video_requested": bench_pass1_video_requested,
    "mjwarp_pass1": bench_mjwarp_pass1,
    "pass1_workers": bench_pass1_workers,
    "ray_vs_local": bench_ray_vs_local,
    "pass2_throughput": bench_pass2_throughput,
    "render_quality": bench_render_quality,
    "pass2_workers": bench_pass2_workers,
    "pass2_segments": bench_pass2_segments,
    "render_rss": bench_render_rss,
    "batch_render": bench_batch_render,
    "gif_vs_mp4": bench_gif_vs_mp4,
    "report_build": bench_report_build,
    "suite_workers": bench_suite_workers,
    "suite_aggregation": bench_suite_aggregation,
    "pass1_vs_sb3_evaluate_policy": bench_pass1_vs_sb3_evaluate_policy,
    "end_to_end": bench_end_to_end,
    "small_job": bench_small_job,
    "served_step_overhead": bench_served_step_overhead,
    "served_eval_pass1": bench_served_eval_pass1,
    "served_vector": bench_served_vector,
    "served_concurrent_clients": bench_served_concurrent_clients,
    "served_policy_pass1": bench_served_policy_pass1,
    "training_tapes": bench_training_tapes,
    "training_background_video": bench_training_background_video,
    "record_tape_step_cost": bench_record_tape_step_cost,
    "export_obs": bench_export_obs,
    "export_camera": bench_export_camera,
    "export_rss": bench_export_rss,
    "atari_pass1": bench_atari_pass1,
    "atari_pass2": bench_atari_pass2,
    "branch_step_cost": bench_branch_step_cost,
}


def select(only: str | Sequence[str] | None) -> list[str]:
    """The benchmark names ``--only`` asks for (all when None), in their standard order."""
    if only is None:
        return list(BENCHMARKS)
    words = only.split(",") if isinstance(only, str) else list(only)
    wanted = [w.strip() for w in words if w.strip()]
    unknown = [w for w in wanted if w not in BENCHMARKS]
    if unknown or not wanted:
        raise UsageError(f"--only {','.join(unknown) or repr(only)} is not a benchmark; choose "
                         f"from {', '.join(BENCHMARKS)}.")
    return [name for name in BENCHMARKS if name in wanted]


def _machine() -> dict[str, Any]:
    from rolltape.envs.ids import package_version

    return {"platform": platform.platform(), "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "versions": {p: package_version(p) for p in (
                "gymnasium", "mujoco", "torch", "stable_baselines3", "av", "numpy")}}


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def run(only: str | Sequence[str] | None = None, *, quick: bool = False,
        out: str | Path = "bench-out", config: Config | None = None,
        log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the benchmarks, write ``OUT/bench.json`` and ``OUT/bench.png``, return the report.

    A benchmark that raises is kept as ``{"error": ...}`` (with ``ratio`` None) and the others
    still run. Targets are reported, never enforced: the caller decides what a miss means.
    """
    names = select(only)
    config = config or (QUICK if quick else FULL)
    log = log or (lambda msg: print(f"[bench] {msg}", file=sys.stderr, flush=True))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "schema_version": BENCH_SCHEMA_VERSION, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": list(sys.argv), "quick": config.quick, "config": asdict(config),
        "env_id": ENV_ID, "seed": SEED, "policy": POLICY_NOTE, "machine": _machine(),
        "loadavg_start": _loadavg(), "benchmarks": {}}
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="rolltape-bench-"))
    try:
        ctx = Context(config, work, log)
        for name in names:
            log(f"{name} ...")
            t0 = time.perf_counter()
            try:
                result = BENCHMARKS[name](ctx)
            except Exception as exc:  # keep going: one broken benchmark must not hide the rest
                result = {"title": name, "error": f"{type(exc).__name__}: {exc}",
                          "traceback": traceback.format_exc(), "ratio": None, "value": None,
                          "target": None, "passed": False, "gating": True, "notes": []}
            result["name"] = name
            result["seconds"] = time.perf_counter() - t0
            report["benchmarks"][name] = result
            log(f"{name}: {_verdict(result)} in {result['seconds']:.1f} s")
            _write_report(report, out / "bench.json")  # partial results survive an interruption
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["seconds"] = time.perf_counter() - started
    report["loadavg_end"] = _loadavg()
    report["chart"] = draw_chart(report, out / "bench.png")
    _write_report(report, out / "bench.json")
    return report


def _write_report(report: dict[str, Any], path: Path) -> None:
    """Write ``bench.json`` atomically; anything JSON cannot hold is written as its str()."""
    write_text(path, json.dumps(report, indent=2, allow_nan=False, default=str) + "\n")


def _verdict(r: dict[str, Any]) -> str:
    if r.get("error"):
        return "ERROR"
    if r["passed"]:
        return "PASS"
    return "FAIL" if r["gating"] else "below target (informational)"


def _fmt(r: dict[str, Any], key: str) -> str:
    value = r.get(key)
    if value is None:
        return "-"
    unit = r.get("unit") if key in ("value", "target") else "x"
    if unit == "MB":
        return f"{value:.1f} MB"
    if unit == "s":
        return f"{value:.2f} s"
    return f"{value:.3f}"


def format_table(report: dict[str, Any]) -> Any:
    """The report as a rich Table."""
    from rich.console import JustifyMethod
    from rich.table import Table

    quick = " (--quick: tiny sizes, numbers are not meaningful)" if report["quick"] else ""
    table = Table(title=f"rolltape bench{quick}")
    table.add_column("benchmark", no_wrap=True)  # a name is what a reader greps for: whole
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("baseline", "left"), ("measured", "left"), ("value", "right"), ("target", "right"),
        ("result", "left"))
    for col, justify in columns:
        table.add_column(col, justify=justify)
    for name, r in report["benchmarks"].items():
        target = "-" if r.get("target") is None else f"{r['op']} {_fmt(r, 'target')}"
        table.add_row(name, r.get("baseline", "-"), r.get("measured", r.get("error", "-")),
                      _fmt(r, "value"), target, _verdict(r))
    return table


def print_report(report: dict[str, Any], out: Path) -> None:
    """Print the table, each benchmark's notes and where the files went."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console.width = 120
    console.print(format_table(report))
    for name, r in report["benchmarks"].items():
        if r.get("error"):
            console.print(f"[red]{name}: {r['error']}[/red]", highlight=False)
        for note in dict.fromkeys(r.get("notes", [])):
            if note != POLICY_NOTE:
                console.print(f"{name}: {note}", highlight=False, markup=False)
    console.print(POLICY_NOTE, highlight=False)
    console.print(f"load average {report['loadavg_start']} -> {report['loadavg_end']} on "
                  f"{report['machine']['cpu_count']} CPUs; {report['seconds']:.0f} s in all",
                  highlight=False)
    chart = report.get("chart") or {}
    png = f", {out / 'bench.png'}" if chart.get("path") else f" (no chart: {chart.get('error')})"
    console.print(f"wrote {out / 'bench.json'}{png}", highlight=False)


def _headroom(r: dict[str, Any]) -> float:
    """How far a result is from its target, as a factor where 1 is exactly on target and
    more is better: value / target for ">=", target / value for "<=" (clipped to 1e-2..1e2,
    so a zero or negative difference still gets a bar)."""
    value, target = float(r["value"]), float(r["target"])
    if r["op"] == ">=":
        score = value / target if target > 0 else math.inf
    else:
        score = target / value if value > 0 else math.inf
    return min(max(score, 1e-2), 1e2)


def draw_chart(report: dict[str, Any], path: Path) -> dict[str, Any]:
    """One row per benchmark on one axis: its distance from its target as a factor (1 on the
    dashed line is exactly on target, right of it is met), labelled with the judged value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401  (matplotlib.ticker below)

    rows = [(n, r) for n, r in report["benchmarks"].items() if not r.get("error")]
    if not rows:
        return {"path": None, "error": "no benchmark finished"}
    rows = rows[::-1]  # the first benchmark at the top
    scores = [_headroom(r) for _, r in rows]
    height = 0.4 * len(rows) + 1.3
    fig, ax = plt.subplots(figsize=(11, height))
    # Names on the left, the bars in the middle, each row's value and verdict in a column
    # of its own on the right (so no label crosses the target line or a long bar).
    fig.subplots_adjust(left=0.2, right=0.63, top=1 - 0.55 / height, bottom=0.7 / height)
    colours = ["#2e7d32" if r["passed"] else "#c62828" if r["gating"] else "#9e9e9e"
               for _, r in rows]
    ax.barh(range(len(rows)), scores, color=colours, height=0.6)
    ax.set_xscale("log")
    ax.set_xlim(min(scores + [1.0]) / 1.6, max(scores + [1.0]) * 1.6)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.axvline(1.0, color="black", linestyle="--", linewidth=1)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([n for n, _ in rows], fontsize=9)
    for y, (name, r) in enumerate(rows):
        unit = "x" if r["unit"] == "x" else f" {r['unit']}"  # us, MB, s, episodes...
        value = _fmt(r, "value").replace(" MB", "").replace(" s", "")
        ax.text(1.02, y, f"{value}{unit}  (target {r['op']} {r['target']:g}{unit})  "
                f"{_verdict(r)}", va="center", fontsize=8, transform=ax.get_yaxis_transform())
    ax.set_xlabel("distance from target: value / target for >=, target / value for <= "
                  "(log; dashed = on target)", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_title("rolltape bench" + (" --quick (tiny sizes, not meaningful)"
                                     if report["quick"] else "")
                 + ":  green met, red missed, grey informational", fontsize=10, loc="left")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return {"path": path.name, "error": None}


def run_and_print(only: str | None = None, *, quick: bool = False, out: str | Path = "bench-out",
                  config: Config | None = None) -> int:
    """Run, print the table; exit status 1 when a benchmark could not run, else 0."""
    report = run(only, quick=quick, out=out, config=config)
    print_report(report, Path(out))
    return 1 if any(r.get("error") for r in report["benchmarks"].values()) else 0

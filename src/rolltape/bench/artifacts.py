"""What a run writes besides tapes: a gif against an mp4 of the same frames
(``gif_vs_mp4``) and the report page, against an absolute budget (``report_build``).

May import: bench.common; rolltape inside functions. Never: bench itself, a sibling module.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import rolltape.bench.common as common


def bench_gif_vs_mp4(ctx: common.Context) -> dict[str, Any]:
    """Encode the same real frames as mp4 and as gif with rolltape.encode.open_writer."""
    from rolltape.pass2.encode import open_writer, read_frames
    from rolltape.pass2.request import RenderRequest

    cfg = ctx.config
    tape = ctx.random_tape(cfg.gif_frames - 1)
    folder = ctx.dir("gif-frames")
    (result,), _, _ = common.timed_render([RenderRequest(
        str(tape), (str(folder / "frames") + "/",), width=cfg.width, height=cfg.height,
        overwrite=True)], ctx.backends(), workers=1, split=False)
    frames = list(read_frames(folder / "frames"))  # lossless PNGs, held in memory
    fps = result.fps
    times: dict[str, list[float]] = {"mp4": [], "gif": []}
    sizes: dict[str, int] = {}
    out = ctx.dir("gif-vs-mp4")
    for _, fmt in common.interleaved(cfg.gif_reps, ("mp4", "gif")):
        path = out / f"episode.{fmt}"
        started = time.perf_counter()
        with open_writer(path, fps=fps, overwrite=True) as writer:
            for frame in frames:
                writer.write(frame)
        times[fmt].append(time.perf_counter() - started)
        sizes[fmt] = path.stat().st_size
    mp4, gif = common.median(times["mp4"]), common.median(times["gif"])
    return common.result(
        title="gif vs mp4 encoding", ratio=gif / mp4, target=2.0, op="<=",
        ratio_of="median time to write the frames as gif / as mp4 (open_writer to close)",
        baseline=f"mp4 {mp4 * 1e3 / len(frames):.1f} ms/frame",
        measured=f"gif {gif * 1e3 / len(frames):.1f} ms/frame",
        raw={"frames": len(frames), "size": [cfg.width, cfg.height], "fps": fps,
             "reps": cfg.gif_reps, "mp4_s": times["mp4"], "gif_s": times["gif"],
             "bytes": sizes},
        notes=[f"{len(frames)} frames drawn once by rolltape.render (quality full, PNG "
               f"frames) at {cfg.width}x{cfg.height} and held in memory; files: mp4 "
               f"{sizes['mp4'] / 1e3:.0f} kB, gif {sizes['gif'] / 1e3:.0f} kB"])


REPORT_BUDGET_S = 10.0

# Its own script rather than run_child: the clock starts before ``import rolltape``, as for
# ``rolltape report RUN``.
def _build_report_twice(run_dir: str) -> dict[str, Any]:
    """(In a fresh interpreter.) Import rolltape's report and build it twice, timing each."""
    started = time.perf_counter()
    from rolltape.outputs.report import build_report

    imported = time.perf_counter()
    path = build_report(run_dir)
    first = time.perf_counter()
    build_report(run_dir)
    second = time.perf_counter()
    return {"import_s": imported - started, "first_s": first - imported,
            "second_s": second - first, "html_bytes": Path(path).stat().st_size}


def _time_report_build(run_dir: Path, cwd: Path) -> dict[str, Any]:
    """Import rolltape.report and build the report twice in a fresh interpreter."""
    child, wall = common.run_child(_build_report_twice, {"run_dir": str(run_dir)}, cwd)
    return {**child, "process_wall_s": wall}


def bench_report_build(ctx: common.Context) -> dict[str, Any]:
    """build_report on a run of many episodes with 3 videos; an absolute budget."""
    from rolltape.evaluation import evaluate

    cfg = ctx.config
    run = evaluate(common.ENV_ID, "random", episodes=cfg.report_episodes, max_episode_steps=50,
                   baseline="random", video=3, workers=2, report=False, quality="fast",
                   width=160, height=120, seed=common.SEED, out=ctx.dir("report-run"),
                   overwrite=True)
    child = _time_report_build(run.path, ctx.dir("report-build"))
    cold = child["import_s"] + child["first_s"]
    return common.result(
        title="report build", ratio=cold / REPORT_BUDGET_S, value=cold, unit="s",
        target=REPORT_BUDGET_S, op="<=",
        ratio_of="seconds of `import rolltape.report` + the first build_report in a fresh "
                 "interpreter / the 10 s budget (judged: the seconds; an ABSOLUTE budget, not a "
                 "ratio against a baseline)",
        baseline=f"budget {REPORT_BUDGET_S:.0f} s (absolute)",
        measured=f"build_report {cold:.2f} s",
        raw={"episodes": cfg.report_episodes, "steps": 50, "videos": len(run.results.videos),
             "size": [160, 120], **child},
        notes=[f"the run: {cfg.report_episodes} random-policy episodes x 50 steps + "
               f"{cfg.report_episodes} baseline episodes + 3 videos (160x120, quality fast); "
               f"timed in a fresh process: import rolltape.report {child['import_s']:.2f} s, "
               f"first build {child['first_s']:.2f} s, second {child['second_s']:.2f} s; "
               f"the whole process (interpreter start, two builds) {child['process_wall_s']:.2f} s",
               "an absolute budget (<= 10 s), not a ratio: it holds on any machine that is "
               "not far slower than this one"])

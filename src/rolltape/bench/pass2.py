"""Pass 2 on one render worker: frames/s against a bare ``env.render()`` loop
(``pass2_throughput``), per ``quality`` preset (``render_quality``), and the worker's
memory on a long episode (``render_rss``); and every tape at once on MuJoCo Warp against
render workers on every core (``batch_render``).

May import: bench.common; rolltape inside functions. Never: bench itself, a sibling module.
"""

from __future__ import annotations

import time
from typing import Any

import rolltape.bench.common as common


def bench_pass2_throughput(ctx: common.Context) -> dict[str, Any]:
    """rolltape.render frames/s vs a bare render+encode loop in a subprocess (A B B A ...)."""
    from rolltape.pass2.request import RenderRequest
    from rolltape.rendering import render

    cfg = ctx.config
    tape = ctx.random_tape(cfg.throughput_steps)
    backend = ctx.backend
    runs: dict[str, list[dict[str, Any]]] = {"rolltape": [], "bare": []}
    frames = 0
    for _, who in common.interleaved(cfg.throughput_reps, ("rolltape", "bare")):
        folder = ctx.dir(f"throughput-{who}")
        if who == "rolltape":
            started = time.perf_counter()
            with common.track_workers() as workers:
                result = render([RenderRequest(
                    str(tape), (str(folder / "rolltape.mp4"),), width=cfg.width,
                    height=cfg.height, overwrite=True)],
                    backends=(backend, "osmesa") if backend != "osmesa" else ("osmesa",))[0]
            wall = time.perf_counter() - started
            assert result is not None and result.verified
            backend, frames = result.backend or backend, result.frames
            cpu = sum(w["cpu_s"] or 0.0 for w in workers if w["target"] == "render_worker")
            runs[who].append({"wall_s": wall, "loop_s": result.seconds, "cpu_s": cpu,
                              "frames": result.frames, "backend": result.backend,
                              # a backend given up on (its time is in wall_s)
                              "failures": [list(f) for f in result.failures]})
        else:
            bare, wall = common.run_child(bare_render_child, {
                "tape": str(tape), "width": cfg.width, "height": cfg.height,
                "out": str(folder / "bare.mp4")}, folder, gl=backend)
            runs[who].append({"wall_s": wall, **bare})

    ours, theirs = runs["rolltape"], runs["bare"]
    fps, bare_fps = common.median_rate(ours), common.median_rate(theirs)
    inner, bare_inner = common.median_rate(ours, "loop_s"), common.median_rate(theirs, "loop_s")
    per_cpu, bare_per_cpu = common.median_rate(ours, "cpu_s"), common.median_rate(theirs, "cpu_s")
    return common.result(
        title="pass-2 throughput", ratio=fps / bare_fps, target=0.9, op=">=",
        ratio_of="median rolltape.render frames/s / median bare-loop frames/s (wall time of "
                 "each call, process start included on both sides)",
        baseline=f"bare loop {bare_fps:.1f} frames/s",
        measured=f"rolltape.render {fps:.1f} frames/s",
        raw={"frames": frames, "size": [cfg.width, cfg.height], "backend": backend,
             "reps": cfg.throughput_reps, "rolltape": runs["rolltape"], "bare": runs["bare"],
             "fps": fps, "bare_fps": bare_fps, "fps_in_worker": inner,
             "bare_fps_in_loop": bare_inner, "ratio_in_worker": inner / bare_inner,
             "frames_per_cpu_s": per_cpu, "bare_frames_per_cpu_s": bare_per_cpu,
             "cpu_ratio": per_cpu / bare_per_cpu},
        notes=[f"both draw {cfg.width}x{cfg.height} with MUJOCO_GL={backend} and write mp4 via "
               "rolltape.pass2.encode.open_writer; rolltape also verifies every step",
               f"in-process only (no start-up): rolltape {inner:.1f} vs bare {bare_inner:.1f} "
               f"frames/s, ratio {inner / bare_inner:.3f}; frames per CPU-second (all threads, "
               f"start-up included, less disturbed by other load): ratio "
               f"{per_cpu / bare_per_cpu:.3f}"])


def bare_render_child(tape: str, width: int, height: int, out: str) -> dict[str, Any]:
    """(In a child with MUJOCO_GL set.) gym.make + reset(seed) + step(actions) + render +
    streaming mp4, nothing else."""
    import resource

    import gymnasium as gym

    from rolltape.pass2.encode import open_writer
    from rolltape.tape import Tape

    recorded = Tape.load(tape)  # only its seed and actions are used
    actions, seed = recorded.actions, recorded.seed
    started = time.perf_counter()
    env: Any = gym.make(common.ENV_ID, render_mode="rgb_array", width=width, height=height,
                        max_episode_steps=len(actions))  # render(): an RGB frame each time
    env.reset(seed=seed)
    with open_writer(out, fps=env.metadata["render_fps"], overwrite=True) as writer:
        writer.write(env.render())
        for action in actions:
            env.step(action)
            writer.write(env.render())
    env.close()
    loop_s = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"loop_s": loop_s, "frames": writer.frames_written,
            "cpu_s": usage.ru_utime + usage.ru_stime}



def bench_render_rss(ctx: common.Context) -> dict[str, Any]:
    """Peak RSS of the render worker for a short and a long episode: memory must stay flat."""
    from rolltape.pass2.request import RenderRequest
    from rolltape.rendering import render

    cfg = ctx.config
    peaks: dict[str, float] = {}
    raw: dict[str, Any] = {"size": [cfg.width, cfg.height]}
    for name, steps in (("short", cfg.rss_short), ("long", cfg.rss_long)):
        tape = ctx.random_tape(steps)
        out = ctx.dir(f"rss-{name}") / f"{name}.mp4"
        started = time.perf_counter()
        with common.track_workers() as workers:
            result = render([RenderRequest(str(tape), (str(out),), width=cfg.width,
                                           height=cfg.height, overwrite=True)],
                            backends=ctx.backends())[0]
        assert result is not None
        drew = [w for w in workers if w["target"] == "render_worker"]
        if not drew or drew[-1]["peak_rss_kb"] is None:
            raise RuntimeError("could not read the render worker's VmHWM from /proc")
        peaks[name] = drew[-1]["peak_rss_kb"] / 1024
        raw[name] = {"steps": steps, "frames": result.frames, "backend": result.backend,
                     "peak_rss_mb": peaks[name], "seconds": time.perf_counter() - started,
                     "workers": len(drew)}
    diff = peaks["long"] - peaks["short"]
    return common.result(
        title="render worker memory", ratio=peaks["long"] / peaks["short"], value=diff,
        unit="MB", target=50.0, op="<=",
        ratio_of="peak RSS of the long render / the short render (judged: the difference, MB)",
        baseline=f"{cfg.rss_short + 1} frames: {peaks['short']:.0f} MB",
        measured=f"{cfg.rss_long + 1} frames: {peaks['long']:.0f} MB",
        raw=raw,
        notes=[f"peak RSS (VmHWM of the render worker, read from /proc by the parent) at "
               f"{cfg.width}x{cfg.height}: {peaks['short']:.0f} MB for {cfg.rss_short + 1} "
               f"frames, {peaks['long']:.0f} MB for {cfg.rss_long + 1}; a raw frame is "
               f"{cfg.width * cfg.height * 3 / 1e6:.2f} MB, so keeping frames would add "
               f"{(cfg.rss_long - cfg.rss_short) * cfg.width * cfg.height * 3 / 2**20:.0f} MB"])


PRESETS = ("full", "balanced", "fast")


def bench_render_quality(ctx: common.Context) -> dict[str, Any]:
    """frames/s of rolltape.render at each --quality preset vs a bare env.render() loop."""
    from rolltape.pass2.request import QUALITY, RenderRequest

    cfg = ctx.config
    tape = ctx.random_tape(cfg.quality_steps)
    backend = ctx.backend
    order = ["bare", *PRESETS]
    runs: dict[str, list[dict[str, float]]] = {who: [] for who in order}
    for _, who in common.interleaved(cfg.quality_reps, order):  # A B C D D C B A ...
        folder = ctx.dir(f"quality-{who}")
        if who == "bare":
            bare, wall = common.run_child(bare_render_child, {
                "tape": str(tape), "width": cfg.width, "height": cfg.height,
                "out": str(folder / "bare.mp4")}, folder, gl=backend)
            runs[who].append({"wall_s": wall, "loop_s": bare["loop_s"],
                              "cpu_s": bare["cpu_s"], "frames": bare["frames"]})
            continue
        (result,), wall, cpu = common.timed_render([RenderRequest(
            str(tape), (str(folder / f"{who}.mp4"),), width=cfg.width, height=cfg.height,
            quality=who, overwrite=True)], ctx.backends(), workers=1, split=False)
        backend = result.backend or backend
        runs[who].append({"wall_s": wall, "loop_s": result.seconds, "cpu_s": cpu,
                          "frames": result.frames})

    def fps(who: str, key: str = "wall_s") -> float:
        return common.median_rate(runs[who], key)

    bare_fps = fps("bare")
    per_preset: dict[str, dict[str, Any]] = {q: {"fps": fps(q), "fps_in_worker": fps(q, "loop_s"),
                      "frames_per_cpu_s": fps(q, "cpu_s"), "ratio_to_bare_full": fps(q) / bare_fps,
                      "settings": QUALITY[q]} for q in PRESETS}
    ratio = per_preset["fast"]["fps"] / per_preset["full"]["fps"]
    inner = per_preset["fast"]["fps_in_worker"] / per_preset["full"]["fps_in_worker"]
    # Judged inside the worker: the ~0.4 s process start is the same for every preset and
    # would only dilute what the presets change (the wall-time ratio is kept in raw).
    return common.result(
        title="render quality presets", ratio=inner, target=6.0, op=">=",
        ratio_of="median frames/s inside the render worker at quality=fast / at quality=full "
                 "(GL context, drawing, verifying, mp4; not the process start)",
        baseline=f"bare env.render() {bare_fps:.1f} frames/s (full)",
        measured=" / ".join(f"{q} {per_preset[q]['fps']:.1f}" for q in PRESETS) + " frames/s",
        raw={"frames": runs["full"][0]["frames"], "size": [cfg.width, cfg.height],
             "backend": backend, "reps": cfg.quality_reps, "bare_fps": bare_fps,
             "bare_fps_in_loop": fps("bare", "loop_s"), "presets": per_preset,
             "fast_over_full_in_worker": inner, "fast_over_full_wall": ratio, "runs": runs},
        notes=[f"{runs['full'][0]['frames']} frames at {cfg.width}x{cfg.height}, "
               f"MUJOCO_GL={backend}, one render worker, split=False; mp4 encoding on both "
               "sides (the bare loop is bare_render_child: gym.make(render_mode='rgb_array') + "
               "step the tape's actions + env.render() + open_writer, in a subprocess)",
               "frames/s vs bare full: " + ", ".join(
                   f"{q} {per_preset[q]['ratio_to_bare_full']:.2f}x" for q in PRESETS),
               f"in the worker only (no process start): full "
               f"{per_preset['full']['fps_in_worker']:.1f}, balanced "
               f"{per_preset['balanced']['fps_in_worker']:.1f}, fast "
               f"{per_preset['fast']['fps_in_worker']:.1f} frames/s; fast / full {inner:.2f}x"])


BATCH_SIZE = 128  # pixels a side: the target is set at 128x128 (robot-learning cameras)
BATCH_WORK = {True: (4, 20), False: (64, 300)}  # quick / full: tapes, steps each


def bench_batch_render(ctx: common.Context) -> dict[str, Any]:
    """Frames/s of ``render --renderer mjwarp`` (every tape at once on MuJoCo Warp) vs
    ``rolltape.render`` (OpenGL, one render worker per core) on the same tapes, both 128x128
    mp4, interleaved; gating only where Warp draws on a GPU (informational on the CPU)."""
    import os

    from rolltape.pass2.batch import BatchRequest, render_batch
    from rolltape.pass2.request import RenderRequest

    cfg = ctx.config
    n, steps = BATCH_WORK[cfg.quick]
    tapes = [str(t) for t in ctx.random_tapes(steps, n)]
    workers = os.cpu_count() or 1

    def batch(folder: Any) -> Any:
        return render_batch(BatchRequest(
            tapes=tuple(tapes), outputs=tuple((str(folder / f"{i}.mp4"),) for i in range(n)),
            width=BATCH_SIZE, height=BATCH_SIZE, overwrite=True))

    started = time.perf_counter()  # Warp compiles (or loads) its kernels: once, untimed
    warm = batch(ctx.dir("batch-warm"))
    warm_s = time.perf_counter() - started
    runs: dict[str, list[dict[str, Any]]] = {"batch": [], "classic": []}
    for _, who in common.interleaved(cfg.throughput_reps, ("batch", "classic")):
        folder = ctx.dir(f"batch-render-{who}")
        if who == "batch":
            started = time.perf_counter()
            done = batch(folder)
            runs[who].append({"wall_s": time.perf_counter() - started, "frames": done.frames,
                              "draw_s": done.draw_seconds})
        else:
            requests = [RenderRequest(t, (str(folder / f"{i}.mp4"),), width=BATCH_SIZE,
                                      height=BATCH_SIZE, overwrite=True)
                        for i, t in enumerate(tapes)]
            results, wall, cpu = common.timed_render(requests, ctx.backends(), workers)
            runs[who].append({"wall_s": wall, "cpu_s": cpu,
                              "frames": sum(r.frames for r in results),
                              "backend": results[0].backend})
    fps, classic_fps = common.median_rate(runs["batch"]), common.median_rate(runs["classic"])
    on_gpu = warm.device != "cpu"
    return common.result(
        title="batch render (MuJoCo Warp)", ratio=fps / classic_fps, target=10.0, op=">=",
        gating=on_gpu,
        ratio_of="median frames/s of render --renderer mjwarp / median frames/s of "
                 f"rolltape.render with {workers} render workers (one per core), wall time "
                 "of each call, writing mp4 on both sides",
        baseline=f"rolltape.render {classic_fps:.1f} frames/s ({workers} workers)",
        measured=f"MuJoCo Warp on {warm.device} {fps:.1f} frames/s",
        raw={"tapes": n, "steps": steps, "size": [BATCH_SIZE, BATCH_SIZE],
             "device": warm.device, "workers": workers, "warm_s": warm_s,
             "reps": cfg.throughput_reps, "batch": runs["batch"],
             "classic": runs["classic"], "fps": fps, "classic_fps": classic_fps,
             "draw_fps": common.median_rate(runs["batch"], "draw_s")},
        notes=[f"{n} random-policy HalfCheetah tapes of {steps} steps, drawn {BATCH_SIZE}x"
               f"{BATCH_SIZE} from the model camera 'track' (MuJoCo Warp: a ray tracer) and "
               "by env.render() (OpenGL, verified re-simulation): not the same pictures",
               f"Warp's first call (kernels compiled or loaded, untimed): {warm_s:.1f} s"
               + ("" if on_gpu else "; on the CPU this row is informational (issue 41's "
                  "target, >= 10x, is for a GPU)")])

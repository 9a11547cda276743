"""The tool verbs: ``suites``, ``doctor``, ``demo``, ``bench``, ``report``, ``view``.

May import: typer, rich, cli.show; each tool's work lazily (``--help`` stays fast).
Never: torch, GL at module level.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from rolltape.cli.show import err, out, print_run
from rolltape.errors import UsageError
from rolltape.pass2.backends import BACKENDS_HELP


def suites_(
    action: Optional[str] = typer.Argument(None, help="'install': build a benchmark's own "
                                                      "environment (see the listing)."),
    name: Optional[str] = typer.Argument(None, help="With install: the benchmark (metaworld, aloha)."),
) -> None:
    """List the built-in suites, their tasks, and what each needs installed; `suites install
    metaworld` builds Meta-World's own environment, which its suites run in."""
    from rich.markup import escape

    from rolltape.suites.builtin import listing

    if action is not None:
        from rolltape.suites import benchmarks

        if action != "install" or name is None:
            raise UsageError(f"`rolltape suites {action}` is not a command; use `rolltape suites` "
                             "to list them or `rolltape suites install NAME` (NAME: "
                             f"{', '.join(benchmarks.BENCHMARKS)}).")
        bench = benchmarks.benchmark(name)
        seconds = benchmarks.install(bench, log=lambda line: out.print(line, highlight=False,
                                                                       markup=False))
        where = benchmarks.home() / bench.name
        out.print(f"{bench.name}: ready in {where}" + (f" (built in {seconds:.0f} s)"
                  if seconds else " (already built)"), highlight=False, markup=False)
        return

    table = Table(title="built-in suites (rolltape eval --suite NAME)")
    for name in ("suite", "tasks", "success from", "needs", "installed"):
        table.add_column(name)
    missing = set()
    for entry in listing():
        table.add_row(*(escape(cell) for cell in (
                      entry["suite"], ", ".join(entry["tasks"]),
                      f"info['{entry['success_key']}']" if entry["success_key"] else
                      "none (returns only)", entry["needs"],
                      "yes" if entry["installed"] else "no")))
        if entry["install"]:
            missing.add(entry["install"])
    out.print(table)
    for line in sorted(missing):
        out.print(f"the suites not installed need: {line}", highlight=False, markup=False)
    out.print("your own suites: a YAML manifest (see README, 'Benchmark suites'): "
              "rolltape eval --suite my.yaml", highlight=False)



def doctor(
    backends: str = typer.Option("egl,osmesa,glfw", help=BACKENDS_HELP),
    timeout: float = typer.Option(60.0, help="Seconds before a probe counts as hung."),
) -> None:
    """Probe each GL backend in a subprocess: which work here, why the others fail."""
    from rolltape.pass2.backends import doctor as run_doctor
    from rolltape.pass2.backends import first_working, format_doctor

    results = run_doctor(backends, timeout=timeout)
    out.print(format_doctor(results), highlight=False)
    if first_working(results, [r.backend for r in results]) is None:
        raise typer.Exit(1)


def demo(
    episodes: int = typer.Option(10, "--episodes", "-n"),
    output: Path = typer.Option(Path("runs/demo"), "--out", "-o"),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Evaluate the bundled demo policy against a random baseline and render one verified video."""
    from rolltape.demo import demo_assets
    from rolltape.evaluation import evaluate

    assets = demo_assets()
    out.print(f"demo: {assets['env_id']} with the bundled PPO policy "
              f"({assets['timesteps']:,} training steps), {episodes} episodes vs random")
    run = evaluate(assets["env_id"], f"sb3:{assets['policy']}", vecnormalize=assets["vecnormalize"],
                   env_kwargs=assets["env_kwargs"], episodes=episodes, seed=1000,
                   baseline="random", video="best", out=output, viewer=True,
                   overwrite=True, show_progress=not quiet, command=sys.argv)
    print_run(run.results, run.path)


def bench(
    output: Path = typer.Option(Path("bench-out"), "--out", "-o", help="Folder for bench.json and bench.png."),
    quick: bool = typer.Option(False, help="Tiny sizes (seconds), for tests; numbers not meaningful."),
    only: Optional[str] = typer.Option(None, help="NAME[,NAME]: run only these benchmarks."),
    rss_frames: Optional[str] = typer.Option(
        None, metavar="SHORT,LONG",
        help="Steps of the short and long render_rss tapes (default 1000,5000; --quick 30,80)."),
) -> None:
    """Measure speed and memory targets as ratios against baselines run alongside."""
    from dataclasses import replace

    from rolltape.bench import FULL, QUICK, run_and_print

    config = QUICK if quick else FULL
    if rss_frames is not None:
        try:
            short, long = (int(n) for n in rss_frames.split(","))
        except ValueError:
            short = long = 0
        if short < 1 or long < 1:
            raise UsageError(f"--rss-frames must be two step counts SHORT,LONG such as "
                             f"1000,5000, got '{rss_frames}'.")
        config = replace(config, rss_short=short, rss_long=long)
    raise typer.Exit(run_and_print(only, quick=quick, out=output, config=config))


def report(
    run: Path = typer.Argument(..., help="Run folder written by `rolltape eval`."),
    output: Optional[Path] = typer.Option(None, "--out", "-o",
                                          help="Where to write the page (default RUN/report.html)."),
) -> None:
    """Write RUN/report.html: the run's numbers, plots, videos and provenance on one page."""
    from rolltape.outputs.report import build_report

    out.print(f"report written to {build_report(run, out=output)}", highlight=False,
              soft_wrap=True)


def view(
    run: Path = typer.Argument(..., help="Run folder written by `rolltape eval`."),
    port: int = typer.Option(0, help="Port to serve on (0: any free port)."),
    host: str = typer.Option("127.0.0.1", help="Address to serve on."),
    refresh: bool = typer.Option(False, help="Rebuild RUN/viewer even when it is up to date."),
) -> None:
    """Serve RUN's 3-D tape viewer (MuJoCo in WebAssembly) on localhost until Ctrl-C."""
    from rolltape.outputs.viewer import export_viewer, serve, viewer_is_current

    if refresh or not viewer_is_current(run):
        info = export_viewer(run, overwrite=True)
        if info["href"] is None:
            raise UsageError(info["note"])
        if info["note"]:
            err.print(f"note: {info['note']}", highlight=False, soft_wrap=True)
    server, url = serve(run, port=port, host=host)
    out.print(f"open {url}", highlight=False, soft_wrap=True)
    out.file.flush()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        out.print("stopped serving", highlight=False)
    finally:
        server.shutdown()
        server.server_close()


VERBS = {"suites": suites_, "doctor": doctor, "demo": demo, "bench": bench,
         "report": report, "view": view}

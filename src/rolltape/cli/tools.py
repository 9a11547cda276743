"""The tool verbs: ``suites``, ``doctor``, ``demo``, ``bench``, ``report``, ``view``.

Each tool's options are a small record here (or a shared group: demo's --episodes is
groups.Episodes', --out/--quiet groups.RunFolder's, doctor's --backends the render side's
ReplayOptions'); the verb builds it, calls the tool's API and prints.

May import: typer, rich, cli.options, cli.show, flags, groups, the render side's request
records; each tool's work lazily (``--help`` stays fast). Never: torch, GL at module level.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from rolltape.cli.options import config_values, options_of, takes
from rolltape.cli.show import out, print_run, say, warn
from rolltape.errors import UsageError
from rolltape.flags import OUTPUT, SCALE, above, at_least, check_flags, flag
from rolltape.groups import Episodes, RunArgument, RunFolder
from rolltape.pass2.request import ReplayOptions


@dataclass(frozen=True, kw_only=True)
class SuitesArgs:
    """``rolltape suites [install NAME]``: list the suites, or build a benchmark's venv."""

    action: str | None = flag(None, "'install': build a benchmark's own environment (see "
                              "the listing).", panel=OUTPUT, argument=True)
    name: str | None = flag(None, "With install: the benchmark (metaworld, aloha).",
                            panel=OUTPUT, argument=True)

    def __post_init__(self) -> None:
        if self.action is not None and (self.action != "install" or self.name is None):
            from rolltape.suites import benchmarks

            raise UsageError(f"`rolltape suites {self.action}` is not a command; use "
                             "`rolltape suites` to list them or `rolltape suites install "
                             f"NAME` (NAME: {', '.join(benchmarks.BENCHMARKS)}).")


@takes(options_of(SuitesArgs))
def suites_(**given: Any) -> None:
    """List the built-in suites, their tasks, and what each needs installed; `suites install
    metaworld` builds Meta-World's own environment, which its suites run in."""
    args = SuitesArgs(**config_values(SuitesArgs, given))
    if args.name is not None:
        from rolltape.suites import benchmarks

        bench = benchmarks.benchmark(args.name)
        seconds = benchmarks.install(bench, log=say)
        say(f"{bench.name}: ready in {benchmarks.home() / bench.name}" + (
            f" (built in {seconds:.0f} s)" if seconds else " (already built)"))
        return
    table, missing = _suites_table()
    out.print(table)
    for line in sorted(missing):
        say(f"the suites not installed need: {line}")
    say("your own suites: a YAML manifest (see README, 'Benchmark suites'): "
        "rolltape eval --suite my.yaml")


def _suites_table() -> tuple[Table, set[str]]:
    """The built-in suites as a table, and what the suites not installed need."""
    from rich.markup import escape

    from rolltape.suites.builtin import listing

    table = Table(title="built-in suites (rolltape eval --suite NAME)")
    for column in ("suite", "tasks", "success from", "needs", "installed"):
        table.add_column(column)
    missing = set()
    for entry in listing():
        table.add_row(*(escape(cell) for cell in (
                      entry["suite"], ", ".join(entry["tasks"]),
                      f"info['{entry['success_key']}']" if entry["success_key"] else
                      "none (returns only)", entry["needs"],
                      "yes" if entry["installed"] else "no")))
        if entry["install"]:
            missing.add(entry["install"])
    return table, missing


@dataclass(frozen=True, kw_only=True)
class DoctorOptions:
    """How long a probe may take (which backends: ``ReplayOptions.backends``, the one
    ``--backends`` and its one default, egl,osmesa: glfw needs a display, ask for it)."""

    timeout: float = flag(60.0, "Seconds before a probe counts as hung.", panel=SCALE,
                          rule=above(0))

    def __post_init__(self) -> None:
        check_flags(self)


@takes(options_of(ReplayOptions, only=("backends",)), options_of(DoctorOptions))
def doctor(**given: Any) -> None:
    """Probe each GL backend in a subprocess: which work here, why the others fail."""
    from rolltape.pass2.backends import doctor as run_doctor
    from rolltape.pass2.backends import first_working, format_doctor

    backends = ReplayOptions(**config_values(ReplayOptions, given)).backends
    options = DoctorOptions(**config_values(DoctorOptions, given))
    results = run_doctor(",".join(backends), timeout=options.timeout)
    out.print(format_doctor(results), highlight=False)
    if first_working(results, [r.backend for r in results]) is None:
        raise typer.Exit(1)


@takes(options_of(Episodes, only=("episodes",)), options_of(RunFolder, skip=("overwrite",)))
def demo(**given: Any) -> None:
    """Evaluate the bundled demo policy against a random baseline and render one verified video.

    --out: default runs/demo (replaced on each run)."""
    from rolltape.demo import demo_assets
    from rolltape.evaluation import evaluate

    episodes = Episodes(**config_values(Episodes, given)).episodes
    folder = RunFolder(**config_values(RunFolder, given))
    assets = demo_assets()
    say(f"demo: {assets['env_id']} with the bundled PPO policy "
        f"({assets['timesteps']:,} training steps), {episodes} episodes vs random")
    run = evaluate(assets["env_id"], f"sb3:{assets['policy']}", vecnormalize=assets["vecnormalize"],
                   env_kwargs=assets["env_kwargs"], episodes=episodes, seed=1000,
                   baseline="random", video="best", out=folder.out or "runs/demo", viewer=True,
                   overwrite=True, show_progress=not folder.quiet, command=sys.argv)
    print_run(run.results, run.path)


def _frames(text: str) -> tuple[int, int]:
    """--rss-frames SHORT,LONG as two step counts of at least 1."""
    try:
        short, long = (int(n) for n in text.split(","))
    except ValueError:
        short = long = 0
    if short < 1 or long < 1:
        raise UsageError(f"--rss-frames must be two step counts SHORT,LONG such as "
                         f"1000,5000, got '{text}'.")
    return short, long


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    """Which benchmarks, at which sizes (``out``: RunFolder's, default bench-out)."""

    quick: bool = flag(False, "Tiny sizes (seconds), for tests; numbers not meaningful.",
                       panel=SCALE)
    # Benchmark names (export's --only success is now --success-only: one meaning each).
    only: str | None = flag(None, "NAME[,NAME]: run only these benchmarks.", panel=SCALE)
    rss_frames: tuple[int, int] | None = flag(
        None, "Steps of the short and long render_rss tapes (default 1000,5000; --quick "
        "30,80).", panel=SCALE, cli_type=Optional[str], parse=_frames, metavar="SHORT,LONG")


@takes(options_of(BenchOptions), options_of(RunFolder, only=("out",)))
def bench(**given: Any) -> None:
    """Measure speed and memory targets as ratios against baselines run alongside.

    --out: the folder for bench.json and bench.png (default bench-out)."""
    from dataclasses import replace

    from rolltape.bench import FULL, QUICK, run_and_print

    options = BenchOptions(**config_values(BenchOptions, given))
    config = QUICK if options.quick else FULL
    if options.rss_frames is not None:
        short, long = options.rss_frames
        config = replace(config, rss_short=short, rss_long=long)
    out_dir = RunFolder(**config_values(RunFolder, given)).out or "bench-out"
    raise typer.Exit(run_and_print(options.only, quick=options.quick, out=Path(out_dir),
                                   config=config))


@takes(options_of(RunArgument), options_of(RunFolder, only=("out",)))
def report(**given: Any) -> None:
    """Write RUN/report.html: the run's numbers, plots, videos and provenance on one page.

    --out: where to write the page (default RUN/report.html)."""
    from rolltape.outputs.report import build_report

    run = Path(RunArgument(**config_values(RunArgument, given)).run)
    page = RunFolder(**config_values(RunFolder, given)).out
    say(f"report written to {build_report(run, out=None if page is None else Path(page))}")


@dataclass(frozen=True, kw_only=True)
class ViewOptions:
    """Where the viewer is served, and whether it is rebuilt."""

    port: int = flag(0, "Port to serve on (0: any free port).", panel=OUTPUT,
                     rule=at_least(0))
    host: str = flag("127.0.0.1", "Address to serve on.", panel=OUTPUT)
    refresh: bool = flag(False, "Rebuild RUN/viewer even when it is up to date.", panel=OUTPUT)

    def __post_init__(self) -> None:
        check_flags(self)


@takes(options_of(RunArgument), options_of(ViewOptions))
def view(**given: Any) -> None:
    """Serve RUN's 3-D tape viewer (MuJoCo in WebAssembly) on localhost until Ctrl-C."""
    from rolltape.outputs.viewer import export_viewer, serve, viewer_is_current

    options = ViewOptions(**config_values(ViewOptions, given))  # refused before any work
    run = Path(RunArgument(**config_values(RunArgument, given)).run)
    if options.refresh or not viewer_is_current(run):
        info = export_viewer(run, overwrite=True)
        if info["href"] is None:
            raise UsageError(info["note"])
        if info["note"]:
            warn(f"note: {info['note']}")
    server, url = serve(run, port=options.port, host=options.host)
    say(f"open {url}")
    out.file.flush()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        say("stopped serving")
    finally:
        server.shutdown()
        server.server_close()


VERBS = {"suites": suites_, "doctor": doctor, "demo": demo, "bench": bench,
         "report": report, "view": view}

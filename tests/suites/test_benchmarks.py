"""`rolltape suites install NAME`: bad names are one sentence and exit 2; a built venv is
kept (the build itself runs in scripts/setup.sh --test, as a user runs it)."""

from __future__ import annotations

from tests.conftest import run_cli

from rolltape.suites import benchmarks
from rolltape.suites.builtin import listing


def test_install_refuses_an_unknown_benchmark_and_an_unknown_action():
    done = run_cli("suites", "install", "libero")
    assert done.returncode == 2
    assert "There is no benchmark 'libero' to install" in done.stderr
    assert "metaworld" in done.stderr and "Traceback" not in done.stderr
    done = run_cli("suites", "build", "metaworld")
    assert done.returncode == 2 and "`rolltape suites build` is not a command" in done.stderr


def test_a_built_venv_is_kept_and_listed_as_installed():
    bench = benchmarks.METAWORLD
    assert benchmarks.installed(bench), f"build it: {bench.install} (scripts/setup.sh --test)"
    assert benchmarks.install(bench) == 0.0  # nothing rebuilt
    done = run_cli("suites")
    assert done.returncode == 0
    row = next(line for line in done.stdout.splitlines() if "metaworld_mt10" in line)
    assert row.rstrip("│ ").endswith("yes")
    entry = {e["suite"]: e for e in listing()}["metaworld_mt10"]
    assert "metaworld==3.0.0" in entry["needs"] and entry["install"] is None

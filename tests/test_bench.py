"""`rolltape bench --quick`: every benchmark runs and reports a ratio and a target.

Not a timed test: the ratios themselves are never asserted (they depend on the machine
and its load); only that each benchmark ran and wrote what the report promises.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rolltape import bench
from rolltape.errors import UsageError

from conftest import run_cli

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def quick_bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("bench") / "out"
    proc = run_cli("bench", "--quick", "--out", str(out), cwd=out.parent)
    return out, proc


def test_quick_bench_reports_every_benchmark(quick_bench: tuple[Path, object]) -> None:
    out, proc = quick_bench
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "bench.json").read_text())
    assert report["quick"] is True
    assert list(report["benchmarks"]) == list(bench.BENCHMARKS)
    for name, result in report["benchmarks"].items():
        assert "error" not in result, f"{name}: {result.get('error')}"
        for key in ("ratio", "value", "target"):
            assert isinstance(result[key], float) and math.isfinite(result[key]), (name, key)
        assert result["op"] in ("<=", ">=")
        assert isinstance(result["passed"], bool)
        assert result["raw"], name
        assert name in proc.stdout  # the table names every benchmark


def test_quick_bench_draws_a_png(quick_bench: tuple[Path, object]) -> None:
    pytest.importorskip("matplotlib")
    from PIL import Image

    out, _ = quick_bench
    png = out / "bench.png"
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    with Image.open(png) as image:
        image.verify()
    with Image.open(png) as image:
        assert image.format == "PNG" and min(image.size) > 100


def test_only_rejects_unknown_names_before_any_work(tmp_path: Path) -> None:
    proc = run_cli("bench", "--only", "pass1_overhead,nope", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "nope" in proc.stderr and "pass1_overhead" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_select_keeps_the_standard_order() -> None:
    assert bench.select(None) == list(bench.BENCHMARKS)
    assert bench.select("end_to_end, pass1_overhead") == ["pass1_overhead", "end_to_end"]
    with pytest.raises(UsageError):
        bench.select("")

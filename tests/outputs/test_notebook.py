"""report.ipynb: written from a real run, then executed headless by a real Jupyter kernel.

The kernel is this interpreter (a ``python3`` kernel spec written to a temporary
``JUPYTER_PATH``), so the test does not depend on what kernels the machine has registered.
The notebook is run as written, with pandas blocked (rolltape does not depend on it), and
again after the run folder has been moved.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import nbformat
import pytest

from conftest import execute
from rolltape import UsageError, evaluate
from rolltape.outputs.notebook import NOTEBOOK_NAME, Table, write_notebook

VIDEO = "videos/policy-0000.mp4"
pytestmark = pytest.mark.usefixtures("python3_kernel")  # from conftest


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run: 3 random HalfCheetah episodes of 30 steps, a baseline, one video."""
    out = tmp_path_factory.mktemp("nb") / "run"
    return evaluate("HalfCheetah-v5", "random", episodes=3, seed=1, baseline="random",
                    max_episode_steps=30, video=1, out=out).path


def outputs(nb: Any) -> list[dict[str, Any]]:
    return [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]


def text_of(nb: Any) -> str:
    """Everything the cells printed or displayed as text or HTML."""
    parts = []
    for o in outputs(nb):
        if o.output_type == "stream":
            parts.append(o.text)
        for mime in ("text/plain", "text/html"):
            parts.append(o.get("data", {}).get(mime, ""))
    return "\n".join(parts)


def mimes(nb: Any) -> list[str]:
    return [m for o in outputs(nb) for m in o.get("data", {})]


def assert_clean(nb: Any) -> None:
    errors = [f"{o.ename}: {o.evalue}" for o in outputs(nb) if o.output_type == "error"]
    assert not errors, errors
    warnings = [o.text for o in outputs(nb) if o.output_type == "stream" and o.name == "stderr"]
    assert not warnings, warnings


def test_notebook_runs_and_shows_the_run(run_dir: Path) -> None:
    results = json.loads((run_dir / "results.json").read_text())
    path = write_notebook(run_dir)
    assert path == run_dir / NOTEBOOK_NAME
    first = path.read_bytes()
    assert write_notebook(run_dir).read_bytes() == first  # same run, same notebook

    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    title, provenance = nb.cells[0].source, nb.cells[-1].source
    assert title.startswith("# HalfCheetah-v5: random policy")
    assert "3, reset with seeds 1..3" in title
    assert "## Provenance" in provenance and "gymnasium" in provenance
    assert "checkpoint sha256" in provenance
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")

    nb = execute(path, run_dir)
    assert_clean(nb)
    text = text_of(nb)
    mean = results["summary"]["policy"]["mean"]
    assert f"{mean:.2f} ± {results['summary']['policy']['std']:.2f}" in text
    assert "improvement over random on the same seeds: +0.00" in text
    assert f'<video src="{VIDEO}"' in text
    assert "verified: the replay earned exactly what pass 1 earned" in text
    charts = mimes(nb).count("image/png") + mimes(nb).count("image/svg+xml")
    assert charts == 3  # returns per episode, their distribution, cumulative reward


def test_moved_run_folder_still_runs(run_dir: Path, tmp_path: Path) -> None:
    first = tmp_path / "first" / "run"
    shutil.copytree(run_dir, first)
    write_notebook(first)
    moved = tmp_path / "elsewhere" / "renamed"
    moved.parent.mkdir()
    shutil.move(first, moved)  # where the notebook was written no longer exists

    nb = execute(moved / NOTEBOOK_NAME, moved)
    assert_clean(nb)
    text = text_of(nb)
    assert f"run folder {moved.resolve()}" in text
    assert f'<video src="{VIDEO}"' in text


def test_without_pandas_the_tables_are_plain(run_dir: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Only rolltape's own dependencies: pandas cannot be imported."""
    blocked = tmp_path / "blocked"
    (blocked / "pandas").mkdir(parents=True)
    (blocked / "pandas" / "__init__.py").write_text("raise ImportError('pandas is blocked')\n")
    # The kernel inherits it, and any PYTHONPATH that finds rolltape itself.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(blocked),
                                                                   os.environ.get("PYTHONPATH")])))

    nb = execute(write_notebook(run_dir), run_dir)
    assert_clean(nb)
    assert mimes(nb).count("image/png") == 3
    results = json.loads((run_dir / "results.json").read_text())
    assert f"{results['summary']['policy']['mean']:.2f}" in text_of(nb)


def test_a_folder_that_is_not_a_run_is_refused(tmp_path: Path, run_dir: Path) -> None:
    cases = {"no folder": tmp_path / "missing", "a file": tmp_path / "file.txt"}
    (tmp_path / "file.txt").write_text("x")
    empty = tmp_path / "empty"
    empty.mkdir()
    cases["empty"] = empty
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "results.json").write_text("{not json")
    (broken / "metadata.json").write_text("{}")
    cases["corrupt"] = broken
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    shutil.copy(run_dir / "results.json", unfinished)
    cases["no metadata"] = unfinished
    for what, folder in cases.items():
        with pytest.raises(UsageError) as err:
            write_notebook(folder)
        message = str(err.value)
        assert str(folder) in message and message.count(". ") == 0, (what, message)
        assert not (Path(folder) / NOTEBOOK_NAME).exists() if Path(folder).is_dir() else True

    write_notebook(run_dir)
    with pytest.raises(UsageError, match="already exists"):
        write_notebook(run_dir, overwrite=False)


def test_table() -> None:
    table = Table(["", "mean"], [["policy", "1.00"], ["<b>", None]], title="T")
    assert "&lt;b&gt;" in table._repr_html_() and "n/a" in str(table)
    assert str(table).splitlines()[3].endswith("1.00")

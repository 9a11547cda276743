"""``results.json`` is untrusted data too (a run folder from someone else, a hand edit): a
damaged value anywhere makes loading the run for a report or a comparison a UsageError in
one line, never another exception. Hypothesis puts arbitrary JSON values at arbitrary
places of a real run's results.json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rolltape import UsageError, evaluate
from rolltape.compare.report import comparison
from rolltape.compare.runs import LoadedRun

ENVS = Path(__file__).parent / "assets" / "suite_envs.py"
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=6)


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    text = f"s:\n  tasks:\n    a: {{env: \"{ENVS}:ComesAndGoes\"}}\n"
    manifest = tmp_path_factory.mktemp("fuzz") / "m.yaml"
    manifest.write_text(text)
    return evaluate(suite=str(manifest), episodes=3, baseline="random", report=False,
                    out=manifest.parent / "run").path


def _places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON value (keys of objects, indices of lists)."""
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _places(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _places(v, (*path, i))
    return out


def _put(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = data
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return data


@settings(max_examples=400, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_a_damaged_results_json_loads_or_is_one_line(run_folder: Path, data: Any,
                                                     tmp_path_factory: pytest.TempPathFactory
                                                     ) -> None:
    folder = tmp_path_factory.mktemp("case") / "run"
    shutil.copytree(run_folder, folder)
    results = json.loads((folder / "results.json").read_text())
    for _ in range(data.draw(st.integers(1, 3))):
        place = data.draw(st.sampled_from(_places(results)))
        results = _put(results, place, data.draw(VALUES))
    (folder / "results.json").write_text(json.dumps(results))
    try:  # loaded, checked against the other run and compared, or refused in one line
        comparison([LoadedRun.load(folder), LoadedRun.load(run_folder)])
    except UsageError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 600, str(exc)

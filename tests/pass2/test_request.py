"""The render side's request and result types (rolltape.pass2.request): records that refuse
what no replay can do when they are made, a result that is plain JSON, and a module that
whoever only asks for a replay can import without the worker's code."""

from __future__ import annotations

import ast
import math
import subprocess
import sys
from pathlib import Path

import pytest

from rolltape.errors import UsageError
from rolltape.pass2.request import Divergence, RenderOptions, RenderRequest, RenderResult

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "rolltape"


@pytest.mark.parametrize(("options", "said"), [
    ({"mode": "draw"}, "--mode"), ({"quality": "ultra"}, "--quality"),
    ({"rtol": math.nan}, "--rtol must be a finite number"), ({"atol": -1.0}, "--atol"),
    ({"layout": "diagonal"}, "layout")])
def test_a_request_refuses_on_construction_what_no_replay_can_do(options: dict[str, object],
                                                                  said: str) -> None:
    with pytest.raises(UsageError, match=said):
        RenderRequest("t.npz", ("t.mp4",), **options)  # type: ignore[arg-type]


def test_a_request_carries_the_options_it_was_made_with() -> None:
    options = RenderOptions(width=64, height=48, quality="fast", rtol=1e-6)
    request = RenderRequest("t.npz", **options.render_options())
    assert request.render_options() == options.render_options()
    assert (request.width, request.quality, request.outputs) == (64, "fast", ())


def test_a_result_is_plain_json_with_its_divergence_said() -> None:
    import numpy as np

    result = RenderResult("t.npz", ("t.mp4",), "resim", "egl", 3, 4, False,
                          Divergence(2, "reward", 1.0, np.float32(1.5), 0.5),
                          replay_return=math.nan, seconds=0.1, rewards=(1.0, 1.0, 1.5))
    row = result.to_dict()
    assert "rewards" not in row and row["replay_return"] is None  # NaN is null in JSON
    assert row["divergence"] == {"step": 2, "field": "reward", "expected": 1.0, "got": 1.5,
                                 "diff": 0.5}
    assert row["divergence_text"] == ("step 2: reward was 1.0 in pass 1, np.float32(1.5) on "
                                      "replay (difference 0.5)")


def test_importing_the_types_loads_no_worker_code_and_outside_pass2_only_the_worker_is_taken(
        ) -> None:
    code = ("import sys, rolltape.pass2.request; "
            "print(sorted(m for m in sys.modules if m.startswith(('rolltape', 'mujoco'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, timeout=60).stdout
    assert "rolltape.pass2.request" in loaded
    assert "rolltape.pass2.replay" not in loaded and "mujoco" not in loaded
    # Outside the render side, replay.py is imported only for its entry points: the
    # worker's, and verify's batch of MuJoCo Warp tapes (which needs no worker: no GL).
    taken = {alias.name for path in PACKAGE.rglob("*.py") if path.parent.name != "pass2"
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.ImportFrom) and node.module == "rolltape.pass2.replay"
             for alias in node.names}
    assert taken == {"render_worker", "verify_mjwarp"}

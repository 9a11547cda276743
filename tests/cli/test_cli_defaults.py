"""Options that several verbs share agree on their default (issue 40): every verb that starts
render processes starts one per CPU core unless told otherwise (render and verify started
one), and a long video drawn by `rolltape render` is then split across them as eval's is."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import typer.main

from conftest import run_cli
from rolltape.cli import app
from rolltape.executors.launch import per_core


def option_default(verb: str, name: str) -> Any:
    """The default the parser gives ``--name`` of ``verb`` (the real command, as built)."""
    group: Any = typer.main.get_command(app)  # typer's own click group
    command = group.get_command(group.context_class(group), verb)
    assert command is not None, verb
    [option] = [p for p in command.params if f"--{name}" in getattr(p, "opts", ())]
    return option.default


#: The flags that count render processes, by verb (eval's --workers counts pass-1 ones).
RENDER_PROCESSES = {"eval": "render-workers", "export": "workers", "render": "workers",
                    "verify": "workers"}


@pytest.mark.parametrize("verb", ["render", "verify"])
def test_render_processes_default_to_one_per_core_as_eval_and_export(verb: str) -> None:
    cores = os.cpu_count() or 1
    assert {v: per_core(option_default(v, n) or 0) for v, n in RENDER_PROCESSES.items()} == \
        dict.fromkeys(RENDER_PROCESSES, cores)
    assert option_default(verb, "workers") != 1  # the drifted default


def test_render_by_default_splits_a_long_video_across_the_cores(tmp_path: Path) -> None:
    from rolltape.envs.build import make_env
    from rolltape.envs.ids import env_spec
    from rolltape.pass1.rollout import record_episode
    from rolltape.policies import load_policy
    from rolltape.tape import Tape

    spec = env_spec("HalfCheetah-v5", max_episode_steps=100)  # never ends early: 101 frames
    env = make_env(spec)
    fields = record_episode(env, load_policy("random", env), seed=4)
    env.close()
    Tape(env=spec, **fields).save(tmp_path / "t.npz")
    out = tmp_path / "t.mp4"
    proc = run_cli("render", str(tmp_path / "t.npz"), "--out", str(out), "--width", "64",
                   "--height", "48", "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.with_name("t.mp4.metadata.json").read_text())["result"]
    # Segments of at least 50 frames, one per core: two here on two cores or more (one
    # worker, the old default, drew one).
    assert result["segments"] == min(os.cpu_count() or 1, 2) and result["verified"]
    assert result["frames"] == 101


#: Options shared by several verbs whose defaults had drifted apart (issue 40), and the one
#: default each now has in every verb that takes it.
SHARED = {"format": None,  # --out's suffix, else mp4 (eval said mp4, render unset)
          "episodes": 10,  # parity played 5
          "width": None, "height": None,  # the env's own size (parity drew 480x480)
          "deterministic": None,  # the policy's own default (serve-policy said True)
          "backends": "egl,osmesa",  # doctor probed glfw too
          "out": None, "overwrite": False, "quiet": False}


@pytest.mark.parametrize("name", sorted(SHARED))
def test_an_option_several_verbs_take_has_one_default(name: str) -> None:
    group: Any = typer.main.get_command(app)
    verbs = [v for v in group.commands
             if any(f"--{name}" in getattr(p, "opts", ()) for p in group.commands[v].params)]
    assert len(verbs) >= 2, verbs  # really shared
    defaults = {v: option_default(v, name) for v in verbs}
    assert defaults == dict.fromkeys(verbs, SHARED[name])

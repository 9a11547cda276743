"""Issue 34, item 17: sentences of the command line that said something untrue or ended
badly: click's "Did you mean 'eval'?" was followed by a stray ";", and a `rolltape view`
stopped by SIGTERM (its ordinary end) was told to "rerun it to finish", and
Gymnasium-Robotics' notice about its Dense Adroit envs was printed by every process of a
maze suite."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rolltape.cli import interrupted_line
from rolltape.errors import Interrupted


def test_a_mistyped_verb_gets_one_clean_sentence() -> None:
    done = subprocess.run([sys.executable, "-m", "rolltape.cli", "evl"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    line = done.stderr.strip()
    assert "Did you mean 'eval'? Try `rolltape --help`." in line and "?;" not in line, line


def test_a_stopped_server_verb_is_not_told_to_rerun() -> None:
    for verb in ("view", "serve"):
        said = interrupted_line(Interrupted(15), [verb, "runs/x"])
        assert said.startswith("Interrupted (SIGTERM)") and "rerun" not in said, said
    assert "rerun it to finish" in interrupted_line(Interrupted(15), ["eval", "--env", "X"])


@pytest.mark.parametrize(("env_id", "noticed"), [
    ("gymnasium_robotics:PointMaze_UMaze-v3", False),
    ("gymnasium_robotics:AdroitHandDoor-v1", True)])
def test_the_dense_adroit_notice_is_printed_only_for_the_envs_it_names(
        env_id: str, noticed: bool) -> None:
    code = ("from rolltape.envs.build import make_env; "
            "from rolltape.envs.ids import env_spec; "
            f"make_env(env_spec({env_id!r})).close()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert ("AdroitHandRelocateDense-v1" in done.stderr) == noticed, done.stderr[-500:]


def test_train_recipes_help_is_whole_and_shows_its_defaults() -> None:
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "train_recipes.py"
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True,
                          text=True, timeout=60)
    said = " ".join(done.stdout.split())
    assert done.returncode == 0 and "compares (training runs per recipe" in said, said
    assert "(default: 3)" in said and "(default: 4096)" in said and "None" not in said, said

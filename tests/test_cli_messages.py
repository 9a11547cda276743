"""Issue 34, item 17: sentences of the command line that said something untrue or ended
badly: click's "Did you mean 'eval'?" was followed by a stray ";", and a `rolltape view`
stopped by SIGTERM (its ordinary end) was told to "rerun it to finish"."""

from __future__ import annotations

import subprocess
import sys

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


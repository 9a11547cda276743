"""``rolltape.sb3``, the name users import the SB3 callback by: the same objects as
rolltape.training.sb3, whichever way they are reached first, and only on use (the SB3
training itself: tests/training/test_training.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("first", ["from", "attribute"])
def test_the_callback_imports_as_sb3_s_own_do(first: str) -> None:
    """``from rolltape.sb3 import TapeCallback`` and ``rolltape.sb3.TapeCallback``, in
    either order, are the one class."""
    import_from = "from rolltape.sb3 import TapeCallback, make_recorded_vec_env"
    steps = [import_from, "import rolltape; A = rolltape.sb3.TapeCallback"]
    code = "; ".join(steps if first == "from" else steps[::-1]) + (
        "; import rolltape.training.sb3 as t; "
        "print(A is TapeCallback is t.TapeCallback, callable(make_recorded_vec_env))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["True", "True"]


def test_importing_rolltape_loads_neither_the_module_nor_sb3() -> None:
    code = ("import sys, rolltape; print('rolltape.sb3' in sys.modules, "
            "'stable_baselines3' in sys.modules, 'sb3' in rolltape.__all__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "False", "True"]


def test_it_names_exactly_what_it_imports() -> None:
    import rolltape.sb3 as face
    import rolltape.training.sb3 as code

    assert face.__all__ == ["TapeCallback", "every", "make_recorded_vec_env"]
    assert all(getattr(face, name) is getattr(code, name) for name in face.__all__)

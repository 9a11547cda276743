"""``rolltape.sb3``, the name users import the SB3 callback by: the same objects as
rolltape.training.sb3, loaded only on use. (The callback in a real SB3 training run, and
its import by either name in a fresh interpreter: tests/training/.)"""

from __future__ import annotations

import subprocess
import sys


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


def test_the_package_face_gives_the_module_itself() -> None:
    import rolltape
    import rolltape.sb3

    assert rolltape.sb3 is sys.modules["rolltape.sb3"]
    assert rolltape.sb3.TapeCallback.__module__ == "rolltape.training.sb3"

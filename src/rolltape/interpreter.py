"""The one way rolltape starts a fresh Python interpreter: workers, GL probes, the viewer's
env probe and benchmark children all run ``python -c PROGRAM ARGS`` built here.

A fresh interpreter, never a fork: a forked child would inherit the parent's modules and any
GL or torch thread state, which is what isolation must avoid, and its environment
(``MUJOCO_GL``...) is fixed before it starts. ``python -c`` puts the current folder first
on ``sys.path``; unless the caller keeps it (the user's own ``file.py:attr`` may live
there), the program first drops it, before any import (even the standard library's, which
a file there would shadow).

May import: the standard library only (every side of the package uses it).

>>> python_command("print(1)", "a")[2:]
["import sys\\nif sys.path[:1] == ['']: del sys.path[0]\\nprint(1)", 'a']
>>> python_command("print(1)", keep_cwd=True)[2]
'print(1)'
"""

from __future__ import annotations

import sys

#: The variables that decide a process's OpenGL backend: MuJoCo reads MUJOCO_GL once, at
#: import, and PyOpenGL PYOPENGL_PLATFORM once, at first use. Pass 1 runs without them.
GL_VARIABLES = ("MUJOCO_GL", "PYOPENGL_PLATFORM")
NO_GL: dict[str, str | None] = dict.fromkeys(GL_VARIABLES)  # unset in a child's environment

_DROP_CWD = "import sys\nif sys.path[:1] == ['']: del sys.path[0]\n"


def python_command(program: str, *argv: str, keep_cwd: bool = False) -> list[str]:
    """The command line that runs ``program`` (Python source) in a new interpreter of this
    Python, with ``argv`` as its ``sys.argv[1:]``."""
    return [sys.executable, "-c", program if keep_cwd else _DROP_CWD + program, *argv]

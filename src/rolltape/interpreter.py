"""The one way rolltape starts a fresh Python interpreter: workers, GL probes, the viewer's
env probe and benchmark children all run ``python -c PROGRAM ARGS`` built here.

A fresh interpreter, never a fork: a forked child would inherit the parent's modules and any
GL or torch thread state, which is what isolation must avoid, and its environment
(``MUJOCO_GL``...) is fixed before it starts. ``python -c`` puts the current folder first
on ``sys.path``; unless the caller keeps it (the user's own ``file.py:attr`` may live
there), the program first drops it, before any import (even the standard library's, which
a file there would shadow).

No child outlives the process that built its command: the program's first lines (before
any heavy import) ask Linux to SIGKILL it when its parent dies (``PR_SET_PDEATHSIG``),
exit at once if the parent is already gone, and watch ``os.getppid()`` on a thread (the
fallback where prctl is missing, and for a parent thread's death, see
:mod:`rolltape.executors.launch`). A SIGKILLed orchestrator cannot stop its workers itself.

May import: the standard library only (every side of the package uses it).

>>> python_command("print(1)", "a")[2].endswith("print(1)"), python_command("print(1)", "a")[3:]
(True, ['a'])
>>> python_command("print(1)", keep_cwd=True, guard=False)[2]
'print(1)'
"""

from __future__ import annotations

import os
import sys

#: The variables that decide a process's OpenGL backend: MuJoCo reads MUJOCO_GL once, at
#: import, and PyOpenGL PYOPENGL_PLATFORM once, at first use. Pass 1 runs without them.
GL_VARIABLES = ("MUJOCO_GL", "PYOPENGL_PLATFORM")
NO_GL: dict[str, str | None] = dict.fromkeys(GL_VARIABLES)  # unset in a child's environment

_DROP_CWD = "import sys\nif sys.path[:1] == ['']: del sys.path[0]\n"

# Seconds between the fallback's looks at the parent: a worker notices within about this.
ORPHAN_POLL_S = 0.5

# {parent} is the pid of the process that starts the child. prctl(1, 9) is
# prctl(PR_SET_PDEATHSIG, SIGKILL): SIGKILL, since a worker may be deep in GL or torch code
# that a catchable signal would wait for; what it was writing is staging that --resume
# redoes. The getppid check after it closes the race of a parent that died before it.
_ORPHAN_GUARD = """\
def _rolltape_orphan_guard(parent):
    import os, sys, threading, time
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)
        except Exception:
            pass
    def watch():
        while os.getppid() == parent:
            time.sleep({poll})
        os._exit(1)
    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=watch, name="rolltape-orphan-guard", daemon=True).start()
_rolltape_orphan_guard({parent})
del _rolltape_orphan_guard
"""


def python_command(program: str, *argv: str, keep_cwd: bool = False,
                   guard: bool = True) -> list[str]:
    """The command line that runs ``program`` (Python source) in a new interpreter of this
    Python, with ``argv`` as its ``sys.argv[1:]``; with ``guard`` (the default) the child
    exits when this process dies. Build it in the process that starts the child."""
    prelude = "" if keep_cwd else _DROP_CWD
    if guard:
        prelude += _ORPHAN_GUARD.format(parent=os.getpid(), poll=ORPHAN_POLL_S)
    return [sys.executable, "-c", prelude + program, *argv]

"""README's module map ("How the code is laid out") names every module of the package and
no file that is gone: a new module, a rename or a deletion updates the map with it.

How a name in the map is read: ``folder/name.py`` is a path from the package root; a bare
``name.py`` on a folder's lines (from its ``├─ folder/`` line to the next) is that folder's
module, else a module at the package root (the root's modules sit on the orchestrator's and
the ``shared:`` lines)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "rolltape"


def the_map(readme: str) -> str:
    """The first code block of the README's layout section."""
    section = readme.split("## How the code is laid out", 1)[1]
    return section.split("```", 2)[1]


def named_modules(block: str) -> tuple[set[str], set[str]]:
    """(modules the map names, names it gives that are no module), as paths from the
    package root."""
    named, gone = set(), set()
    folder = ""
    for line in block.splitlines():
        opens = re.match(r"^\s*[├└]─\s*(\w+)/", line)
        if opens:
            folder = opens.group(1)
        elif line.startswith("shared:"):
            folder = ""
        for name in re.findall(r"[\w/]*\w\.py\b", line):
            tried = [name] if "/" in name else [f"{folder}/{name}" if folder else name, name]
            found = next((t for t in tried if (PACKAGE / t).is_file()), None)
            if found is None:
                gone.add(tried[0])
            else:
                named.add(found)
    return named, gone


def test_the_module_map_names_every_module_and_nothing_that_is_gone() -> None:
    named, gone = named_modules(the_map((ROOT / "README.md").read_text()))
    modules = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
               if p.stem not in ("__init__", "__main__")}
    assert len(named) > 50 and "pass2/replay.py" in named  # the map is really read
    missing = sorted(modules - named)
    assert not missing, f"README's module map ('How the code is laid out') leaves out {missing}"
    assert not gone, f"README's module map names files that do not exist: {sorted(gone)}"


def test_a_name_is_read_in_its_folder_then_at_the_root() -> None:
    block = ("config.py\n  ├─ pass2/       replay.py, nowhere.py\n  │   policies.py's plays,"
             " training/sb3.py\nshared: record.py\n")
    named, gone = named_modules(block)
    assert named == {"config.py", "pass2/replay.py", "policies.py", "training/sb3.py",
                     "record.py"}
    assert gone == {"pass2/nowhere.py"}

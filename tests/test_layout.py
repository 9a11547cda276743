"""The layout is the architecture: no import cycles, and a render worker cannot reach the
policy side, torch, SB3, the orchestrator or an executor (from the source and at run time).

The import graph is read from the source with ``ast``: every ``import`` and ``from ...
import`` of a rolltape module, at module level or inside a function (a worker runs the
functions too, so a lazy import counts).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np

from rolltape import RenderRequest, Tape, render
from rolltape.pass2.replay import FORBIDDEN

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "rolltape"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str) -> set[str]:
    """Every module ``name`` imports (rolltape modules resolved, others by top name)."""
    tree = ast.parse(MODULES[name].read_text())
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([node.module] if node.module else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES)
    return {m if m.startswith("rolltape") else m.partition(".")[0] for m in found} - {name}


GRAPH = {name: {m for m in imports_of(name) if m in MODULES} for name in MODULES}


def closure(start: str) -> set[str]:
    """Every module importing ``start`` can lead to, rolltape's parent packages included."""
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in MODULES:  # a third-party module is kept by name, not followed
            parents = [".".join(name.split(".")[:k]) for k in range(1, name.count(".") + 1)]
            todo.extend(imports_of(name) | set(parents))
    return seen


def test_no_import_cycles():
    cycles = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done

    def visit(name: str, stack: list[str]) -> None:
        state[name] = 1
        for dep in sorted(GRAPH[name]):
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, stack + [dep])
        state[name] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_render_worker_cannot_reach_policy_code_statically():
    reached = closure("rolltape.pass2.replay")
    bad = sorted(m for m in reached
                 if any(m == f or m.startswith(f + ".") for f in FORBIDDEN + ("rolltape.outputs",)))
    assert bad == []
    assert "rolltape.pass2.backends" in reached  # the closure is really followed


ABOVE_THE_WORK = ("rolltape.executors", "rolltape.evaluation", "rolltape.config",
                  "rolltape.videos", "rolltape.rendering", "rolltape.cli", "rolltape.parity")


def test_the_work_never_imports_an_executor():
    """Executors sit above the work: pass 1, pass 2 and outputs do not call up into them."""
    work = [m for m in MODULES if m.startswith(("rolltape.pass1", "rolltape.pass2",
                                                "rolltape.outputs"))]
    upward = sorted((m, dep) for m in work for dep in GRAPH[m]
                    if dep.startswith(ABOVE_THE_WORK))
    assert upward == []


def test_the_core_and_the_wire_never_call_up_into_the_control_room():
    """The server's wire, suites, envs, tapes and policies are used by the orchestrator and
    use none of it (nor an executor)."""
    lower = [m for m in MODULES if m.startswith(("rolltape.server", "rolltape.suites",
                                                 "rolltape.envs", "rolltape.tape",
                                                 "rolltape.policies", "rolltape.address"))]
    assert len(lower) > 8  # really found
    upward = sorted((m, d) for m in lower for d in GRAPH[m] if d.startswith(ABOVE_THE_WORK))
    assert upward == []


def test_no_two_folders_import_each_other():
    """Folder-level arrows (a top-level module counts as a folder of its own) go one way:
    the folders form no cycle, so each can be read knowing only the ones below it."""
    def unit(m: str) -> str:
        return ".".join(m.split(".")[:2])

    arrows = {(unit(m), unit(d)) for m in MODULES for d in GRAPH[m]
              if unit(m) != unit(d) and unit(d) != "rolltape"}
    below: dict[str, set[str]] = {}
    for a, b in arrows:
        below.setdefault(a, set()).add(b)

    def reaches(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in below.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    back = sorted((a, b) for a, b in arrows if a in reaches(b))
    assert ("rolltape.pass1", "rolltape.server") in arrows  # the graph is really read
    assert back == [], f"folders that import each other (directly or around): {back}"


def test_executors_know_no_job_s_insides():
    """An executor runs whatever function it is handed: it imports none of the work."""
    executors = [m for m in MODULES if m.startswith("rolltape.executors")]
    assert sorted((m, d) for m in executors for d in GRAPH[m]
                  if d.startswith(("rolltape.pass1", "rolltape.pass2", "rolltape.policies",
                                   "rolltape.outputs", "rolltape.envs", "rolltape.tape"))) == []


def test_render_side_never_imports_policy_side_and_the_reverse():
    pass2 = [m for m in MODULES if m.startswith("rolltape.pass2")]
    pass1 = [m for m in MODULES if m.startswith("rolltape.pass1")]
    assert sorted((m, d) for m in pass2 for d in GRAPH[m]
                  if d.startswith(("rolltape.pass1", "rolltape.policies"))) == []
    assert sorted((m, d) for m in pass1 for d in GRAPH[m] if d.startswith("rolltape.pass2")) == []



def test_the_env_server_never_reaches_policy_code():
    """The server steps envs for any client; it imports no policy, pass 1 or torch. Only
    parity (a policy-side tool run in its own worker) and the CLI verbs do."""
    for module in ("rolltape.server.server", "rolltape.server.client",
                   "rolltape.server.protocol"):
        reached = closure(module)
        assert not any(m == f or m.startswith(f + ".") for m in reached
                       for f in ("rolltape.policies", "rolltape.pass1", "torch",
                                 "stable_baselines3", "rolltape.executors")), module
    assert "rolltape.envs" in closure("rolltape.server.server")  # really followed


def test_bench_is_reached_only_through_the_cli_verb():
    """The benchmarks may import anything of rolltape; only `rolltape bench` imports them,
    and each benchmark module shares rolltape.bench.common, never a sibling's code."""
    importers = sorted(m for m in MODULES if not m.startswith("rolltape.bench")
                       and any(d.startswith("rolltape.bench") for d in GRAPH[m]))
    assert importers == ["rolltape.cli.tools"]
    siblings = sorted((m, d) for m in MODULES if m.startswith("rolltape.bench.")
                      for d in GRAPH[m]
                      if d.startswith("rolltape.bench") and d != "rolltape.bench.common")
    assert siblings == []

def test_a_running_render_worker_has_loaded_nothing_forbidden(tmp_path):
    """At run time too: a real worker draws a real MuJoCo tape and lists what it imported."""
    from rolltape.envs.build import make_env
    from rolltape.envs.ids import env_spec
    from rolltape.pass1.rollout import record_episode
    from rolltape.policies import load_policy

    env = make_env(env_spec("Hopper-v5", max_episode_steps=5))
    fields = record_episode(env, load_policy("random", env), seed=3)
    env.close()
    tape = Tape(env=env_spec("Hopper-v5", max_episode_steps=5), **fields)
    tape.save(tmp_path / "t.npz")
    [result] = render([RenderRequest(str(tmp_path / "t.npz"), (str(tmp_path / "t.gif"),))])
    assert result.verified and result.frames == 6
    assert result.forbidden_loaded == () and not result.torch_loaded
    assert "torch" in sys.modules or True  # this test process may have torch; the worker not


def test_the_package_face_is_lazy():
    import subprocess

    code = ("import sys, rolltape.pass2.replay; "
            "print(sorted(m for m in sys.modules if m.startswith('rolltape')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "rolltape.evaluation" not in out and "rolltape.policies" not in out
    assert np.all([m in out for m in ("rolltape.pass2.replay", "rolltape.tape")])


def test_no_module_hides_a_name_of_the_package_face():
    """Importing a submodule sets it as an attribute of the package: one named like a
    function of the face (``rolltape.evaluate``) would replace that function."""
    import rolltape

    hidden = sorted(name for name in rolltape.__all__ if f"rolltape.{name}" in MODULES
                    and rolltape._MODULES.get(name) != f"rolltape.{name}")  # sb3: itself
    assert hidden == []
    import rolltape.evaluation  # noqa: F401

    assert callable(rolltape.evaluate) and callable(rolltape.render)


def test_every_module_has_a_test_file_of_its_own_in_the_mirrored_folder():
    """``rolltape/<folder>/<stem>.py`` is tested by ``tests/<folder>/test_<stem>*.py`` (or
    ``test_<folder>_<stem>*.py`` where a test file's name would repeat: pytest imports test
    files by their base name)."""
    tests = Path(__file__).resolve().parent
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.stem in ("__init__", "__main__"):
            continue
        folder = path.parent.relative_to(PACKAGE)
        names = [f"test_{path.stem}"] + ([f"test_{path.parent.name}_{path.stem}"]
                                         if folder.parts else [])
        here = [p.stem for p in (tests / folder).glob("test_*.py")]
        if not any(stem == n or stem.startswith(n + "_") for stem in here for n in names):
            missing.append(str(path.relative_to(SRC)))
    assert not missing, f"modules without a test file of their own: {missing}"

"""The suites rolltape ships, on real benchmark envs, and what each needs installed.

``mazes`` and ``adroit`` come from Gymnasium-Robotics (``info["success"]``), ``pusht`` is
LeRobot's PushT from gym-pusht (``info["is_success"]``); both are in the ``suites`` extra,
pinned exactly as LeRobot pins its benchmark packages (``pip install 'rolltape[suites]'``).
``locomotion`` (MuJoCo, returns only: no env there reports success) and ``classic``
(classic control, Discrete actions) need only rolltape itself. Fetch tasks are left out:
Gymnasium-Robotics 1.4.2 fails to build them under MuJoCo 4.
``metaworld_mt10`` and ``metaworld_mt50`` run in Meta-World's own venv
(:mod:`rolltape.suites.benchmarks`, ``rolltape suites install metaworld``), served from there.
``aloha`` (gym-aloha's insertion and transfer cube) runs in ALOHA's own venv likewise
(``rolltape suites install aloha``).

May import: suites.manifest, suites.benchmarks, errors, envs.ids (package versions, without
importing them).
Never: gymnasium at import, policies, pass 1, pass 2, executors, outputs.

Example:
    >>> [t.name for t in builtin_manifest("classic").tasks]
    ['cartpole', 'acrobot', 'mountaincar']
"""

from __future__ import annotations

import difflib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rolltape.errors import UsageError
from rolltape.suites.manifest import Manifest, Task, load_manifest, parse_manifest

EXTRA = "suites"
INSTALL = f"pip install 'rolltape[{EXTRA}]'"


@dataclass(frozen=True)
class Package:
    """A distribution a suite's envs come from: its pip name, the module that registers
    its envs, and the rolltape extra that installs it (None: a core dependency)."""

    dist: str
    module: str
    extra: str | None

    @property
    def installed(self) -> bool:
        return importlib.util.find_spec(self.module) is not None


ROBOTICS = Package("gymnasium-robotics==1.4.2", "gymnasium_robotics", EXTRA)
PUSHT = Package("gym-pusht==0.1.8", "gym_pusht", EXTRA)
MUJOCO = Package("gymnasium[mujoco]", "mujoco", None)
CLASSIC = Package("gymnasium[classic-control]", "gymnasium", None)
PACKAGES = {p.module: p for p in (ROBOTICS, PUSHT)}  # modules a manifest env may name

# Meta-World's lists (v3 task names less "-v3"); its env is rolltape's LeRobot-rule wrapper,
# served from the benchmark's own venv (rolltape.suites.metaworld, .benchmarks, .hosted).
METAWORLD_ENV = "rolltape.suites.metaworld:MetaWorld-v3"
MT10 = ("reach", "push", "pick-place", "door-open", "drawer-open", "drawer-close",
        "button-press-topdown", "peg-insert-side", "window-open", "window-close")
MT50 = MT10 + (
    "assembly", "basketball", "bin-picking", "box-close", "button-press-topdown-wall",
    "button-press", "button-press-wall", "coffee-button", "coffee-pull", "coffee-push",
    "dial-turn", "disassemble", "door-close", "door-lock", "door-unlock", "faucet-close",
    "faucet-open", "hammer", "hand-insert", "handle-press-side", "handle-press",
    "handle-pull-side", "handle-pull", "lever-pull", "peg-unplug-side", "pick-out-of-hole",
    "pick-place-wall", "plate-slide-back-side", "plate-slide-back", "plate-slide-side",
    "plate-slide", "push-back", "push-wall", "reach-wall", "shelf-place", "soccer",
    "stick-pull", "stick-push", "sweep-into", "sweep")
# LeRobot's difficulty groups (its metaworld_config.json), the MT50 tasks split four ways.
EASY = ("button-press", "button-press-topdown", "button-press-topdown-wall",
        "button-press-wall", "coffee-button", "dial-turn", "door-close", "door-lock",
        "door-open", "door-unlock", "drawer-close", "drawer-open", "faucet-close",
        "faucet-open", "handle-press", "handle-press-side", "handle-pull", "handle-pull-side",
        "lever-pull", "plate-slide", "plate-slide-back", "plate-slide-back-side",
        "plate-slide-side", "reach", "reach-wall", "window-close", "window-open",
        "peg-unplug-side")
MEDIUM = ("basketball", "bin-picking", "box-close", "coffee-pull", "coffee-push", "hammer",
          "peg-insert-side", "push-wall", "soccer", "sweep", "sweep-into")
HARD = ("assembly", "hand-insert", "pick-out-of-hole", "pick-place", "push", "push-back")
VERY_HARD = ("shelf-place", "disassemble", "stick-pull", "stick-push", "pick-place-wall")
METAWORLD_SUITES = (("mt10", "MT10", MT10), ("mt50", "MT50", MT50),
                    ("easy", "easy (LeRobot's group)", EASY),
                    ("medium", "medium (LeRobot's group)", MEDIUM),
                    ("hard", "hard (LeRobot's group)", HARD),
                    ("very_hard", "very hard (LeRobot's group)", VERY_HARD))
#: Built-in suites whose envs run in a benchmark's own venv (rolltape.suites.benchmarks).
HOSTED = {f"metaworld_{group}{pixels}": "metaworld" for group, _, _ in METAWORLD_SUITES
          for pixels in ("", "_pixels")}
# gym-aloha's two tasks as LeRobot plays them (rolltape.suites.aloha), in their own venv.
ALOHA_ENV = "rolltape.suites.aloha:Aloha-v0"
HOSTED["aloha"] = "aloha"

BUILTIN: dict[str, dict[str, Any]] = {
    "mazes": {
        "description": "PointMaze navigation (Gymnasium-Robotics), success = goal reached",
        "success_key": "success", "max_episode_steps": 300,
        "tasks": {name: f"gymnasium_robotics:PointMaze_{maze}-v3" for name, maze in
                  (("open", "Open"), ("umaze", "UMaze"), ("medium", "Medium"),
                   ("large", "Large"))},
    },
    "adroit": {
        "description": "Adroit dexterous hand (Gymnasium-Robotics), success from the env",
        "success_key": "success", "max_episode_steps": 200,
        "tasks": {name: f"gymnasium_robotics:AdroitHand{task}-v1" for name, task in
                  (("door", "Door"), ("hammer", "Hammer"), ("pen", "Pen"),
                   ("relocate", "Relocate"))},
    },
    "pusht": {
        "description": "LeRobot's PushT (gym-pusht), success = the T covers its goal",
        "success_key": "is_success", "max_episode_steps": 300,
        # Its reward unions the T's pymunk shapes in set order, which follows memory
        # addresses: the last bit of a reward can differ from one process to the next.
        "reward_atol": 1e-9,
        "tasks": {"pusht": "gym_pusht:gym_pusht/PushT-v0"},
    },
    "locomotion": {
        "description": "MuJoCo locomotion, returns only (no success reported)",
        "success_key": None,
        "tasks": {"halfcheetah": "HalfCheetah-v5", "hopper": "Hopper-v5",
                  "walker2d": "Walker2d-v5", "ant": "Ant-v5"},
    },
    **{f"metaworld_{group}": {
        "description": f"Meta-World {title} as LeRobot plays it, in its own venv",
        "success_key": "is_success",
        "tasks": {task: {"env": METAWORLD_ENV, "kwargs": {"task": f"{task}-v3"}}
                  for task in tasks},
    } for group, title, tasks in METAWORLD_SUITES},
    # The same tasks with LeRobot's image observations (corner2 camera, 480 x 480, its keys).
    **{f"metaworld_{group}_pixels": {
        "description": f"Meta-World {title} with LeRobot's camera image and keys, in its own "
                       "venv",
        "success_key": "is_success",
        "tasks": {task: {"env": METAWORLD_ENV,
                         "kwargs": {"task": f"{task}-v3", "obs_type": "pixels_agent_pos"}}
                  for task in tasks},
    } for group, title, tasks in METAWORLD_SUITES},
    "aloha": {
        "description": "ALOHA bimanual insertion and cube transfer (gym-aloha) as LeRobot "
                       "plays them: top camera and joints, in its own venv",
        "success_key": "is_success", "max_episode_steps": 400,  # LeRobot's episode_length
        "tasks": {task: {"env": ALOHA_ENV, "kwargs": {"task": task}}
                  for task in ("insertion", "transfer_cube")},
    },
    "classic": {
        "description": "classic control with Discrete actions, returns only",
        "success_key": None,
        "tasks": {"cartpole": "CartPole-v1", "acrobot": "Acrobot-v1",
                  "mountaincar": "MountainCar-v0"},
    },
}
NEEDS = {"mazes": ROBOTICS, "adroit": ROBOTICS, "pusht": PUSHT, "locomotion": MUJOCO,
         "classic": CLASSIC}  # HOSTED suites need their benchmark's venv instead


def builtin_manifest(name: str) -> Manifest:
    """The built-in suite ``name`` as a manifest; an unknown name is refused."""
    if name not in BUILTIN:
        close = difflib.get_close_matches(name, list(BUILTIN), n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'?" if close else \
            f"the built-in suites are {', '.join(BUILTIN)} (or give a manifest.yaml)."
        raise UsageError(f"--suite '{name}' is neither a built-in suite nor a manifest file; "
                         f"{hint}")
    return parse_manifest({name: BUILTIN[name]}, f"built-in suite '{name}'")


def resolve_suite(name_or_file: str) -> Manifest:
    """``--suite``: a built-in suite's name, or a YAML manifest file."""
    if name_or_file in BUILTIN:
        return builtin_manifest(name_or_file)
    if name_or_file.endswith((".yaml", ".yml")) or Path(name_or_file).exists():
        return load_manifest(name_or_file)
    return builtin_manifest(name_or_file)  # refuses, with the close match


def check_installed(task: Task) -> None:
    """Refuse, in one sentence naming the extra, a task whose benchmark package is missing."""
    module = task.env.partition(":")[0] if ":" in task.env else None
    package = PACKAGES.get(module or "")
    if package is not None and not package.installed:
        raise UsageError(f"Task '{task.key}' needs {package.dist}, which is not installed; "
                         f"install it with {INSTALL}.")


def listing() -> list[dict[str, Any]]:
    """One entry per built-in suite: its tasks, success key, and what it needs."""
    from rolltape.suites import benchmarks

    entries = []
    for name, body in BUILTIN.items():
        if name in HOSTED:
            bench = benchmarks.benchmark(HOSTED[name])
            ready = benchmarks.installed(bench)
            entries.append({
                "suite": name, "description": body["description"],
                "tasks": {task: spec["env"] for task, spec in body["tasks"].items()},
                "success_key": body["success_key"],
                "needs": f"its own venv ({', '.join(bench.pins)})", "installed": ready,
                "install": None if ready else bench.install})
            continue
        package = NEEDS[name]
        entries.append({
            "suite": name, "description": body["description"],
            "tasks": {task: env for task, env in body["tasks"].items()},
            "success_key": body["success_key"], "needs": package.dist,
            "installed": package.installed,
            "install": None if package.installed or package.extra is None else INSTALL,
        })
    return entries

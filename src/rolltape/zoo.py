"""``--policy zoo:FOLDER``: an rl-zoo3 experiment folder, or a model repo in its layout.

What rl-zoo3's ``enjoy.py`` reads, read here as data (rl-zoo3 itself loads its YAML with
``yaml.UnsafeLoader`` and ``eval``s a ``normalize`` string; here only the OrderedDict tag its
``yaml.dump`` writes is understood, and nothing is evaluated):

- an experiment folder ``logs/ppo/CartPole-v1_1/``: the model ``CartPole-v1.zip``
  (``best_model.zip``, ``rl_model_N_steps.zip``) and ``CartPole-v1/`` holding ``config.yml``,
  ``args.yml`` and ``vecnormalize.pkl``;
- a model repo ``ppo-CartPole-v1/``: one model ``.zip`` with ``config.yml``, ``args.yml``,
  ``env_kwargs.yml`` and ``vec_normalize.pkl`` beside it.

From them: the env id (``args.yml``'s ``env``; a ``gym_packages`` module makes it
``module:EnvId``), the algorithm, ``env_kwargs`` (``config.yml``'s, replaced by
``args.yml``'s when set, then updated by ``--env-kwargs``, as enjoy.py does), ``env_wrapper``
entries (policy-side wrappers, in order), ``frame_stack`` and ``normalize`` (the statistics,
applied with training and reward normalization off). The env is then what rl-zoo3's
``create_test_env`` builds: Monitor under the wrappers, VecNormalize, then VecFrameStack (with
a frame stack, the statistics are applied in the policy-side chain, before the stack).
Atari folders sample actions, as enjoy.py does unless told ``--deterministic``.

A zoo folder is data: reading it imports nothing it names. Its YAML is read with the suite
manifests' caps (size, aliases); every value is type-checked and sizes are bounded. The
modules it names (``env_wrapper`` entries, ``gym_packages``, an ``env`` of ``module:Id``)
must be installed packages of Gymnasium envs or wrappers (:func:`rolltape.envs.ids.env_package`,
judged from installed metadata, never by importing) or be named by the user
(``--trust-module``); a wrapper must then be a ``gymnasium.Wrapper`` class, checked in the
pass-1 worker after its package is imported and before it is called.

May import: errors, files, limits, address, envs (metadata only), suites.manifest (its YAML
caps), pass1.wrappers (names only), yaml. Never: SB3, torch, rl-zoo3
(the orchestrator reads folders; the pass-1 worker loads the model), the render side.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rolltape.address import is_served, parse_served
from rolltape.errors import UsageError
from rolltape.files import sha256_of
from rolltape.limits import MAX_FRAME_STACK
from rolltape.pass1.wrappers import NORMALIZE

_NOT_MODELS = ("best_model.zip", "train_eval_metrics.zip")
_STEPS = re.compile(r"rl_model_(\d+)_steps\.zip")
_ALGOS = {"ppo": "PPO", "a2c": "A2C", "sac": "SAC", "td3": "TD3", "ddpg": "DDPG", "dqn": "DQN"}


@dataclass(frozen=True)
class ZooFolder:
    """What a zoo folder says about how its policy is evaluated."""

    folder: Path
    env_id: str
    algo: str
    model: Path
    env_kwargs: dict[str, Any]
    wrappers: tuple[dict[str, Any], ...]
    frame_stack: int
    vecnormalize: Path | None
    atari: bool
    files: dict[str, str] = field(default_factory=dict)  # every file read -> its sha256

    def provenance(self, checkpoint: str) -> dict[str, Any]:
        """What metadata.json keeps: the folder, the checkpoint asked for, the files read."""
        return {"folder": str(self.folder), "checkpoint": checkpoint, "env": self.env_id,
                "algo": self.algo, "files": dict(self.files)}


def _loader() -> Any:
    """The suite manifests' capped safe loader that also reads rl-zoo3's
    ``!!python/object/apply:OrderedDict`` (as a plain mapping: nothing is applied)."""
    from rolltape.suites.manifest import capped_loader

    class ZooLoader(capped_loader()):  # type: ignore[misc]
        pass

    def ordered(loader: Any, node: Any) -> dict[str, Any]:
        value = loader.construct_sequence(node, deep=True) or [[]]
        if len(value) != 1 or not isinstance(value[0], list) or not all(
                isinstance(p, list) and len(p) == 2 for p in value[0]):
            raise ValueError("an OrderedDict that is not a list of key, value pairs")
        return {str(k): v for k, v in value[0]}

    ZooLoader.add_constructor("tag:yaml.org,2002:python/object/apply:collections.OrderedDict",
                              ordered)
    return ZooLoader


def _read_yaml(path: Path, files: dict[str, str]) -> dict[str, Any]:
    import yaml

    from rolltape.suites.manifest import MAX_BYTES, YAMLTooLarge

    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise YAMLTooLarge(f"is {size:,} bytes, more than such a file needs "
                               f"({MAX_BYTES:,} at most).")
        data = yaml.load(path.read_text(encoding="utf-8"),  # noqa: S506 (a safe loader)
                         Loader=_loader())
    except YAMLTooLarge as exc:
        raise UsageError(f"zoo: '{path}' {exc}") from None
    except (yaml.YAMLError, ValueError, TypeError, OSError, RecursionError) as exc:
        first = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise UsageError(f"zoo: '{path}' is not a YAML file rolltape can read as data "
                         f"({first}); only plain values and rl-zoo3's OrderedDict are "
                         "understood.") from None
    files[str(path)] = sha256_of(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"zoo: '{path}' holds a {type(data).__name__}, not a mapping.")
    return data


def _shown(value: Any) -> str:
    """A value from a zoo file for a message, bounded however long or deep it is."""
    import reprlib

    return " ".join(reprlib.repr(value).split())[:100]


def _mapping(value: Any, where: Path, key: str) -> dict[str, Any]:
    """``env_kwargs`` and the like: a mapping of names (or nothing)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise UsageError(f"zoo: '{where}' {key} must be a mapping of argument names to "
                         f"values, not {_shown(value)}.")
    return dict(value)


def _text(value: Any, where: Path, key: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        raise UsageError(f"zoo: '{where}' {key} must be a name (text), not {_shown(value)}.")
    return value


def _frame_stack(value: Any, where: Path) -> int:
    """rl-zoo3's ``frame_stack``: a whole number of frames (false or absent: none)."""
    if value is None or value is False:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"zoo: '{where}' frame_stack must be a whole number of frames, not "
                         f"{_shown(value)}.")
    if not 0 <= value <= MAX_FRAME_STACK:
        raise UsageError(f"zoo: '{where}' frame_stack {_shown(value)} must be between 0 and "
                         f"{MAX_FRAME_STACK:,} frames.")
    return value


def _sb3_package(top: str) -> bool:
    """True for an installed distribution of SB3 wrappers (sb3-contrib's TimeFeatureWrapper,
    in many rl-zoo3 configs): one named as ``top`` that requires stable-baselines3 (SB3
    itself requires Gymnasium, so :func:`rolltape.envs.ids.env_package` admits it). Read from
    installed metadata; nothing is imported."""
    from importlib.metadata import PackageNotFoundError, requires

    from rolltape.envs.ids import env_package

    try:
        needs = requires(top) or []
    except PackageNotFoundError:
        return False
    return env_package("stable_baselines3") and any(
        re.split(r"[\s\[(<>=!~;]", n, maxsplit=1)[0].lower().replace("-", "_")
        == "stable_baselines3" and "extra" not in n.partition(";")[2] for n in needs)


def _check_module(module: str, what: str, where: Path, trusted: tuple[str, ...]) -> None:
    """Refuse, from installed metadata and before anything is imported, a module a zoo folder
    names that is neither an installed package of Gymnasium envs (or wrappers) nor one the
    user trusts: ``pydoc``, ``antigravity`` or a file put beside the folder would run."""
    from rolltape.envs.ids import env_package

    parts = module.split(".")
    top = parts[0]
    if not all(p.isidentifier() for p in parts):
        raise UsageError(f"zoo: '{where}' names {what} '{module[:100]}', which is not a dotted "
                         "module name.")
    if top in trusted:
        return
    if top != "rolltape" and (env_package(top) or _sb3_package(top)):
        return
    import importlib.util

    if importlib.util.find_spec(top) is None:
        raise UsageError(f"zoo: '{where}' names {what} '{module[:100]}', which is not "
                         "installed; install it to evaluate this folder.")
    raise UsageError(f"zoo: '{where}' names {what} from '{top}', which is not an installed "
                     "package of Gymnasium envs or wrappers, and a zoo folder may not run "
                     f"code; if you trust it, add --trust-module {top}.")


def _config_dir(folder: Path) -> tuple[Path, bool]:
    """(the folder holding config.yml, whether the folder is a model repo)."""
    if (folder / "config.yml").is_file():
        return folder, True
    inner = [d for d in sorted(folder.iterdir()) if (d / "config.yml").is_file()] \
        if folder.is_dir() else []
    if len(inner) != 1:
        raise UsageError(f"zoo:{folder} is not an rl-zoo3 experiment folder or model repo: "
                         "no config.yml in it or in one sub-folder named after its env "
                         + ("(several sub-folders have one)." if inner else "."))
    return inner[0], False


def _model(folder: Path, env_name: str, repo: bool, checkpoint: str) -> Path:
    """The model file ``--checkpoint`` names: last (the final model), best or N steps."""
    if checkpoint == "best":
        path = folder / "best_model.zip"
    elif checkpoint.isdigit():
        path = folder / f"rl_model_{int(checkpoint)}_steps.zip"
    elif checkpoint == "last":
        path = folder / f"{env_name}.zip"
        if repo and not path.is_file():
            zips = [p for p in sorted(folder.glob("*.zip"))
                    if p.name not in _NOT_MODELS and not _STEPS.fullmatch(p.name)]
            if len(zips) == 1:
                path = zips[0]
    else:
        raise UsageError(f"--checkpoint '{checkpoint}' must be best, last or a step count N "
                         "(rl_model_N_steps.zip).")
    if not path.is_file():
        have = sorted(p.name for p in folder.glob("*.zip"))
        raise UsageError(f"zoo:{folder} has no model file '{path.name}' for --checkpoint "
                         f"{checkpoint} (it has {', '.join(have) or 'no .zip'}).")
    return path


MAX_WRAPPER_INT = 10**6  # wrapper counts (steps, stack sizes) of real folders are thousands


def _largest_int(value: Any) -> int:
    """The largest whole number (in magnitude) anywhere in a YAML value."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return abs(value)
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return max((_largest_int(v) for v in value), default=0)
    return 0


def _wrapper_entries(config: dict[str, Any], where: Path, trusted: tuple[str, ...]
                     ) -> tuple[dict[str, Any], ...]:
    """``env_wrapper`` as policy-side wrapper entries (rl-zoo3's get_wrapper_class forms:
    one dotted name, or a list of names and ``{name: kwargs}``), each module checked
    (:func:`_check_module`) before anything is imported."""
    raw = config.get("env_wrapper")
    if raw is None:
        return ()
    out = []
    for item in raw if isinstance(raw, list) else [raw]:
        kwargs: Any = {}
        if isinstance(item, dict):
            if len(item) != 1:
                raise UsageError(f"zoo: '{where}' env_wrapper entry {_shown(item)} must name "
                                 "one wrapper.")
            item, kwargs = next(iter(item.items()))
        module, _, name = item.rpartition(".") if isinstance(item, str) else ("", "", "")
        if not module or not name.isidentifier() or not isinstance(kwargs or {}, dict) \
                or not all(isinstance(k, str) for k in kwargs or {}):
            raise UsageError(f"zoo: '{where}' env_wrapper entry {_shown(item)} is not a dotted "
                             "module.Class name with keyword arguments.")
        _check_module(module, f"the wrapper '{item[:100]}'", where, trusted)
        big = _largest_int(kwargs)
        if big > MAX_WRAPPER_INT:  # a stack or buffer size: refused before it allocates
            raise UsageError(f"zoo: '{where}' env_wrapper entry '{item[:100]}' has the "
                             f"argument {big:.6g}, more than a wrapper's count or size needs "
                             f"(at most {MAX_WRAPPER_INT:,}); lower it.")
        out.append({"target": f"{module}:{name}", "kwargs": dict(kwargs or {}),
                    "flag": f"zoo env_wrapper '{item}'"})
    return tuple(out)


def read_zoo(folder: str | Path, checkpoint: str = "last", trusted: tuple[str, ...] = (),
             env: str | None = None) -> ZooFolder:
    """Read a zoo folder; one sentence naming the entry when it cannot be reproduced.
    ``trusted``: top-level modules the user names (``--trust-module``); ``env``: the env the
    user named, whose module is theirs to trust."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"zoo:{folder} is not a folder; give an rl-zoo3 experiment folder "
                         "(logs/ppo/ENV_1) or a model repo in its layout.")
    files: dict[str, str] = {}
    cfg_dir, repo = _config_dir(folder)
    config = _read_yaml(cfg_dir / "config.yml", files)
    args = _read_yaml(cfg_dir / "args.yml", files) if (cfg_dir / "args.yml").is_file() else {}
    args_file = cfg_dir / "args.yml"
    env_name = _text(args["env"], args_file, "env") if args.get("env") is not None else \
        ("" if repo else cfg_dir.name)
    if not env_name:
        raise UsageError(f"zoo:{folder} does not say its env: its args.yml (with env: ID) is "
                         "missing.")
    algo_name = _text(args["algo"], args_file, "algo").lower() if args.get("algo") else ""
    if not algo_name and not repo:
        algo_name = folder.parent.name.lower()  # logs/ALGO/ENV_N
    if algo_name and algo_name not in _ALGOS:
        raise UsageError(f"zoo:{folder} was trained with '{algo_name[:100]}', which rolltape "
                         f"does not load; it loads {', '.join(_ALGOS)}.")
    if config.get("vec_env_wrapper") is not None:
        raise UsageError(f"zoo: '{cfg_dir / 'config.yml'}' has a vec_env_wrapper, which rolltape "
                         "cannot apply on the policy side; evaluate it with rl-zoo3.")
    packages = args.get("gym_packages") or []
    if not isinstance(packages, list) or not all(isinstance(p, str) for p in packages):
        raise UsageError(f"zoo: '{args_file}' gym_packages must be a list of module names, not "
                         f"{_shown(packages)}.")
    if len(packages) > 1:
        raise UsageError(f"zoo:{folder} imports several gym_packages {_shown(packages)}; "
                         "rolltape takes one module (MODULE:EnvId).")
    env_id = f"{packages[0]}:{env_name}" if packages else env_name
    if ":" in env_id and env_id != env:  # gym.make would import the module it names
        _check_module(env_id.partition(":")[0], "the env module", args_file if packages
                      or args.get("env") else cfg_dir / "config.yml", trusted)
    env_kwargs = _mapping(config.get("env_kwargs"), cfg_dir / "config.yml", "env_kwargs")
    if args.get("env_kwargs") is not None:  # enjoy.py: the training command line's win
        env_kwargs = _mapping(args["env_kwargs"], args_file, "env_kwargs")
    frame_stack = _frame_stack(config.get("frame_stack"), cfg_dir / "config.yml")
    stats = None
    if config.get("normalize"):
        stats = next((p for p in (cfg_dir / "vecnormalize.pkl", cfg_dir / "vec_normalize.pkl")
                      if p.is_file()), None)
        if stats is None:
            raise UsageError(f"zoo:{folder} was trained with normalize but has no "
                             f"vecnormalize.pkl in '{cfg_dir}'; copy the statistics there.")
        files[str(stats)] = sha256_of(stats)
    model = _model(folder, env_name, repo, checkpoint)
    files[str(model)] = sha256_of(model)
    wrappers = _wrapper_entries(config, cfg_dir / "config.yml", trusted)
    atari = any("atari" in w["target"].lower() for w in wrappers) or \
        env_name.startswith("ALE/") or "NoFrameskip" in env_name
    return ZooFolder(folder, env_id, _ALGOS.get(algo_name, ""), model, env_kwargs, wrappers,
                     frame_stack, stats, atari, files)


def zoo_options(policy: str, env: str | None, options: dict[str, Any]
                ) -> tuple[str, str, dict[str, Any]]:
    """``evaluate``'s (env, policy, options) for ``--policy zoo:FOLDER``: the folder's env,
    model, algorithm, kwargs, wrappers, frame stack and statistics, the user's flags checked
    against them."""
    checkpoint = str(options.pop("checkpoint", None) or "last")
    trusted = tuple(options.pop("trust_module", None) or ())
    served = None
    if env is not None and is_served(env):  # the folder's env, stepped on `rolltape serve`
        served, env = env, parse_served(env)[1]
    zoo = read_zoo(policy[len("zoo:"):], checkpoint, trusted, env)
    if env is not None and env != zoo.env_id:
        raise UsageError(f"--policy {policy} was trained on '{zoo.env_id}', not '{env}'; leave "
                         "the env out (the folder names it).")
    for flag, key in (("--vecnormalize", "vecnormalize"), ("--frame-stack", "frame_stack"),
                      ("--wrapper", "wrappers")):
        if options.get(key):
            raise UsageError(f"--policy {policy} brings its own {flag} (from its config.yml); "
                             f"drop {flag}.")
    if options.get("algo") and options["algo"].upper() != zoo.algo:
        raise UsageError(f"--policy {policy} was trained with {zoo.algo}; drop --algo.")
    wrappers, stats = zoo.wrappers, str(zoo.vecnormalize) if zoo.vecnormalize else None
    if stats and zoo.frame_stack > 1:  # rl-zoo3 normalizes, then stacks: so does the chain
        wrappers, stats = wrappers + ({"target": NORMALIZE, "kwargs": {"path": stats}},), None
    options.update(
        algo=zoo.algo or None, wrappers=wrappers, frame_stack=zoo.frame_stack,
        vecnormalize=stats,
        env_kwargs={**zoo.env_kwargs, **(options.get("env_kwargs") or {})},
        zoo=zoo.provenance(checkpoint))
    if zoo.atari and "deterministic" not in options:
        options["deterministic"] = False  # enjoy.py samples Atari actions by default
    return served or zoo.env_id, f"sb3:{zoo.model}", options

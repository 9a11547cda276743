"""The protocol card: ``protocol.json``, how a run was made, in the words a diff compares.

Two evaluations of the same policy disagree because of one knob more often than anything
else: the time limit, the success rule, the control rate, an env argument, a wrapper that
flips the image, an action's scale. The card writes each down once per run (tapes are
unchanged): env id and kwargs with package versions, horizon, control rate (dt = MuJoCo's
timestep x frame skip), success rule and key, seed scheme, policy-side wrappers and their
arguments, observation keys with shapes, dtypes and value ranges, the action space and
what is done to actions, the policy's source and sha256, batch size, executor, GL backend.

A run made before cards existed is described from its ``metadata.json`` as far as it goes
(:func:`read_card`), with the fields it cannot tell listed, so a diff says what it could
not compare.

May import: record, tape (json_safe), pass1.wrappers (names only), outputs.artifacts.
Never: policies, the simulator, the render side, executors.

Example (not run: it reads a run):
    >>> card, unknown = read_card(Run.load("runs/cheetah"))
    >>> card["envs"]["env"]["max_episode_steps"]
    1000
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from rolltape.outputs.artifacts import write_json
from rolltape.record import Run
from rolltape.tape import json_safe

CARD = "protocol.json"
CARD_VERSION = 1
SEED_SCHEME = "episode i of each task is reset with seed base + i"
# Facts only the pass-1 worker can read (it has the env): an older run cannot tell them.
_WORKER_FACTS = ("horizon", "control", "observation", "action", "env_wrappers")
# Card fields that say how the work was spread, not what was evaluated: a difference in
# them is shown, but does not by itself make two runs' episodes differ.
EXECUTION = ("execution",)
# The run's choices of when actions act (EvalConfig fields, where this rolltape has them).
_TIMING = ("latency", "execute_steps")


def build_card(*, specs: dict[str, dict[str, Any]], rules: dict[str, dict[str, Any]],
               config: Any, policy: dict[str, Any] | None,
               env_facts: dict[str, dict[str, Any]], wrappers: list[str],
               gl_backend: list[str] | None, served: bool = False) -> dict[str, Any]:
    """The card of a run. ``specs`` and ``rules`` are per task label ("env" for a single
    env, "suite/task" for a suite's), ``config`` the run's :class:`rolltape.config.EvalConfig`,
    ``policy`` what the worker said made the actions, ``env_facts`` what the worker read
    from each env (:func:`rolltape.pass1.facts.env_facts`, keyed "" for a single env),
    ``wrappers`` the policy-side wrappers as described, ``gl_backend`` the backends pass 2
    drew with (None: no video), ``served`` whether a `rolltape serve` stepped the envs."""
    envs = {}
    for label, spec in specs.items():
        facts = env_facts.get("" if label == "env" else label) or {}
        envs[label] = {
            "id": spec.get("id"), "kwargs": spec.get("kwargs") or {},
            "versions": spec.get("versions") or {},
            "max_episode_steps": spec.get("max_episode_steps"),
            **rules.get(label, {}),
            **{k: facts[k] for k in (*_WORKER_FACTS, "render_fps") if k in facts},
        }
        # What the policy acts on: the env's own spaces unless wrappers change them.
        for name, own in (("policy_observation", "observation"), ("policy_action", "action")):
            if own in facts:
                envs[label][name] = facts.get(name, facts[own])
    policy = policy or {}
    return json_safe({
        "schema_version": CARD_VERSION,
        "envs": envs,
        "seeds": {"scheme": SEED_SCHEME, "base": config.seed},
        # what stepped the physics: the env's own, or MuJoCo Warp's float32 worlds
        "simulator": getattr(config, "simulator", "env"),
        "policy": {
            "kind": policy.get("kind"), "source": policy.get("source"),
            "sha256": policy.get("sha256"), "algo": policy.get("algo", config.algo),
            "deterministic": policy.get("deterministic", config.deterministic),
            "vecnormalize_sha256": policy.get("vecnormalize_sha256"),
            "wrappers": wrappers, "frame_stack": config.frame_stack or None,
            "action_postprocess": action_postprocess(policy),
            # When actions act (a simulated inference latency, chunks run open loop).
            **{k: getattr(config, k) for k in _TIMING if getattr(config, k, None) is not None},
        },
        "execution": {
            "batch_size": (config.episodes if getattr(config, "simulator", "env") == "mjwarp"
                           else config.workers if config.batched_inference else 1),
            "executor": config.executor,
            "env_process": "served (rolltape serve)" if served else "local",
            "gl_backend": {"pass1": "none (rendering off)", "pass2": gl_backend},
        },
    })


def action_postprocess(policy: dict[str, Any]) -> str:
    """What happens to the policy's output before ``env.step`` (besides wrappers)."""
    kind = policy.get("kind")
    if kind == "sb3":
        return ("SB3 predict: clipped to the action space's bounds, or unscaled from [-1, 1] "
                "for a squashing policy")
    if kind == "random":
        return "sampled from the action space"
    if kind == "tape":
        return "the recorded actions, as recorded"
    return "none: the policy's output is passed to env.step as it is"


def write_card(root: Path, card: dict[str, Any]) -> Path:
    """Write ``protocol.json`` (atomically) into the run folder ``root``."""
    write_json(root / CARD, card)
    return root / CARD


def read_card(run: Run) -> tuple[dict[str, Any], list[str]]:
    """(the run's card, what it cannot tell). A run with ``protocol.json`` has everything;
    an older one is described from ``metadata.json`` and ``results.json``, and the fields
    only a card holds are named as unknown. A damaged card counts as missing."""
    path = run.path / CARD
    if path.is_file():
        try:
            card = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            card = None
        if isinstance(card, dict) and isinstance(card.get("envs"), dict):
            return card, []
    return _from_metadata(run)


def _from_metadata(run: Run) -> tuple[dict[str, Any], list[str]]:
    """An older run's card, as far as its metadata and results go."""
    meta: dict[str, Any] = dict(run.metadata or {})
    config: dict[str, Any] = meta["config"] if isinstance(meta.get("config"), dict) else {}
    results = run.results
    unknown = [f"{k} (the run has no {CARD}: it was made before cards were written)"
               for k in ("effective horizon", "control rate",
                         "observation keys, shapes and ranges",
                         "action space", "env wrappers")]
    envs: dict[str, Any] = {}
    manifest = results.manifest if isinstance(results.manifest, dict) else None
    if manifest is not None:
        for t in manifest.get("tasks") or []:
            if isinstance(t, dict):
                envs[f"{t.get('suite')}/{t.get('name')}"] = {
                    "id": t.get("env"), "kwargs": t.get("kwargs") or {},
                    "max_episode_steps": t.get("max_episode_steps"),
                    "success_key": t.get("success_key"),
                    "success_rule": t.get("success") or results.success_rule}
    else:
        spec = results.env if isinstance(results.env, dict) else {}
        envs["env"] = {"id": spec.get("id", results.env_id), "kwargs": spec.get("kwargs") or {},
                       "versions": spec.get("versions") or {},
                       "max_episode_steps": spec.get("max_episode_steps"),
                       "success_key": "is_success", "success_rule": results.success_rule}
    policy: dict[str, Any] = results.policy if isinstance(results.policy, dict) else {}
    if not meta:
        unknown.append("executor, batch size and GL backend (metadata.json is missing)")
    render: dict[str, Any] = meta["render"] if isinstance(meta.get("render"), dict) else {}
    card = {
        "schema_version": None,
        "envs": envs,
        "seeds": {"scheme": SEED_SCHEME, "base": results.seed},
        "simulator": (config.get("simulator") or "env") if config else "env",
        "policy": {"kind": policy.get("kind"), "source": policy.get("source"),
                   "sha256": policy.get("sha256"), "algo": config.get("algo"),
                   "deterministic": policy.get("deterministic"),
                   "vecnormalize_sha256": policy.get("vecnormalize_sha256"),
                   "wrappers": policy.get("wrappers") or [],
                   "frame_stack": config.get("frame_stack") or None,
                   "action_postprocess": action_postprocess(policy),
                   **{k: config[k] for k in _TIMING if config.get(k) is not None}},
        "execution": {"batch_size": (config.get("episodes") if config.get("simulator") ==
                                     "mjwarp" else config.get("workers")
                                     if config.get("batched_inference") else 1)
                                    if config else None,
                      "executor": config.get("executor"),
                      "gl_backend": {"pass1": "none (rendering off)",
                                     "pass2": render.get("backend_used")}},
    }
    return json_safe(card), unknown


def flatten(card: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """The card's leaves as ('envs.env.kwargs.frame_skip', value), in the card's order; a
    list of objects is walked by index ('env_wrappers[0].kwargs.max_episode_steps'), a
    list of plain values is one leaf."""
    if isinstance(card, dict):  # an empty one ({} kwargs) has no leaves: nothing set
        for k, v in card.items():
            if k == "schema_version" and not prefix:
                continue
            yield from flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(card, list) and card and all(isinstance(v, dict) for v in card):
        for i, v in enumerate(card):
            yield from flatten(v, f"{prefix}[{i}]")
    else:
        yield prefix, card

"""Zoo folders as hostile data: config.yml, args.yml and env_kwargs.yml of any values and
types (names of code to run, huge and mistyped sizes, YAML tags and alias bombs). Reading the
folder (``zoo_options``) and building its policy-side wrapper chain over a real CartPole
either succeed or raise one UsageError sentence; nothing else escapes, and no payload's
marker is ever written. ROLLTAPE_FUZZ_EXAMPLES raises the count (default 150)."""

from __future__ import annotations

import os
import re
import stat
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rolltape.errors import UsageError

EXAMPLES = int(os.environ.get("ROLLTAPE_FUZZ_EXAMPLES", "150"))
MARK = "MARKER"
# Names a folder may give, from real wrappers to code that would run (each leaves MARKER if
# imported or called: evilmod.py sits beside the folder, $BROWSER writes it, the shell
# commands in kwargs write it).
NAMES = ["gymnasium.wrappers.FlattenObservation", "gymnasium.wrappers.TimeLimit",
         "gymnasium.wrappers.ClipReward", "gymnasium.wrappers.FrameStackObservation",
         "gymnasium.wrappers.RecordVideo", "gymnasium.make", "gymnasium.spaces.Box",
         "stable_baselines3.common.atari_wrappers.AtariWrapper",
         "rl_zoo3.wrappers.TimeFeatureWrapper", "sb3_contrib.common.wrappers.TimeFeatureWrapper",
         "pydoc.pipepager", "os.system", "subprocess.Popen", "antigravity.Foo", "evilmod.Wrap",
         "builtins.eval", "rolltape.vecnormalize", "rolltape.frame_stack", "x", "", "a..b",
         "evilmod.py:Wrap"]
SHELL = f"touch {MARK}"
TAGS = [f"!!python/object/apply:os.system ['{SHELL}']", "!!python/name:os.system",
        "!!python/object/apply:collections.OrderedDict [[['a', 1]]]",
        "!!python/object/apply:collections.OrderedDict [5]",
        "!!python/object/apply:collections.OrderedDict []", "!!binary aGVsbG8="]
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.sampled_from([0, 1, 4, 10**9]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(NAMES + ["CartPole-v1", "ppo", "dqn", "1e3", "abc", SHELL]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8) | st.sampled_from(
        ["cmd", "stack_size", "max_episode_steps", "func", "id"]), inner, max_size=3)),
    max_leaves=12)
wrapper_item = st.one_of(
    st.sampled_from(NAMES),
    st.builds(lambda n, kw: {n: kw}, st.sampled_from(NAMES),
              st.one_of(st.none(), st.dictionaries(st.sampled_from(
                  ["cmd", "stack_size", "max_episode_steps", "min_reward", "func", "id"]),
                  scalars, max_size=2))),
    values)
sizes = st.one_of(st.sampled_from([0, 1, 4, 1024, 1025, 10**9, True, 1.5, "abc", "1e3", [4]]),
                  values)
wrapped = st.fixed_dictionaries({"env_wrapper": st.lists(st.one_of(
    st.sampled_from(NAMES), wrapper_item), min_size=1, max_size=3)}, optional={
    "frame_stack": sizes})  # the folder's code routes, judged with a readable rest
anything = st.fixed_dictionaries({}, optional={
    "env_wrapper": st.one_of(wrapper_item, st.lists(wrapper_item, max_size=3)),
    "frame_stack": sizes, "env_kwargs": st.one_of(st.just({"sutton_barto_reward": True}),
                                                  values),
    "normalize": values, "vec_env_wrapper": values, "policy": values})
config = st.one_of(wrapped, wrapped, anything)
VALID_ARGS = {"env": "CartPole-v1", "algo": "ppo"}
args = st.one_of(st.just(VALID_ARGS), st.fixed_dictionaries({}, optional={
    "env": st.one_of(st.sampled_from(["CartPole-v1", "evilmod:CartPole-v1", "antigravity:X",
                                      "gymnasium:CartPole-v1", "evilmod.py:Env"]), values),
    "algo": st.one_of(st.sampled_from(["ppo", "dqn", "a2c"]), values),
    "gym_packages": st.one_of(st.sampled_from([["antigravity"], ["gymnasium"], ["evilmod"],
                                               ["pydoc"]]), values),
    "env_kwargs": values}).map(lambda d: {**VALID_ARGS, **d}))
# A file: a dumped mapping, a mapping with a raw tagged value, an alias bomb, raw bytes.
document = st.one_of(
    config.map(yaml.safe_dump), config.map(yaml.safe_dump), config.map(yaml.safe_dump),
    st.builds(lambda d, tag: yaml.safe_dump(d) + f"extra: {tag}\n", config,
              st.sampled_from(TAGS)),
    st.just(BOMB), st.binary(max_size=40).map(lambda b: b.decode("latin-1")))
# Mostly a readable args.yml, so that the config's entries are what is judged.
args_document = st.one_of(st.just(yaml.safe_dump(VALID_ARGS)), args.map(yaml.safe_dump),
                          args.map(yaml.safe_dump), document)


def _hostile(folder: Path) -> None:
    """evilmod.py beside the folder and a $BROWSER (antigravity) that leave the marker."""
    (folder / "evilmod.py").write_text(
        "import gymnasium as gym\nfrom pathlib import Path\n"
        f"Path(__file__).with_name({MARK!r}).write_text('imported')\n"
        "class Wrap(gym.Wrapper):\n    pass\n")
    browser = folder / "browser"
    browser.write_text(f"#!/bin/sh\ntouch {folder / MARK}\n")
    browser.chmod(browser.stat().st_mode | stat.S_IEXEC)


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(config_text=document, args_text=args_document, kwargs_text=document)
def test_zoo_folders_run_no_code_and_raise_only_usage_errors(
        config_text: str, args_text: str, kwargs_text: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import gymnasium as gym

    from rolltape.pass1.wrappers import recording_tap, wrap, wrapper_entries
    from rolltape.zoo import zoo_options

    here = Path(tempfile.mkdtemp(dir=tmp_path))
    _hostile(here)
    monkeypatch.setenv("BROWSER", str(here / "browser"))
    monkeypatch.chdir(here)  # shell payloads write the marker here
    monkeypatch.syspath_prepend(str(here))  # so that a wrong check would import evilmod
    folder = here / "repo"
    folder.mkdir()
    (folder / "ppo-CartPole-v1.zip").write_bytes(b"PK\x05\x06" + bytes(18))
    for name, text in (("config.yml", config_text), ("args.yml", args_text),
                       ("env_kwargs.yml", kwargs_text)):
        (folder / name).write_text(text, encoding="utf-8")
    try:
        _, _, options = zoo_options(f"zoo:{folder}", None, {})
        entries = wrapper_entries(options["wrappers"], options["frame_stack"])
        base = gym.make("CartPole-v1")
        try:
            wrap(recording_tap(base), entries)  # imports and calls what the folder names
        finally:
            base.close()
        event(f"accepted ({len(entries)} wrappers)")
    except UsageError as exc:
        event("refused: " + re.sub(r"'[^']*'|zoo:\S+", "_", str(exc))[:50])
        assert "\n" not in str(exc) and len(str(exc)) < 1000, str(exc)
    assert not (here / MARK).exists()
    assert "evilmod" not in sys.modules and "antigravity" not in sys.modules

"""The executor contract (rolltape.executors.base): executors are picked once by name, with
the options they take; a new one is a register() call away."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from rolltape.errors import UsageError
from rolltape.executors import base
from rolltape.executors.local import LocalExecutor
from rolltape.executors.ray import RayOptions
from rolltape.flags import SCALE, flag


@dataclass(frozen=True, kw_only=True)
class _ToyOptions:
    size: int = flag(1, "Toy workers.", panel=SCALE, names=("--toy-size",))
    address: str | None = flag(None, "Where the toy runs.", panel=SCALE,
                               names=("--toy-address",))


class _Toy:
    name = "toy"
    runs_workers = warms_workers = splits_segments = shares_disk = False
    OPTIONS = _ToyOptions

    def __init__(self, size: int = 1, address: str | None = None) -> None:
        self.size, self.address = size, address


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    base.register("toy", _Toy)  # type: ignore[arg-type]


def test_the_builtin_executors_are_local_and_ray():
    assert base.names() == ["local", "ray"]


def test_local_is_built_from_its_module_when_asked_for():
    assert isinstance(base.get("local"), LocalExecutor)


def test_a_registered_executor_is_named_and_built_with_its_options(toy: None):
    assert base.names()[-1] == "toy"
    executor: Any = base.get("toy", size=3, address="here")
    assert isinstance(executor, _Toy) and (executor.size, executor.address) == (3, "here")


def test_an_unknown_name_lists_every_registered_one(toy: None):
    with pytest.raises(UsageError) as info:
        base.get("slurm")
    assert str(info.value) == "--executor must be one of local, ray, toy; got 'slurm'."


def test_an_option_of_another_executor_names_its_flag_and_what_this_one_takes(toy: None):
    with pytest.raises(UsageError) as info:
        base.get("toy", render_gpus=1.0, size=2)
    assert str(info.value) == ("--ray-render-gpus is an option of another executor; "
                               "--executor toy takes --toy-size, --toy-address.")


def test_the_command_line_offers_each_executor_s_own_options(toy: None):
    """What an executor declares is what `eval --help` offers: adding one is its module,
    a registry line and its test, no CLI edit."""
    assert base.option_records() == [RayOptions, _ToyOptions]
    from rolltape.cli.options import options_of

    names = {p.default.param_decls[0] for r in base.option_records() for p in options_of(r)}
    assert names == {"--ray-address", "--ray-render-gpus", "--toy-size", "--toy-address"}


def test_an_executor_taking_no_options_says_none():
    with pytest.raises(UsageError, match="--executor local takes none"):
        base.get("local", address="auto")


def test_work_descriptions_are_frozen_data():
    work = base.ShareWork(worker=print, args=(), env={}, task=None, cut=list, timeout=1.0,
                          units=("episode",), stalled=lambda s, n: "")
    assert work.timeout_name == "its timeout"
    with pytest.raises(AttributeError):
        work.timeout = 2.0  # type: ignore[misc]

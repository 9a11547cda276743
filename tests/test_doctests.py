"""The ``>>>`` examples in module docstrings run, where running them is cheap; the others
say "(not run: why)" beside their heading."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

CHEAP = ["rolltape.errors", "rolltape.stats.intervals", "rolltape.stats.paired",
         "rolltape.stats.aggregates", "rolltape.outputs.summary", "rolltape.files", "rolltape.pass1.rollout", "rolltape.envs.ids",
         "rolltape.envs.build", "rolltape.envs.digests",
         "rolltape.outputs.plots", "rolltape.progress", "rolltape.executors.fallback",
         "rolltape.pass1.remote", "rolltape.pass2.replay", "rolltape.interpreter",
         "rolltape.compare.checkpoints", "rolltape.server.protocol", "rolltape.address",
         "rolltape.suites.manifest", "rolltape.suites.builtin", "rolltape.suites.results",
         "rolltape.outputs.suite_view", "rolltape.record", "rolltape.pass2.formats",
         "rolltape.limits", "rolltape.executors.base", "rolltape.config", "rolltape.flags",
         "rolltape.cli.options", "rolltape.pass1.ahead", "rolltape.pass1.dealer",
         "rolltape.pass1.inflight", "rolltape.pass2.export",
         "rolltape.datasets.lerobot", "rolltape.pass1.branches",
         "rolltape.outputs.branch_chart"]
CHEAP += ["rolltape.pass1.clock",  # the simulated clock's schedule
          "rolltape.policy_server.wire",  # served policies: the codec and ws:// sources
          "rolltape.serve_policy",
          "rolltape.policy_server.lerobot_policy",  # lerobot:DIR observation mapping
          "rolltape.video_pick",  # what --video picks
          "rolltape.pass2.request",  # the render side's request and result types
          "rolltape.groups",  # the option groups several verbs share
          "rolltape.compare.flips"]  # verify --flips: a report row
SRC = Path(__file__).resolve().parent.parent / "src"


@pytest.mark.parametrize("name", CHEAP)
def test_docstring_examples_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an example that writes files writes them here
    failed, attempted = doctest.testmod(importlib.import_module(name),
                                        optionflags=doctest.ELLIPSIS)
    assert attempted > 0 and failed == 0


def test_every_other_example_says_it_is_not_run():
    cheap = {f"{name.replace('.', '/')}.py" for name in CHEAP}
    unmarked = []
    for path in sorted((SRC / "rolltape").rglob("*.py")):
        rel = str(path.relative_to(SRC))
        text = path.read_text()
        if rel in cheap or ">>>" not in text:
            continue
        doc = text.split('"""')[1] if text.startswith('"""') else ""
        if ">>>" in doc and "not run" not in doc:
            unmarked.append(rel)
    assert unmarked == []

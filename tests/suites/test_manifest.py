"""Suite manifests (rolltape.suites.manifest): bad YAML, unknown keys, alias bombs and
oversized values are refused in one short sentence before anything is written; --tasks
names tasks of the manifest."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_results import MANIFEST

from conftest import ROOT, run_cli
from rolltape import UsageError, evaluate
from rolltape.suites.manifest import load_manifest, select_tasks


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("manifest") / "bench.yaml"
    path.write_text(MANIFEST)
    return path


@pytest.mark.parametrize("text, words", [
    ("pattern: [", ["not valid YAML"]),
    ("pattern: {tasks: {a: !!python/object/apply:os.system [echo]}}",
     ["uses the YAML tag '!!python/object/apply:os.system'", "plain data only"]),
    ("pattern: {tasks: {a: {env: CartPole-v1, episdoes: 3}}}",
     ["bad.yaml", "suite 'pattern'", "task 'a'", "'episdoes'", "did you mean 'episodes'"]),
    ("pattern: {tasks: {a: {kwargs: {}}}}", ["task 'a'", "has no env"]),
    ("pattern:\n  tasks:\n    a: CartPole-v1\n    a: Acrobot-v1\n", ["task 'a' twice"]),
    ("pattern: {tasks: {a: {env: CartPole-v1, kwargs: [1, 2]}}}", ["kwargs must be a mapping"]),
    ("pattern: {episodes: 0, tasks: {a: CartPole-v1}}", ["episodes must be", "got 0"]),
])
def test_bad_manifests_are_one_sentence_and_write_nothing(tmp_path, text, words):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(UsageError) as caught:
        evaluate(suite=str(bad), out=tmp_path / "out")
    message = str(caught.value)
    assert all(w in message for w in words), message
    assert "\n" not in message and not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out*"))


def alias_bomb(levels: int, use: str = "kwargs") -> str:
    """A manifest whose one task nests ``levels`` levels of 9 aliases each (9**levels
    values once expanded) under ``use``."""
    lines = ["bomb:", "  tasks:", "    t:", "      env: CartPole-v1", f"      {use}:"]
    lines.append("        l0: &l0 [x, x, x, x, x, x, x, x, x]")
    lines += [f"        l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("text, words", [
    (alias_bomb(9), ["expands its aliases to more than 100,000 values"]),  # 9**9 values
    ("s:\n  tasks:\n    t: {env: CartPole-v1, kwargs: {x: &a [1, *a]}}\n",
     ["alias *a inside the value it names"]),
    ("x: " + "y" * (1 << 20) + "\n", ["more than a manifest needs"]),
    # under the cap, but a refusal that quoted what it got would be megabytes long
    (alias_bomb(5, use="episodes"), ["episodes must be a whole number", "..."]),
    (f"s:\n  tasks:\n    {'t' * 300}$: CartPole-v1\n", ["301 characters long"]),
    (f"s:\n  tasks:\n    t: {{env: CartPole-v1, {'k' * 1000}: 1}}\n", ["unknown key", "…"]),
])
def test_a_manifest_too_big_once_expanded_is_refused_fast_in_one_short_line(tmp_path, text,
                                                                            words):
    """A 600-byte alias bomb hung `eval --suite` (everything walked 9**9 values); caps apply
    while the YAML is composed, and no refusal quotes more than a line of what it got."""
    bad = tmp_path / "bomb.yaml"
    bad.write_text(text)
    started = time.monotonic()
    result = run_cli("eval", "--suite", str(bad), "--out", str(tmp_path / "out"))
    assert time.monotonic() - started < 20
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr[:2000]
    assert all(w in lines[0] for w in words) and "Traceback" not in result.stderr, lines[0]
    assert len(lines[0]) < 400 + len(str(bad))
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_bad_suite_arguments(tmp_path, manifest):
    with pytest.raises(UsageError, match="does not exist"):
        evaluate(suite=str(tmp_path / "missing.yaml"), out=tmp_path / "o")
    with pytest.raises(UsageError, match="did you mean 'never'"):
        select_tasks(load_manifest(manifest), "nevr")
    with pytest.raises(UsageError, match="did you mean 'mazes'"):
        evaluate(suite="maze", out=tmp_path / "o")
    result = run_cli("eval", "CartPole-v1", "--suite", "classic", "--out", str(tmp_path / "o"))
    assert result.returncode == 2 and "not both" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "o").exists()
    result = run_cli("eval", "--suite", str(manifest), "--tasks", "end,nope",
                     "--out", str(tmp_path / "o"), cwd=ROOT)
    assert result.returncode == 2 and "--tasks 'nope' is not a task" in result.stderr

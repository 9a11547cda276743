"""A suite's headline is success (per task, and the unweighted mean over tasks with its
interval over k tasks), never a return pooled across tasks; pooled rows hold only what
pools (success counts); an interval over one task is not drawn. Checked on a real suite
run's CLI output and report: tasks whose returns differ in scale (about -3 and -40)."""

from __future__ import annotations

import re

from tests.conftest import run_cli

PATTERN = "tests.assets.suite_envs:SuccessPattern"
MANIFEST = f"""
big:
  episodes: 6
  tasks:
    short: {{env: "{PATTERN}", kwargs: {{report: end, at: 2, steps: 4}}}}
    long: {{env: "{PATTERN}", kwargs: {{report: end, at: 2, steps: 40}}}}
    silent: {{env: "{PATTERN}", kwargs: {{report: never, steps: 10}}}}
solo:
  episodes: 6
  tasks:
    only: {{env: "{PATTERN}", kwargs: {{report: end, at: 2, steps: 8}}}}
"""


def test_a_suites_headline_is_success_over_its_tasks_never_a_pooled_return(tmp_path):
    manifest = tmp_path / "bench.yaml"
    manifest.write_text(MANIFEST)
    done = run_cli("eval", "--suite", str(manifest), "--out", str(tmp_path / "run"),
                   "--quiet")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    # Seeds 0..5, success when seed % 3 == 0: 2 of 6 in every task that reports it; 3 tasks
    # report it (silent does not), so the mean is over k = 3 tasks.
    headline = next(line for line in out.splitlines()
                    if line.startswith("success, unweighted mean over 3 tasks: 33.3% "))
    assert "stratified bootstrap over 3 tasks" in headline
    assert "mean return" not in out and "IQM" not in out and " ± " not in out
    # pooled rows: success counts, no rewards or lengths
    pooled = [line for line in out.splitlines() if "pooled" in line]
    assert len(pooled) == 3 and all(line.count("—") == 2 for line in pooled), pooled
    assert re.search(r"short .*-1\.83", out) and re.search(r"long .*-37\.83", out)  # per task

    html = (tmp_path / "run" / "report.html").read_text()
    assert "mean return</div>" not in html  # no return card
    assert "Policy: success, unweighted mean over 3 tasks" in html
    assert "unweighted mean of 2 task rates" in html  # suite 'big': k = 2 said
    assert "over 2 tasks" in html
    assert "unweighted mean of 1 task rates" not in html  # suite 'solo': not drawn

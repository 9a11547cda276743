"""One record of a run: every output of real runs agrees, episode by episode and by the
full key (role, suite, task, index, seed), with what is recomputed here from
``episodes.jsonl`` and the tapes; success has one vocabulary, and its default is LeRobot's
own rule (the success key on the terminal step).

The runs: a plain run (a baseline, two videos), a manifest of two suites whose tasks have
different reward scales and lengths and an env whose success comes and goes (a baseline,
videos), the same suite served by a real `rolltape serve --suite` process, and a comparison
of two policies on the suite.
"""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest

from conftest import execute, run_cli
from rolltape import Tape, evaluate
from rolltape.record import SCHEMA_VERSION, Episode, EpisodeKey, Run, Summary
from rolltape.stats import wilson_interval

ASSETS = Path(__file__).parent / "assets"
SRC = Path(__file__).resolve().parent.parent / "src" / "rolltape"
ENVS = ASSETS / "suite_envs.py"
MANIFEST = f"""
levers:
  tasks:
    small: {{env: "{ENVS}:Lever", kwargs: {{scale: 1.0, steps: 8}}}}
    big: {{env: "{ENVS}:Lever", kwargs: {{scale: 100.0, steps: 20}}}}
pattern:
  tasks:
    comes: {{env: "{ENVS}:ComesAndGoes", kwargs: {{scale: 10.0, steps: 10}}}}
"""
EPISODES = 6


def manifest(folder: Path, text: str = MANIFEST) -> Path:
    path = folder / "suite.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    root = tmp_path_factory.mktemp("record")
    suite = manifest(root)
    return {
        "plain": evaluate(f"{ENVS}:Lever", f"{ENVS}:pull_mostly", episodes=5, seed=3,
                          baseline="random", video="0,2", out=root / "plain"),
        "suite": evaluate(suite=str(suite), policy=f"{ENVS}:pull_mostly", episodes=EPISODES,
                          baseline="random", video=1, workers=2, out=root / "suite"),
        "best": evaluate(suite=str(suite), policy=f"{ENVS}:pull_target", episodes=EPISODES,
                         video=0, report=False, out=root / "best"),
    }


# -------------------------------------------------------------------- recomputed truth


def truth(run: Run) -> dict[EpisodeKey, dict[str, Any]]:
    """Every episode of the run, from episodes.jsonl and its tape alone."""
    out = {}
    for line in (run.path / "episodes.jsonl").read_text().splitlines():
        row = json.loads(line)
        tape = Tape.load(run.path / row["tape"])
        key = EpisodeKey(row["role"], row.get("suite"), row.get("task"), row["index"],
                         row["seed"])
        assert (tape.seed, tape.meta["role"], tape.meta["index"]) == \
            (key.seed, key.role, key.index)
        assert (tape.meta.get("suite"), tape.meta.get("task")) == key.task_key
        out[key] = {"return": math.fsum(tape.rewards.tolist()), "length": tape.length,
                    "at_end": tape.success_at_end, "once": tape.success_once,
                    "cumulative": np.concatenate([[0.0], np.cumsum(tape.rewards)]).tolist()}
    return out


def check_results_json(run: Run, known: dict[EpisodeKey, dict[str, Any]]) -> None:
    data = json.loads((run.path / "results.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    rows = data["episodes_rows"] + data["baseline_rows"]
    assert len(rows) == len(known)
    for row in rows:
        t = known[Episode.from_json(row).key]
        assert (row["return"], row["length"]) == (t["return"], t["length"])
        assert (row["success_at_end"], row["success_once"]) == (t["at_end"], t["once"])
        assert "success" not in row  # one vocabulary: both rules, by name
    for role in data["summary"]:
        mine = [t for k, t in known.items() if k.role == role]
        s = data["summary"][role]
        assert s["mean"] == pytest.approx(np.mean([t["return"] for t in mine]), rel=1e-12)
        assert s["std"] == pytest.approx(np.std([t["return"] for t in mine]), rel=1e-12, abs=1e-12)
        for rule, flag in (("at_end", "at_end"), ("once", "once")):
            flags = [t[flag] for t in mine if t[flag] is not None]
            if flags:
                assert s[f"success_{rule}"]["count"] == sum(flags)
                assert s[f"success_{rule}"]["ci"] == pytest.approx(
                    list(wilson_interval(sum(flags), len(flags))))
        headline = [t["at_end"] for t in mine if t["at_end"] is not None]
        assert s["success_rule"] == "at_end"
        assert s["success_count"] == (sum(headline) if headline else None)
    if data.get("baseline_rows"):
        pairs = [(t["return"], known[k.counterpart("baseline")]["return"])
                 for k, t in known.items() if k.role == "policy"]
        imp = data["improvement_over_baseline"]
        assert imp["mean_diff"] == pytest.approx(np.mean([a - b for a, b in pairs]), rel=1e-12)


def series(page: str) -> dict[str, dict[str, list[float]]]:
    """Every chart series the page draws with its data: {chart id: {data-key: values}}."""
    out: dict[str, dict[str, list[float]]] = {}
    for chart in re.finditer(r'<figure id="plot-([^"]+)">(.*?)</figure>', page, re.S):
        found = out.setdefault(chart.group(1), {})
        for g in re.finditer(r'<g class="series"[^>]*data-key="([^"]+)"([^>]*)>', chart.group(2)):
            attrs = dict(re.findall(r"data-(\w+)='([^']*)'", g.group(2)))
            found[html.unescape(g.group(1))] = {k: json.loads(v) for k, v in attrs.items()}
    return out


def check_report(run: Run, known: dict[EpisodeKey, dict[str, Any]]) -> None:
    """Each chart draws the episodes of the task it names, by role, by index; each
    cumulative curve is the tape of the episode its key names."""
    page = (run.path / "report.html").read_text()
    charts = series(page)
    tasks = sorted({k.task_key for k in known}, key=str)
    for task in tasks:
        uid = "" if task[0] is None else "-" + "-".join(task)
        for role in ("policy", "baseline"):
            mine = sorted((k for k in known if k.role == role and k.task_key == task),
                          key=lambda k: k.index)
            if not mine:
                continue
            drawn = charts[f"returns{uid}"][f"{role}{uid}"]
            assert drawn["xs"] == [k.index for k in mine]
            assert drawn["ys"] == pytest.approx([known[k]["return"] for k in mine], rel=1e-12)
            assert charts[f"lengths{uid}"][f"{role}{uid}"]["ys"] == \
                [known[k]["length"] for k in mine]
            assert sorted(charts[f"distribution{uid}"][f"{role}{uid}"]["values"]) == \
                pytest.approx(sorted(known[k]["return"] for k in mine), rel=1e-12)
        curves = charts[f"cumulative{uid}"]
        videos = [v.key for v in run.results.videos if v.key.task_key == task]
        assert videos, f"no video of {task}"
        for key in videos:
            for episode in (key, key.counterpart("baseline")):
                if episode not in known:
                    continue
                drawn = curves[episode.anchor + ("-baseline" if episode.role == "baseline" else "")]
                assert drawn["ys"] == pytest.approx(known[episode]["cumulative"], rel=1e-12)
                assert drawn["xs"] == list(range(known[episode]["length"] + 1))  # whole axis
        prefix = "" if task[0] is None else f"{task[0]}-{task[1]}-"  # no other task's curve
        assert all(re.fullmatch(re.escape(prefix) + r"\d+(-baseline)?", k) for k in curves)


def check_notebook(run: Run, known: dict[EpisodeKey, dict[str, Any]]) -> None:
    """The executed notebook's episode table holds, row by row, the task, the episode and
    the baseline return of the same task and seed."""
    path = run.path / "report.ipynb"
    nb = nbformat.read(path, as_version=4)
    probe = "print('ROWS=' + json.dumps(episodes, default=str))"
    nb.cells.append(nbformat.v4.new_code_cell("import json\n" + probe))
    probed = run.path / "probe.ipynb"
    nbformat.write(nb, probed)
    executed = execute(probed, run.path)
    probed.unlink()
    errors = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors, errors
    text = "".join(o.text for c in executed.cells if c.cell_type == "code" for o in c.outputs
                   if o.output_type == "stream" and "ROWS=" in o.text)
    rows = json.loads(text.split("ROWS=", 1)[1])
    policy = sorted((k for k in known if k.role == "policy"), key=lambda k: (str(k.suite), str(k.task), k.index))
    assert len(rows) == len(policy)
    for row in rows:
        key = EpisodeKey("policy", row.get("suite"), row.get("task"), row["episode"],
                         row["seed"])
        assert row["return"] == pytest.approx(known[key]["return"], rel=1e-12)
        assert (row["success at end"], row["success once"]) == \
            (known[key]["at_end"], known[key]["once"])
        base = key.counterpart("baseline")
        if base in known:
            assert row["baseline return"] == pytest.approx(known[base]["return"], rel=1e-12)


def check_sidecars(run: Run) -> None:
    """Paths in video sidecars name the committed run's files, never the staging folder."""
    sidecars = list((run.path / "videos").rglob("*.metadata.json"))
    assert sidecars
    for car in sidecars:
        text = car.read_text()
        assert ".partial" not in text
        record = json.loads(text)
        assert (car.parent / record["tape"]["path"]).resolve().is_file()
        for out in record["result"]["outputs"]:
            assert (car.parent / out).exists()


# ---------------------------------------------------------------------------- the tests


@pytest.mark.usefixtures("python3_kernel")
@pytest.mark.parametrize("name", ["plain", "suite"])
def test_every_output_agrees_with_the_episodes(runs: dict[str, Run], name: str) -> None:
    run = runs[name]
    known = truth(run)
    check_results_json(run, known)
    check_report(run, known)
    check_notebook(run, known)
    check_sidecars(run)
    assert Run.load(run.path) == run  # the record written is the record returned


def test_a_suite_run_says_its_seeds_and_tasks(runs: dict[str, Run]) -> None:
    run = runs["suite"]
    page = (run.path / "report.html").read_text()
    for task in ("levers/small", "levers/big", "pattern/comes"):
        assert f"{task}: 0 … {EPISODES - 1}" in page  # seeds per task in the provenance
        assert f"{task}: return per episode" in page
    info = json.loads((run.path / "eval_info.json").read_text())
    known = truth(run)
    for entry in info["per_task"]:
        mine = sorted((k for k in known if k.role == "policy"
                       and k.task_key == (entry["task_group"], entry["task_id"])),
                      key=lambda k: k.index)
        assert entry["metrics"]["sum_rewards"] == pytest.approx([known[k]["return"] for k in mine])
        assert entry["metrics"]["successes"] == [known[k]["at_end"] for k in mine]
        assert entry["n_success"] == sum(known[k]["at_end"] for k in mine)


def test_success_follows_lerobots_rule_by_default_and_once_when_asked(tmp_path: Path) -> None:
    """ComesAndGoes on seeds 0..11: 4 episodes succeed on their terminal step (LeRobot's
    own rollout reads is_success from the final step), 8 at some step."""
    text = f"pattern:\n  tasks:\n    comes: {{env: \"{ENVS}:ComesAndGoes\"}}\n"
    default = evaluate(suite=str(manifest(tmp_path, text)), episodes=12, report=False,
                       out=tmp_path / "default")
    [task] = default.results.suite["per_task"]
    assert (task["n_success"], task["pc_success"]) == (4, pytest.approx(100 * 4 / 12))
    assert task["success_once"]["n_success"] == 8 and task["success_rule"] == "at_end"
    info = json.loads((default.path / "eval_info.json").read_text())
    assert info["per_task"][0]["n_success"] == 4 and info["overall"]["n_success"] == 4

    once = tmp_path / "once"
    once.mkdir()
    chosen = evaluate(suite=str(manifest(once, text.replace("  tasks:", "  success: once\n  tasks:"))),
                      episodes=12, report=False, out=tmp_path / "once-run")
    [task] = chosen.results.suite["per_task"]
    assert (task["n_success"], task["success_rule"]) == (8, "once")
    assert task["success_at_end"]["n_success"] == 4

    plain = evaluate(f"{ENVS}:ComesAndGoes", episodes=12, out=tmp_path / "plain")
    s = plain.results.summary["policy"]
    assert (s.success_count, s.success_once["count"]) == (4, 8)
    page = (plain.path / "report.html").read_text()
    assert "random actions (seeded)" in page and "deterministic actions" not in page
    assert "(not used: a random policy samples its actions)" in page
    assert "success on the terminal step (LeRobot&#39;s rule)" in page
    flag = evaluate(f"{ENVS}:ComesAndGoes", episodes=12, report=False, success="once",
                    out=tmp_path / "flag").results.summary["policy"]
    assert (flag.success_rule, flag.success_count, flag.success_at_end["count"]) == ("once", 8, 4)


def test_a_bad_success_rule_is_one_sentence(tmp_path: Path) -> None:
    done = run_cli("eval", f"{ENVS}:ComesAndGoes", "--success", "any", "--out",
                   str(tmp_path / "x"))
    assert done.returncode == 2 and "--success must be 'at_end'" in done.stderr
    assert done.stderr.count("\n") == 1 and not (tmp_path / "x").exists()
    bad = manifest(tmp_path, MANIFEST.replace("pattern:\n  tasks:", "pattern:\n  success: any\n  tasks:"))
    done = run_cli("eval", "--suite", str(bad), "--out", str(tmp_path / "y"))
    assert done.returncode == 2 and "success must be 'at_end'" in done.stderr


def test_a_comparison_pairs_episodes_by_task_and_seed(runs: dict[str, Run], tmp_path: Path
                                                      ) -> None:
    out = tmp_path / "cmp"
    done = run_cli("compare", str(runs["best"].path), str(runs["suite"].path), "--out", str(out))
    assert done.returncode == 0, done.stderr
    result = json.loads((out / "comparison.json").read_text())
    known = {"best": truth(runs["best"]), "suite": truth(runs["suite"])}  # by label
    checked = 0
    for pair in result["pairs"]:
        if pair["a"] not in known or pair["b"] not in known:
            continue  # a pair with the random baseline
        a, b = known[pair["a"]], known[pair["b"]]
        suite, task = pair["task"].split("/")
        for entry in pair["per_seed"]:
            key = EpisodeKey("policy", suite, task, entry["seed"], entry["seed"])  # seed 0 + i
            assert entry["a"] == pytest.approx(a[key]["return"], rel=1e-12)
            assert entry["b"] == pytest.approx(b[key]["return"], rel=1e-12)
            checked += 1
    assert checked == 3 * EPISODES


def test_a_served_suite_is_the_same_record(runs: dict[str, Run], tmp_path: Path) -> None:
    pytest.importorskip("zmq")
    from conftest import Server

    server = Server(what=("--suite", str(manifest(tmp_path))))
    try:
        served = evaluate(suite=str(manifest(tmp_path)), policy=f"{ENVS}:pull_mostly",
                          episodes=EPISODES, baseline="random", video=0, report=False,
                          served=server.address, out=tmp_path / "served")
    finally:
        server.stop()
    local = runs["suite"]
    check_results_json(served, truth(served))
    strip = lambda e: (e.key, e.ret, e.length, e.success_at_end, e.success_once)  # noqa: E731
    assert [strip(e) for e in served.results.all_episodes] == \
        [strip(e) for e in local.results.all_episodes]
    assert served.results.suite["per_task"] == local.results.suite["per_task"]


def test_a_damaged_results_json_is_one_sentence(runs: dict[str, Run], tmp_path: Path) -> None:
    import shutil

    from rolltape.errors import UsageError

    folder = tmp_path / "run"
    shutil.copytree(runs["plain"].path, folder)
    good = json.loads((folder / "results.json").read_text())
    damage = {
        "no seed": lambda d: d["episodes_rows"][0].pop("seed"),
        "a seed 'abc'": lambda d: d["episodes_rows"][0].update(seed="abc"),
        "rows a dict": lambda d: d.update(episodes_rows={"a": 1}),
        "a return 'x'": lambda d: d["episodes_rows"][1].update({"return": "x"}),
        "a success 2": lambda d: d["episodes_rows"][1].update(success_at_end=2),
        "two alike": lambda d: d["episodes_rows"].append(d["episodes_rows"][0]),
    }
    for what, spoil in damage.items():
        data = json.loads(json.dumps(good))
        spoil(data)
        (folder / "results.json").write_text(json.dumps(data))
        with pytest.raises(UsageError) as err:
            Run.load(folder)
        assert "results.json" in str(err.value) and "\n" not in str(err.value), what


def test_no_module_reads_results_by_string() -> None:
    """Outputs read the typed record: no ``results[...]``/``results.get(...)`` by string
    key outside the record's own to_json/from_json (rolltape.record)."""
    pattern = re.compile(r"""\bresults\s*(\[|\.get\()\s*['"]""")
    found = [f"{p.relative_to(SRC)}:{n}" for p in SRC.rglob("*.py") if p.name != "record.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []


def test_summary_round_trips_and_counts_by_rule() -> None:
    key = lambda i: EpisodeKey("policy", None, None, i, i)  # noqa: E731
    eps = [Episode(key(0), 1.0, 3, True, True), Episode(key(1), 2.0, 3, False, True),
           Episode(key(2), None, 3, None, None, flags=("nonfinite_return",))]
    s = Summary.of(eps, "once")
    assert (s.n, s.episodes, s.nonfinite_returns) == (2, 3, 1)
    assert (s.success_rule, s.success_count, s.success_known) == ("once", 2, 2)
    assert s.success_at_end["count"] == 1
    assert Summary.from_json(json.loads(json.dumps(s.to_json()))) == s


@pytest.fixture
def small_disks(tmp_path: Path):
    """Real tmpfs mounts (the tests run as root, in CI too): a 16 KiB one and a read-only
    one, unmounted afterwards."""
    import subprocess

    disks = {}
    for name, options in (("full", "size=16k"), ("ro", "ro,size=1m")):
        disks[name] = tmp_path / name
        disks[name].mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(disks[name])],
                       check=True)
    yield disks
    for disk in disks.values():
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_compare_to_a_bad_out_is_one_sentence_and_leaves_no_half(runs: dict[str, Run],
                                                                  small_disks: dict[str, Path],
                                                                  tmp_path: Path) -> None:
    a, b = str(runs["best"].path), str(runs["suite"].path)
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for out, words in ((a_file, "is a file"), (small_disks["ro"] / "cmp", "Read-only"),
                       (small_disks["full"], "No space left")):
        done = run_cli("compare", a, b, "--out", str(out))
        assert done.returncode == 2, (out, done.stderr)
        assert words in done.stderr and done.stderr.count("\n") == 1, done.stderr
        assert "Traceback" not in done.stderr
        if out.is_dir():
            assert not list(out.glob("comparison.*")), list(out.iterdir())


def test_compare_refuses_rows_that_disagree_with_their_tapes(runs: dict[str, Run],
                                                             tmp_path: Path) -> None:
    import shutil

    edited = tmp_path / "edited"
    shutil.copytree(runs["suite"].path, edited)
    data = json.loads((edited / "results.json").read_text())
    for row in data["episodes_rows"]:
        row["return"] += 1000  # the tapes are untouched
    (edited / "results.json").write_text(json.dumps(data))
    done = run_cli("compare", str(runs["best"].path), str(edited), "--out", str(tmp_path / "c"))
    assert done.returncode == 2 and "does not match the tapes" in done.stderr
    assert "levers/small episode 0 (seed 0)" in done.stderr and done.stderr.count("\n") == 1
    assert not (tmp_path / "c").exists()


def test_messages_name_what_is_wrong(tmp_path: Path) -> None:
    """--resume after a manifest change names the task and the field; --resume onto a
    file says it is a file; a compare of a run with a failed episode says so."""
    path = manifest(tmp_path)
    out = tmp_path / "run"
    evaluate(suite=str(path), episodes=2, report=False, out=out)
    path.write_text(MANIFEST.replace("scale: 100.0", "scale: 50.0"))
    done = run_cli("eval", "--suite", str(path), "-n", "2", "--resume", "--out", str(out))
    assert done.returncode == 2, done.stderr
    assert "task levers/big: kwargs.scale was 100.0, now 50.0" in done.stderr

    afile = tmp_path / "afile"
    afile.write_text("x")
    done = run_cli("eval", f"{ENVS}:Lever", "--resume", "--out", str(afile))
    assert done.returncode == 2 and "is a file, not a run to resume" in done.stderr
    assert afile.read_text() == "x"

    toy = "tests.assets.toy_envs:FaultToy-v0"
    broken = evaluate(toy, env_kwargs={"fault": "raise_step", "at_seed": 1}, episodes=3,
                      report=False, out=tmp_path / "broken")
    whole = evaluate(toy, env_kwargs={"fault": "raise_step", "at_seed": 1}, episodes=3,
                     report=False, out=tmp_path / "whole", seed=10)
    assert broken.results.failed and not whole.results.failed
    done = run_cli("compare", str(whole.path), str(broken.path), "--out", str(tmp_path / "c"))
    assert done.returncode == 2 and "1 failed episode(s)" in done.stderr
    assert "policy episode 1, seed 1" in done.stderr and "--resume" in done.stderr

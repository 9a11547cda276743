"""`rolltape diff RUN --against DATASET`: a run against the Minari dataset (or LeRobotDataset)
rolltape exported from it is "no difference" (actions, rewards, flags and, for Minari, every
observation's digest equal, paired by seed); a folder that is not a dataset is one
sentence and exit 2."""

from __future__ import annotations

from rolltape.cli import main
from rolltape.compare.diff import diff_runs


def test_a_run_against_its_own_minari_export_is_no_difference(random_run, tmp_path, capsys):
    datasets = tmp_path / "minari"
    assert main(["export", str(random_run.path), "--to", "minari", "--id", "test/cheetah-v0",
                 "--out", str(datasets)]) == 0
    report = diff_runs(random_run.path, against=datasets / "test" / "cheetah-v0")
    assert report["verdict"] == "no difference", report["episodes"]
    assert report["paired"] == 3 and report["card"]["differences"] == []
    assert any("control rate" in n for n in report["card"]["not_compared"])
    capsys.readouterr()
    assert main(["diff", str(random_run.path), "--against", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rolltape: --against") and "is not a Minari dataset" in err
    assert main(["diff", str(random_run.path)]) == 2  # neither a second run nor a dataset
    assert "give a second run" in capsys.readouterr().err


def test_a_run_against_its_own_lerobot_export_is_no_difference(random_run, tmp_path, capsys):
    """Paired by the seed rolltape's export keeps in meta/episodes, compared at the float32
    the dataset stores; a LeRobotDataset without seeds is one sentence and exit 2."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "lerobot"
    assert main(["export", str(random_run.path), "--to", "lerobot", "--out", str(out)]) == 0
    report = diff_runs(random_run.path, against=out)
    assert report["verdict"] == "no difference", report["episodes"]
    assert report["paired"] == 3 and report["card"]["differences"] == []
    assert report["numbers"]["return_changed"] == 0
    assert any(n.startswith("observations") for n in report["card"]["not_compared"])
    # one action the dataset says was taken otherwise (episode 1, step 5): found there
    data = out / "data" / "chunk-000" / "file-000.parquet"
    table = pq.read_table(data)
    actions = table.column("action").to_pylist()
    row = table.column("episode_index").to_pylist().index(1) + 5
    actions[row] = [-x for x in actions[row]]
    pq.write_table(table.set_column(table.schema.get_field_index("action"), "action",
                                    pa.array(actions, table.schema.field("action").type)), data)
    first = diff_runs(random_run.path, against=out)["first"]
    assert (first["index"], first["divergence"]["step"], first["divergence"]["field"]) == (
        1, 5, "action"), first
    episodes = out / "meta" / "episodes" / "chunk-000" / "file-000.parquet"
    pq.write_table(pq.read_table(episodes).drop(["rolltape/seed"]), episodes)
    capsys.readouterr()
    assert main(["diff", str(random_run.path), "--against", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "keeps no episode's seed" in err and "\n" not in err and "Traceback" not in err

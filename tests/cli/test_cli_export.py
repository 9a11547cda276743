"""The ``export`` verb (rolltape.cli.export): registered on an app, its flags reach
rolltape.export with the API's own defaults, and it says what it wrote in one line; bad
input is one line and exit 2. A real run of the 5-step toy env of
``tests/assets/toy_envs.py``, exported to LeRobot's layout (pyarrow; no lerobot needed)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import typer

from rolltape import Run, evaluate, export
from rolltape.cli import export as export_verb
from rolltape.cli import main
from rolltape.datasets import NOT_EXPORTED, ExportConfig
from rolltape.errors import UsageError
from rolltape.flags import SAME

TOY = "tests.assets.toy_envs:SuccessToy-v0"


def verb(monkeypatch: pytest.MonkeyPatch | None = None
         ) -> tuple[typer.Typer, list[str], list[str]]:
    """A fresh app with only the export verb, and what it says and warns."""
    app = typer.Typer()
    said: list[str] = []
    warned: list[str] = []
    if monkeypatch is not None:
        monkeypatch.setattr(export_verb, "say", said.append)
        monkeypatch.setattr(export_verb, "warn", warned.append)
    app.command("export")(export_verb.export)

    @app.command()
    def other() -> None:  # a second verb keeps typer from making export the whole app
        pass

    return app, said, warned


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return evaluate(TOY, "random", episodes=4, seed=0, out=tmp_path_factory.mktemp("run") / "r",
                    report=False, viewer=False)


def params() -> dict[str, object]:
    app, _, _ = verb()
    command = typer.main.get_command(app).commands["export"]  # type: ignore[attr-defined]
    return {p.name: p for p in command.params}


def test_the_verb_and_the_api_build_the_same_record(run: Run, monkeypatch) -> None:
    """`rolltape export` and rolltape.export take ExportConfig's fields, with its defaults,
    and build the same record (the API quiet unless asked)."""
    import rolltape.datasets as datasets

    flags = params()
    for f in dataclasses.fields(ExportConfig):
        if f.name in flags and f.default is not dataclasses.MISSING:
            spec = f.metadata["flag"]
            cli = f.default if spec.cli_default is SAME else spec.cli_default
            assert flags[f.name].default == cli, f.name  # type: ignore[attr-defined]
    assert not set(NOT_EXPORTED) & set(flags)  # the replay's choices export cannot honour
    built: list[ExportConfig] = []
    monkeypatch.setattr(datasets, "export_run", lambda config, on_episode=None: built.append(
        config) or datasets.ExportOutcome(Path("x"), "lerobot", 0, 0))
    monkeypatch.setattr(export_verb, "say", lambda line: None)
    export(str(run.path), to="lerobot", out="ds", pick="best:2", success_only=True)
    app, _, _ = verb()
    app(args=["export", str(run.path), "--to", "lerobot", "-o", "ds", "--pick", "best:2",
              "--success-only", "-q"], standalone_mode=False)
    assert built[0] == built[1] == ExportConfig(run=str(run.path), to="lerobot", out="ds",
                                                pick="best:2", success_only=True, quiet=True)


def test_the_flags_are_spelled_as_documented() -> None:
    flags = params()
    assert flags["dataset_id"].opts == ["--id"]  # type: ignore[attr-defined]
    assert set(flags["out"].opts) == {"--out", "-o"}  # type: ignore[attr-defined]
    assert flags["cameras"].multiple and flags["trust_module"].multiple  # type: ignore[attr-defined]
    assert flags["to"].required  # type: ignore[attr-defined]
    # Issue 40: --episodes is eval's count and --only bench's names; export picks.
    assert flags["pick"].opts == ["--pick"]  # type: ignore[attr-defined]
    assert "episodes" not in flags and "only" not in flags


def test_an_export_says_what_it_wrote_in_one_line(run: Run, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    app, said, warned = verb(monkeypatch)
    out = tmp_path / "ds"
    app(args=["export", str(run.path), "--to", "lerobot", "--out", str(out), "--pick",
              "0,1,2", "--success-only", "--trust-module", "tests"], standalone_mode=False)
    # The toy succeeds on even seeds: of episodes 0, 1 and 2, those of seeds 0 and 2.
    kept = [e for e in run.results.episodes if e.key.seed in (0, 2)]
    steps = sum(e.length for e in kept)
    assert said == [f"wrote {out} (lerobot: 2 episodes, {steps} steps)"] and warned == []
    info = json.loads((out / "meta" / "info.json").read_text())
    assert (info["total_episodes"], info["total_frames"]) == (2, steps)


@pytest.mark.parametrize(("flags", "words"), [
    (["--to", "parquet"], "Unknown --to 'parquet'; use one of minari, lerobot."),
    (["--to", "minari", "--camera", "free"], "--camera makes videos, which only --to lerobot"),
    (["--to", "lerobot", "--fps", "-1"], "--fps must be a number above 0, got -1.0."),
    (["--to", "lerobot", "--pick", "x"], "--pick 'x' is not understood; use a count"),
    (["--to", "lerobot", "--mode", "auto"], "Unknown --mode 'auto'; use one of resim, restore."),
])
def test_bad_input_is_one_line_and_exit_2(run: Run, tmp_path: Path, capsys, flags: list[str],
                                          words: str) -> None:
    code = main(["export", str(run.path), "--out", str(tmp_path / "ds"), *flags])
    err = capsys.readouterr().err
    assert code == 2 and words in err, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("rolltape: ")
    assert not (tmp_path / "ds").exists()


def test_workers_default_to_one_per_core_and_a_negative_count_is_refused(run: Run,
                                                                          tmp_path: Path) -> None:
    # Unset: one per core, as render's and eval's --render-workers (issue 40: one default).
    assert params()["workers"].default is None  # type: ignore[attr-defined]
    out = tmp_path / "ds"
    done = export(run, to="lerobot", out=out, trust_module=("tests",))
    assert done.episodes == 4 and (out / "meta" / "info.json").is_file()
    with pytest.raises(UsageError, match="--workers must be at least 1, got -1"):
        export(run, to="lerobot", out=tmp_path / "bad", workers=-1, trust_module=("tests",))
    assert not (tmp_path / "bad").exists()

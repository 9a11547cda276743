"""Adding an executor touches no file of rolltape: a toy one (threads in one process),
written here alone against :mod:`rolltape.executors.base` and registered by name, runs an
eval and a render whose tapes equal the local executor's.

The toy runs each share's ``task`` in a thread, and render jobs one by one in a thread of
the same process. One process reads its GL backend once, when MuJoCo is first imported, so
the toy's process picks it at start (a fresh interpreter: pytest's imported MuJoCo long
before) and draws with that one only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from rolltape import executors
from rolltape.errors import UsageError
from rolltape.executors.base import Message, RenderWork, ShareWork
from rolltape.executors.fallback import BackendFallback
from rolltape.files import write_bytes, write_folder
from rolltape.flags import SCALE, at_least, flag

RUN = dict(episodes=4, seed=21, max_episode_steps=40, baseline="random", video=1,
           workers=2, report=False)


def _write(files: dict[str, Any]) -> None:
    for path, data in files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        (write_folder if isinstance(data, dict) else write_bytes)(path, data)


class _ThreadPool:
    """Render jobs one at a time on a thread, the next backend after a failure."""

    def __init__(self, work: RenderWork, jobs: Sequence[Any], order: Sequence[str],
                 on_done: Callable[[int, Any], None]) -> None:
        self.work, self.jobs, self.on_done = work, jobs, on_done
        self.fallback = BackendFallback(order, len(jobs))
        self.errors: list[tuple[int, str, str]] = []

    def _one(self, i: int) -> None:
        while (backend := self.fallback.backend_for(self.work.needs_backend[i])) != "":
            if backend is not None:
                os.environ.update(self.work.environment(backend, 1))
            kind, payload, files = self.work.task(backend, self.jobs[i],
                                                  self.work.ship(self.jobs[i]))
            if kind == "backend_failed":
                self.fallback.died(i, backend, payload)
                continue
            if kind == "done":
                _write(files)
                self.on_done(i, payload)
            else:
                self.errors.append((i, kind, payload))
            return

    def run(self) -> None:
        thread = threading.Thread(target=lambda: [self._one(i) for i in range(len(self.jobs))])
        thread.start()
        thread.join()


@dataclass(frozen=True, kw_only=True)
class ThreadOptions:
    """The toy executor's own option, declared as Ray's are (executors.ray.RayOptions)."""

    threads: int = flag(2, "Threads of the toy executor.", panel=SCALE, rule=at_least(1))


class ThreadExecutor:
    """Every share's task on a thread of this process; no worker processes."""

    name = "threads"
    runs_workers = warms_workers = splits_segments = shares_disk = False
    OPTIONS = ThreadOptions

    def __init__(self, threads: int = 2) -> None:
        self.threads = threads

    def check(self) -> None:
        if self.threads < 1:
            raise UsageError(f"threads must be at least 1, got {self.threads}.")

    def run_shares(self, work: ShareWork, shares: Sequence[Any]) -> Iterator[Message]:
        assert work.task is not None
        with ThreadPoolExecutor(self.threads) as pool:
            for answer in pool.map(work.task, work.cut(list(shares))):
                if "usage_error" in answer:
                    raise UsageError(answer["usage_error"])
                _write(answer["files"])
                yield from answer["messages"]

    def render_pool(self, work: RenderWork, jobs: Sequence[Any], order: Sequence[str],
                    workers: int, timeout: float, *, on_progress: Any, on_done: Any,
                    cancel: Any = None, warm: Sequence[Any] = ()) -> _ThreadPool:
        return _ThreadPool(work, jobs, order, on_done)

    def warm_render_workers(self, work: RenderWork, backend: str, workers: int) -> list[Any]:
        return []


def main(out: str, tape: str, backend: str) -> None:
    """(In a fresh interpreter.) An eval and a render on the toy executor with ``backend``
    read by MuJoCo before anything else; prints JSON."""
    from rolltape.pass2.backends import gl_environment

    os.environ.update(gl_environment(backend))
    import mujoco  # noqa: F401  (reads MUJOCO_GL now, once for this process)

    from rolltape import RenderRequest, evaluate, render

    executors.register("threads", ThreadExecutor)
    run = evaluate("CartPole-v1", "random", out=out, executor="threads",
                   executor_options={"threads": 2}, backends=backend, **RUN)
    [result] = render([RenderRequest(tape, [str(Path(out) / "again.mp4")])],
                      backends=backend, executor="threads")
    print(json.dumps({"threads": threading.active_count(),
                      "verified": [v.verified for v in run.results.videos],
                      "render_verified": result.verified, "frames": result.frames}))


def test_a_toy_executor_in_this_file_alone_gives_the_local_executor_s_tapes(tmp_path):
    from rolltape import Tape, evaluate

    local = evaluate("CartPole-v1", "random", out=tmp_path / "local", **RUN)
    tape = local.path / local.results.episodes[0].tape
    here = Path(__file__).resolve().parent
    from rolltape.pass2.backends import doctor, first_working

    backend = first_working(doctor())  # one that works here (CartPole itself draws with pygame)
    code = (f"import sys; sys.path.insert(0, {str(here)!r}); import test_executor_protocol as t; "
            f"t.main({str(tmp_path / 'threads')!r}, {str(tape)!r}, {backend!r})")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    said = json.loads(child.stdout.strip().splitlines()[-1])
    assert said["verified"] == [True] and said["render_verified"] is True
    assert said["frames"] == local.results.episodes[0].length + 1
    assert (tmp_path / "threads" / "again.mp4").stat().st_size > 0

    threads = json.loads((tmp_path / "threads" / "results.json").read_text())
    for role in ("episodes_rows", "baseline_rows"):
        rows_l, rows_t = local.results.to_json()[role], threads[role]
        assert len(rows_l) == len(rows_t) == RUN["episodes"]
        for a, b in zip(rows_l, rows_t):
            assert {**a, "wall_s": 0} == {**b, "wall_s": 0}
            ta, tb = Tape.load(local.path / a["tape"]), Tape.load(tmp_path / "threads" / b["tape"])
            for name in ("actions", "rewards", "terminated", "truncated", "obs_digest"):
                x, y = getattr(ta, name), getattr(tb, name)
                assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert local.results.to_json()["summary"] == threads["summary"]


def test_an_executor_is_picked_once_by_name_with_its_own_options():
    assert executors.get("local").runs_workers
    ray = executors.get("ray", address="auto", render_gpus=0.5)
    assert (ray.address, ray.render_gpus, ray.runs_workers) == ("auto", 0.5, False)
    for bad, text in ((lambda: executors.get("slurm"), "--executor must be one of"),
                      (lambda: executors.get("local", render_gpus=1.0),
                       "--ray-render-gpus is an option of another executor"),
                      (lambda: executors.get("ray", render_gpus=-1.0),
                       "--ray-render-gpus must be 0")):
        try:
            bad()
        except UsageError as exc:
            assert text in str(exc)
        else:
            raise AssertionError(text)


def test_no_code_above_the_executors_compares_their_names():
    """Executors are told apart by capability flags, never by name, outside executors/."""
    src = Path(__file__).resolve().parents[2] / "src" / "rolltape"
    found = [f"{p.relative_to(src)}:{n}" for p in src.rglob("*.py")
             if "executors" not in p.parts and "bench" not in p.parts
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if "executor ==" in line or "executor !=" in line or 'executor == "' in line]
    assert found == []

"""The one backend rule of pass 2 (rolltape.executors.fallback): backends in the caller's
order, a failed one dead for the rest of the run, each job's failures kept."""

from __future__ import annotations

from rolltape.executors.fallback import BackendFallback


def test_a_job_runs_on_the_first_backend_and_one_that_draws_nothing_on_none():
    fb = BackendFallback(["egl", "osmesa", "glfw"], jobs=1)
    assert fb.backend_for(True) == "egl"
    assert fb.backend_for(False) is None
    assert fb.problem() is None


def test_a_dead_backend_is_skipped_for_every_later_job():
    fb = BackendFallback(["egl", "osmesa", "glfw"], jobs=3)
    fb.died(0, "osmesa", "crash")
    assert fb.backend_for(True) == "egl"
    fb.died(1, "egl", "hung")
    assert fb.backend_for(True) == "glfw"
    assert fb.failures == {0: [("osmesa", "crash")], 1: [("egl", "hung")], 2: []}


def test_a_backend_keeps_the_first_reason_it_died_for_but_each_job_keeps_its_own():
    fb = BackendFallback(["egl", "osmesa"], jobs=2)
    fb.died(0, "egl", "first")
    fb.died(1, "egl", "second")
    assert fb.dead == {"egl": "first"}
    assert fb.failures[1] == [("egl", "second")]


def test_every_backend_dead_leaves_no_backend_and_names_each_reason_in_order():
    fb = BackendFallback(["egl", "osmesa"], jobs=1)
    fb.died(0, "osmesa", "no libOSMesa")
    assert fb.problem() is None
    fb.died(0, "egl", "no device")
    assert fb.backend_for(True) == ""
    assert fb.backend_for(False) is None  # a job that draws nothing still runs
    assert fb.problem() == ("Every GL backend failed (osmesa: no libOSMesa; egl: no device); "
                            "run `rolltape doctor` to see what each needs.")


def test_no_backends_at_all_is_no_problem_for_jobs_that_draw_nothing():
    fb = BackendFallback([], jobs=1)
    assert fb.backend_for(False) is None and fb.backend_for(True) == ""
    assert fb.problem() is None

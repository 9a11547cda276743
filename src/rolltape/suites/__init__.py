"""Benchmark suites: many tasks, one policy, success rates per task, suite and overall.

:mod:`~rolltape.suites.manifest` reads a YAML manifest (suites -> tasks -> env),
:mod:`~rolltape.suites.builtin` holds the suites rolltape ships (real benchmark envs) and
:mod:`~rolltape.suites.results` aggregates a suite run's rows and writes LeRobot's
``eval_info.json``. The orchestrator (:mod:`rolltape.evaluation`) turns a suite into pass-1
jobs, one per task and role.

May import: errors, envs, stats, files. Never: policies, pass 1, pass 2, executors, outputs.
"""

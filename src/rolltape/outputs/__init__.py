"""Outputs: the run folder, results, the HTML report, its charts, the notebook, the 3-D viewer.

May import: tape, envs, stats, files, errors. Never: policies, pass 1, executors.
"""

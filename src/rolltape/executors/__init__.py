"""Executors: where jobs run (fresh local processes, or Ray). They start the entry point
they are given and know nothing of what it does.

May import: the launcher, errors (Ray: the job types it ships). Never: the orchestrator.
"""

"""Envs: what an env id names, the env built from it, and what a replay reads from it.

One module per concern; importers name the module that holds what they use (this package
re-exports nothing, so importing one module loads only it):

- :mod:`rolltape.envs.ids`: the env-id grammar (a Gymnasium id, ``module:EnvId``,
  ``module:factory``, ``FILE.py:ATTR``, ``tcp://HOST:PORT/ENV_ID``), the spec a tape keeps
  (:func:`~rolltape.envs.ids.env_spec`), and whether a tape's id may run code (packages of
  Gymnasium envs, ``--trust-module``).
- :mod:`rolltape.envs.build`: building the env a spec describes
  (:func:`~rolltape.envs.build.make_env`), the one-sentence refusals of one that cannot be
  built or drawn, and MuJoCo's warnings.
- :mod:`rolltape.envs.state`: the simulator state a tape records and a replay puts back
  (MuJoCo physics with the env's ``after_set_state`` hook, Atari's emulator, the reset RNG,
  the TimeLimit's count).
- :mod:`rolltape.envs.digests`: observation digests, to find the first step a replay parts.

Both sides use them (pass 1, pass 2, the server); none imports policies, pass 1, pass 2,
executors or outputs. This file imports nothing.
"""

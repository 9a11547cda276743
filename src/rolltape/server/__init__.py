"""The env server's wire: ``rolltape serve`` steps envs for clients in other processes or
machines.

:mod:`.protocol` is the wire format (msgpack, arrays as dtype + shape + bytes, caps before
anything is expanded), :mod:`.server` the zmq loop and its sessions, :mod:`.client` the
Gymnasium-like ``RemoteEnv`` that pass-1 workers step, :mod:`.frames` the frame both sides
draw. Above it: :mod:`rolltape.address` (the ``tcp://`` grammar, beside the env-id grammar),
:mod:`rolltape.parity` (local vs served, a policy-side tool) and
:mod:`rolltape.cli.serve` (the ``serve`` and ``parity`` verbs).

May import: envs, tape, address, errors, files, the render side's backend choice (and
pyzmq/msgpack lazily, inside functions). Never: policy code, pass 1, an executor, the
orchestrator (tested).
"""

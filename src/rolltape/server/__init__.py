"""The env server: ``rolltape serve`` steps envs for clients in other processes or machines.

:mod:`.protocol` is the wire format (msgpack, arrays as dtype + shape + bytes, caps before
anything is expanded), :mod:`.server` the zmq loop and its sessions, :mod:`.client` the
Gymnasium-like ``RemoteEnv`` that pass-1 workers step, :mod:`.parity` the local-vs-served
comparison, :mod:`.commands` the ``serve`` and ``parity`` verbs.

May import: envs, tape, errors, files (and pyzmq/msgpack lazily, inside functions). The
server never imports policy code; only :mod:`.parity` (a policy-side tool) does.
"""

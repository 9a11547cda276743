"""Policies that live elsewhere: ``rolltape serve-policy`` and ``--policy ws://HOST:PORT``.

The wire is openpi's websocket protocol: binary websocket messages holding msgpack maps, NumPy
arrays encoded as openpi's ``msgpack_numpy`` encodes them; the server sends its metadata on
connect; each request is an observation and each answer holds ``"actions"``, an action chunk
of H rows. :mod:`.wire` is the codec and the address grammar, :mod:`.client` a session
on a server. Above it: :class:`rolltape.policies.ServedPolicy` (what pass 1 steps: chunks
executed open loop, ``--execute-steps``) and :mod:`rolltape.serve_policy` (the server,
``rolltape serve-policy``, which runs in another project's environment: it imports no
simulator, tested through ``sys.modules``).

May import: numpy, msgpack, websockets, errors, address, server.protocol (its caps and
dtype rule). Never: policies, gymnasium, torch, pass 1, pass 2, executors.
"""

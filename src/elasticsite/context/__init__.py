"""Recontextualization: nodes of an elastic cluster learn who joins and who leaves.

``broker`` serves the HTTP contract of docs/recontext-api.md (state in ``store``,
payloads in ``models``, certificate from ``tls``); ``client`` is how agents, the
manager and the ``elasticsite context`` commands talk to it. Submodules are imported
on use so an agent does not load the server's dependencies.
"""

"""Kueue's model of a workload, as Kueue v0.19.2 builds its Workload: no team policy here.

Owns the kinds table (:mod:`.kinds`, :mod:`.kind_model`, :mod:`.registration`), Kueue's view of an
object (:mod:`.view`: podsets, counts, :mod:`.podgroup`), per-pod requests (:mod:`.resources`), what
Kueue and the API server can read (:mod:`.wellformed`), which nodes can hold a pod
(:mod:`.scheduling`) and the node inventory (:mod:`.inventory`). May import :mod:`..objects` only.
"""

"""The team-policy rules of SPEC §3, one small pure module each.

Each rule reads Kueue's view of the workload (:mod:`webhook.core.kueue.view`), the team's compiled
policy and the draft, and records changes, denials and warnings in the plan. No I/O, no clock,
no globals. :mod:`webhook.core.plan.planner` runs them in order: queue, Kueue priority, pod priority
and node affinity per podset, topology, then the strand checks.
"""

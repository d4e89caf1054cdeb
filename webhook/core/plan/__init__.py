"""Mutation planning: an admission request and a team's compiled policy in, a plan and its JSON Patch out.

Owns the planner's input (:mod:`.request`), the dispatcher (:mod:`.planner`), CREATE (:mod:`.create`,
:mod:`.policy_fill` for values an admission policy filled in) and UPDATE (:mod:`.update`,
:mod:`.recheck`) planning, the draft of changes (:mod:`.draft`) and its RFC 6902 form
(:mod:`.patch`), the view of the planned object (:mod:`.planned`), owners and forged children
(:mod:`.owners`) and the rules, one module each (:mod:`.rules`). May import :mod:`..platform`,
:mod:`..kueue` and :mod:`..objects`, never :mod:`..admission`.
"""

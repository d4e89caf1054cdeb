"""The platform team's side: the platform file and what it compiles to.

Owns the platform file's models (:mod:`.models`), loading (:mod:`.platform`, :mod:`.yamlload`) and
checks (:mod:`.checks`), the naming presets (:mod:`.naming`), the compiled team policies
(:mod:`.policy`, :mod:`.prepared`) and which team a namespace belongs to (:mod:`.resolve`). May import
:mod:`..kueue` and :mod:`..objects`, never :mod:`..plan` or :mod:`..admission`.
"""

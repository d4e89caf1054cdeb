"""Kueue configuration generator (SPEC §6): platform file → Kueue objects, checks, drift.

Outer layer: imports :mod:`webhook.core`, never the other way round. Modules:
:mod:`~webhook.generate.manifests` (pure object builders), :mod:`~webhook.generate.render` (YAML
files), :mod:`~webhook.generate.validate` (generator checks, node inventory, recreate rules),
:mod:`~webhook.generate.live` (comparison with a live cluster), :mod:`~webhook.generate.hyperpod`
(SageMaker HyperPod import) and :mod:`~webhook.cli.generate` (the ``kgov`` commands).
"""

from webhook.generate.manifests import GenerateOptions, build_manifests
from webhook.generate.render import render_files
from webhook.generate.validate import validate_platform

__all__ = ["GenerateOptions", "build_manifests", "render_files", "validate_platform"]

"""``kgov``: the command line, one module per command group.

=================== ===================================================================
module              commands
=================== ===================================================================
:mod:`.admission`   ``review``, ``mutate`` (the admission path offline)
:mod:`.serve`       ``serve`` (the webhook server, :mod:`webhook.serve`)
:mod:`.platform`    ``schema``, ``policy``
:mod:`.generate`    ``generate``, ``diff``, ``import-hyperpod`` (:mod:`webhook.generate`)
:mod:`.chart`       ``chart values``, ``chart kinds``
:mod:`.topology`    ``topology``, ``topology label`` (:mod:`webhook.topology`)
:mod:`.certs`       ``certs`` (:mod:`webhook.certs`)
:mod:`.why`         ``why``, ``status`` (:mod:`webhook.why`)
:mod:`.completion`  ``completion bash|zsh|fish``
=================== ===================================================================

Shared options and exit codes: :mod:`.common`, :mod:`.options`. Nothing else imports this package.

Exit codes (all commands): 0 success; 1 the answer is "no" (a denied manifest, a malformed
AdmissionReview); 2 usage error or an input file that cannot be used (bad platform file, bad YAML).
"""

from __future__ import annotations

import click

from webhook.cli.admission import mutate_command, review_command
from webhook.cli.certs import certs_group
from webhook.cli.chart import chart_group
from webhook.cli.completion import completion_command
from webhook.cli.errors import KgovGroup
from webhook.cli.generate import diff_command, generate_command, import_hyperpod_command
from webhook.cli.platform import policy_command, schema_command
from webhook.cli.serve import serve_command
from webhook.cli.topology import topology_group
from webhook.cli.why import status_command, why_command

__all__ = ["main"]


@click.group(cls=KgovGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kueue-governor", prog_name="kgov")
def main() -> None:
    """kueue-governor: team policies and topology-aware placement for Kueue clusters."""


for _name, _command in (
    ("review", review_command),
    ("mutate", mutate_command),
    ("serve", serve_command),
    ("schema", schema_command),
    ("policy", policy_command),
    ("generate", generate_command),
    ("diff", diff_command),
    ("import-hyperpod", import_hyperpod_command),
    ("chart", chart_group),
    ("topology", topology_group),
    ("certs", certs_group),
    ("why", why_command),
    ("status", status_command),
    ("completion", completion_command),
):
    main.add_command(_command, _name)

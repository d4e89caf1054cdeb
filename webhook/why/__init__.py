"""``kgov why`` and ``kgov status``: why a workload is pending, and each team's quota and queue.

Layout: :mod:`~webhook.why.snapshot` (one read of the cluster), :mod:`~webhook.why.shapes`
(the types of what is read, checked once), :mod:`~webhook.why.state`
(a Workload's conditions), :mod:`~webhook.why.quota` (ClusterQueue and cohort quota),
:mod:`~webhook.why.placement` (TAS nodes and domains), :mod:`~webhook.why.decision` (what our
policy decided) and :mod:`~webhook.why.provenance` (who set a field: ``managedFields``),
:mod:`~webhook.why.explain` and :mod:`~webhook.why.causes` (the report and its cause),
:mod:`~webhook.why.owners` (the Workloads of what an object owns), :mod:`~webhook.why.report`
(text and JSON), :mod:`~webhook.why.status` and
:mod:`~webhook.why.picture` (``kgov status``), :mod:`~webhook.cli.why` (the CLI).
"""

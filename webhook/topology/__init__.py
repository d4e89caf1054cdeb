"""Topology tooling (SPEC §9): the tree of network nodes with free accelerators per domain
(``kgov topology``), and node labels from EC2 ``DescribeInstanceTopology`` (``kgov topology label``).

Layers: :mod:`~webhook.topology.tree` (pure model built from Node, Pod and Workload objects),
:mod:`~webhook.topology.render` (table, tree and JSON text), :mod:`~webhook.topology.picture`
(PNG/SVG with matplotlib), :mod:`~webhook.topology.ec2` (labels from EC2 output, pure),
:mod:`~webhook.topology.live` (reading and labelling a cluster with kubernetes-asyncio) and
:mod:`~webhook.cli.topology` (the click commands).
"""

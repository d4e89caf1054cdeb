"""Where the webhook's inputs come from: the cluster or files, outside the core.

The API client with its checks (:mod:`.client`), the watched caches of namespaces and nodes
(:mod:`.cache`), the policy ConfigMap's watch (:mod:`.policy_watch`), and the same inputs read from
files for the CLI and offline runs (:mod:`.files`).
"""

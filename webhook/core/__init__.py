"""The pure core: from an AdmissionReview and a team's policy to a JSON Patch, with no I/O.

Five rooms, each importing only the rooms below it (``lint-imports`` enforces the order):

- :mod:`.admission`: the AdmissionReview envelope and the review entry point;
- :mod:`.plan`: the planner, the draft of changes and its JSON Patch, UPDATE handling and the rules;
- :mod:`.platform`: the platform file, its checks and naming, compiled team policies, team resolution;
- :mod:`.kueue`: Kueue's model of a workload (the kinds table, podsets, per-pod requests, node
  eligibility, the node inventory);
- :mod:`.objects`: Kubernetes objects as JSON (strict decoding, paths, resource quantities).
"""

"""The webhook server (``kgov serve``): aiohttp over TLS, outside the core.

Owns the HTTP server and its routes (:mod:`.server`, :mod:`.handlers`), connection limits and memory
(:mod:`.connections`, :mod:`.memory`), readiness and the policy/cache state (:mod:`.state`), TLS
(:mod:`.tlsconfig`), Prometheus metrics (:mod:`.metrics`) and structured logs (:mod:`.logs`). Calls the
core through :func:`webhook.core.admission.review.review`; reads the cluster through :mod:`webhook.kube`.
"""

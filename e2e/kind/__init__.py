"""A kind cluster for the e2e suite (needs Docker; see ``e2e/kind/install.sh`` and e2e/README.md)."""

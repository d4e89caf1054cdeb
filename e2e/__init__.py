"""End-to-end tests against a real kube-apiserver and Kueue (see devcluster/)."""

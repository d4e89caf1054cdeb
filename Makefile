PYTHON ?= python3
# Fake node tree for e2e-up: SxBxRxH (spines x blocks x racks x hosts) or BxRxH.
SHAPE ?= 1x2x2x2
# Set to a platform file to also run `kgov serve` and register the kgov-governor webhook.
PLATFORM ?=

.PHONY: e2e-build e2e-up e2e-down e2e-status e2e-test

## Build etcd, kube-apiserver and Kueue from their Go modules (cached in ${KGOV_CACHE:-~/.cache/kueue-governor}).
e2e-build:
	$(PYTHON) -m e2e.build

## Start the local control plane (state in ${KGOV_E2E_STATE:-e2e/.state}); prints the kubeconfig path.
e2e-up:
	$(PYTHON) -m e2e.devcluster up --shape $(SHAPE) $(if $(PLATFORM),--with-governor $(PLATFORM))

## Stop every process e2e-up started.
e2e-down:
	$(PYTHON) -m e2e.devcluster down

e2e-status:
	$(PYTHON) -m e2e.devcluster status

## Run the e2e suite (brings up its own cluster unless KGOV_E2E_KUBECONFIG is set).
e2e-test:
	$(PYTHON) -m pytest e2e -m e2e

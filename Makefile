# Everything runs from a virtualenv made on first use, so a fresh machine needs only Python 3.11+
# (and Go for the e2e binaries).
VENV ?= .venv
PYTHON ?= $(VENV)/bin/python
KGOV := $(VENV)/bin/kgov
# Fake node tree for e2e-up: SxBxRxH (spines x blocks x racks x hosts) or BxRxH.
SHAPE ?= 1x2x2x2
# The platform whose generated Kueue objects and namespaces e2e-up applies, with `kgov serve`
# registered as the kgov-governor webhook; `make e2e-up PLATFORM=` gives a bare Kueue cluster.
PLATFORM ?= kueue-config/platform.yaml

# Whether e2e-up also runs one real node (containerd, kubelet, kube-proxy; needs root): REAL_NODE= for KWOK nodes only.
REAL_NODE ?= 1
# Debian packages of the real node and the daemonless image build (installed by e2e-node-deps).
NODE_PACKAGES := containerd runc containernetworking-plugins iptables conntrack mmdebstrap gcc libc6-dev

.PHONY: install example test test-unit docs fuzz lint generate-check crd-defaults crd-defaults-check helm-check bench bench-cluster bench-apiserver bench-placement e2e-build e2e-node-deps image e2e-up e2e-down e2e-status e2e-test record-reviews mutate mutate-score

## Make the virtualenv and install kueue-governor with its test tools (re-run when pyproject.toml changes).
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $@

## The main job on the bundled example: what admission makes of a PyTorchJob in a team namespace.
example: install
	$(KGOV) mutate --platform kueue-config/platform.yaml -n hyperpod-ns-research \
		-f examples/pytorchjob.yaml --nodes examples/nodes.json --explain

## Everything CI runs: lint, unit tests, generated-config drift check, docs site, chart lint/render, end-to-end suite.
test: lint test-unit generate-check docs crd-defaults-check helm-check e2e-test

## Unit, property and example-case tests (no cluster, no Go).
test-unit: install
	$(PYTHON) -m pytest tests

## The documentation site (MkDocs, Material) into site/: the generated references (docs/reference/), then a
## strict build (a broken link or a page missing from the nav fails). Installs the `docs` extra first.
docs: install
	$(VENV)/bin/pip install --quiet -e '.[docs]'
	$(PYTHON) tools/docs_reference.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# Longer fuzzing (not part of `make test`; docs/testing.md, "Fuzzing"): the Hypothesis fuzz tests with FUZZ_SCALE times their
# CI budget, then atheris (installed here, from the `fuzz` extra) for FUZZ_SECONDS on each target.
FUZZ_SCALE ?= 20
FUZZ_SECONDS ?= 300
FUZZ_TARGETS ?= review platform policy

## The fuzz suite at FUZZ_SCALE x its CI examples, then atheris FUZZ_SECONDS per target (niced; inputs that fail: crash-*).
fuzz: install
	$(VENV)/bin/pip install --quiet -e '.[fuzz]'
	KGOV_FUZZ_SCALE=$(FUZZ_SCALE) nice $(PYTHON) -m pytest -q \
		tests/test_fuzz.py tests/test_fuzz_reviews.py tests/test_fuzz_server.py tests/test_fuzz_platform.py
	for target in $(FUZZ_TARGETS); do \
		nice $(PYTHON) tools/fuzz_atheris.py --target $$target -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 \
			-print_final_stats=1 || exit $$?; \
	done

# actionlint (the release workflow's checker), built from its Go module once into the e2e binaries' cache.
KGOV_CACHE ?= $(HOME)/.cache/kueue-governor
ACTIONLINT_VERSION := v1.7.12
ACTIONLINT := $(KGOV_CACHE)/bin/actionlint-$(ACTIONLINT_VERSION)

## ruff (checks and formatting), mypy --strict (webhook/, benchmarks/), the import-linter layer contracts and actionlint.
lint: install $(ACTIONLINT)
	$(VENV)/bin/ruff check webhook tests benchmarks e2e tools
	$(VENV)/bin/ruff format --check webhook tests benchmarks e2e tools
	$(VENV)/bin/mypy webhook benchmarks
	$(VENV)/bin/mypy e2e/test_watches.py
	$(VENV)/bin/lint-imports
	$(ACTIONLINT) .github/workflows/*.yaml
	@if git grep -nE '^(<<<<<<<|>>>>>>>)( |$$)' 2>/dev/null; then echo 'lint: merge conflict markers above' >&2; exit 1; fi
	$(PYTHON) -m pytest e2e -m e2e --collect-only -q -p no:cacheprovider > /dev/null  # every e2e module imports

$(ACTIONLINT):
	mkdir -p $(dir $@)
	tmp=$$(mktemp -d) && GOBIN=$$tmp go install github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION) \
		&& mv $$tmp/actionlint $@ && rmdir $$tmp

## The checked-in kueue-config/generated/ must match what the platform file generates.
generate-check: install
	$(KGOV) generate kueue-config/platform.yaml --namespaces --check
	$(KGOV) chart kinds --check
	$(KGOV) chart schema --check
	$(KGOV) chart values kueue-config/platform.yaml --out helm/kueue-governor/ci/platform-values.yaml --check

## Rewrite webhook/core/kueue/crd_defaults.json from the workload CRDs Kueue pins (needs Go: their modules are downloaded).
crd-defaults: install
	$(PYTHON) -m e2e.crd_defaults

## The checked-in webhook/core/kueue/crd_defaults.json must match the defaults of the CRDs Kueue pins (needs Go).
crd-defaults-check: install
	$(PYTHON) -m e2e.crd_defaults --check

## helm lint and renders of helm/kueue-governor with each values file of its ci/ (helm is built from its Go module).
helm-check: install
	$(PYTHON) -m pytest e2e/test_helm_render.py e2e/test_helm_platform_file.py

## Benchmarks (figures printed next to a baseline measured in the same run).
bench: install
	$(PYTHON) benchmarks/bench_admission.py
	$(PYTHON) benchmarks/bench_generate.py
	$(PYTHON) benchmarks/bench_topology.py
	$(PYTHON) benchmarks/bench_why.py

## The simulated cluster under load: 256 KWOK nodes, 2,000 Job pods (several minutes; builds the binaries first).
bench-cluster: install
	$(PYTHON) benchmarks/bench_cluster.py

## Through the simulated cluster's kube-apiserver: what the webhook adds to a create (none / no-op / kgov), the fail-safe policies side by side (none, policies, no-op, canned, kgov, kgov + policies),
## then faults during creates under failurePolicy Fail and Ignore (each several minutes).
bench-apiserver: install
	$(PYTHON) benchmarks/bench_apiserver.py
	$(PYTHON) benchmarks/bench_faults.py
	$(PYTHON) benchmarks/bench_fail_safe.py

# Options of the placement benchmark, e.g. PLACEMENT_ARGS="--shape 1x2x2x4 --horizon 120" or "--seeds 1,2,3 --shapes 1x2x2x4,2x2x4x4 --patience 20s" (python -m benchmarks.placement --help).
PLACEMENT_ARGS ?=

## Placement quality of the topology policies (none, required and preferred at layer 3, auto, auto-preferred, auto-patient) on the simulated cluster with Kueue: a table per seed and shape, a summary over them (default one seed, 256 nodes: about an hour on 2 busy cores).
bench-placement: install
	nice $(PYTHON) -m benchmarks.placement $(PLACEMENT_ARGS)

## Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, Kueue, KWOK and the JobSet controller from their Go modules,
## and fetch Kueue's site/static/examples at its tag (git; KGOV_KUEUE_GIT: another clone) (cached in ${KGOV_CACHE:-~/.cache/kueue-governor}).
e2e-build: install
	$(PYTHON) -m e2e.build

## The Debian packages of the real node and the daemonless image build (one apt-get update; skipped when all are there).
e2e-node-deps:
	@if dpkg-query -W -f='$${Status}\n' $(NODE_PACKAGES) 2>/dev/null | grep -vq 'install ok installed' \
		|| [ "$$(dpkg-query -W -f='$${Status}\n' $(NODE_PACKAGES) 2>/dev/null | wc -l)" -ne $(words $(NODE_PACKAGES)) ]; then \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(NODE_PACKAGES); \
	fi

# How `make image` builds: auto (docker when a daemon answers, else daemonless), docker or daemonless.
IMAGE_BUILDER ?= auto

## The image (Dockerfile with docker; else a Debian rootfs + chroot venv as an OCI archive) and the pause image, cached by inputs' hash.
image: install
	$(PYTHON) -m e2e.image --builder $(IMAGE_BUILDER)

## Start the simulated cluster (state in ${KGOV_E2E_STATE:-e2e/.state}) with one real node unless REAL_NODE=; prints the kubeconfig path.
e2e-up: install $(if $(REAL_NODE),e2e-node-deps)
	$(PYTHON) -m e2e.devcluster up --shape $(SHAPE) $(if $(PLATFORM),--with-governor $(PLATFORM)) $(if $(REAL_NODE),--real-node)

## Stop every process e2e-up started.
e2e-down: install
	$(PYTHON) -m e2e.devcluster down

e2e-status: install
	$(PYTHON) -m e2e.devcluster status

## Re-record the unit tests' fixtures from a real API server: tests/data/admission/*.json (AdmissionReviews
## as sent to a webhook) and tests/data/live/ (the bundled platform's objects as `kgov diff` reads them).
## Starts its own cluster (a few minutes); needs kubectl.
record-reviews: install
	$(PYTHON) -m e2e.record

## Run the e2e suite (brings up its own cluster unless KGOV_E2E_KUBECONFIG is set; as root, the real node's
## packages are installed first and test_chart_real_node.py runs the chart on the real node). The e2e build runs
## first: it also fetches Kueue's example manifests, which e2e/test_kueue_examples.py reads.
e2e-test: install e2e-build $(if $(filter 0,$(shell id -u)),e2e-node-deps)
	$(PYTHON) -m pytest e2e -m e2e

# Mutation testing (not part of `make test`; docs/testing.md, "Mutation testing"). MUTATE_MODULES are modules of
# webhook/core, as paths without .py; MUTATE_BUDGET is in seconds: when it runs out, the run stops and keeps
# the verdicts it has. Every run starts from a fresh mutants/ (mutmut's working copy, not in git).
MUTATE_MODULES ?= platform/resolve kueue/resources kueue/inventory kueue/scheduling plan/patch objects/quantity plan/planner plan/owners plan/create plan/update plan/recheck \
	platform/policy kueue/view plan/draft objects/paths admission/review platform/naming kueue/injected kueue/crd_defaults plan/rules/podset_limits \
	plan/rules/queue plan/rules/node_affinity plan/rules/kueue_priority plan/rules/pod_priority plan/rules/stranded plan/rules/topology
MUTATE_BUDGET ?= 5400
MUTATE_JOBS ?= 2

## Mutation testing of webhook/core with mutmut, niced and time-bounded, then the score (about 40 min for the default modules on 2 cores).
mutate: install
	rm -rf mutants && mkdir mutants
	rc=0; nice -n 10 timeout --signal=INT --kill-after=60 $(MUTATE_BUDGET) $(VENV)/bin/mutmut run \
		--max-children $(MUTATE_JOBS) $(foreach m,$(MUTATE_MODULES),'webhook.core.$(subst /,.,$(m)).*') \
		> mutants/run.log 2>&1 || rc=$$?; \
	if [ $$rc -eq 124 ]; then echo "mutate: MUTATE_BUDGET of $(MUTATE_BUDGET) s ran out; the score counts what finished"; \
	elif [ $$rc -ne 0 ]; then tail -n 40 mutants/run.log; exit $$rc; fi
	$(MAKE) --no-print-directory mutate-score

## The score of the last `make mutate` run, per module, with the survivors not listed as equivalent.
mutate-score: install
	$(PYTHON) tools/mutation_score.py $(MUTATE_MODULES)

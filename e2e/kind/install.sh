#!/usr/bin/env bash
# A kind cluster for the e2e suite, with Kueue, the workload CRDs, the bundled platform's generated
# objects and the governor running in the cluster. Needs Docker, kind, kubectl (>= 1.24, for
# --subresource), git (kustomize remote bases) and the repository's virtualenv (`make install`).
#
#   e2e/kind/install.sh            # create (or reuse) the cluster and install everything
#   KGOV_E2E_KUBECONFIG=e2e/.state/kind/kubeconfig .venv/bin/python -m pytest e2e -m e2e
#   kind delete cluster --name kgov-e2e
#
# Settings (environment): KIND_CLUSTER (kgov-e2e), KGOV_KIND_STATE (e2e/.state/kind: kubeconfig,
# generated config, governor PKI), IMAGE (kueue-governor:e2e), GPUS_PER_NODE (8), PYTHON
# (.venv/bin/python), KUEUE_FEATURE_GATES (extra Kueue feature gates, e.g.
# TopologyAwareScheduling=true on a Kueue release where TAS is still alpha; v0.19 has it on).
set -euo pipefail

KUEUE_VERSION=v0.19.2
# The versions Kueue v0.19.2 pins in its go.mod (as the local control plane's CRDs).
JOBSET_VERSION=v0.12.0
TRAINING_OPERATOR_VERSION=v1.9.3

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CLUSTER=${KIND_CLUSTER:-kgov-e2e}
STATE=${KGOV_KIND_STATE:-$REPO/e2e/.state/kind}
IMAGE=${IMAGE:-kueue-governor:e2e}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
KGOV=$(dirname "$PYTHON")/kgov
INSTANCE_TYPE_SELECTOR=node.kubernetes.io/instance-type=p5.48xlarge

step() { printf '\n==> %s\n' "$*" >&2; }

retry() {  # retry N COMMAND...: webhooks that just started may refuse a few calls
  local attempts=$1 n=1
  shift
  until "$@"; do
    if ((n >= attempts)); then
      return 1
    fi
    n=$((n + 1))
    sleep 5
  done
}

for tool in docker kind kubectl git; do
  command -v "$tool" >/dev/null || { echo "install.sh: $tool is not on PATH" >&2; exit 2; }
done
if [[ ! -x $PYTHON ]]; then
  step "virtualenv (make install)"
  make -C "$REPO" install
fi
mkdir -p "$STATE"
export KUBECONFIG=$STATE/kubeconfig

step "kind cluster $CLUSTER (e2e/kind/cluster.yaml)"
if kind get clusters | grep -qx "$CLUSTER"; then
  kind export kubeconfig --name "$CLUSTER" --kubeconfig "$KUBECONFIG"
else
  kind create cluster --name "$CLUSTER" --config "$REPO/e2e/kind/cluster.yaml" --kubeconfig "$KUBECONFIG" --wait 120s
fi

step "advertise $GPUS_PER_NODE nvidia.com/gpu per worker (an extended resource on the node status)"
for node in $(kubectl get nodes -l "$INSTANCE_TYPE_SELECTOR" -o name); do
  kubectl patch "$node" --subresource=status --type=json \
    -p "[{\"op\": \"add\", \"path\": \"/status/capacity/nvidia.com~1gpu\", \"value\": \"$GPUS_PER_NODE\"}]"
done
# The kubelet derives allocatable from capacity at its next status update.
kubectl wait nodes -l "$INSTANCE_TYPE_SELECTOR" --timeout=180s \
  --for=jsonpath="{.status.allocatable.nvidia\.com/gpu}=$GPUS_PER_NODE"

step "workload CRDs: JobSet $JOBSET_VERSION, Kubeflow training-operator $TRAINING_OPERATOR_VERSION (CRDs only)"
kubectl apply --server-side -f "https://github.com/kubernetes-sigs/jobset/releases/download/$JOBSET_VERSION/manifests.yaml"
kubectl apply --server-side -k "github.com/kubeflow/training-operator.git/manifests/base/crds?ref=$TRAINING_OPERATOR_VERSION"
kubectl -n jobset-system wait deploy --all --for=condition=Available --timeout=300s

step "Kueue $KUEUE_VERSION (release manifests; TopologyAwareScheduling is on by default in v0.19)"
kubectl apply --server-side -f "https://github.com/kubernetes-sigs/kueue/releases/download/$KUEUE_VERSION/manifests.yaml"
if [[ -n ${KUEUE_FEATURE_GATES:-} ]]; then
  kubectl -n kueue-system patch deploy kueue-controller-manager --type=json \
    -p "[{\"op\": \"add\", \"path\": \"/spec/template/spec/containers/0/args/-\", \"value\": \"--feature-gates=$KUEUE_FEATURE_GATES\"}]"
fi
kubectl -n kueue-system rollout status deploy/kueue-controller-manager --timeout=300s

step "the bundled platform's generated objects (kgov generate --namespaces)"
"$KGOV" generate "$REPO/kueue-config/platform.yaml" --namespaces -o "$STATE/generated"
kubectl create namespace kueue-governor-system --dry-run=client -o yaml | kubectl apply --server-side -f -
# Kueue's webhooks serve a few seconds after its Deployment is Available (certificates first).
retry 24 kubectl apply --server-side -k "$STATE/generated"
kubectl wait clusterqueues --all --for=condition=Active --timeout=120s

step "governor image $IMAGE (e2e/kind/Dockerfile), loaded into kind"
docker build -f "$REPO/e2e/kind/Dockerfile" -t "$IMAGE" "$REPO"
kind load docker-image "$IMAGE" --name "$CLUSTER"

step "kgov serve in kueue-governor-system, then the kgov-governor webhook"
(cd "$REPO" && "$PYTHON" -m e2e.kind.deploy server --image "$IMAGE" --pki "$STATE/pki") | kubectl apply --server-side -f -
# A new image under the same tag: make the Deployment pick it up.
kubectl -n kueue-governor-system rollout restart deploy/kgov-governor
kubectl -n kueue-governor-system rollout status deploy/kgov-governor --timeout=180s
(cd "$REPO" && "$PYTHON" -m e2e.kind.deploy webhook --pki "$STATE/pki") | kubectl apply --server-side -f -

step "ready"
cat >&2 <<EOF
Run the e2e suite against this cluster:
  KGOV_E2E_KUBECONFIG=$KUBECONFIG $PYTHON -m pytest $REPO/e2e -m e2e
Delete it:
  kind delete cluster --name $CLUSTER
EOF

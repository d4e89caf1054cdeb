#!/bin/bash
# scenarios.sh NAME : make the objects of one recorded snapshot on the e2e cluster (`make e2e-up`,
# the bundled platform with the governor), then record it with record.sh once Kueue has decided.
#   owners : namespace why-own, ClusterQueue why-tas (the TAS flavor p5-48xlarge only, 100 CPUs):
#            pod1 (no requests), Deployment web (3 x 40 CPUs: 2 fit), StatefulSet db (2 pods),
#            CronJob nightly (its Job every minute); ClusterQueues why-lend (4 CPUs) and
#            why-borrow (2 CPUs, borrowingLimit 1) in cohort why-c2: big (3 CPUs, admitted) then
#            more (1 CPU): the borrowing limit binds while the cohort has CPUs unused
#   policy : in research's namespace, through the governor: plain (no labels) and labelled (the
#            user sets kueue.x-k8s.io/priority-class: experimentation-priority)
#   message: ClusterQueue why-sel whose namespaceSelector matches no namespace, Job sel in it:
#            Kueue's message names a reason kgov does not model; Job foo in why-tas requests
#            example.com/foo, which why-tas does not cover
#   taint1 : 7 of 8 nodes tainted why-test=rec:NoSchedule, a 1-GPU pod bound to the untainted one,
#            then one (1 x 8 GPUs, rack required) in ClusterQueue why-tas
set -euo pipefail
: "${KUBECONFIG:?set KUBECONFIG to the kubeconfig of the e2e cluster}"
delay='{"pod-complete.stage.kwok.x-k8s.io/delay": "1h", "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "1h"}'
queues() { # NAMESPACE
  kubectl create namespace "$1" --dry-run=client -o yaml | kubectl apply -f -
  cat <<YAML | kubectl apply -f -
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: why-tas}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: p5-48xlarge
      resources: [{name: cpu, nominalQuota: 100}, {name: memory, nominalQuota: 16Ti}, {name: nvidia.com/gpu, nominalQuota: 64}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: why-tas, namespace: $1}
spec: {clusterQueue: why-tas}
YAML
}
job() { # NAME NAMESPACE QUEUE-LABELS PODS REQUESTS [TEMPLATE-ANNOTATIONS [LIMITS]]
  cat <<YAML | kubectl create -f -
apiVersion: batch/v1
kind: Job
metadata: {name: $1, namespace: $2, labels: {$3}}
spec:
  parallelism: $4
  completions: $4
  suspend: true
  template:
    metadata: {annotations: ${6:-$delay}}
    spec:
      restartPolicy: Never
      containers: [{name: main, image: registry.k8s.io/pause:3.10, resources: {requests: {$5}, limits: {${7:-}}}}]
YAML
}
case "$1" in
owners)
  queues why-own
  cat <<YAML | kubectl apply -f -
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: why-lend}
spec:
  cohortName: why-c2
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: p5-48xlarge, resources: [{name: cpu, nominalQuota: 4}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: why-borrow}
spec:
  cohortName: why-c2
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: p5-48xlarge, resources: [{name: cpu, nominalQuota: 2, borrowingLimit: 1}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: why-borrow, namespace: why-own}
spec: {clusterQueue: why-borrow}
---
apiVersion: v1
kind: Pod
metadata: {name: pod1, namespace: why-own, labels: {kueue.x-k8s.io/queue-name: why-tas}}
spec:
  containers: [{name: main, image: registry.k8s.io/pause:3.10}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: why-own, labels: {kueue.x-k8s.io/queue-name: why-tas}}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: main, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: "40"}}}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: why-own, labels: {kueue.x-k8s.io/queue-name: why-tas}}
spec:
  replicas: 2
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: main, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: "1"}}}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: why-own}
spec:
  schedule: "* * * * *"
  concurrencyPolicy: Forbid
  jobTemplate:
    metadata: {labels: {kueue.x-k8s.io/queue-name: why-tas}}
    spec:
      template:
        metadata: {annotations: $delay}
        spec:
          restartPolicy: Never
          containers: [{name: main, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: "1"}}}]
YAML
  job big why-own "kueue.x-k8s.io/queue-name: why-borrow" 1 "cpu: 3"
  sleep 5
  job more why-own "kueue.x-k8s.io/queue-name: why-borrow" 1 "cpu: 1"
  ;;
policy)
  job plain hyperpod-ns-research "" 1 "cpu: 1"
  job labelled hyperpod-ns-research "kueue.x-k8s.io/priority-class: experimentation-priority" 1 "cpu: 1"
  ;;
taint1)
  queues why-taint
  nodes=$(kubectl get nodes -l node.kubernetes.io/instance-type=p5.48xlarge -o name | sed "s,^node/,," | sort)
  free=$(echo "$nodes" | head -1)
  for n in $(echo "$nodes" | tail -n +2); do kubectl taint nodes --overwrite "$n" why-test=rec:NoSchedule; done
  cat <<YAML | kubectl create -f -
apiVersion: v1
kind: Pod
metadata: {name: filler, namespace: why-taint}
spec:
  nodeName: $free
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}}]
YAML
  sleep 5
  job one why-taint "kueue.x-k8s.io/queue-name: why-tas" 1 "cpu: 1, nvidia.com/gpu: 8" \
    '{"kueue.x-k8s.io/podset-required-topology": "topology.k8s.aws/network-node-layer-3", "pod-complete.stage.kwok.x-k8s.io/delay": "1h", "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "1h"}' \
    "nvidia.com/gpu: 8"
  ;;
message)
  cat <<YAML | kubectl apply -f -
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: why-sel}
spec:
  namespaceSelector: {matchLabels: {why-test: never}}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: p5-48xlarge, resources: [{name: cpu, nominalQuota: 10}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: why-sel, namespace: why-own}
spec: {clusterQueue: why-sel}
YAML
  job sel why-own "kueue.x-k8s.io/queue-name: why-sel" 1 "cpu: 1"
  job foo why-own "kueue.x-k8s.io/queue-name: why-tas" 1 "cpu: 1, example.com/foo: 1" "$delay" "example.com/foo: 1"
  ;;
*) echo "usage: $0 owners|policy|taint1|message" >&2; exit 2 ;;
esac

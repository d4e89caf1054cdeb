#!/bin/bash
# record.sh OUT.json : every object kgov why/status reads (KUBECONFIG: the e2e cluster's).
# managedFields are removed, except on the workload objects (Jobs, Deployments, StatefulSets,
# CronJobs), where kgov why reads who set each governed value.
set -euo pipefail
: "${KUBECONFIG:?set KUBECONFIG}"
out=$1; tmp=$(mktemp -d)
kubectl get nodes -o json > $tmp/nodes.json
kubectl get pods -A -o json > $tmp/pods.json
kubectl get workloads.kueue.x-k8s.io -A -o json > $tmp/workloads.json
kubectl get clusterqueues.kueue.x-k8s.io -o json > $tmp/clusterqueues.json
kubectl get localqueues.kueue.x-k8s.io -A -o json > $tmp/localqueues.json
kubectl get resourceflavors.kueue.x-k8s.io -o json > $tmp/resourceflavors.json
kubectl get topologies.kueue.x-k8s.io -o json > $tmp/topologies.json
kubectl get workloadpriorityclasses.kueue.x-k8s.io -o json > $tmp/workloadpriorityclasses.json
kubectl get cohorts.kueue.x-k8s.io -o json > $tmp/cohorts.json
kubectl get jobs -A --show-managed-fields -o json > $tmp/jobs.json
kubectl get deployments -A --show-managed-fields -o json > $tmp/deployments.json
kubectl get replicasets -A -o json > $tmp/replicasets.json
kubectl get statefulsets -A --show-managed-fields -o json > $tmp/statefulsets.json
kubectl get cronjobs -A --show-managed-fields -o json > $tmp/cronjobs.json
kubectl get namespaces -o json > $tmp/namespaces.json
kubectl get configmap -n kueue-governor-system kgov-policy -o json > $tmp/policy.json 2>/dev/null || echo '{}' > $tmp/policy.json
python3 - $tmp $out <<'PY'
import json,sys,os
d=sys.argv[1]; out={}
keep = {"jobs", "deployments", "statefulsets", "cronjobs"}
for f in sorted(os.listdir(d)):
    data=json.load(open(os.path.join(d,f)))
    items = data.get("items", [data] if data else [])
    for i in items:
        if f[:-5] not in keep:
            i.get("metadata",{}).pop("managedFields",None)
    out[f[:-5]]=items
json.dump(out, open(sys.argv[2],"w"), indent=1, sort_keys=True)
PY

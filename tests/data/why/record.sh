#!/bin/bash
# record.sh OUT.json : every object kgov why/status reads, managedFields stripped
export KUBECONFIG=/work/wt/i14/e2e/.state/kubeconfig
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
kubectl get jobs -A -o json > $tmp/jobs.json
kubectl get configmap -n kueue-governor-system kgov-policy -o json > $tmp/policy.json 2>/dev/null || echo '{}' > $tmp/policy.json
python3 - $tmp $out <<'PY'
import json,sys,os
d=sys.argv[1]; out={}
for f in sorted(os.listdir(d)):
    data=json.load(open(os.path.join(d,f)))
    items = data.get("items", [data] if data else [])
    for i in items: i.get("metadata",{}).pop("managedFields",None)
    out[f[:-5]]=items
json.dump(out, open(sys.argv[2],"w"), indent=1, sort_keys=True)
PY

{{/*
  certs.mode in-cluster: the server keeps its CA and serving pair in the Secret <fullname>-certs
  (made by the first replica to start, renewed there) and publishes the caBundle of the webhook
  configuration; nothing of it is rendered (webhook/certs/keeper.py).
*/}}
{{- define "kueue-governor.certsSecret" -}}{{ include "kueue-governor.fullname" . }}-certs{{- end }}

{{- define "kueue-governor.inCluster" -}}{{ if eq .Values.certs.mode "in-cluster" }}true{{ end }}{{- end }}

{{/* The arguments of kgov serve in mode in-cluster (a YAML list, or nothing). */}}
{{- define "kueue-governor.inClusterArgs" -}}
{{- if include "kueue-governor.inCluster" . }}
{{- $ic := .Values.certs.inCluster }}
- --certs-secret={{ include "kueue-governor.certsSecret" . }}
{{- range concat (include "kueue-governor.dnsNames" . | fromJsonArray) $ic.extraDNSNames }}
- --certs-dns-name={{ . }}
{{- end }}
{{- range $ic.ipAddresses }}
- --certs-ip-address={{ . }}
{{- end }}
- --certs-days={{ $ic.days }}
- --certs-ca-days={{ $ic.caDays }}
- --certs-interval={{ $ic.syncIntervalSeconds }}
- --mutating-webhook-configuration={{ .Values.webhook.name }}
{{- end }}
{{- end }}

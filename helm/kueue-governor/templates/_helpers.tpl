{{/* Names and labels. */}}
{{- define "kueue-governor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kueue-governor.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kueue-governor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kueue-governor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kueue-governor.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kueue-governor.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "kueue-governor.caSecret" -}}{{ include "kueue-governor.fullname" . }}-ca{{- end }}
{{- define "kueue-governor.tlsSecret" -}}{{ include "kueue-governor.fullname" . }}-tls{{- end }}
{{- define "kueue-governor.policyConfigMap" -}}{{ include "kueue-governor.fullname" . }}-policy{{- end }}

{{/* DNS names of the Service, as the serving certificate carries them. */}}
{{- define "kueue-governor.dnsNames" -}}
{{- $svc := include "kueue-governor.fullname" . -}}
{{- list (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) | toJson }}
{{- end }}

{{/*
  The kinds table's rules and CEL (files/kinds.yaml, written by `kgov chart kinds`), with the CEL of
  "the request comes from a controller" put where the file says controllerPlaceholder: the
  platform's controllers (platform.controllerExpression, written by `kgov chart values`), or
  the default controllers (cel.defaultController) for values written before it existed.
*/}}
{{- define "kueue-governor.kinds" -}}
{{- $kinds := .Files.Get "files/kinds.yaml" | fromYaml }}
{{- $controller := printf "(%s)" (include "kueue-governor.controllerExpression" . | default $kinds.cel.defaultController) }}
{{- $cel := dict }}
{{- range $name, $expression := $kinds.cel }}
{{- $_ := set $cel $name (replace $kinds.controllerPlaceholder $controller $expression) }}
{{- end }}
{{- toYaml (set $kinds "cel" $cel) }}
{{- end }}

{{/* Fail early on values that would break admission. */}}
{{- define "kueue-governor.validate" -}}
{{- include "kueue-governor.validatePlatformFile" . }}
{{- if and (not .Values.platform.policy) (not (include "kueue-governor.helmOnly" .)) }}
{{- fail "no platform: give the platform file itself as a values file (helm upgrade --install kgov helm/kueue-governor -f platform.yaml), or the values `kgov chart values PLATFORM --out platform-values.yaml` writes (-f platform-values.yaml)" }}
{{- end }}
{{- if not (lt .Values.webhook.name "kueue") }}
{{- fail (printf "webhook.name %q must sort before Kueue's kueue-mutating-webhook-configuration (the API server calls webhooks in name order)" .Values.webhook.name) }}
{{- end }}
{{- if and (eq .Values.certs.mode "cert-manager") .Values.webhook.url }}
{{- fail "webhook.url needs certs.mode self-managed (cert-manager issues for the Service's names)" }}
{{- end }}
{{- end }}

{{/*
The chart's name: app.kubernetes.io/name, as in the kustomize base.
*/}}
{{- define "statefulset-resizer.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of every object (suffixed for the Role, the Services and the Secret): the release name
when it already contains the chart name, so `helm install statefulset-resizer` gives the kustomize
base's names. 63 characters at most (label values, DNS labels).
*/}}
{{- define "statefulset-resizer.fullname" -}}
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

{{/*
Labels of every object; the caller adds app.kubernetes.io/component as the kustomize base does
(controller, rbac, metrics, webhook).
*/}}
{{- define "statefulset-resizer.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "statefulset-resizer.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: csi-resizer
{{- end }}

{{/*
The controller pods' selector (immutable on the Deployment: never change it).
*/}}
{{- define "statefulset-resizer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "statefulset-resizer.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{- define "statefulset-resizer.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "statefulset-resizer.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create=false (the existing ServiceAccount to bind)" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Webhook names, shared by the Deployment's flags, the Service, the RBAC resourceNames and the
MutatingWebhookConfiguration, so that they always agree.
*/}}
{{- define "statefulset-resizer.webhookServiceName" -}}
{{- include "statefulset-resizer.fullname" . }}
{{- end }}
{{- define "statefulset-resizer.webhookSecretName" -}}
{{- printf "%s-webhook-tls" (include "statefulset-resizer.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "statefulset-resizer.webhookConfigurationName" -}}
{{- include "statefulset-resizer.fullname" . }}
{{- end }}

{{/*
Leader election: on when asked; replicas > 1 without it is refused (two active controllers).
*/}}
{{- define "statefulset-resizer.leaderElection" -}}
{{- if .Values.leaderElection.enabled }}true
{{- else if gt (int .Values.replicas) 1 }}
{{- fail (printf "replicas=%v needs leaderElection.enabled=true: without it every replica would patch the same PVCs; set replicas=1 or leaderElection.enabled=true" .Values.replicas) }}
{{- end }}
{{- end }}

{{/*
The fields both entries of the MutatingWebhookConfiguration share.
*/}}
{{- define "statefulset-resizer.webhookCommon" -}}
admissionReviewVersions: ["v1"]
clientConfig:
  service:
    name: {{ include "statefulset-resizer.webhookServiceName" . }}
    namespace: {{ .Release.Namespace }}
    path: /mutate-statefulset-volume-claim-templates
    port: {{ .Values.webhook.port }}
rules:
- apiGroups: ["apps"]
  apiVersions: ["v1"]
  resources: ["statefulsets"]
  operations: ["UPDATE"]
  scope: Namespaced
matchPolicy: Equivalent
failurePolicy: Ignore
sideEffects: None
timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
reinvocationPolicy: Never
{{- end }}

{{/*
--logging-format: text, or json (one JSON object per line on stderr).
*/}}
{{- define "statefulset-resizer.logFormat" -}}
{{- if has .Values.logFormat (list "text" "json") }}{{ .Values.logFormat }}
{{- else }}
{{- fail (printf "logFormat=%v: want text or json" .Values.logFormat) }}
{{- end }}
{{- end }}

{{/*
--webhook-shutdown-delay in seconds: a whole number, 0 or more.
*/}}
{{- define "statefulset-resizer.webhookShutdownDelaySeconds" -}}
{{- $d := .Values.webhook.shutdownDelaySeconds }}
{{- if not (regexMatch "^[0-9]+$" (toString $d)) }}
{{- fail (printf "webhook.shutdownDelaySeconds=%v: want a whole number of seconds, 0 or more" $d) }}
{{- end }}
{{- int $d }}
{{- end }}

{{/*
The pod's terminationGracePeriodSeconds: 30 s for the controller (on SIGTERM the leader's
workers finish the StatefulSet they are on, 10 s at most; then the Lease is released, within
--leader-election-renew-deadline, 10 s; 10 s of margin), plus the webhook's drain when the webhook
is on. The drain runs alongside the controller's stop, so this is an upper bound, not a wait: the
process exits as soon as both are done. The kustomize base has 30, its webhook component 40.
*/}}
{{- define "statefulset-resizer.terminationGracePeriodSeconds" -}}
{{- if .Values.webhook.enabled }}
{{- add 30 (include "statefulset-resizer.webhookShutdownDelaySeconds" . | int) }}
{{- else }}30
{{- end }}
{{- end }}

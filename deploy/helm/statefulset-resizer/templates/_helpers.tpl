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

{{/*
The webhook pods' selector (immutable on the Deployment: never change it).
*/}}
{{- define "statefulset-resizer.webhookSelectorLabels" -}}
app.kubernetes.io/name: {{ include "statefulset-resizer.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: webhook
{{- end }}

{{/*
The webhook's ServiceAccount: its own, never the controller's (the process that parses the
apiserver's requests holds a token that can write nothing but its certificate).
*/}}
{{- define "statefulset-resizer.webhookServiceAccountName" -}}
{{- $name := "" }}
{{- if .Values.webhook.serviceAccount.create }}
{{- $name = default (printf "%s-webhook" (include "statefulset-resizer.fullname" .) | trunc 63 | trimSuffix "-") .Values.webhook.serviceAccount.name }}
{{- else }}
{{- $name = required "webhook.serviceAccount.name is required when webhook.serviceAccount.create=false (the existing ServiceAccount to bind)" .Values.webhook.serviceAccount.name }}
{{- end }}
{{- if eq $name (include "statefulset-resizer.serviceAccountName" .) }}
{{- fail (printf "the webhook's ServiceAccount %s is the controller's: the webhook must run with its own (webhook.serviceAccount.name), which can write nothing but its certificate" $name) }}
{{- end }}
{{- $name }}
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
The fields every entry of the MutatingWebhookConfiguration shares (failurePolicy is per entry).
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
sideEffects: None
timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
reinvocationPolicy: Never
{{- end }}

{{/*
CEL over the request (matchConditions): the live object carries a pending change.
*/}}
{{- define "statefulset-resizer.pendingChange" -}}
oldObject != null && has(oldObject.metadata.annotations) && 'csi-resizer.io/desired-volume-claim-templates' in oldObject.metadata.annotations
{{- end }}

{{/*
CEL over the request: the writer is the controller (a ServiceAccount of its name: the kustomize
base cannot write the namespace into the expression, and the chart says the same) or the garbage
collector (its ServiceAccount, or kube-controller-manager's own user), whose updates never wait for
the webhook.
*/}}
{{- define "statefulset-resizer.exemptWriter" -}}
request.userInfo.username in ['system:serviceaccount:kube-system:generic-garbage-collector', 'system:kube-controller-manager'] || (request.userInfo.username.startsWith('system:serviceaccount:') && request.userInfo.username.endsWith(':{{ include "statefulset-resizer.serviceAccountName" . }}'))
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
The webhook pod's terminationGracePeriodSeconds: the drain (webhook.shutdownDelaySeconds), then
5 s at most for the requests under way, and margin: the drain plus 20. The kustomize component
has 30 (a 10 s drain). The controller's is 30 (its workers' 10 s, the Lease release within the
renew deadline's 10 s, 10 s of margin), as the kustomize base's.
*/}}
{{- define "statefulset-resizer.webhookTerminationGracePeriodSeconds" -}}
{{- add 20 (include "statefulset-resizer.webhookShutdownDelaySeconds" . | int) }}
{{- end }}

{{/*
The chart's name: app.kubernetes.io/name, as in the kustomize base (the monitoring
kustomization's ServiceMonitor selects the metrics Service by it).
*/}}
{{- define "volume-autoscaler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of every object (suffixed for the Lease Role and the metrics Service): the release name
when it already contains the chart name, so `helm install volume-autoscaler` gives the kustomize
base's names. 63 characters at most (label values, DNS labels).
*/}}
{{- define "volume-autoscaler.fullname" -}}
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
(controller, rbac, metrics).
*/}}
{{- define "volume-autoscaler.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "volume-autoscaler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: csi-resizer
{{- end }}

{{/*
The pods' selector (immutable on the Deployment: never change it).
*/}}
{{- define "volume-autoscaler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "volume-autoscaler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{- define "volume-autoscaler.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "volume-autoscaler.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create=false (the existing ServiceAccount to bind)" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Leader election: on when asked; replicas > 1 without it is refused (two active autoscalers would
patch the same PVCs).
*/}}
{{- define "volume-autoscaler.leaderElection" -}}
{{- if .Values.leaderElection.enabled }}true
{{- else if gt (int .Values.replicas) 1 }}
{{- fail (printf "replicas=%v needs leaderElection.enabled=true: without it every replica would resize the same PVCs; set replicas=1 or leaderElection.enabled=true" .Values.replicas) }}
{{- end }}
{{- end }}

{{/*
--logging-format: text, or json (one JSON object per line on stderr).
*/}}
{{- define "volume-autoscaler.logFormat" -}}
{{- if has .Values.logFormat (list "text" "json") }}{{ .Values.logFormat }}
{{- else }}
{{- fail (printf "logFormat=%v: want text or json" .Values.logFormat) }}
{{- end }}
{{- end }}

{{/*
The kubelets' CA: "configMap" or "secret" (mounted at /etc/kubelet-ca, --kubelet-certificate-authority
names its key there), or "" with kubelet.insecureSkipTLSVerify (--kubelet-insecure-tls). The
command refuses both at once, and neither, at start; the chart refuses them at render time.
*/}}
{{- define "volume-autoscaler.kubeletCASource" -}}
{{- $ca := .Values.kubelet.certificateAuthority }}
{{- if .Values.kubelet.insecureSkipTLSVerify }}
{{- if $ca.secret }}
{{- fail (printf "kubelet.insecureSkipTLSVerify=true and kubelet.certificateAuthority.secret=%s exclude each other (as --kubelet-insecure-tls and --kubelet-certificate-authority): verify the kubelets with the CA, or unset the secret" $ca.secret) }}
{{- end }}
{{- else }}
{{- if not $ca.key }}
{{- fail "kubelet.certificateAuthority.key is empty: name the key of the ConfigMap or Secret that holds the kubelets' CA (ca.crt for kube-root-ca.crt)" }}
{{- end }}
{{- if $ca.secret }}secret
{{- else if $ca.configMap }}configMap
{{- else }}
{{- fail "no CA for the kubelets' serving certificates: set kubelet.certificateAuthority.configMap or .secret (or, on a test cluster only, kubelet.insecureSkipTLSVerify=true)" }}
{{- end }}
{{- end }}
{{- end }}

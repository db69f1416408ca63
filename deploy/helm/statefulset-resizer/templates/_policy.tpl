{{/*
The user names the ValidatingAdmissionPolicies (validatingadmissionpolicy-*.yaml) confine: the
ServiceAccounts of this release, exactly (the kustomize component, which cannot know its
namespace, matches them by the end of the name instead).
*/}}
{{- define "statefulset-resizer.policyControllerUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "statefulset-resizer.serviceAccountName" .) }}
{{- end }}
{{- define "statefulset-resizer.policyWebhookUser" -}}
{{- printf "system:serviceaccount:%s:%s-webhook" .Release.Namespace (include "statefulset-resizer.fullname" .) }}
{{- end }}

{{/*
admissionPolicies.enabled needs admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy
(Kubernetes >= 1.30): an older cluster is refused with a message rather than the policies skipped,
so that they are never silently missing. By the version, not .Capabilities.APIVersions: `helm
template` does not list the API offline.
*/}}
{{- define "statefulset-resizer.admissionPoliciesSupported" -}}
{{- if and .Values.admissionPolicies.enabled (not (semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version)) }}
{{- fail (printf "admissionPolicies.enabled=true needs admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy (Kubernetes >= 1.30; the cluster is %s): upgrade, or set admissionPolicies.enabled=false" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- end }}

{{/*
Expand the name of the chart.
*/}}
{{- define "wcow-runtime.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name. Truncated at 54 characters, not 63, so that
"<fullname>-operator-metrics" still fits a DNS label.
If the release name contains the chart name it is used as the full name.
*/}}
{{- define "wcow-runtime.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 46 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 46 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 46 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Create chart name and version as used by the chart label.
*/}}
{{- define "wcow-runtime.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels
*/}}
{{- define "wcow-runtime.labels" -}}
helm.sh/chart: {{ include "wcow-runtime.chart" . }}
{{ include "wcow-runtime.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: wcow-runtime
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels
*/}}
{{- define "wcow-runtime.selectorLabels" -}}
app.kubernetes.io/name: {{ include "wcow-runtime.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Per component: the operator (Linux Deployment) and the node agent (Windows DaemonSet).
*/}}
{{- define "wcow-runtime.operator.labels" -}}
{{ include "wcow-runtime.labels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "wcow-runtime.operator.selectorLabels" -}}
{{ include "wcow-runtime.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "wcow-runtime.agent.labels" -}}
{{ include "wcow-runtime.labels" . }}
app.kubernetes.io/component: node-agent
{{- end }}

{{- /* kubectl wcow's read-only roles, and the helm test's check of each profile. */ -}}
{{- define "wcow-runtime.viewer.labels" -}}
{{ include "wcow-runtime.labels" . }}
app.kubernetes.io/component: viewer
{{- end }}

{{- define "wcow-runtime.test.labels" -}}
{{ include "wcow-runtime.labels" . }}
app.kubernetes.io/component: test
{{- end }}

{{- define "wcow-runtime.agent.selectorLabels" -}}
{{ include "wcow-runtime.selectorLabels" . }}
app.kubernetes.io/component: node-agent
{{- end }}

{{/*
Fixed object names: the binaries and docs refer to them.
*/}}
{{- define "wcow-runtime.operator.fullname" -}}
{{ include "wcow-runtime.fullname" . }}-operator
{{- end }}

{{- define "wcow-runtime.agent.fullname" -}}
{{ include "wcow-runtime.fullname" . }}-agent
{{- end }}

{{- define "wcow-runtime.operator.serviceAccountName" -}}
{{ include "wcow-runtime.operator.fullname" . }}
{{- end }}

{{- define "wcow-runtime.agent.serviceAccountName" -}}
{{ include "wcow-runtime.agent.fullname" . }}
{{- end }}

{{/*
The generated RBAC rules (files/rbac-rules.yaml, written from wcow_operator/rbac.py by
deploy/generate.py). Call with (dict "ctx" $ "set" "operatorCluster").
*/}}
{{- define "wcow-runtime.rules" -}}
{{- $rules := .ctx.Files.Get "files/rbac-rules.yaml" | fromYaml -}}
{{- if not (hasKey $rules .set) }}
{{- fail (printf "files/rbac-rules.yaml has no rule set %q: run deploy/generate.py" .set) }}
{{- end }}
{{- toYaml (get $rules .set) }}
{{- end }}

{{/*
image: repository:tag or repository@digest. Call with (dict "image" .Values.operator.image "ctx" $).
*/}}
{{- define "wcow-runtime.image" -}}
{{- if .image.digest -}}
{{ .image.repository }}@{{ .image.digest }}
{{- else -}}
{{ .image.repository }}:{{ .image.tag | default .ctx.Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/*
Whether the cluster (or --kube-version) can run the admission policies. Every policy template
calls it, whichever parts are enabled: on 1.28 and 1.29 ValidatingAdmissionPolicy is beta and
off by default (admissionregistration.k8s.io/v1 is served from 1.30), so rendering them there
would fail at install ("no matches for kind") or, with the beta API switched on, need another
apiVersion. The chart stops instead and says what the user gives up with
admissionPolicy.enabled=false (docs/install.md, "Guards by Kubernetes version").
*/}}
{{- define "wcow-runtime.admissionPolicy.check" -}}
{{- if and .Values.admissionPolicy.enabled (semverCompare "<1.30-0" .Capabilities.KubeVersion.Version) }}
{{- fail (printf "admissionPolicy.enabled needs Kubernetes 1.30 or later (ValidatingAdmissionPolicy v1 is GA in 1.30, and bound service-account tokens carry the node name from 1.30); this cluster is %s. Without the policies nothing narrows RBAC: the agent's token may patch every Node, and the operator's token may write any webhook configuration, any RuntimeClass and any profile's spec, labels and annotations, and the plan ConfigMap is writable by anyone with update on ConfigMaps in %s. Upgrade the cluster, or set admissionPolicy.enabled=false to install without these guards (docs/install.md)" .Capabilities.KubeVersion.Version .Release.Namespace) }}
{{- end }}
{{- end }}

{{/*
The CEL condition "the request comes from the operator's ServiceAccount", in any namespace
(a kustomize overlay may move it; matching a look-alike elsewhere only restricts more).
*/}}
{{- define "wcow-runtime.operator.isRequester" -}}
request.userInfo.username.startsWith('system:serviceaccount:') && request.userInfo.username.endsWith(':{{ include "wcow-runtime.operator.serviceAccountName" . }}')
{{- end }}

{{/*
The finalizer the operator adds to each profile and removes when it has cleaned up
(wcow_operator/reconcile/model.py FINALIZER; a test keeps them equal).
*/}}
{{- define "wcow-runtime.operator.finalizer" -}}
runtime.wcow.dev/cleanup
{{- end }}

{{/*
Whether default profiles can be created in this step: see profiles.create in values.yaml.
*/}}
{{- define "wcow-runtime.profiles.ready" -}}
{{- if and .Values.profiles.create (or (not .Values.crds.enabled) (.Capabilities.APIVersions.Has "runtime.wcow.dev/v1alpha1/WindowsRuntimeProfile")) -}}
true
{{- end -}}
{{- end }}

{{/*
The prefix of every Node label and annotation the agent owns: the API group (wcow_operator
READY_LABEL_PREFIX; a test keeps them equal).
*/}}
{{- define "wcow-runtime.keyPrefix" -}}
runtime.wcow.dev/
{{- end }}

{{/*
The prefix of the Node labels that say what the agent found on its node (capabilities:
node.runtime.wcow.dev/hyperv, /containerd-line, /guest-build-<N>; wcow_contract.labels
NODE_LABEL_PREFIX; a test keeps them equal). Labels only: the agent's annotations stay under
keyPrefix.
*/}}
{{- define "wcow-runtime.nodeLabelPrefix" -}}
node.runtime.wcow.dev/
{{- end }}

{{/*
The pod admission webhook: its Service, the ClusterRole that owns its configurations, and
(cert-manager) its Certificate and Secret share one name.
*/}}
{{- define "wcow-runtime.webhook.fullname" -}}
{{ include "wcow-runtime.operator.fullname" . }}-webhook
{{- end }}

{{- define "wcow-runtime.webhook.certManagerIssuerRef" -}}
{{- with .Values.webhook.certManager.issuerRef }}{{ if .name }}
name: {{ .name | quote }}
kind: {{ .kind | quote }}
group: {{ .group | quote }}
{{- end }}{{ end }}
{{- if not .Values.webhook.certManager.issuerRef.name }}
name: {{ include "wcow-runtime.webhook.fullname" . }}-ca
kind: Issuer
group: cert-manager.io
{{- end }}
{{- end }}

{{- /* A `helm test` hook, created before its weight's turn and deleted once every test passed
(a failed test's objects stay for `kubectl logs`, and go before the next `helm test`). */ -}}
{{- define "wcow-runtime.test.hook" -}}
helm.sh/hook: test
helm.sh/hook-weight: {{ .weight | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}

{{- /* The uninstall hook (`helm uninstall` only): created in weight order before the run, deleted
once it succeeded; a failed run's Job stays for `kubectl logs`, and goes before the next one. */ -}}
{{- define "wcow-runtime.uninstall.hook" -}}
helm.sh/hook: pre-delete
helm.sh/hook-weight: {{ .weight | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}

{{- define "wcow-runtime.uninstall.labels" -}}
{{ include "wcow-runtime.labels" . }}
app.kubernetes.io/component: uninstall
{{- end }}

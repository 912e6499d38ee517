{{/* The container image of every gpupool process. */}}
{{- define "gpupool.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "gpupool.labels" -}}
app.kubernetes.io/part-of: gpupool
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The scheduler's identity as the API server names it (for the admission policy). */}}
{{- define "gpupool.schedulerUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:gpupool-scheduler
{{- end -}}

{{/* The restricted Pod Security level's container settings. */}}
{{- define "gpupool.restrictedContainer" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{- define "gpupool.restrictedPod" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}


{{/* Pod-level network settings: the node's network namespace when .Values.hostNetwork. */}}
{{- define "gpupool.podNetwork" -}}
{{- if .Values.hostNetwork }}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
{{- end -}}

{{/* Where a container reaches the API server when .Values.apiServer.host is set. */}}
{{- define "gpupool.apiServerEnv" -}}
{{- if .Values.apiServer.host }}
- {name: KUBERNETES_SERVICE_HOST, value: {{ .Values.apiServer.host | quote }}}
- {name: KUBERNETES_SERVICE_PORT, value: {{ .Values.apiServer.port | quote }}}
{{- end }}
{{- end -}}

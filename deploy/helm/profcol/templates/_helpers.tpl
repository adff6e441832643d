{{/* Names, labels and the image, as the OpenTelemetry Collector chart spells them. */}}

{{- define "profcol.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "profcol.fullname" -}}
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

{{- define "profcol.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{- define "profcol.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "profcol.selectorLabels" -}}
app.kubernetes.io/name: {{ include "profcol.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
component: {{ if eq .Values.mode "daemonset" }}agent-collector{{ else }}standalone-collector{{ end }}
{{- end }}

{{- define "profcol.labels" -}}
helm.sh/chart: {{ include "profcol.chart" . }}
{{ include "profcol.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: profcol
{{- end }}

{{- define "profcol.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "profcol.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "profcol.clusterRoleName" -}}
{{- default (include "profcol.fullname" .) .Values.clusterRole.name }}
{{- end }}

{{- define "profcol.clusterRoleBindingName" -}}
{{- default (include "profcol.fullname" .) .Values.clusterRole.clusterRoleBinding.name }}
{{- end }}

{{- define "profcol.configMapName" -}}
{{- if .Values.configMap.create }}
{{- include "profcol.fullname" . }}
{{- else }}
{{- required "configMap.existingName is required when configMap.create is false" .Values.configMap.existingName }}
{{- end }}
{{- end }}

{{- define "profcol.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The ClusterRole exists when asked for or when a preset needs the Kubernetes API. */}}
{{- define "profcol.clusterRoleEnabled" -}}
{{- if or .Values.clusterRole.create .Values.presets.kubernetesAttributes.enabled }}true{{ end }}
{{- end }}

{{/* Kubernetes before 1.30 has no appArmorProfile field; it takes an annotation instead. */}}
{{- define "profcol.appArmorAsField" -}}
{{- if semverCompare ">=1.30-0" .Capabilities.KubeVersion.Version }}true{{ end }}
{{- end }}

{{/* The container's securityContext: the values, with the profiling preset's needs over them. */}}
{{- define "profcol.securityContext" -}}
{{- $ctx := deepCopy .Values.securityContext }}
{{- if .Values.presets.profiling.enabled }}
{{- $ctx = mustMergeOverwrite $ctx (deepCopy .Values.presets.profiling.securityContext) }}
{{- end }}
{{- if not (include "profcol.appArmorAsField" .) }}
{{- $_ := unset $ctx "appArmorProfile" }}
{{- end }}
{{- toYaml $ctx }}
{{- end }}

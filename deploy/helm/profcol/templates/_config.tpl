{{/*
profcol's configuration: the presets' pieces, with `.Values.config` merged over them (maps
merge, lists are replaced), then the presets' components put into the profiles pipelines.
*/}}
{{- define "profcol.config" -}}
{{- $presets := dict }}
{{- if .Values.presets.profiling.enabled }}
{{- $presets = mustMergeOverwrite $presets (include "profcol.preset.profiling" . | fromYaml) }}
{{- end }}
{{- if .Values.presets.kubernetesAttributes.enabled }}
{{- $presets = mustMergeOverwrite $presets (include "profcol.preset.kubernetesAttributes" . | fromYaml) }}
{{- end }}
{{- $config := mustMergeOverwrite $presets (deepCopy .Values.config) }}
{{- $service := $config.service | default dict }}
{{- $pipelines := $service.pipelines | default dict }}
{{- if and .Values.presets.profiling.enabled (not (hasKey $pipelines "profiles")) }}
{{- $_ := set $pipelines "profiles" (dict "receivers" (list) "exporters" (list "debug")) }}
{{- if not (hasKey ($config.exporters | default dict) "debug") }}
{{- $_ := set $config "exporters" (mustMergeOverwrite ($config.exporters | default dict) (dict "debug" dict)) }}
{{- end }}
{{- end }}
{{- range $name, $pipeline := $pipelines }}
{{- if or (eq $name "profiles") (hasPrefix "profiles/" $name) }}
{{- $receivers := $pipeline.receivers | default list }}
{{- if and $.Values.presets.profiling.enabled (eq $name "profiles") (not (has "profiling" $receivers)) }}
{{- $receivers = append $receivers "profiling" }}
{{- end }}
{{- $_ := set $pipeline "receivers" $receivers }}
{{- /* memory_limiter first, then k8s_attributes, then service_name (it reads k8s values). */}}
{{- $processors := $pipeline.processors | default list }}
{{- $wanted := list }}
{{- if $.Values.presets.kubernetesAttributes.enabled }}
{{- $wanted = append $wanted "k8s_attributes" }}
{{- end }}
{{- if has "profiling" $receivers }}
{{- $wanted = append $wanted "service_name" }}
{{- end }}
{{- $head := list }}
{{- $rest := list }}
{{- range $processors }}
{{- if eq . "memory_limiter" }}
{{- $head = append $head . }}
{{- else }}
{{- $rest = append $rest . }}
{{- end }}
{{- end }}
{{- range $wanted }}
{{- if not (has . $processors) }}
{{- $head = append $head . }}
{{- end }}
{{- end }}
{{- $all := concat $head $rest }}
{{- if $all }}
{{- $_ := set $pipeline "processors" $all }}
{{- end }}
{{- end }}
{{- end }}
{{- $_ := set $service "pipelines" $pipelines }}
{{- $_ := set $config "service" $service }}
{{- toYaml $config }}
{{- end }}

{{- define "profcol.preset.profiling" -}}
receivers:
  profiling:
    samples_per_second: {{ .Values.presets.profiling.samplesPerSecond }}
processors:
  service_name: {}
{{- end }}

{{- define "profcol.preset.kubernetesAttributes" -}}
processors:
  k8s_attributes:
    auth_type: serviceAccount
    passthrough: false
    {{- if eq .Values.mode "daemonset" }}
    filter:
      node_from_env_var: K8S_NODE_NAME
    {{- end }}
    # The eBPF receiver knows container ids, not pod ips: container.id comes first.
    pod_association:
      - sources:
          - from: resource_attribute
            name: container.id
      - sources:
          - from: resource_attribute
            name: k8s.pod.ip
      - sources:
          - from: resource_attribute
            name: k8s.pod.uid
      - sources:
          - from: connection
    extract:
      otel_annotations: true
      metadata:
        - k8s.namespace.name
        - k8s.pod.name
        - k8s.pod.uid
        - k8s.pod.start_time
        - k8s.node.name
        - k8s.deployment.name
        - k8s.replicaset.name
        - k8s.statefulset.name
        - k8s.daemonset.name
        - k8s.job.name
        - k8s.cronjob.name
        - k8s.container.name
        - container.image.name
        - container.image.tag
        - service.namespace
        - service.name
        - service.version
        - service.instance.id
      {{- if .Values.presets.kubernetesAttributes.extractAllPodLabels }}
      labels:
        - tag_name: $$1
          key_regex: (.*)
          from: pod
      {{- end }}
      {{- if .Values.presets.kubernetesAttributes.extractAllPodAnnotations }}
      annotations:
        - tag_name: $$1
          key_regex: (.*)
          from: pod
      {{- end }}
{{- end }}

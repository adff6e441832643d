{{/* The pod template shared by the DaemonSet and the Deployment. */}}
{{- define "profcol.pod" -}}
metadata:
  labels:
    {{- include "profcol.selectorLabels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    # Roll the pods when the configuration changes.
    checksum/config: {{ include "profcol.config" . | sha256sum }}
    {{- if and .Values.presets.profiling.enabled (not (include "profcol.appArmorAsField" .)) }}
    container.apparmor.security.beta.kubernetes.io/profcol: unconfined
    {{- end }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "profcol.serviceAccountName" . }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if .Values.presets.profiling.enabled }}
  # The profiler sees and symbolizes every process of the node.
  hostPID: true
  {{- end }}
  {{- if .Values.hostNetwork }}
  hostNetwork: true
  {{- end }}
  {{- with .Values.dnsPolicy }}
  dnsPolicy: {{ . }}
  {{- end }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with .Values.podSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
  containers:
    - name: profcol
      image: {{ include "profcol.image" . | quote }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      command:
        - /{{ .Values.command.name }}
      args:
        - --config=/conf/relay.yaml
        {{- range .Values.command.extraArgs }}
        - {{ . | quote }}
        {{- end }}
      securityContext:
        {{- include "profcol.securityContext" . | nindent 8 }}
      {{- $ports := list }}
      {{- range $name, $port := .Values.ports }}
      {{- if $port.enabled }}
      {{- $ports = append $ports $name }}
      {{- end }}
      {{- end }}
      {{- if $ports }}
      ports:
        {{- range $name, $port := .Values.ports }}
        {{- if $port.enabled }}
        - name: {{ $name }}
          containerPort: {{ $port.containerPort }}
          protocol: {{ $port.protocol }}
          {{- if and (eq $.Values.mode "daemonset") $port.hostPort }}
          hostPort: {{ $port.hostPort }}
          {{- end }}
        {{- end }}
        {{- end }}
      {{- end }}
      env:
        - name: MY_POD_IP
          valueFrom:
            fieldRef:
              apiVersion: v1
              fieldPath: status.podIP
        - name: K8S_NODE_NAME
          valueFrom:
            fieldRef:
              apiVersion: v1
              fieldPath: spec.nodeName
        {{- with .Values.extraEnvs }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with .Values.extraEnvsFrom }}
      envFrom:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.livenessProbe }}
      livenessProbe:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.readinessProbe }}
      readinessProbe:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        - name: config
          mountPath: /conf
          readOnly: true
        {{- if and .Values.presets.profiling.enabled .Values.presets.profiling.mountTracefs }}
        - name: tracefs
          mountPath: /sys/kernel/tracing
          readOnly: true
        {{- end }}
        {{- with .Values.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    {{- with .Values.extraContainers }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ include "profcol.configMapName" . }}
        items:
          - key: relay
            path: relay.yaml
    {{- if and .Values.presets.profiling.enabled .Values.presets.profiling.mountTracefs }}
    - name: tracefs
      hostPath:
        path: /sys/kernel/tracing
        type: Directory
    {{- end }}
    {{- with .Values.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

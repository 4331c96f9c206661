{{/* The name prefix of every object. */}}
{{- define "xidpipe.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object; pass (list $ "component"). */}}
{{- define "xidpipe.labels" -}}
{{- $ := index . 0 -}}
{{ include "xidpipe.selectorLabels" . }}
app.kubernetes.io/component: {{ index . 1 }}
app.kubernetes.io/part-of: xidpipe
app.kubernetes.io/version: {{ $.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" $.Chart.Name $.Chart.Version }}
{{- with $.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The labels that select one component's pods; pass (list $ "component"). */}}
{{- define "xidpipe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "xidpipe.fullname" (index . 0) }}-{{ index . 1 }}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
{{- end -}}

{{/* "true" when kafka.securityProtocol is SASL_PLAINTEXT or SASL_SSL: only then are the SASL mechanism,
user and password rendered (the settings refuse them with PLAINTEXT or SSL). */}}
{{- define "xidpipe.sasl" -}}
{{- if hasPrefix "SASL_" .Values.kafka.securityProtocol }}true{{ end -}}
{{- end -}}

{{- define "xidpipe.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "xidpipe.agentNamespace" -}}
{{- .Values.agent.namespace | default .Release.Namespace -}}
{{- end -}}

{{/* The pod security context of the worker, responder and web (Pod Security `restricted`). */}}
{{- define "xidpipe.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.podSecurity.runAsUser }}
runAsGroup: {{ .Values.podSecurity.runAsGroup }}
fsGroup: {{ .Values.podSecurity.fsGroup }}
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "xidpipe.containerSecurityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: ["ALL"]}
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/* A Secret reference as an env var source; pass (list name key optional). */}}
{{- define "xidpipe.secretEnv" -}}
valueFrom:
  secretKeyRef: {name: {{ index . 0 | quote }}, key: {{ index . 1 | quote }}{{ if index . 2 }}, optional: true{{ end }}}
{{- end -}}

{{- define "xidpipe.extraEnv" -}}
{{- range $k, $v := . }}
- {name: {{ $k | quote }}, value: {{ $v | toString | quote }}}
{{- end }}
{{- end -}}

{{- define "xidpipe.kafkaCaVolume" -}}
{{- if .Values.kafka.caConfigMap }}
- name: kafka-ca
  configMap: {name: {{ .Values.kafka.caConfigMap | quote }}}
{{- end }}
{{- end -}}

{{- define "xidpipe.kafkaCaMount" -}}
{{- if .Values.kafka.caConfigMap }}
- {name: kafka-ca, mountPath: /etc/xidpipe/kafka-ca, readOnly: true}
{{- end }}
{{- end -}}

{{- /* Where the remediation loop's Jobs run: remediation.namespace, else the agent's (privileged) namespace. */ -}}
{{- define "xidpipe.remediationNamespace" -}}
{{- .Values.remediation.namespace | default (include "xidpipe.agentNamespace" .) -}}
{{- end }}

{{- define "sevents-collector.name" -}}
{{- .Chart.Name -}}
{{- end -}}

{{- define "sevents-collector.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sevents-collector.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sevents-collector.labels" -}}
{{ include "sevents-collector.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: collector
app.kubernetes.io/part-of: sevents
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "sevents-collector.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

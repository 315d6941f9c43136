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

{{/*
The settings the chart writes or passes itself: set elsewhere in the values, never under `settings`
(a key written twice is invalid TOML, and webhook_url holds a token).
*/}}
{{- define "sevents-collector.reservedSettings" -}}
sink: "sink is always eventhubs in the chart"
eventhubs_namespace: "set eventHubs.namespace"
eventhubs_name: "set eventHubs.name"
state_dir: "set stateDir"
metrics_addr: "set metrics.port and metrics.host"
webhook_url: "it holds a token: put it in a Secret and set webhook.urlSecret.name"
eventhubs_connection_string: "put it in a Secret and set eventHubs.connectionStringSecret.name"
eventhubs_connection_string_file: "put the connection string in a Secret and set eventHubs.connectionStringSecret.name"
{{- end -}}

{{/*
Every problem with the values, in one message (as the collector lists every problem with its config): required
values left at their defaults, a release in the "default" namespace, settings the chart owns.
*/}}
{{- define "sevents-collector.validate" -}}
{{- $problems := list -}}
{{- $ns := .Release.Namespace -}}
{{- if or (not $ns) (eq $ns "default") -}}
{{- $problems = append $problems (printf "the release namespace is %q: install into a namespace of its own, e.g. helm install %s <chart> -n sevents --create-namespace (it must allow privileged pods: the host network and a hostPath volume)" (default "" $ns) .Release.Name) -}}
{{- end -}}
{{- if not .Values.image.repository -}}
{{- $problems = append $problems "image.repository is required: build infra/helm/Dockerfile, push it to your registry and set e.g. --set image.repository=myregistry.azurecr.io/sevents-collector" -}}
{{- end -}}
{{- $sas := .Values.eventHubs.connectionStringSecret.name -}}
{{- $ehns := .Values.eventHubs.namespace -}}
{{- if and (not $ehns) (not $sas) -}}
{{- $problems = append $problems "eventHubs.namespace is required: the Event Hubs namespace, fully qualified (output eventhubsNamespace of infra/azure/main.bicep, e.g. myns.servicebus.windows.net); or eventHubs.connectionStringSecret.name" -}}
{{- else if and $ehns (not (contains "." $ehns)) -}}
{{- $problems = append $problems (printf "eventHubs.namespace must be fully qualified, e.g. %s.servicebus.windows.net, got %q" $ehns $ehns) -}}
{{- end -}}
{{- if not .Values.eventHubs.name -}}
{{- $problems = append $problems "eventHubs.name is required: the event hub (output eventhubsName of infra/azure/main.bicep)" -}}
{{- end -}}
{{- if .Values.workloadIdentity.enabled -}}
{{- $id := .Values.workloadIdentity.clientId | default "" | lower -}}
{{- if or (not $id) (eq $id "00000000-0000-0000-0000-000000000000") -}}
{{- $problems = append $problems "workloadIdentity.clientId is required: the client id of the identity allowed to send to the hub (output collectorClientId of infra/azure/main.bicep); or workloadIdentity.enabled=false with eventHubs.connectionStringSecret.name" -}}
{{- end -}}
{{- end -}}
{{- $metricsHost := .Values.metrics.host | default "" | trimPrefix "[" | trimSuffix "]" -}}
{{- if and .Values.metrics.enabled .Values.probes.enabled (not .Values.hostNetwork) (has $metricsHost (list "127.0.0.1" "localhost" "::1")) -}}
{{- $problems = append $problems (printf "metrics.host %q is the pod's own loopback: without the host network kubelet's probes cannot reach it; leave metrics.host empty (the pod's IP)" .Values.metrics.host) -}}
{{- end -}}
{{- $reserved := include "sevents-collector.reservedSettings" . | fromYaml -}}
{{- range $key, $value := .Values.settings -}}
{{- if hasKey $reserved $key -}}
{{- $problems = append $problems (printf "settings.%s is set by the chart: %s" $key (get $reserved $key)) -}}
{{- else if kindIs "map" $value -}}
{{- $problems = append $problems (printf "settings.%s is a table: the collector's only other table is [approval], set under approval:" $key) -}}
{{- end -}}
{{- end -}}
{{- if $problems -}}
{{- fail (printf "\nsevents-collector: %d value(s) to fix:\n  - %s" (len $problems) (join "\n  - " $problems)) -}}
{{- end -}}
{{- end -}}

{{/*
One TOML value: a string, number or boolean as JSON writes it (a valid TOML basic string, integer, float or
boolean: a whole number, which Helm keeps as a float, is written without a fraction), a list as a TOML array, a
map as an inline table. Null has no TOML form: the key is left out by the caller.
*/}}
{{- define "sevents-collector.tomlValue" -}}
{{- if kindIs "map" . -}}
{ {{- $sep := "" -}}
{{- range $key, $value := . -}}
{{- if not (kindIs "invalid" $value) -}}
{{ $sep }} {{ include "sevents-collector.tomlKey" $key }} = {{ include "sevents-collector.tomlValue" $value }}
{{- $sep = "," -}}
{{- end -}}
{{- end }} }
{{- else if kindIs "slice" . -}}
[{{- range $i, $value := . -}}{{ if $i }}, {{ end }}{{ include "sevents-collector.tomlValue" $value }}{{- end -}}]
{{- else -}}
{{ toJson . }}
{{- end -}}
{{- end -}}

{{/* A TOML key: bare when it can be, else quoted. */}}
{{- define "sevents-collector.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . -}}{{ . }}{{- else -}}{{ toJson . }}{{- end -}}
{{- end -}}

{{/*
The collector's probe without /metrics: exit 0 while <stateDir>/alive was rewritten within the last N seconds
(python -I -S: the standard library only, no site-packages, a few milliseconds a run).
*/}}
{{- define "sevents-collector.aliveProbe" -}}
exec:
  command:
    - python
    - -I
    - -S
    - -c
    - "import os, sys, time; sys.exit(time.time() - os.stat(sys.argv[1]).st_mtime > float(sys.argv[2]))"
    - {{ printf "%s/alive" (trimSuffix "/" .Values.stateDir) | quote }}
    - {{ .Values.probes.aliveMaxAgeSeconds | quote }}
{{- end -}}


{{/*
The host kubelet's HTTP probes connect to: the pod's IP (none written) unless metrics.host names one address (a
wildcard listens on the pod's IP too). An IPv6 address loses its brackets: kubelet adds them.
*/}}
{{- define "sevents-collector.probeHost" -}}
{{- $host := .Values.metrics.host | default "" | trimPrefix "[" | trimSuffix "]" -}}
{{- if not (has $host (list "" "0.0.0.0" "::")) -}}{{ $host }}{{- end -}}
{{- end -}}

{{/*
A probe: with /metrics, an HTTP GET of the collector's path (/healthz or /readyz, with its age limit) on the metrics
port; without, the alive file's exec probe. Called with (list $ "/healthz" maxAgeSeconds).
*/}}
{{- define "sevents-collector.probe" -}}
{{- $root := index . 0 -}}
{{- if $root.Values.metrics.enabled -}}
httpGet:
  {{- with include "sevents-collector.probeHost" $root }}
  host: {{ . | quote }}
  {{- end }}
  path: {{ printf "%s?max_age=%v" (index . 1) (index . 2) }}
  port: metrics
{{- else -}}
{{ include "sevents-collector.aliveProbe" $root }}
{{- end -}}
{{- end -}}

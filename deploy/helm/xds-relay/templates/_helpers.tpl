{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "xds-relay.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name: the release name, prefixed unless it contains the chart name. */}}
{{- define "xds-relay.fullname" -}}
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

{{- define "xds-relay.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels: what the Service, PDB and spread constraints select on. */}}
{{- define "xds-relay.selectorLabels" -}}
app.kubernetes.io/name: {{ include "xds-relay.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "xds-relay.labels" -}}
helm.sh/chart: {{ include "xds-relay.chart" . }}
{{ include "xds-relay.selectorLabels" . }}
app.kubernetes.io/component: relay
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "xds-relay.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* relay.yaml: .Values.config with the listen, admin and upstream values set. */}}
{{- define "xds-relay.config" -}}
{{- $cfg := deepCopy (default (dict) .Values.config) }}
{{- $_ := set $cfg "listen" (printf ":%d" (int .Values.ports.grpc)) }}
{{- $_ := set $cfg "admin" (printf ":%d" (int .Values.ports.admin)) }}
{{- $up := default (dict) (get $cfg "upstream") }}
{{- $_ := set $up "protocol" .Values.upstream.protocol }}
{{- if .Values.upstream.address }}
{{- $_ := set $up "address" .Values.upstream.address }}
{{- else }}
{{- $src := default (dict) (get $cfg "source") }}
{{- if not (get $src "dir") }}
{{- $_ := set $src "dir" "/etc/xds-relay/sample-config" }}
{{- end }}
{{- $_ := set $cfg "source" $src }}
{{- end }}
{{- $_ := set $cfg "upstream" $up }}
{{- if include "xds-relay.adminTokenSecret" . }}
{{- $_ := set $cfg "admin_token_file" "/etc/xds-relay/admin-token/token" }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/* The admin token's Secret: existingSecret, the chart's own, or "" (none). */}}
{{- define "xds-relay.adminTokenSecret" -}}
{{- if .Values.adminToken.existingSecret }}
{{- .Values.adminToken.existingSecret }}
{{- else if .Values.adminToken.create }}
{{- printf "%s-admin-token" (include "xds-relay.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

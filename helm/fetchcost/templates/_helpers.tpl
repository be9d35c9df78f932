{{/* Chart name. */}}
{{- define "fetchcost.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release name, plus the chart name unless the release name already has it. */}}
{{- define "fetchcost.fullname" -}}
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

{{- define "fetchcost.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "fetchcost.labels" -}}
helm.sh/chart: {{ include "fetchcost.chart" . }}
{{ include "fetchcost.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fetchcost
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels (immutable in a DaemonSet: never add to them). */}}
{{- define "fetchcost.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fetchcost.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "fetchcost.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "fetchcost.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "fetchcost.image" -}}
{{- $repo := .Values.image.repository }}
{{- if .Values.image.registry }}
{{- $repo = printf "%s/%s" .Values.image.registry .Values.image.repository }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repo .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* host:port for fetchcostd's --listen; $(POD_IP) is expanded by the kubelet. */}}
{{- define "fetchcost.listen" -}}
{{- if eq .Values.listen.address "podIP" }}
{{- printf "$(POD_IP):%d" (int .Values.listen.port) }}
{{- else }}
{{- printf "%s:%d" .Values.listen.address (int .Values.listen.port) }}
{{- end }}
{{- end }}

{{/* The price table fetchcostd loads: a preset name or the ConfigMap's custom table. */}}
{{- define "fetchcost.priceTable" -}}
{{- if .Values.priceTable.custom }}
{{- "/etc/fetchcost/price-table.json" }}
{{- else }}
{{- required "priceTable.preset or priceTable.custom must be set" .Values.priceTable.preset }}
{{- end }}
{{- end }}

{{/* fetchcostd's config.json (userspace/daemon/config.h). */}}
{{- define "fetchcost.config" -}}
{{- range $key := list "listen" "log_dirs" "state_dir" "price_table" }}
{{- if or (hasKey $.Values.config $key) (hasKey $.Values.extraConfig $key) }}
{{- fail (printf "config.%s is set by the chart: use %s" $key (get (dict "listen" "listen.address/listen.port" "log_dirs" "broker.logDirs" "state_dir" "stateDir.mountPath" "price_table" "priceTable.preset or priceTable.custom") $key)) }}
{{- end }}
{{- end }}
{{- $config := deepCopy .Values.config }}
{{- $config = mergeOverwrite $config (deepCopy .Values.extraConfig) }}
{{- $_ := set $config "log_dirs" (default list .Values.broker.logDirs) }}
{{- $_ = set $config "state_dir" .Values.stateDir.mountPath }}
{{- $_ = set $config "price_table" (include "fetchcost.priceTable" .) }}
{{- toPrettyJson $config }}
{{- end }}

{{/* The job label of fetchcostd's scrape target, for `up` in the alerts. */}}
{{- define "fetchcost.jobSelector" -}}
{{- if .Values.prometheusRule.jobSelector }}
{{- .Values.prometheusRule.jobSelector }}
{{- else }}
{{- $fullname := include "fetchcost.fullname" . }}
{{- printf "job=~\"%s|%s/%s\"" $fullname (default .Release.Namespace .Values.podMonitor.namespace) $fullname }}
{{- end }}
{{- end }}

{{/* Whether the budget alert is on ("auto": when budgets are configured). */}}
{{- define "fetchcost.budgetAlertEnabled" -}}
{{- $setting := .Values.prometheusRule.alerts.budgetExceeded.enabled }}
{{- if eq (toString $setting) "auto" }}
{{- $budgets := mergeOverwrite (deepCopy (default dict .Values.config.budgets)) (deepCopy (default dict .Values.extraConfig.budgets)) }}
{{- if $budgets.limits }}true{{ end }}
{{- else if $setting }}true
{{- end }}
{{- end }}

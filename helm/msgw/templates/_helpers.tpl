{{/* Chart name. */}}
{{- define "msgw.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name (63 chars max, the DNS label limit). */}}
{{- define "msgw.fullname" -}}
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

{{- define "msgw.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Standard labels. */}}
{{- define "msgw.labels" -}}
helm.sh/chart: {{ include "msgw.chart" . }}
{{ include "msgw.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/component: grpc-gateway
app.kubernetes.io/part-of: msgw
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels: stable across upgrades. */}}
{{- define "msgw.selectorLabels" -}}
app.kubernetes.io/name: {{ include "msgw.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "msgw.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "msgw.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "msgw.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* "true" when an external PostgreSQL store is configured, else "" (embedded SQLite). */}}
{{/* Whether a PodDisruptionBudget is rendered: as set, or (null) when several replicas may run. */}}
{{- define "msgw.pdb" -}}
{{- $enabled := .Values.podDisruptionBudget.enabled }}
{{- if kindIs "invalid" $enabled }}
{{- if or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1) }}true{{ end }}
{{- else if $enabled }}true{{ end }}
{{- end }}

{{- define "msgw.postgres" -}}
{{- if or .Values.store.postgres.url .Values.store.postgres.existingSecret }}true{{ end }}
{{- end }}

{{/* Secret holding the API key, webhook secret and account token. */}}
{{- define "msgw.secretName" -}}
{{- .Values.secrets.existingSecret | default (include "msgw.fullname" .) }}
{{- end }}

{{/* "true" when the chart renders its own Secret. */}}
{{- define "msgw.createSecret" -}}
{{- if or (not .Values.secrets.existingSecret) .Values.store.postgres.url }}true{{ end }}
{{- end }}

{{/*
Secret keys to mount, as a dict: env var name (without _FILE) -> key in the Secret.
The chart's own Secret always holds webhook-secret and account-token; api-key only when set.
*/}}
{{- define "msgw.secretKeys" -}}
{{- $keys := dict }}
{{- if .Values.secrets.existingSecret }}
{{- with .Values.secrets.existingSecretKeys.apiKey }}{{ $_ := set $keys "MSGW_API_KEY" . }}{{ end }}
{{- with .Values.secrets.existingSecretKeys.webhookSecret }}{{ $_ := set $keys "MSGW_WEBHOOK_SECRET" . }}{{ end }}
{{- with .Values.secrets.existingSecretKeys.accountToken }}{{ $_ := set $keys "MSGW_ACCOUNT_TOKEN" . }}{{ end }}
{{- with .Values.secrets.existingSecretKeys.webhookSecretPrevious }}{{ $_ := set $keys "MSGW_WEBHOOK_SECRET_PREVIOUS" . }}{{ end }}
{{- else }}
{{- if .Values.secrets.apiKey }}{{ $_ := set $keys "MSGW_API_KEY" "api-key" }}{{ end }}
{{- $_ := set $keys "MSGW_WEBHOOK_SECRET" "webhook-secret" }}
{{- $_ := set $keys "MSGW_ACCOUNT_TOKEN" "account-token" }}
{{- if .Values.secrets.webhookSecretPrevious }}{{ $_ := set $keys "MSGW_WEBHOOK_SECRET_PREVIOUS" "webhook-secret-previous" }}{{ end }}
{{- end }}
{{- toJson $keys }}
{{- end }}

{{/* MSGW_PUBLIC_URL: config.publicUrl, else derived from the Ingress host, else "". */}}
{{- define "msgw.publicUrl" -}}
{{- if .Values.config.publicUrl }}
{{- .Values.config.publicUrl | trimSuffix "/" }}
{{- else if and .Values.ingress.enabled .Values.ingress.host }}
{{- printf "%s://%s" (ternary "https" "http" .Values.ingress.tls.enabled) .Values.ingress.host }}
{{- end }}
{{- end }}

{{- define "msgw.terminationGracePeriodSeconds" -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add (int .Values.config.shutdownGraceSeconds) (int .Values.config.shutdownDelaySeconds) 5 }}
{{- else }}
{{- int .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/* Checks the schema can't express; fails rendering with a clear message. */}}
{{- define "msgw.validate" -}}
{{- $postgres := include "msgw.postgres" . }}
{{- if not $postgres }}
{{- if gt (int .Values.replicaCount) 1 }}
{{- fail (printf "msgw: replicaCount=%d needs an external store: the embedded SQLite store is single-replica. Set store.postgres.url (or store.postgres.existingSecret), or use replicaCount: 1." (int .Values.replicaCount)) }}
{{- end }}
{{- if .Values.autoscaling.enabled }}
{{- fail "msgw: autoscaling.enabled needs an external store: the embedded SQLite store is single-replica. Set store.postgres.url (or store.postgres.existingSecret), or disable autoscaling." }}
{{- end }}
{{- end }}
{{- if and .Values.store.postgres.url .Values.store.postgres.existingSecret }}
{{- fail "msgw: set store.postgres.url or store.postgres.existingSecret, not both." }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- fail "msgw: autoscaling.minReplicas must not exceed autoscaling.maxReplicas." }}
{{- end }}
{{- $tgps := include "msgw.terminationGracePeriodSeconds" . | int }}
{{- $shutdown := add (int .Values.config.shutdownGraceSeconds) (int .Values.config.shutdownDelaySeconds) }}
{{- if le $tgps (int $shutdown) }}
{{- fail (printf "msgw: terminationGracePeriodSeconds (%d) must be larger than config.shutdownDelaySeconds + config.shutdownGraceSeconds (%d), or the kubelet kills msgw before it has drained." $tgps (int $shutdown)) }}
{{- end }}
{{- if and .Values.config.upstreamUrl (not .Values.secrets.existingSecret) (not .Values.secrets.apiKey) }}
{{- fail "msgw: config.upstreamUrl is set but there is no API key: set secrets.apiKey or secrets.existingSecret." }}
{{- end }}
{{- $multi := or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1) }}
{{- if and $postgres .Values.secrets.existingSecret (not .Values.secrets.existingSecretKeys.webhookSecret) }}
{{- fail "msgw: replicas sharing PostgreSQL must share the webhook secret: set secrets.existingSecretKeys.webhookSecret." }}
{{- end }}
{{- if and $postgres .Values.secrets.existingSecret (not .Values.secrets.existingSecretKeys.accountToken) }}
{{- fail "msgw: replicas sharing PostgreSQL must share the account webhook token: set secrets.existingSecretKeys.accountToken." }}
{{- end }}
{{- if and (include "msgw.pdb" .) (not (kindIs "invalid" .Values.podDisruptionBudget.minAvailable)) (not (kindIs "invalid" .Values.podDisruptionBudget.maxUnavailable)) }}
{{- fail "msgw: set podDisruptionBudget.minAvailable or podDisruptionBudget.maxUnavailable, not both." }}
{{- end }}
{{- if and .Values.ingress.enabled (not .Values.ingress.host) }}
{{- fail "msgw: ingress.enabled needs ingress.host (the public host the gateway posts webhooks to)." }}
{{- end }}
{{- if and .Values.tracing.enabled (not .Values.tracing.otlpEndpoint) }}
{{- fail "msgw: tracing.enabled needs tracing.otlpEndpoint." }}
{{- end }}
{{- end }}

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
{{- if or (not .Values.secrets.existingSecret) .Values.store.postgres.url .Values.store.postgres.direct.url }}true{{ end }}
{{- end }}

{{/*
Secret keys to mount, as a dict: env var name (without _FILE) -> key in the Secret.
The chart's own Secret always holds webhook-secret, account-token and verify-secret; api-key only when set.
*/}}
{{- define "msgw.secretKeys" -}}
{{- $keys := dict }}
{{- if .Values.secrets.existingSecret }}
{{- with .Values.secrets.existingSecretKeys.apiKey }}{{ $_ := set $keys "MSGW_API_KEY" . }}{{ end }}
{{- with .Values.secrets.existingSecretKeys.webhookSecret }}{{ $_ := set $keys "MSGW_WEBHOOK_SECRET" . }}{{ end }}
{{- with .Values.secrets.existingSecretKeys.accountToken }}{{ $_ := set $keys "MSGW_ACCOUNT_TOKEN" . }}{{ end }}
{{- with .Values.secrets.existingSecretKeys.webhookSecretPrevious }}{{ $_ := set $keys "MSGW_WEBHOOK_SECRET_PREVIOUS" . }}{{ end }}
{{- with .Values.secrets.existingSecretKeys.verifySecret }}{{ $_ := set $keys "MSGW_VERIFY_SECRET" . }}{{ end }}
{{- else }}
{{- if .Values.secrets.apiKey }}{{ $_ := set $keys "MSGW_API_KEY" "api-key" }}{{ end }}
{{- $_ := set $keys "MSGW_WEBHOOK_SECRET" "webhook-secret" }}
{{- $_ := set $keys "MSGW_ACCOUNT_TOKEN" "account-token" }}
{{- $_ := set $keys "MSGW_VERIFY_SECRET" "verify-secret" }}
{{- if .Values.secrets.webhookSecretPrevious }}{{ $_ := set $keys "MSGW_WEBHOOK_SECRET_PREVIOUS" "webhook-secret-previous" }}{{ end }}
{{- end }}
{{- toJson $keys }}
{{- end }}

{{/* A config value as an environment variable's text: a list comma-separated, a whole
number as digits (YAML numbers reach templates as floats, and 1000000 would print as 1e+06). */}}
{{- define "msgw.envValue" -}}
{{- if kindIs "slice" . }}{{ join "," . }}
{{- else if and (kindIs "float64" .) (eq . (floor .)) }}{{ int64 . }}
{{- else }}{{ . }}{{ end }}
{{- end }}

{{/* MSGW_PUBLIC_URL: config.publicUrl, else derived from the Ingress host, else "". */}}
{{- define "msgw.publicUrl" -}}
{{- if .Values.config.publicUrl }}
{{- .Values.config.publicUrl | trimSuffix "/" }}
{{- else if and .Values.ingress.enabled .Values.ingress.host }}
{{- printf "%s://%s" (ternary "https" "http" .Values.ingress.tls.enabled) .Values.ingress.host }}
{{- end }}
{{- end }}

{{/* Secret of the gRPC port's TLS: grpc.tls.secretName, else the cert-manager Certificate's. */}}
{{- define "msgw.grpcTlsSecretName" -}}
{{- .Values.grpc.tls.secretName | default (printf "%s-grpc-tls" (include "msgw.fullname" .)) }}
{{- end }}

{{/* "true" when callers must present a client certificate (mTLS), else "". */}}
{{- define "msgw.mtls" -}}
{{- if and .Values.grpc.tls.enabled .Values.grpc.tls.clientCA.enabled }}true{{ end }}
{{- end }}

{{/* "true" when a callers file is configured (existing Secret or inline), else "". */}}
{{- define "msgw.callers" -}}
{{- if or .Values.callers.existingSecret .Values.callers.inline }}true{{ end }}
{{- end }}

{{/* Secret holding the callers file, and its key. */}}
{{- define "msgw.callersSecretName" -}}
{{- .Values.callers.existingSecret | default (printf "%s-callers" (include "msgw.fullname" .)) }}
{{- end }}
{{- define "msgw.callersSecretKey" -}}
{{- if .Values.callers.existingSecret }}{{ .Values.callers.existingSecretKey }}{{ else }}callers.toml{{ end }}
{{- end }}

{{/* DNS names of the gRPC certificate: grpc.tls.certManager.dnsNames, else the Service's in-cluster names. */}}
{{- define "msgw.grpcTlsDnsNames" -}}
{{- $cm := .Values.grpc.tls.certManager }}
{{- if $cm.dnsNames }}
{{- toJson $cm.dnsNames }}
{{- else }}
{{- $svc := include "msgw.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- toJson (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns $cm.clusterDomain)) }}
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
{{- $direct := .Values.store.postgres.direct }}
{{- if and $direct.url $direct.existingSecret }}
{{- fail "msgw: set store.postgres.direct.url or store.postgres.direct.existingSecret, not both." }}
{{- end }}
{{- if and (or $direct.url $direct.existingSecret) (not $postgres) }}
{{- fail "msgw: store.postgres.direct is PostgreSQL past a pooler: set store.postgres.url (or existingSecret) to the pooler too." }}
{{- end }}
{{- if eq .Values.store.postgres.pooling "transaction" }}
{{- if not $postgres }}
{{- fail "msgw: store.postgres.pooling=transaction is for a PostgreSQL store: set store.postgres.url (or existingSecret) to the pooler." }}
{{- end }}
{{- if not (or $direct.url $direct.existingSecret) }}
{{- fail "msgw: store.postgres.pooling=transaction needs store.postgres.direct (url or existingSecret): PostgreSQL itself, past the pooler, for the migrations' lock and LISTEN." }}
{{- end }}
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
{{- if and $postgres .Values.secrets.existingSecret (not .Values.secrets.existingSecretKeys.verifySecret) }}
{{- fail "msgw: replicas sharing PostgreSQL must share the verification secret: set secrets.existingSecretKeys.verifySecret." }}
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
{{- $tls := .Values.grpc.tls }}
{{- if and $tls.enabled (not $tls.secretName) (not $tls.certManager.enabled) }}
{{- fail "msgw: grpc.tls.enabled needs grpc.tls.secretName (a kubernetes.io/tls Secret) or grpc.tls.certManager.enabled." }}
{{- end }}
{{- if and $tls.clientCA.enabled (not $tls.enabled) }}
{{- fail "msgw: grpc.tls.clientCA.enabled (mTLS) needs grpc.tls.enabled." }}
{{- end }}
{{- if and $tls.certManager.enabled (not $tls.enabled) }}
{{- fail "msgw: grpc.tls.certManager.enabled needs grpc.tls.enabled." }}
{{- end }}
{{- if and $tls.enabled $tls.certManager.enabled (not $tls.certManager.issuerRef.name) }}
{{- fail "msgw: grpc.tls.certManager.enabled needs grpc.tls.certManager.issuerRef.name (the Issuer or ClusterIssuer that signs the certificate)." }}
{{- end }}
{{- if and .Values.callers.existingSecret .Values.callers.inline }}
{{- fail "msgw: set callers.existingSecret or callers.inline, not both." }}
{{- end }}
{{- with .Values.callers.inline }}
{{- $parsed := fromToml . }}
{{- if hasKey $parsed "Error" }}
{{- fail (printf "msgw: callers.inline is not valid TOML: %s" (get $parsed "Error")) }}
{{- end }}
{{- range $caller := (get $parsed "caller" | default list) }}
{{- if and (kindIs "map" $caller) (hasKey $caller "token") }}
{{- fail (printf "msgw: callers.inline: caller %q has a plain token: the callers file holds only token_sha256 (the SHA-256 of the token), never the token." (toString (get $caller "name"))) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.config.upstreamUrl (not (include "msgw.callers" .)) (not (include "msgw.mtls" .)) (not .Values.allowUnauthenticated) }}
{{- fail "msgw: config.upstreamUrl is set (a real gateway) but no caller authentication is configured: anyone who reaches the gRPC port could send paid messages and read every delivery event. Set callers.existingSecret or callers.inline (bearer tokens), or grpc.tls.enabled with grpc.tls.clientCA.enabled (mTLS), or allowUnauthenticated: true if something in front of msgw (a service mesh) already authenticates callers." }}
{{- end }}
{{- $rate := .Values.config.upstreamRate }}
{{- $burst := .Values.config.upstreamBurst }}
{{- if and (not (kindIs "invalid" $rate)) (not (kindIs "invalid" $burst)) (gt (float64 $burst) (float64 $rate)) }}
{{- fail (printf "msgw: config.upstreamBurst (%d) must not exceed config.upstreamRate (%d): a burst is at most one second's worth of sends." (int64 $burst) (int64 $rate)) }}
{{- end }}
{{- if and .Values.tracing.enabled (not .Values.tracing.otlpEndpoint) }}
{{- fail "msgw: tracing.enabled needs tracing.otlpEndpoint." }}
{{- end }}
{{- end }}

{{/* Probe handler: native gRPC health, or (TLS on the gRPC port) a TCP connect. */}}
{{- define "msgw.probeHandler" -}}
{{- if .root.Values.grpc.tls.enabled -}}
httpGet:
  path: {{ .path }}
  port: admin
{{- else -}}
grpc:
  port: {{ .root.Values.config.grpcPort }}
{{- end }}
{{- end }}

{{/* Chart name, truncated to the 63 characters of a label value. */}}
{{- define "tpu-webhook.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified name: "<release>-<chart>", or "<release>" when it already contains the chart
name. Truncated to 63 characters (DNS label limit of Service names).
*/}}
{{- define "tpu-webhook.fullname" -}}
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

{{- define "tpu-webhook.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Standard labels on every object. */}}
{{- define "tpu-webhook.labels" -}}
helm.sh/chart: {{ include "tpu-webhook.chart" . }}
{{ include "tpu-webhook.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: admission-webhook
app.kubernetes.io/part-of: tpu-webhook
{{- end }}

{{/* Selector labels: stable across upgrades (a Deployment selector is immutable). */}}
{{- define "tpu-webhook.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tpu-webhook.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tpu-webhook.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tpu-webhook.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Image reference: repository[:tag][@digest]; the tag defaults to appVersion. */}}
{{- define "tpu-webhook.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
Container resources: a memory request or limit left out is 128Mi / 256Mi (one server process,
70-85 MiB measured in bench/RESULTS.md).
*/}}
{{- define "tpu-webhook.resources" -}}
{{- $res := deepCopy (.Values.resources | default dict) }}
{{- $requests := get $res "requests" | default dict }}
{{- if not (hasKey $requests "memory") }}
{{- $_ := set $requests "memory" "128Mi" }}
{{- end }}
{{- $limits := get $res "limits" | default dict }}
{{- if not (hasKey $limits "memory") }}
{{- $_ := set $limits "memory" "256Mi" }}
{{- end }}
{{- $_ := set $res "requests" $requests }}
{{- $_ := set $res "limits" $limits }}
{{- toYaml $res }}
{{- end }}

{{/* Whether the server Pods use a system-* PriorityClass that GKE limits by ResourceQuota. */}}
{{- define "tpu-webhook.criticalPriority" -}}
{{- if has .Values.priorityClassName (list "system-cluster-critical" "system-node-critical") }}true{{ end }}
{{- end }}

{{/*
The Secret that holds the CA a PodMonitoring verifies the server with; the chart grants the
managed collector `get` on it. Never a Secret that holds a private key: by default the
CA-only Secret (none in certManager mode, where `metrics.podMonitoring.tls` must say).
*/}}
{{- define "tpu-webhook.podMonitoringCASecret" -}}
{{- $tls := .Values.metrics.podMonitoring.tls }}
{{- $caOnly := include "tpu-webhook.caSecretName" . }}
{{- $host := printf "%s.%s.svc" (include "tpu-webhook.serviceName" .) .Release.Namespace }}
{{- if not $tls }}
{{- if not $caOnly }}
{{- fail (printf "metrics.podMonitoring.tls is required when certificates.mode is %s: the managed collector reads the scrape's CA from a Secret the chart lets it get, and every Secret of this mode holds a private key (%s holds the serving key). Name a Secret with only ca.crt: --set metrics.podMonitoring.tls.serverName=%s --set metrics.podMonitoring.tls.ca.secret.name=SECRET --set metrics.podMonitoring.tls.ca.secret.key=ca.crt" .Values.certificates.mode (include "tpu-webhook.tlsSecretName" .) $host) }}
{{- end }}
{{- $caOnly }}
{{- else if and $tls.ca $tls.ca.secret }}
{{- $name := $tls.ca.secret.name }}
{{- if has $name (include "tpu-webhook.keySecretNames" . | fromJsonArray) }}
{{- fail (printf "metrics.podMonitoring.tls.ca.secret.name: %s holds a private key, and the chart would let the managed collector get it; name a Secret with only ca.crt%s" $name (ternary (printf " (this release renders %s)" $caOnly) "" (ne $caOnly ""))) }}
{{- end }}
{{- $name }}
{{- end }}
{{- end }}

{{/*
The Secret with only `ca.crt` (the CAs the serving certificate chains to, no key) that the
chart renders: "<fullname>-ca-bundle" in selfSigned and selfManaged modes (the server fills it
in the latter) and in existingSecret mode (from existingSecret.caBundle); "" in certManager
mode, whose Secrets all hold a key.
*/}}
{{- define "tpu-webhook.caSecretName" -}}
{{- $mode := .Values.certificates.mode }}
{{- if and .Values.deployment.enabled (or (has $mode (list "selfSigned" "selfManaged")) (and (eq $mode "existingSecret") .Values.certificates.existingSecret.caBundle)) }}
{{- printf "%s-ca-bundle" (include "tpu-webhook.fullname" .) }}
{{- end }}
{{- end }}

{{/* Secrets of this release that hold a private key (JSON list): only the server reads them. */}}
{{- define "tpu-webhook.keySecretNames" -}}
{{- $names := list }}
{{- if .Values.deployment.enabled }}
{{- $names = append $names (include "tpu-webhook.tlsSecretName" .) }}
{{- if and (eq .Values.certificates.mode "certManager") (not .Values.certificates.certManager.issuerRef) }}
{{- $names = append $names (printf "%s-ca" (include "tpu-webhook.fullname" .)) }}
{{- end }}
{{- end }}
{{- toJson $names }}
{{- end }}

{{/* The Service name is the fullname; it is also the first certificate SAN. */}}
{{- define "tpu-webhook.serviceName" -}}
{{- include "tpu-webhook.fullname" . }}
{{- end }}

{{/* DNS names the serving certificate must carry. */}}
{{- define "tpu-webhook.dnsNames" -}}
{{- $svc := include "tpu-webhook.serviceName" . }}
{{- $ns := .Release.Namespace }}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson }}
{{- end }}

{{/* TLS Secret the server mounts. */}}
{{- define "tpu-webhook.tlsSecretName" -}}
{{- if eq .Values.certificates.mode "existingSecret" }}
{{- required "certificates.existingSecret.name is required when certificates.mode is existingSecret" .Values.certificates.existingSecret.name }}
{{- else if eq .Values.certificates.mode "selfManaged" }}
{{- default (printf "%s-certs" (include "tpu-webhook.fullname" .)) .Values.certificates.secretName }}
{{- else }}
{{- default (printf "%s-tls" (include "tpu-webhook.fullname" .)) .Values.certificates.secretName }}
{{- end }}
{{- end }}

{{/* Whether the server keeps its own certificates through the Kubernetes API. */}}
{{- define "tpu-webhook.selfManaged" -}}
{{- if and (eq .Values.certificates.mode "selfManaged") .Values.deployment.enabled }}true{{ end }}
{{- end }}

{{/* cert-manager serving Certificate name (the target of cert-manager.io/inject-ca-from). */}}
{{- define "tpu-webhook.certificateName" -}}
{{- printf "%s-serving" (include "tpu-webhook.fullname" .) }}
{{- end }}

{{/*
Base64 of a PEM CA given in values, for clientConfig.caBundle. Fails on text that is not PEM so
a base64 string pasted by habit is caught at render time instead of at the first admission call.
Call with (list <pem> <values path for the message>).
*/}}
{{- define "tpu-webhook.pemToCABundle" -}}
{{- $pem := index . 0 | trim }}
{{- $path := index . 1 }}
{{- if not (hasPrefix "-----BEGIN CERTIFICATE-----" $pem) }}
{{- fail (printf "%s must be a PEM certificate (\"-----BEGIN CERTIFICATE-----...\"), not base64 or empty" $path) }}
{{- end }}
{{- printf "%s\n" $pem | b64enc }}
{{- end }}

{{/*
Checks of value combinations that the schema cannot express with a clear message. Included
by every template that depends on them, so `helm template -s` of any file still checks.
*/}}
{{- define "tpu-webhook.validate" -}}
{{- $url := .Values.webhook.url }}
{{- if $url.enabled }}
{{- if not $url.iUnderstandThisIsForTesting }}
{{- fail "webhook.url.enabled sends admission reviews to webhook.url.base instead of the in-cluster Service; it is for tests and development only. Set webhook.url.iUnderstandThisIsForTesting=true to confirm." }}
{{- end }}
{{- if not (hasPrefix "https://" $url.base) }}
{{- fail "webhook.url.base must be an https:// URL (e.g. https://127.0.0.1:18443) when webhook.url.enabled is true" }}
{{- end }}
{{- if hasSuffix "/" $url.base }}
{{- fail "webhook.url.base must not end with /; the chart appends /mutate, /validate and /validate/warn" }}
{{- end }}
{{- else if not .Values.deployment.enabled }}
{{- fail "deployment.enabled=false leaves the webhooks without a server; it is only allowed with webhook.url.enabled=true" }}
{{- end }}
{{- if and .Values.deployment.enabled (not .Values.image.repository) }}
{{- fail "image.repository is required: no public tpu-webhook image is published. Build it from the repository's Dockerfile, push it to a registry your nodes can pull from, and set image.repository (e.g. --set image.repository=europe-docker.pkg.dev/PROJECT/REPO/tpu-webhook, with image.tag or image.digest). Without a pullable image the chart would register failurePolicy Fail webhooks that no Pod can serve." }}
{{- end }}
{{- if and .Values.webhook.exemptions.namespaces (ne .Values.webhook.optOutLabel "tpu-webhook.io/ignore") }}
{{- fail "webhook.exemptions.namespaces makes the server decide the object label opt-out, and the server reads the label tpu-webhook.io/ignore: set webhook.optOutLabel to it, or leave webhook.exemptions.namespaces empty" }}
{{- end }}
{{- if eq .Values.certificates.mode "existingSecret" }}
{{- if and .Values.deployment.enabled (not .Values.certificates.existingSecret.name) }}
{{- fail "certificates.existingSecret.name is required when certificates.mode is existingSecret" }}
{{- end }}
{{- if and (not $url.enabled) (not .Values.certificates.existingSecret.caBundle) }}
{{- fail "certificates.existingSecret.caBundle (the PEM CA that signed the Secret's certificate) is required when certificates.mode is existingSecret: the API server needs it to trust the webhook" }}
{{- end }}
{{- end }}
{{- end }}

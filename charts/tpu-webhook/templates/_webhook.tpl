{{/* Pieces of the webhook entries in webhooks.yaml. */}}

{{/* Annotations of both configurations. Call with (dict "root" $ "injectFrom" <ns/cert or "">). */}}
{{- define "tpu-webhook.webhookAnnotations" -}}
{{- $a := deepCopy (.root.Values.webhook.annotations | default dict) }}
{{- if .injectFrom }}
{{- $_ := set $a "cert-manager.io/inject-ca-from" .injectFrom }}
{{- end }}
{{- if $a }}
{{- toYaml $a }}
{{- end }}
{{- end }}

{{/*
clientConfig: the in-cluster Service, or <webhook.url.base><path> in url mode.
Call with (dict "root" $ "path" "/mutate" "caBundle" <base64 or "">).
*/}}
{{- define "tpu-webhook.clientConfig" -}}
{{- $url := .root.Values.webhook.url -}}
clientConfig:
  {{- if $url.enabled }}
  url: {{ printf "%s%s" $url.base .path | quote }}
  {{- else }}
  service:
    name: {{ include "tpu-webhook.serviceName" .root }}
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path | quote }}
    port: 443
  {{- end }}
  {{- if .caBundle }}
  caBundle: {{ .caBundle }}
  {{- end }}
{{- end }}

{{/*
Rules for every supported kind, with the given operations. files/webhook-rules.json is generated
from the webhook's workload table (`make chart-files`, webhook/registration.py; a unit test keeps
it identical): one rule per API group and version (the owners' CRDs may be absent: a rule for a
missing resource matches nothing). matchPolicy Equivalent also sends requests made through other
versions of the same resources, converted to these. Call with (dict "root" $ "ops" <operations>).
*/}}
{{- define "tpu-webhook.rules" -}}
{{- $ops := .ops -}}
rules:
{{- range (.root.Files.Get "files/webhook-rules.json" | fromJsonArray) }}
  - apiGroups: {{ toJson .apiGroups }}
    apiVersions: {{ toJson .apiVersions }}
    resources: {{ toJson .resources }}
    operations: {{ toJson $ops }}
    scope: {{ .scope }}
{{- end }}
{{- end }}

{{/*
namespaceSelector: never kube-system, the release namespace (the webhook must not guard its own
Pods) or webhook.excludeNamespaces; never a namespace with the opt-out label set to "true"; and,
when webhook.namespaceSelector is set, only the namespaces it selects.
"warn": "any" (mutating), "exclude" (enforcing: not the warn-mode namespaces) or "only".
Call with (dict "root" $ "excluded" <list> "warn" <mode>).
*/}}
{{- define "tpu-webhook.namespaceSelector" -}}
{{- $wh := .root.Values.webhook -}}
namespaceSelector:
  {{- with $wh.namespaceSelector.matchLabels }}
  matchLabels:
    {{- /* quoted: `--set ...=true` gives a bool, a label value is a string */}}
    {{- range $key, $value := . }}
    {{ $key | quote }}: {{ $value | toString | quote }}
    {{- end }}
  {{- end }}
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: {{ toJson .excluded }}
    - key: {{ $wh.optOutLabel | quote }}
      operator: NotIn
      values: ["true"]
    {{- if eq .warn "exclude" }}
    - key: {{ $wh.warnMode.label | quote }}
      operator: NotIn
      values: [{{ $wh.warnMode.value | quote }}]
    {{- else if eq .warn "only" }}
    - key: {{ $wh.warnMode.label | quote }}
      operator: In
      values: [{{ $wh.warnMode.value | quote }}]
    {{- end }}
    {{- range $wh.namespaceSelector.matchExpressions }}
    - key: {{ .key | quote }}
      operator: {{ .operator }}
      {{- with .values }}
      values: [{{ range $i, $v := . }}{{ if $i }}, {{ end }}{{ $v | toString | quote }}{{ end }}]
      {{- end }}
    {{- end }}
{{- end }}

{{/*
objectSelector: an object labelled <optOutLabel>=true is never sent, while every namespace may use
that opt-out (webhook.exemptions.optOutLabel true, webhook.exemptions.namespaces empty). Otherwise
nothing is rendered and the server decides: a selector cannot be limited to namespaces.
*/}}
{{- define "tpu-webhook.objectSelector" -}}
{{- $ex := .Values.webhook.exemptions -}}
{{- if and $ex.optOutLabel (not $ex.namespaces) -}}
objectSelector:
  matchExpressions:
    - key: {{ .Values.webhook.optOutLabel | quote }}
      operator: NotIn
      values: ["true"]
{{- end }}
{{- end }}

{{/*
matchConditions (CEL, evaluated by the API server before calling us): send only objects whose
pod spec has a TPU nodeSelector key or a container/initContainer requesting or limiting
google.com/tpu; with "changed", an UPDATE only when it changes the spec (pod templates, host
counts): the server allows every other UPDATE anyway. files/tpu-workload.cel and
files/spec-changed.cel are generated from the webhook's workload table (`make chart-files`,
webhook/registration.py); a unit test keeps them identical.
Call with (dict "root" $ "changed" <bool>).
*/}}
{{- define "tpu-webhook.matchConditions" -}}
{{- if .root.Values.webhook.matchConditions.enabled -}}
matchConditions:
  - name: tpu-workload
    expression: |-
      {{- .root.Files.Get "files/tpu-workload.cel" | trim | nindent 6 }}
  {{- if .changed }}
  - name: spec-changed
    expression: |-
      {{- .root.Files.Get "files/spec-changed.cel" | trim | nindent 6 }}
  {{- end }}
{{- end }}
{{- end }}

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
Rules for every supported kind. Call with the list of operations. Pods are core/v1, Jobs and
CronJobs batch/v1, Deployments and StatefulSets apps/v1, JobSets jobset.x-k8s.io/v1alpha2,
LeaderWorkerSets leaderworkerset.x-k8s.io/v1, RayClusters, RayJobs and RayServices ray.io/v1;
matchPolicy Equivalent also sends requests made through other versions of the same resources,
converted to these.
*/}}
{{- define "tpu-webhook.rules" -}}
{{- $ops := . -}}
rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    resources: ["pods"]
    operations: {{ toJson $ops }}
    scope: Namespaced
  - apiGroups: ["batch"]
    apiVersions: ["v1"]
    resources: ["jobs", "cronjobs"]
    operations: {{ toJson $ops }}
    scope: Namespaced
  - apiGroups: ["apps"]
    apiVersions: ["v1"]
    resources: ["deployments", "statefulsets"]
    operations: {{ toJson $ops }}
    scope: Namespaced
  # Owners of TPU slices (their CRDs may be absent: a rule for a missing resource matches nothing).
  - apiGroups: ["jobset.x-k8s.io"]
    apiVersions: ["v1alpha2"]
    resources: ["jobsets"]
    operations: {{ toJson $ops }}
    scope: Namespaced
  - apiGroups: ["leaderworkerset.x-k8s.io"]
    apiVersions: ["v1"]
    resources: ["leaderworkersets"]
    operations: {{ toJson $ops }}
    scope: Namespaced
  - apiGroups: ["ray.io"]
    apiVersions: ["v1"]
    resources: ["rayclusters", "rayjobs", "rayservices"]
    operations: {{ toJson $ops }}
    scope: Namespaced
{{- end }}

{{/*
namespaceSelector: never kube-system, the release namespace (the webhook must not guard its own
Pods) or webhook.excludeNamespaces; never a namespace with the opt-out label set to "true".
"warn": "any" (mutating), "exclude" (enforcing: not the warn-mode namespaces) or "only".
Call with (dict "root" $ "excluded" <list> "warn" <mode>).
*/}}
{{- define "tpu-webhook.namespaceSelector" -}}
{{- $wh := .root.Values.webhook -}}
namespaceSelector:
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
{{- end }}

{{/* objectSelector: an object labelled <optOutLabel>=true is never sent. */}}
{{- define "tpu-webhook.objectSelector" -}}
objectSelector:
  matchExpressions:
    - key: {{ .Values.webhook.optOutLabel | quote }}
      operator: NotIn
      values: ["true"]
{{- end }}

{{/*
matchConditions (CEL, evaluated by the API server before calling us): send only objects whose
pod spec has a TPU nodeSelector key or a container/initContainer requesting or limiting
google.com/tpu. files/tpu-workload.cel is generated from the webhook's workload table
(`make chart-cel`, webhook/configs.py); a unit test keeps it identical to the server's.
*/}}
{{- define "tpu-webhook.matchConditions" -}}
{{- if .Values.webhook.matchConditions.enabled -}}
matchConditions:
  - name: tpu-workload
    expression: |-
      {{- .Files.Get "files/tpu-workload.cel" | trim | nindent 6 }}
{{- end }}
{{- end }}

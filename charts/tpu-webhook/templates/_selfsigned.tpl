{{/*
selfSigned certificates: the TLS Secret, the CA-only Secret and the caBundle, from one
generation. Helm renders each template file on its own, so webhooks.yaml (which needs the
caBundle) includes this once and renders the objects it returns. Returns JSON:
{"objects": [<TLS Secret>, <CA-only Secret>], "caBundle": <base64 PEM>}.

The pair (an ECDSA P-256 CA and a serving certificate from it, both valid validityDays) is kept
across upgrades (`lookup` of the Secret) until a third of its life is left; the upgrade after
that makes a new pair. The CA of the pair it replaces stays in ca.crt, and so in both
caBundles, until it expires (the certificate it signed expires with it; its key was never
stored), so a Pod still serving that certificate until the kubelet refreshes its mount stays
trusted. A pair without readable tpu-webhook.io/not-before and not-after annotations (the
chart's earlier 10-year RSA pairs) is renewed at once. `helm template` and client-side dry
runs see no cluster and make a new pair every time.
*/}}
{{- define "tpu-webhook.selfSigned" -}}
{{- $layout := "2006-01-02T15:04:05Z07:00" }}
{{- $notBeforeKey := "tpu-webhook.io/not-before" }}
{{- $notAfterKey := "tpu-webhook.io/not-after" }}
{{- $previousKey := "tpu-webhook.io/previous-ca-not-after" }}
{{- $fullname := include "tpu-webhook.fullname" . }}
{{- $secretName := include "tpu-webhook.tlsSecretName" . }}
{{- $days := int .Values.certificates.selfSigned.validityDays }}
{{- $now := now }}
{{- $nowUnix := $now | unixEpoch | int64 }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace $secretName | default dict }}
{{- $data := dig "data" dict $existing }}
{{- $annotations := dig "metadata" "annotations" dict $existing }}
{{- $cas := list }}
{{- if and (hasKey $data "ca.crt") (hasKey $data "tls.crt") (hasKey $data "tls.key") }}
{{- $cas = regexFindAll "-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----" (index $data "ca.crt" | b64dec) -1 }}
{{- end }}
{{- $notBefore := toDate $layout (get $annotations $notBeforeKey | default "") | unixEpoch | int64 }}
{{- $notAfter := toDate $layout (get $annotations $notAfterKey | default "") | unixEpoch | int64 }}
{{- $due := true }}
{{- if and $cas (lt $notBefore $notAfter) }}
{{- /* Renewal when a third of the lifetime is left (as cert-manager and selfManaged do). */}}
{{- $due = ge $nowUnix (sub $notAfter (div (sub $notAfter $notBefore) 3)) }}
{{- end }}
{{- $keep := dict }}
{{- $tlsCrt := "" }}
{{- $tlsKey := "" }}
{{- if $due }}
{{- $caKey := genPrivateKey "ecdsa" }}
{{- $ca := genCAWithKey (printf "%s-ca" $fullname) $days $caKey }}
{{- $cn := printf "%s.%s.svc" (include "tpu-webhook.serviceName" .) .Release.Namespace }}
{{- $names := include "tpu-webhook.dnsNames" . | fromJsonArray }}
{{- $cert := genSignedCertWithKey $cn nil $names $days $ca (genPrivateKey "ecdsa") }}
{{- $tlsCrt = $cert.Cert }}
{{- $tlsKey = $cert.Key }}
{{- $previous := list }}
{{- /* The CA being replaced stays trusted while its certificate may still be served. */}}
{{- if and $cas (or (le $notAfter $notBefore) (lt $nowUnix $notAfter)) }}
{{- $previous = list (last $cas) }}
{{- if lt $notBefore $notAfter }}
{{- $_ := set $keep $previousKey (get $annotations $notAfterKey) }}
{{- end }}
{{- end }}
{{- $cas = append $previous (trim $ca.Cert) }}
{{- $_ := set $keep $notBeforeKey (dateInZone $layout $now "UTC") }}
{{- $_ := set $keep $notAfterKey (dateInZone $layout ($now | dateModify (printf "+%dh" (mul $days 24))) "UTC") }}
{{- else }}
{{- $tlsCrt = index $data "tls.crt" | b64dec }}
{{- $tlsKey = index $data "tls.key" | b64dec }}
{{- $_ := set $keep $notBeforeKey (get $annotations $notBeforeKey) }}
{{- $_ := set $keep $notAfterKey (get $annotations $notAfterKey) }}
{{- $previousNotAfter := toDate $layout (get $annotations $previousKey | default "") | unixEpoch | int64 }}
{{- if and (gt (len $cas) 1) (hasKey $annotations $previousKey) (ge $nowUnix $previousNotAfter) }}
{{- /* The previous CA has expired: only the current one is trusted from now on. */}}
{{- $cas = list (last $cas) }}
{{- else if hasKey $annotations $previousKey }}
{{- $_ := set $keep $previousKey (get $annotations $previousKey) }}
{{- end }}
{{- end }}
{{- $bundle := printf "%s\n" (join "\n" $cas) | b64enc }}
{{- $labels := include "tpu-webhook.labels" . | fromYaml }}
{{- $meta := dict "name" $secretName "namespace" .Release.Namespace "labels" $labels "annotations" $keep }}
{{- $tls := dict "apiVersion" "v1" "kind" "Secret" "metadata" $meta "type" "kubernetes.io/tls" }}
{{- $_ := set $tls "data" (dict "tls.crt" ($tlsCrt | b64enc) "tls.key" ($tlsKey | b64enc) "ca.crt" $bundle) }}
{{- $caMeta := dict "name" (include "tpu-webhook.caSecretName" .) "namespace" .Release.Namespace "labels" $labels }}
{{- $caOnly := dict "apiVersion" "v1" "kind" "Secret" "metadata" $caMeta "type" "Opaque" "data" (dict "ca.crt" $bundle) }}
{{- dict "objects" (list $tls $caOnly) "caBundle" $bundle | toJson }}
{{- end }}

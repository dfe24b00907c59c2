{{/* Names: the release's, cut to what Kubernetes allows. */}}
{{- define "gpuportal.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpuportal.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* A component's selector: (dict "root" $ "component" "gateway") */}}
{{- define "gpuportal.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpuportal.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "gpuportal.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gpuportal.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "gpuportal.gatewayService" -}}
{{ include "gpuportal.fullname" . }}-gateway
{{- end -}}

{{/* The Secret the pods read: the one made outside the chart, or the chart's own. */}}
{{- define "gpuportal.secretName" -}}
{{- .Values.existingSecret.name | default (printf "%s-secrets" (include "gpuportal.fullname" .)) -}}
{{- end -}}

{{/* Each secret file the pods get, as key-in-the-Secret=file-name pairs; a value absent is left out. */}}
{{- define "gpuportal.secretFiles" -}}
{{- $files := dict -}}
{{- if .Values.existingSecret.name -}}
{{- $keys := .Values.existingSecret.keys -}}
{{- if not $keys.secretKey }}{{ fail "existingSecret.keys.secretKey: the key holding SECRET_KEY is required" }}{{ end -}}
{{- if not $keys.databaseUrl }}{{ fail "existingSecret.keys.databaseUrl: the key holding DATABASE_URL is required" }}{{ end -}}
{{- $_ := set $files "SECRET_KEY" $keys.secretKey -}}
{{- $_ := set $files "DATABASE_URL" $keys.databaseUrl -}}
{{- with $keys.databasePassword }}{{ $_ := set $files "DATABASE_PASSWORD" . }}{{ end -}}
{{- with $keys.redisUrl }}{{ $_ := set $files "REDIS_URL" . }}{{ end -}}
{{- with $keys.metricsToken }}{{ $_ := set $files "GP_METRICS_TOKEN" . }}{{ end -}}
{{- else -}}
{{- $_ := set $files "SECRET_KEY" "secret-key" -}}
{{- $_ := set $files "DATABASE_URL" "database-url" -}}
{{- $_ := set $files "REDIS_URL" "redis-url" -}}
{{- if .Values.database.password }}{{ $_ := set $files "DATABASE_PASSWORD" "database-password" }}{{ end -}}
{{- if .Values.metrics.token }}{{ $_ := set $files "GP_METRICS_TOKEN" "metrics-token" }}{{ end -}}
{{- end -}}
{{- toJson $files -}}
{{- end -}}

{{/* The environment every portal process gets: the same settings for all (docs/configuration.md). */}}
{{- define "gpuportal.env" -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- $svc := include "gpuportal.gatewayService" . }}
{{- $hosts := concat .Values.allowedHosts (list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.%s" $svc .Release.Namespace .Values.clusterDomain)) }}
- name: ALLOWED_HOSTS
  value: {{ printf "%s,$(POD_IP)" (join "," $hosts) | quote }}
{{- with .Values.csrfTrustedOrigins }}
- name: CSRF_TRUSTED_ORIGINS
  value: {{ join "," . | quote }}
{{- end }}
{{- range $name, $key := include "gpuportal.secretFiles" . | fromJson }}
- name: {{ $name }}_FILE
  value: /run/secrets/gpuportal/{{ $key }}
{{- end }}
{{- if not (hasKey (include "gpuportal.secretFiles" . | fromJson) "REDIS_URL") }}
- name: REDIS_URL
  value: {{ .Values.redis.url | quote }}
{{- end }}
{{- with .Values.redis.sentinel.hosts }}
{{- if not $.Values.redis.sentinel.master }}{{ fail "redis.sentinel.master: the master's name is required with sentinel hosts" }}{{ end }}
- name: REDIS_SENTINELS
  value: {{ join "," . | quote }}
- name: REDIS_SENTINEL_MASTER
  value: {{ $.Values.redis.sentinel.master | quote }}
{{- end }}
- name: GP_BATCH_FILES_DIR
  value: {{ .Values.batchFiles.path | quote }}
# The user has no home in the image, and the root filesystem is read-only.
- name: HOME
  value: /tmp
{{- range $name, $value := .Values.env }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "gpuportal.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
- name: secrets
  mountPath: /run/secrets/gpuportal
  readOnly: true
- name: batch-files
  mountPath: {{ .Values.batchFiles.path }}
{{- end -}}

{{- define "gpuportal.volumes" -}}
# The root filesystem is read-only: Python writes no bytecode (the image says so), beat's schedule
# and Django's spooled uploads go to /tmp.
- name: tmp
  emptyDir: {}
- name: secrets
  secret:
    secretName: {{ include "gpuportal.secretName" . }}
    defaultMode: 0440
    items:
    {{- range $name, $key := include "gpuportal.secretFiles" . | fromJson }}
      - key: {{ $key }}
        path: {{ $key }}
    {{- end }}
- name: batch-files
  {{- if .Values.batchFiles.existingClaim }}
  persistentVolumeClaim:
    claimName: {{ .Values.batchFiles.existingClaim }}
  {{- else if .Values.batchFiles.create }}
  persistentVolumeClaim:
    claimName: {{ include "gpuportal.fullname" . }}-batch-files
  {{- else }}
  emptyDir: {}
  {{- end }}
{{- end -}}

{{/* A pod's common spec: (dict "root" $ "values" .Values.worker) */}}
{{- define "gpuportal.podCommon" -}}
serviceAccountName: {{ include "gpuportal.serviceAccountName" .root }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with (.values.nodeSelector | default .root.Values.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (.values.tolerations | default .root.Values.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (.values.affinity | default .root.Values.affinity) }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  {{- include "gpuportal.volumes" .root | nindent 2 }}
{{- end -}}

{{/* What restarts the pods when the chart's Secret changes. */}}
{{- define "gpuportal.podAnnotations" -}}
checksum/env: {{ include "gpuportal.env" . | sha256sum }}
{{- if not .Values.existingSecret.name }}
checksum/secret: {{ include (print .Template.BasePath "/secret.yaml") . | sha256sum }}
{{- end }}
{{- end -}}

{{/* add_replica's arguments for each replica in the values, as JSON. */}}
{{- define "gpuportal.replicaArgs" -}}
{{- $all := list -}}
{{- range $i, $r := .Values.replicas -}}
{{- $args := list "--name" (required "replicas[].name is required" $r.name) "--url" (required "replicas[].url is required" $r.url) "--model" (required "replicas[].model is required" $r.model) "--max-num-seqs" (toString (required "replicas[].maxNumSeqs is required" $r.maxNumSeqs)) -}}
{{- with $r.policy }}{{ $args = concat $args (list "--policy" .) }}{{ end -}}
{{- with $r.modelKind }}{{ $args = concat $args (list "--model-kind" .) }}{{ end -}}
{{- with $r.kind }}{{ $args = concat $args (list "--kind" .) }}{{ end -}}
{{- if $r.apiKeySecret }}{{ $args = concat $args (list "--api-key" (printf "env:GP_REPLICA_API_KEY_%d" $i)) }}{{ end -}}
{{- $all = append $all $args -}}
{{- end -}}
{{- toJson $all -}}
{{- end -}}

{{- define "thinktier.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "thinktier.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "thinktier.selectorLabels" -}}
app.kubernetes.io/name: {{ include "thinktier.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "thinktier.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "thinktier.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: thinktier
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The image of every Ray container: image.tag, else the chart's appVersion for a policy with a GPU tier (the CUDA
image of Dockerfile) and appVersion-cpu for a CPU-only policy (the vllm-cpu image of Dockerfile.cpu).
*/}}
{{- define "thinktier.image" -}}
{{- $gpu := false }}
{{- range .Values.tiers }}{{ if eq .accelerator "gpu" }}{{ $gpu = true }}{{ end }}{{ end }}
{{- $tag := printf "%s%s" .Chart.AppVersion (ternary "" .Values.image.cpuTagSuffix $gpu) }}
{{- printf "%s:%s" .Values.image.repository (default $tag .Values.image.tag) }}
{{- end }}

{{- define "thinktier.tierNames" -}}
{{- range .Values.tiers }}{{ .name }} {{ end }}
{{- end }}

{{- define "thinktier.policyConfigMap" -}}
{{ include "thinktier.fullname" . }}-policy
{{- end }}

{{- define "thinktier.apiKeySecret" -}}
{{ default (printf "%s-api-keys" (include "thinktier.fullname" .)) .Values.apiKeys.existingSecret }}
{{- end }}

{{- define "thinktier.hasApiKeys" -}}
{{- if or .Values.apiKeys.existingSecret .Values.apiKeys.keys }}true{{ end }}
{{- end }}

{{/*
Checks that values generated from the policy are present and coherent; a missing generation step
fails here with the command that fixes it, before any object is rendered.
*/}}
{{- define "thinktier.checkValues" -}}
{{- $fix := "generate them from your policy: thinktier helm values --policy POLICY.yaml > generated.yaml, then pass -f generated.yaml before your own values file" }}
{{- if not .Values.policy.yaml }}
{{- fail (printf "policy.yaml is empty: the chart's policy values are generated, not written by hand; %s" $fix) }}
{{- end }}
{{- if not .Values.serveConfigV2 }}
{{- fail (printf "serveConfigV2 is empty; %s" $fix) }}
{{- end }}
{{- if not .Values.tiers }}
{{- fail (printf "tiers is empty: no worker group to run the tiers on; %s" $fix) }}
{{- end }}
{{- $tiers := include "thinktier.tierNames" . | splitList " " | compact }}
{{- range $name, $override := .Values.workers.tierOverrides }}
{{- if not (has $name $tiers) }}
{{- fail (printf "workers.tierOverrides.%s: the policy has no tier %q; tiers are %s" $name $name ($tiers | sortAlpha | join ", ")) }}
{{- end }}
{{- end }}
{{- if gt (int .Values.workers.objectStoreGiB) (int .Values.workers.sharedMemoryGiB) }}
{{- fail (printf "workers.objectStoreGiB (%v) must not exceed workers.sharedMemoryGiB (%v): Ray's object store lives in /dev/shm" .Values.workers.objectStoreGiB .Values.workers.sharedMemoryGiB) }}
{{- end }}
{{- if not .Values.apiKeys.existingSecret }}
{{- range .Values.apiKeyEnvs }}
{{- if not (hasKey $.Values.apiKeys.keys .) }}
{{- fail (printf "the policy's tenants read their API key from %s, which apiKeys.keys lacks; set apiKeys.keys.%s or apiKeys.existingSecret (a Secret with key %s)" . . .) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Environment shared by every Ray container: caches on the scratch volume (the root filesystem is read-only). */}}
{{- define "thinktier.env" -}}
- name: XDG_CACHE_HOME
  value: /tmp/.cache
- name: XDG_CONFIG_HOME
  value: /tmp/.config
- name: TRITON_CACHE_DIR
  value: /tmp/.triton
- name: RAY_USAGE_STATS_ENABLED
  value: "0"
{{- range .Values.rayEnv }}
- name: {{ .name }}
  value: {{ .value | quote }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "thinktier.envFrom" -}}
{{- if include "thinktier.hasApiKeys" . }}
envFrom:
  - secretRef:
      name: {{ include "thinktier.apiKeySecret" . }}
{{- end }}
{{- end }}

{{- define "thinktier.volumeMounts" -}}
- name: policy
  mountPath: {{ .Values.policy.mountDir }}
  readOnly: true
- name: scratch
  mountPath: /tmp
- name: shm
  mountPath: /dev/shm
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Volumes of every Ray pod; the argument is a dict with the root context and the /dev/shm size. */}}
{{- define "thinktier.volumes" -}}
{{- $ := .root -}}
- name: policy
  configMap:
    name: {{ include "thinktier.policyConfigMap" $ }}
- name: scratch
  emptyDir:
    sizeLimit: {{ $.Values.scratchSizeLimit }}
- name: shm
  emptyDir:
    medium: Memory
    sizeLimit: {{ .shmGiB }}Gi
{{- with $.Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

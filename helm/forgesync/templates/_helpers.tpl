{{/* The release's base name: <release>-forgesync, or the release name when it holds "forgesync". */}}
{{- define "forgesync.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A component's object name: <fullname>-<component>. Args: (list $ component). */}}
{{- define "forgesync.componentName" -}}
{{- $ := index . 0 -}}
{{- printf "%s-%s" (include "forgesync.fullname" $) (index . 1) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "forgesync.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels of a component. Args: (list $ component). */}}
{{- define "forgesync.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "forgesync.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* Standard labels of a component's objects. Args: (list $ component). */}}
{{- define "forgesync.labels" -}}
{{- $ := index . 0 -}}
{{ include "forgesync.selectorLabels" . }}
app.kubernetes.io/part-of: forgesync
app.kubernetes.io/version: {{ $.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" $.Chart.Name $.Chart.Version | replace "+" "_" }}
{{- with $.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* repository@digest, or repository:tag. Args: (list imageValues defaultTag). */}}
{{- define "forgesync.imageRef" -}}
{{- $image := index . 0 -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default (index . 1) $image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "forgesync.image" -}}
{{- include "forgesync.imageRef" (list .Values.image .Chart.AppVersion) -}}
{{- end -}}

{{/* A service entry merged over serviceDefaults. Args: (list $ name). Returns YAML. */}}
{{- define "forgesync.service" -}}
{{- $ := index . 0 -}}
{{- $entry := index $.Values.services (index . 1) | default dict -}}
{{- toYaml (mergeOverwrite (deepCopy $.Values.serviceDefaults) (deepCopy $entry)) -}}
{{- end -}}

{{/* The Secret every service reads its secret keys from. */}}
{{- define "forgesync.secretName" -}}
{{- default (include "forgesync.fullname" .) .Values.secrets.existingSecret -}}
{{- end -}}

{{/* terminationGracePeriodSeconds: the service's grace + the preStop pause + a margin. */}}
{{- define "forgesync.terminationGrace" -}}
{{- add .graceSeconds .preStopSeconds .marginSeconds -}}
{{- end -}}

{{/* The pod-level security context every pod of the chart runs with (restricted profile). */}}
{{- define "forgesync.podSecurityContext" -}}
runAsNonRoot: true
{{- toYaml .Values.podSecurityContext | nindent 0 }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The container-level security context of every container of the chart. */}}
{{- define "forgesync.containerSecurityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* A NetworkPolicy egress rule from a networkPolicy.<destination> value ({to, ports}). */}}
{{- define "forgesync.egressRule" -}}
- to:
    {{- toYaml .to | nindent 4 }}
  ports:
    {{- range .ports }}
    - { protocol: TCP, port: {{ . }} }
    {{- end }}
{{- end }}

{{/* The Secret key a service's environment variable is read from: the NATS credentials are
     its own NATS user's (NATS_URL -> NATS_URL_GITHUB_SYNC), any other key is shared.
     Args: (list serviceName envName). */}}
{{- define "forgesync.secretKey" -}}
{{- $name := index . 0 -}}
{{- $key := index . 1 -}}
{{- if has $key (list "NATS_URL" "FORGESYNC_NATS_NKEY") -}}
{{- printf "%s_%s" $key (upper (replace "-" "_" $name)) -}}
{{- else -}}
{{- $key -}}
{{- end -}}
{{- end -}}

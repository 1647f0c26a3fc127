{{/* The chart's name. */}}
{{- define "csi-fat.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Name of the release's objects: the release name, with the chart name unless it holds it. */}}
{{- define "csi-fat.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "csi-fat.selectorLabels" -}}
app.kubernetes.io/name: {{ include "csi-fat.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "csi-fat.labels" -}}
{{ include "csi-fat.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "csi-fat.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "csi-fat.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is needed when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The host directory holding the driver's CSI socket; the container sees it at /csi. */}}
{{- define "csi-fat.pluginDir" -}}
{{- printf "%s/plugins/%s" .Values.kubeletDir .Values.driverName -}}
{{- end -}}

{{/* The CSI socket as the kubelet sees it. */}}
{{- define "csi-fat.kubeletSocketPath" -}}
{{- printf "%s/csi.sock" (include "csi-fat.pluginDir" .) -}}
{{- end -}}

{{- define "csi-fat.registrationDir" -}}
{{- printf "%s/plugins_registry" .Values.kubeletDir -}}
{{- end -}}

{{/* A pull policy: the container's own when set, else image.pullPolicy. Argument: (list $ own). */}}
{{- define "csi-fat.pullPolicy" -}}
{{- $root := index . 0 -}}
{{- default $root.Values.image.pullPolicy (index . 1) -}}
{{- end -}}

{{/* True ("true") when path (argument) is dir or lies under it; argument: (list path dir). */}}
{{- define "csi-fat.under" -}}
{{- $path := index . 0 -}}
{{- $dir := index . 1 -}}
{{- if or (eq $path $dir) (hasPrefix (printf "%s/" $dir) $path) -}}true{{- end -}}
{{- end -}}

{{/* Host paths of the USB pool outside /sys and /dev, which the driver container needs mounted
     at the same path: a list of distinct paths, as YAML. */}}
{{- define "csi-fat.usbExtraPaths" -}}
{{- $paths := list -}}
{{- if .Values.usb.enabled -}}
{{- if not (include "csi-fat.under" (list .Values.usb.sysfsRoot "/sys")) -}}
{{- $paths = append $paths .Values.usb.sysfsRoot -}}
{{- end -}}
{{- range list .Values.usb.byIdDir .Values.usb.byPathDir .Values.usb.devDir -}}
{{- if not (include "csi-fat.under" (list . "/dev")) -}}
{{- $paths = append $paths . -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml (uniq $paths) -}}
{{- end -}}

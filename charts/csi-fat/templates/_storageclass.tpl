{{/* A StorageClass of the driver. Argument: (list $ classValues pool). */}}
{{- define "csi-fat.storageClass" -}}
{{- $root := index . 0 -}}
{{- $class := index . 1 -}}
{{- $pool := index . 2 -}}
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: {{ $class.name }}
  labels:
    {{- include "csi-fat.labels" $root | nindent 4 }}
  {{- if $class.isDefault }}
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
  {{- end }}
provisioner: {{ $root.Values.driverName }}
# A volume lives on one node: the scheduler picks the node (heeding each node's capacity) and the
# provisioner of that node makes the volume there.
volumeBindingMode: WaitForFirstConsumer
{{- if eq $pool "image" }}
# A claim may grow (online) when the csi-resizer runs.
allowVolumeExpansion: {{ and $root.Values.resizer.enabled $class.allowVolumeExpansion }}
{{- else }}
# A USB volume is the whole stick: it cannot grow.
allowVolumeExpansion: false
{{- end }}
reclaimPolicy: {{ $class.reclaimPolicy }}
{{- with $class.mountOptions }}
mountOptions:
  {{- toYaml . | nindent 2 }}
{{- end }}
parameters:
  pool: {{ $pool | quote }}
  {{- range $key, $value := $class.parameters }}
  {{ $key }}: {{ $value | toString | quote }}
  {{- end }}
{{- end -}}

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
# The driver has no volume expansion.
allowVolumeExpansion: false
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

package volume

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// The names and attributes of CSI ephemeral inline volumes (node/ephemeral.go serves them).

// EphemeralContextKey is the volume context key kubelet sets to "true" for an inline
const EphemeralContextKey = "csi.storage.k8s.io/ephemeral"

// ParamSize is the volume attribute for an inline volume's size, as bytes or a Kubernetes
// quantity ("64Mi", "1G"); without it a volume gets DefaultImageSize.
const ParamSize = "size"

// EphemeralName is the volume name (and image file name) of the inline volume with the CO's
// volume ID: a hash, since the ID is the CO's and may hold anything. It starts with a prefix
// CreateVolume names may also use; CreateVolume refuses a name an inline volume holds.
func EphemeralName(volumeID string) string {
	sum := sha256.Sum256([]byte(volumeID))
	return "ephemeral-" + hex.EncodeToString(sum[:16])
}

// IsEphemeral tells whether a NodePublishVolume request is for an inline
func IsEphemeral(volumeContext map[string]string) bool {
	return volumeContext[EphemeralContextKey] == "true"
}

// ParseEphemeral reads an inline volume's attributes: the StorageClass parameters of the image
// pool and ParamSize. Keys under csi.storage.k8s.io/ (the pod's name, namespace, UID, the
// ephemeral flag) are kubelet's and ignored.
func ParseEphemeral(attrs map[string]string) (int64, Params, error) {
	rest := make(map[string]string, len(attrs))
	var size int64
	for k, v := range attrs {
		if k != ParamSize {
			rest[k] = v
			continue
		}
		n, err := ParseSize(v)
		if err != nil {
			return 0, Params{}, fmt.Errorf("volume attribute %s=%q: %w", ParamSize, v, err)
		}
		size = n
	}
	p, err := ParseParams(rest)
	if err != nil {
		return 0, Params{}, err
	}
	if p.Pool != PoolImage {
		return 0, Params{}, fmt.Errorf("inline ephemeral volumes are image files: %s=%q is not supported", ParamPool, p.Pool)
	}
	if p.MaxSize != 0 {
		return 0, Params{}, fmt.Errorf("inline ephemeral volumes do not grow: %s is not supported", ParamMaxSize)
	}
	return size, p, nil
}

package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Media types and annotations of the OCI image specification (image-spec v1.1), and the
// annotation by which containerd names an image it imports.
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"

	annotationRefName      = "org.opencontainers.image.ref.name"
	annotationImageName    = "io.containerd.image.name"
	ociImageLayoutVersion  = "1.0.0"
	ociImageLayoutFileName = "oci-layout"
)

// image is what the archive describes: one single-layer image with a name and a start command.
type image struct {
	name       string   // full reference, e.g. ghcr.io/csi-fat/csi-fat:e2e
	entrypoint []string // the process a container runs
	env        []string // KEY=VALUE
	created    time.Time
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type imageConfig struct {
	Created      string         `json:"created"`
	Architecture string         `json:"architecture"`
	OS           string         `json:"os"`
	Config       runConfig      `json:"config"`
	RootFS       rootFS         `json:"rootfs"`
	History      []historyEntry `json:"history"`
}

type runConfig struct {
	Env        []string `json:"Env,omitempty"`
	Entrypoint []string `json:"Entrypoint"`
	WorkingDir string   `json:"WorkingDir"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type historyEntry struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

// dockerManifestEntry is one element of manifest.json, the file `docker load` reads (Docker 25
// and later write it next to the OCI layout in the same way).
type dockerManifestEntry struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

// writeArchive writes an OCI image layout as a tar stream: oci-layout, the blobs, index.json
// naming the image for containerd (`ctr images import`) and manifest.json for `docker load`.
func writeArchive(w io.Writer, img image, layer []byte) error {
	layerDigest := digest(layer)
	cfg := imageConfig{
		Created:      img.created.UTC().Format(time.RFC3339),
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Config:       runConfig{Env: img.env, Entrypoint: img.entrypoint, WorkingDir: "/"},
		RootFS:       rootFS{Type: "layers", DiffIDs: []string{layerDigest}},
		History: []historyEntry{{
			Created:   img.created.UTC().Format(time.RFC3339),
			CreatedBy: "imagearchive " + strings.Join(img.entrypoint, " "),
		}},
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("image config: %w", err)
	}
	man := manifest{
		SchemaVersion: 2,
		MediaType:     mediaTypeManifest,
		Config:        descriptor{MediaType: mediaTypeConfig, Digest: digest(cfgJSON), Size: int64(len(cfgJSON))},
		Layers:        []descriptor{{MediaType: mediaTypeLayer, Digest: layerDigest, Size: int64(len(layer))}},
	}
	manJSON, err := json.Marshal(man)
	if err != nil {
		return fmt.Errorf("image manifest: %w", err)
	}
	idx := index{
		SchemaVersion: 2,
		MediaType:     mediaTypeIndex,
		Manifests: []descriptor{{
			MediaType: mediaTypeManifest,
			Digest:    digest(manJSON),
			Size:      int64(len(manJSON)),
			Platform:  &platform{Architecture: cfg.Architecture, OS: cfg.OS},
			Annotations: map[string]string{
				annotationImageName: img.name,
				annotationRefName:   refTag(img.name),
			},
		}},
	}
	idxJSON, err := json.Marshal(idx)
	if err != nil {
		return fmt.Errorf("image index: %w", err)
	}
	dockerJSON, err := json.Marshal([]dockerManifestEntry{{
		Config:   blobPath(man.Config.Digest),
		RepoTags: []string{img.name},
		Layers:   []string{blobPath(layerDigest)},
	}})
	if err != nil {
		return fmt.Errorf("docker manifest: %w", err)
	}

	blobs := map[string][]byte{
		blobPath(layerDigest):             layer,
		blobPath(man.Config.Digest):       cfgJSON,
		blobPath(idx.Manifests[0].Digest): manJSON,
	}
	blobNames := make([]string, 0, len(blobs))
	for name := range blobs {
		blobNames = append(blobNames, name)
	}
	sort.Strings(blobNames)

	tw := tar.NewWriter(w)
	add := func(name string, data []byte) error {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: img.created, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("archive entry %s: %w", name, err)
		}
		if _, err := tw.Write(data); err != nil {
			return fmt.Errorf("archive entry %s: %w", name, err)
		}
		return nil
	}
	if err := add(ociImageLayoutFileName, []byte(`{"imageLayoutVersion":"`+ociImageLayoutVersion+`"}`)); err != nil {
		return err
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: dir, Mode: 0o755, ModTime: img.created, Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
			return fmt.Errorf("archive entry %s: %w", dir, err)
		}
	}
	for _, name := range blobNames {
		if err := add(name, blobs[name]); err != nil {
			return err
		}
	}
	if err := add("index.json", idxJSON); err != nil {
		return err
	}
	if err := add("manifest.json", dockerJSON); err != nil {
		return err
	}
	return tw.Close()
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(d string) string {
	return "blobs/sha256/" + strings.TrimPrefix(d, "sha256:")
}

// refTag is the tag of a reference (what follows the last colon after the last slash), the
// form of org.opencontainers.image.ref.name that containerd's own export writes; a reference
// without a tag is "latest".
func refTag(ref string) string {
	name := ref[strings.LastIndex(ref, "/")+1:]
	if _, tag, ok := strings.Cut(name, ":"); ok {
		return tag
	}
	return "latest"
}

# The csi-fat driver's container image, for release builds:
#
#   docker build --build-arg VERSION=v0.1.0 -t ghcr.io/csi-fat/csi-fat:0.1.0 .
#
# The runtime stage holds what the driver runs besides itself: fusermount3 (fuse3; go-fuse mounts
# and unmounts through it) and mount/umount (mount; k8s.io/mount-utils bind-mounts with mount and
# probes umount). The driver formats and checks volumes itself, so no dosfstools. build/image.sh
# writes an image with the same contents from a machine's own files, for clusters without a
# registry (see build/README.md). This file has not been built where the project is tested: no
# container engine runs there.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
	-ldflags "-s -w -X github.com/csi-fat/csi-fat/driver.Version=${VERSION}" \
	-o /out/csi-fat ./cmd/csi-fat

FROM debian:bookworm-slim
RUN apt-get update \
	&& apt-get install -y --no-install-recommends fuse3 mount \
	&& rm -rf /var/lib/apt/lists/*
COPY --from=build /out/csi-fat /csi-fat
# The subcommand comes from the pod's args (the chart passes "driver ..."), so the same image
# also runs csi-fat fsck or mkfs.
ENTRYPOINT ["/csi-fat"]

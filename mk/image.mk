# The OCI image (issue 34): `make image` builds deploy/Containerfile.scratch
# with Debian's podman, FROM scratch, out of a context assembled here from
# this checkout and Debian's packages, because this machine kind reaches
# no container registry (deploy/Containerfile, for machines that do,
# builds the same contents from golang and distroless; image_test.go
# holds the two together). The image carries the WASM runtime (plugins,
# Extism plug-ins) and the interpreted languages: JavaScript (QuickJS,
# inside the binary), Python and Ruby (IMAGE_LANGUAGES: their interpreter
# WASMs). The compiled languages build outside the pod (`moat build`) and
# upload (`moat deploy`): deploy/README.md says why and what it costs.

IMAGE ?= localhost/moat:dev
export MOAT_IMAGE := $(IMAGE)
# The languages whose interpreter WASMs `moat toolchains install` puts in
# the image; deploy/Containerfile names the same (a test holds them equal).
IMAGE_LANGUAGES := python ruby
IMAGE_CONTEXT := $(BIN)/image
# podman builds and runs the image (runc: crun refuses a host that mounts
# cgroup v1 beside v2, as this machine kind does). ca-certificates and
# tzdata are what the image's /etc/ssl and /usr/share/zoneinfo copy.
IMAGE_APT_PACKAGES := podman runc ca-certificates tzdata file
TEST_APT_PACKAGES += $(IMAGE_APT_PACKAGES)
TEST_SETUP += image

.PHONY: image
image: build ## build the OCI image $(IMAGE) with podman, FROM scratch (moat, moat-confine, Python and Ruby WASMs; non-root)
	$(call apt_install,$(IMAGE_APT_PACKAGES))
	@echo "==> image context $(IMAGE_CONTEXT): the static binaries, $(IMAGE_LANGUAGES) toolchains, a root of Debian's files"
	@set -e; ctx=$(IMAGE_CONTEXT); rm -rf $$ctx/rootfs $$ctx/moat $$ctx/moat-confine; \
	mkdir -p $$ctx/rootfs/etc/ssl/certs $$ctx/rootfs/usr/share $$ctx/rootfs/tmp $$ctx/rootfs/home/nonroot $$ctx/toolchains; \
	for b in moat moat-confine; do \
		file -b $(BIN)/$$b 2>/dev/null | grep -q 'statically linked' || { echo "$(BIN)/$$b is not statically linked (CGO_ENABLED=0)" >&2; exit 1; }; \
		cp $(BIN)/$$b $$ctx/$$b; done; \
	printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
		'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' > $$ctx/rootfs/etc/passwd; \
	printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'nonroot:x:65532:' > $$ctx/rootfs/etc/group; \
	cp /etc/ssl/certs/ca-certificates.crt $$ctx/rootfs/etc/ssl/certs/; \
	cp -a /usr/share/zoneinfo $$ctx/rootfs/usr/share/; \
	chmod 1777 $$ctx/rootfs/tmp
	@$(MOAT) toolchains install --no-apt --dir $(IMAGE_CONTEXT)/toolchains $(IMAGE_LANGUAGES)
	@echo "==> podman build -f deploy/Containerfile.scratch -t $(IMAGE) $(IMAGE_CONTEXT)"
	@podman build -q -f deploy/Containerfile.scratch -t $(IMAGE) $(IMAGE_CONTEXT) >/dev/null
	@podman image inspect -f '{{.Id}} {{.Size}} bytes' $(IMAGE)

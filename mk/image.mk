# The OCI image (issue 34): `make image` builds deploy/Containerfile.scratch
# with Debian's podman, FROM scratch, out of a context assembled here from
# this checkout and Debian's packages, because this machine kind reaches
# no container registry (deploy/Containerfile, for machines that do,
# builds the same contents from golang and distroless; image_test.go
# holds the two together). The image carries the WASM runtime (plugins,
# Extism plug-ins), the interpreted languages: JavaScript (QuickJS,
# inside the binary), Python and Ruby (IMAGE_LANGUAGES: their interpreter
# WASMs), and the compilers of C, C++ and Rust (Debian's, with the shared
# libraries they load: IMAGE_COMPILER_PACKAGES) and of Go (IMAGE_GOROOT),
# which run as native jobs in user namespaces (MOAT_NATIVE_PROC=bind in
# the Deployment): deploy/README.md says what that costs.

IMAGE ?= localhost/moat:dev
export MOAT_IMAGE := $(IMAGE)
# The languages whose interpreter WASMs `moat toolchains install` puts in
# the image; deploy/Containerfile names the same (a test holds them equal).
IMAGE_LANGUAGES := python ruby
IMAGE_CONTEXT := $(BIN)/image
# The compilers' Debian packages (the toolchains' own lists: clang-19 with
# wasi-libc and libc++ for C and C++, rustc with its wasm32 std and the
# lld-14 it links with), copied with the packages of every shared library
# they load by mk/image-packages.sh; and Go's tree (a GOROOT, statically
# linked), less its tests. deploy/Containerfile installs the same.
IMAGE_COMPILER_PACKAGES := clang-19 lld-19 libclang-rt-19-dev-wasm32 wasi-libc libclang-common-19-dev libc++-19-dev-wasm32 libc++abi-19-dev-wasm32 rustc libstd-rust-dev-wasm32 lld-14
IMAGE_GOROOT := /usr/local/go
# podman builds and runs the image (runc: crun refuses a host that mounts
# cgroup v1 beside v2, as this machine kind does). ca-certificates and
# tzdata are what the image's /etc/ssl and /usr/share/zoneinfo copy.
IMAGE_APT_PACKAGES := podman runc ca-certificates tzdata file $(IMAGE_COMPILER_PACKAGES)
TEST_APT_PACKAGES += $(IMAGE_APT_PACKAGES)
TEST_SETUP += image

.PHONY: image
image: build ## build the OCI image $(IMAGE) with podman, FROM scratch (moat, moat-confine, Python and Ruby WASMs, C/C++/Rust/Go compilers; non-root)
	$(call apt_install,$(IMAGE_APT_PACKAGES))
	@echo "==> image context $(IMAGE_CONTEXT): the static binaries, $(IMAGE_LANGUAGES) toolchains, compilers, a root of Debian's files"
	@set -e; ctx=$(IMAGE_CONTEXT); rm -rf $$ctx/moat $$ctx/moat-confine; \
	stamp="$$(dpkg-query -W $(IMAGE_COMPILER_PACKAGES) | tr '\n' ' ') $$(cat $(IMAGE_GOROOT)/VERSION | head -1) $$(cksum < mk/image-packages.sh)"; \
	if [ "$$(cat $$ctx/rootfs.stamp 2>/dev/null)" != "$$stamp" ]; then \
		echo "==> the compilers' files: $(IMAGE_COMPILER_PACKAGES) and their libraries; $(IMAGE_GOROOT)"; \
		rm -rf $$ctx/rootfs $$ctx/goroot $$ctx/rootfs.stamp; mkdir -p $$ctx/goroot; \
		sh mk/image-packages.sh $$ctx/rootfs $(IMAGE_COMPILER_PACKAGES); \
		tar -C $(IMAGE_GOROOT) --exclude=./test -cf - . | tar -C $$ctx/goroot -xf -; \
		echo "$$stamp" > $$ctx/rootfs.stamp; \
	fi; \
	mkdir -p $$ctx/rootfs/etc/ssl/certs $$ctx/rootfs/usr/share $$ctx/rootfs/tmp $$ctx/rootfs/home/nonroot $$ctx/toolchains; \
	for b in moat moat-confine; do \
		file -b $(BIN)/$$b 2>/dev/null | grep -q 'statically linked' || { echo "$(BIN)/$$b is not statically linked (CGO_ENABLED=0)" >&2; exit 1; }; \
		cp $(BIN)/$$b $$ctx/$$b; done; \
	printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
		'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' > $$ctx/rootfs/etc/passwd; \
	printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'nonroot:x:65532:' > $$ctx/rootfs/etc/group; \
	cp /etc/ssl/certs/ca-certificates.crt $$ctx/rootfs/etc/ssl/certs/; \
	rm -rf $$ctx/rootfs/usr/share/zoneinfo; cp -a /usr/share/zoneinfo $$ctx/rootfs/usr/share/; \
	chmod 1777 $$ctx/rootfs/tmp
	@# --no-warm: a warm-up's state would be root's, which moat as uid 65532
	@# refuses (moatdir.OwnedDir); a pod warms into its own data directory.
	@$(MOAT) toolchains install --no-apt --no-warm --dir $(IMAGE_CONTEXT)/toolchains $(IMAGE_LANGUAGES)
	@echo "==> podman build -f deploy/Containerfile.scratch -t $(IMAGE) $(IMAGE_CONTEXT)"
	@old=$$(podman image inspect -f '{{.Id}}' $(IMAGE) 2>/dev/null || true); \
	podman build -q -f deploy/Containerfile.scratch -t $(IMAGE) $(IMAGE_CONTEXT) >/dev/null; \
	new=$$(podman image inspect -f '{{.Id}}' $(IMAGE)); \
	if [ -n "$$old" ] && [ "$$old" != "$$new" ]; then podman rmi "$$old" >/dev/null 2>&1 || true; fi
	@podman image inspect -f '{{.Id}} {{.Size}} bytes' $(IMAGE)

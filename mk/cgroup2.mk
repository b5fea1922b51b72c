# cgroup v2 (issue 12): this machine kind mounts the cgroup v1 controllers,
# production hosts and Kubernetes nodes the unified v2 hierarchy. The test
# in internal/vmtest boots Debian's own kernel under QEMU with only v2
# mounted (KVM where /dev/kvm can boot a stock kernel; this machine kind's
# nested PVM cannot, so TCG here), and runs the native runner's and
# policy/kernel's tests there (about 60-90 s). It needs qemu-system-x86 (QEMU with KVM and virtio-9p),
# kmod (depmod for the guest kernel's module index, and the guest's
# modprobe) and the kernel image with its modules, which vm-kernel
# unpacks from Debian's linux-image package into VM_KERNEL_DIR without
# installing it (the host's own kernel and /boot are left alone).

TEST_APT_PACKAGES += qemu-system-x86 kmod

VM_KERNEL_DIR ?= $(CURDIR)/.cache/vmkernel
export MOAT_VM_KERNEL := $(VM_KERNEL_DIR)

TEST_SETUP += vm-kernel
.PHONY: vm-kernel
vm-kernel: ## unpack Debian's current linux-image-amd64 kernel for the cgroup v2 VM test
	$(call apt_install,kmod)
	@test -f $(VM_KERNEL_DIR)/.complete || { \
		set -e; \
		pkg=$$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$$/\1/p' | head -n1); \
		if [ -z "$$pkg" ]; then $(APT_UPDATE); \
			pkg=$$(apt-cache depends linux-image-amd64 | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$$/\1/p' | head -n1); fi; \
		echo "==> vm-kernel: $$pkg into $(VM_KERNEL_DIR) (apt-get download + dpkg -x, about 70 MB, once)"; \
		rm -rf $(VM_KERNEL_DIR) && mkdir -p $(VM_KERNEL_DIR)/deb; \
		cd $(VM_KERNEL_DIR)/deb && $(APT_GET) download -q $$pkg >/dev/null 2>&1 || { $(APT_UPDATE) && $(APT_GET) download -q $$pkg >/dev/null; }; \
		dpkg -x $(VM_KERNEL_DIR)/deb/*.deb $(VM_KERNEL_DIR); rm -rf $(VM_KERNEL_DIR)/deb; \
		release=$${pkg#linux-image-}; depmod -b $(VM_KERNEL_DIR) $$release; \
		touch $(VM_KERNEL_DIR)/.complete; }

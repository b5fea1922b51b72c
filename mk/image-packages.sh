#!/bin/sh
# image-packages.sh ROOTFS PACKAGE...: copy the files of these installed
# Debian packages into ROOTFS, with every package that holds a shared
# library their programs load (ldd, to a fixed point), for the image's
# compilers (mk/image.mk). Documentation, manual pages and translations
# stay out. ROOTFS gets Debian's merged-/usr links (/lib -> usr/lib...),
# so the paths the dynamic loader and the packages name resolve as on
# the build machine. No maintainer script runs and nothing else comes
# along: no shell, no package manager (none of these packages is one).
set -eu
root=$1; shift
mkdir -p "$root/usr/bin" "$root/usr/lib" "$root/usr/lib64" "$root/usr/sbin"
for l in bin lib lib64 sbin; do [ -e "$root/$l" ] || ln -s "usr/$l" "$root/$l"; done
have=" "
todo="$*"
list=$(mktemp)
trap 'rm -f "$list"' EXIT
while [ -n "$todo" ]; do
	new=""
	for p in $todo; do
		case "$have" in *" $p "*) continue ;; esac
		have="$have$p "; new="$new $p"
	done
	[ -n "$new" ] || break
	# shellcheck disable=SC2086
	dpkg -L $new | grep -v -e '^/usr/share/doc' -e '^/usr/share/man' -e '^/usr/share/lintian' -e '^/usr/share/locale' \
		| while IFS= read -r f; do [ -L "$f" ] || [ -f "$f" ] && printf '%s\n' "${f#/}"; done > "$list"
	tar -C / --no-recursion -cf - -T "$list" | tar -C "$root" --keep-directory-symlink -xf -
	# The shared libraries of the programs and libraries just copied.
	todo=$(grep -E '(^usr/bin/|/bin/|\.so)' "$list" | sed 's|^|/|' | xargs -r ldd 2>/dev/null \
		| awk '/=> \//{print $3} /^\t\/[^ ]*ld-linux/{print $1}' | sort -u \
		| while IFS= read -r l; do dpkg -S "$(readlink -f "$l")" 2>/dev/null || dpkg -S "$l" 2>/dev/null || true; done \
		| cut -d: -f1 | sort -u | tr '\n' ' ')
done
printf '%s\n' $have | sort > "$root/.image-packages"

#!/usr/bin/env bash
# Builds xfer's Debian package from a built binary (make deb, make dist):
#
#   scripts/make-deb.sh BIN MAN_DIR OUT_DIR
#
# BIN the xfer to package (the release build, linked with --static-swift-stdlib), MAN_DIR
# the directory of its man page (`make man`), OUT_DIR where xfer_VERSION_ARCH.deb and the
# binary's symbols, xfer_VERSION_ARCH.debug, are written. VERSION is what `BIN --version` says.
#
# The package: /usr/bin/xfer (stripped; its debug link names the .debug file), the man page,
# the bash, zsh and fish completions (what `make install-files` writes), the receiver's
# service (packaging/: the unit, its defaults file, a conffile, and the maintainer scripts),
# and /usr/share/doc/xfer/{copyright,changelog.gz}. Depends: is what dpkg-shlibdeps finds in
# the binary, and adduser (postinst's addgroup). A staged tree and `dpkg-deb --build`: no
# debian/ directory, no debhelper.
#
# A binary that loads the Swift runtime from the toolchain (a build without
# --static-swift-stdlib, as `swift build` makes in debug) is refused: no Debian package
# provides those libraries, so the package would install a command that does not start.
# ALLOW_TOOLCHAIN_LIBRARIES=1 packages it anyway, for tests that check the package's shape
# on the debug build (PackagingTests), never for a package anyone installs.
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: make-deb.sh BIN MAN_DIR OUT_DIR" >&2
  exit 2
fi
bin="$1" man_dir="$2" out="$3"
repo="$(cd "$(dirname "$0")/.." && pwd)"
packaging="$repo/packaging"

[ -x "$bin" ] || { echo "make-deb.sh: no executable xfer at '$bin'" >&2; exit 2; }
man_pages=("$man_dir"/*.1)
[ -f "${man_pages[0]}" ] || { echo "make-deb.sh: no man page in '$man_dir' (make man)" >&2; exit 2; }
for tool in dpkg-deb dpkg-shlibdeps strip objcopy readelf; do
  command -v "$tool" >/dev/null || { echo "make-deb.sh: $tool is missing (make build-deps installs it)" >&2; exit 2; }
done

version="$("$bin" --version)"
# Debian's version syntax, without an epoch or a revision: a native package.
[[ "$version" =~ ^[0-9][0-9A-Za-z.+~]*$ ]] || { echo "make-deb.sh: '$bin --version' said '$version', not a version" >&2; exit 2; }
arch="$(dpkg --print-architecture)"
name="xfer_${version}_${arch}"

toolchain_libraries="$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' \
  | grep -E '^lib(swift|Foundation|_Foundation|dispatch|BlocksRuntime)' || true)"
shlibdeps_options=()
if [ -n "$toolchain_libraries" ]; then
  if [ "${ALLOW_TOOLCHAIN_LIBRARIES:-}" != 1 ]; then
    echo "make-deb.sh: $bin loads the Swift toolchain's $(echo $toolchain_libraries | tr ' ' ',') (build it with --static-swift-stdlib: make release)" >&2
    exit 2
  fi
  # No package provides them: dpkg-shlibdeps would stop there.
  shlibdeps_options+=(--ignore-missing-info)
fi

# Times in the package: the last commit's (or SOURCE_DATE_EPOCH's), so that one commit
# built twice gives the same files (dpkg-deb reads SOURCE_DATE_EPOCH too).
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH="$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)"
fi
export SOURCE_DATE_EPOCH

work="$(mktemp -d -t xfer-deb.XXXXXX)"
trap 'rm -rf "$work"' EXIT
# Staged where dpkg-shlibdeps expects a package's files: debian/PACKAGE beside debian/control.
stage="$work/debian/xfer"
umask 022
mkdir -p "$out"
out="$(cd "$out" && pwd)"

# The binary, stripped; its symbols beside the package, found by gdb through the debug link
# (the .debug file's name and checksum) in the binary's directory or /usr/lib/debug/usr/bin.
install -d "$stage/usr/bin"
install -m 755 "$bin" "$stage/usr/bin/xfer"
"$repo/scripts/split-debug.sh" "$stage/usr/bin/xfer" "$out/$name.debug"

# The man page, compressed as Debian's policy asks (-n: no name or time in the header).
install -d "$stage/usr/share/man/man1"
for page in "${man_pages[@]}"; do
  gzip -9n < "$page" > "$stage/usr/share/man/man1/$(basename "$page").gz"
done

# The completions `make install-files` writes, in Debian's directories (zsh's vendor-completions
# is on Debian's zsh fpath; site-functions under /usr is not).
install -d "$stage/usr/share/bash-completion/completions" "$stage/usr/share/zsh/vendor-completions" \
  "$stage/usr/share/fish/vendor_completions.d"
# bash-completion sources the file: its #! line is noise (lintian: bash-completion-with-hashbang).
"$bin" --generate-completion-script bash | sed '1{/^#!/d}' > "$stage/usr/share/bash-completion/completions/xfer"
"$bin" --generate-completion-script zsh > "$stage/usr/share/zsh/vendor-completions/_xfer"
"$bin" --generate-completion-script fish > "$stage/usr/share/fish/vendor_completions.d/xfer.fish"

# The receiver's service: disabled until someone enables it (postinst enables nothing).
install -d "$stage/lib/systemd/system" "$stage/etc/default"
install -m 644 "$packaging/xfer-serve.service" "$stage/lib/systemd/system/xfer-serve.service"
install -m 644 "$packaging/xfer-serve.default" "$stage/etc/default/xfer-serve"

# A native package's changelog is Debian's format; what changed is CHANGELOG.md's to say.
install -d "$stage/usr/share/doc/xfer"
install -m 644 "$packaging/copyright" "$stage/usr/share/doc/xfer/copyright"
maintainer="${DEB_MAINTAINER:-the xfer authors <xfer@users.noreply.github.com>}"
{
  echo "xfer ($version) unstable; urgency=medium"
  echo
  echo "  * xfer $version: CHANGELOG.md of its source has what changed."
  echo
  echo " -- $maintainer  $(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n > "$stage/usr/share/doc/xfer/changelog.gz"
chmod 644 "$stage/usr/share/doc/xfer/changelog.gz"

# swift-nio-extras vendors zlib with its symbols renamed (cnioextras_z_*, in NIOHTTPCompression,
# which AsyncHTTPClient links for the receiver's object storage): the system's libz cannot take
# its place, so lintian's "embedded-library zlib" is expected, and said so where lintian reads it.
install -d "$stage/usr/share/lintian/overrides"
install -m 644 "$packaging/lintian-overrides" "$stage/usr/share/lintian/overrides/xfer"

# Depends: the libraries the binary loads, as dpkg-shlibdeps names their packages (it reads a
# debian/control naming the package), and adduser for postinst. --warnings=1 keeps the warning
# about symbols no library has and skips the search for libraries linked but unused, which reads
# every library's symbols (70 s on the debug build) and changes nothing in Depends.
# (and a DEBIAN directory, by which it knows the package's root).
install -d "$stage/DEBIAN"
printf 'Source: xfer\n\nPackage: xfer\nArchitecture: any\n' > "$work/debian/control"
shlibs="$(cd "$work" && dpkg-shlibdeps -O --warnings=1 "${shlibdeps_options[@]}" -edebian/xfer/usr/bin/xfer)"
depends="${shlibs#shlibs:Depends=}"
[ -n "$depends" ] || { echo "make-deb.sh: dpkg-shlibdeps found no dependency in $bin" >&2; exit 1; }
# A binary linked with packed relative relocations (GNU ld's -z pack-relative-relocs; not the
# release link, Makefile's RELEASE_FLAGS, but a BIN_DIR of someone's) needs glibc's
# GLIBC_ABI_DT_RELR, new in 2.36, which Debian 12's symbols file does not count: its libc6
# minimum is then raised to 2.36, or the package would install where xfer cannot start.
if readelf -V -W "$bin" | grep -q 'GLIBC_ABI_DT_RELR'; then
  depends="$(echo "$depends" | sed -E 's/libc6 \(>= 2\.([0-9]|[12][0-9]|3[0-5])\)/libc6 (>= 2.36)/')"
  [[ "$depends" == *"libc6 (>= 2."* ]] || depends="libc6 (>= 2.36), $depends"
fi

# Installed-Size as dpkg-gencontrol counts it: each file's KiB rounded up, 1 per directory or link.
installed_size="$(cd "$stage" && find . -mindepth 1 -path ./DEBIAN -prune -o -printf '%y %s\n' \
  | awk '$1 == "f" { kib += int(($2 + 1023) / 1024) } $1 != "f" { kib += 1 } END { print kib }')"

cat > "$stage/DEBIAN/control" <<EOF
Package: xfer
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $installed_size
Depends: $depends, adduser
Section: net
Priority: optional
Description: resumable, chunked file transfers that survive kill -9
 xfer pushes files to HTTP servers and S3 in chunks, and pulls them, as jobs
 whose state survives a crash, a kill or a lost network: running the same
 command again goes on from what the other side acknowledged. It speaks tus,
 the IETF resumable uploads draft, S3 multipart uploads and three chunked
 protocols of its own.
 .
 The package also holds the receiver, xfer serve, as the systemd service
 xfer-serve (disabled until enabled; settings in /etc/default/xfer-serve, a
 random token in /etc/xfer-serve/auth-token), the manual and bash, zsh and
 fish completions.
EOF
echo /etc/default/xfer-serve > "$stage/DEBIAN/conffiles"
install -m 755 "$packaging/postinst" "$packaging/prerm" "$packaging/postrm" "$stage/DEBIAN/"
(cd "$stage" && find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z \
  | xargs -0 md5sum) > "$stage/DEBIAN/md5sums"
chmod 644 "$stage/DEBIAN/control" "$stage/DEBIAN/conffiles" "$stage/DEBIAN/md5sums"
find "$stage" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

# DEB_COMPRESSION=none: for tests that look at the package's shape (xz takes most of the time
# on a debug build's 70 MB).
dpkg-deb --root-owner-group -Z"${DEB_COMPRESSION:-xz}" --build "$stage" "$out/$name.deb" >/dev/null
echo "$out/$name.deb"
echo "$out/$name.debug"

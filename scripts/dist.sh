#!/usr/bin/env bash
# A release's files (make dist; CHANGELOG.md, "Releasing"), from a release build:
#
#   BIN_DIR=DIR MAN_DIR=DIR [DIST_DIR=dist] scripts/dist.sh
#
# writes to DIST_DIR (default dist/, which git ignores):
#   xfer_VERSION_ARCH.deb             the Debian package (scripts/make-deb.sh)
#   xfer_VERSION_ARCH.debug           the binary's symbols (gdb finds them by its debug link)
#   xfer-VERSION-linux-x86_64.tar.gz  the same stripped binary, its man page, completions,
#                                     a README and the copyright, under xfer-VERSION/ laid out
#                                     as a prefix: bin/, share/ (copy both under /usr/local)
#   SHA256SUMS                        of the three (sha256sum -c SHA256SUMS)
# The tarball's binary is taken out of the package, so that both are one binary, the one the
# .debug file belongs to. Files of an earlier run for another version are removed first, so
# SHA256SUMS covers exactly what is there.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
: "${BIN_DIR:?dist.sh: set BIN_DIR to the release build's directory (make dist does)}"
: "${MAN_DIR:?dist.sh: set MAN_DIR to the man page's directory (make dist does)}"
out="${DIST_DIR:-$repo/dist}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
# One time for every file of the release, the package's included: the last commit's.
SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct)}"
export SOURCE_DATE_EPOCH
rm -f "$out"/xfer_*.deb "$out"/xfer_*.debug "$out"/xfer-*.tar.gz "$out/SHA256SUMS"

made="$("$repo/scripts/make-deb.sh" "$BIN_DIR/xfer" "$MAN_DIR" "$out")"
deb="$(echo "$made" | grep '\.deb$')"
debug="$(echo "$made" | grep '\.debug$')"
version="$(dpkg-deb --field "$deb" Version)"
machine="$(uname -m)"
top="xfer-$version"

work="$(mktemp -d -t xfer-dist.XXXXXX)"
trap 'rm -rf "$work"' EXIT
dpkg-deb --extract "$deb" "$work/deb"
tree="$work/$top"
install -d "$tree/bin" "$tree/share/man/man1" "$tree/share/bash-completion/completions" \
  "$tree/share/zsh/site-functions" "$tree/share/fish/vendor_completions.d"
install -m 755 "$work/deb/usr/bin/xfer" "$tree/bin/xfer"
for page in "$work/deb/usr/share/man/man1/"*.gz; do
  gunzip -c "$page" > "$tree/share/man/man1/$(basename "$page" .gz)"
done
install -m 644 "$work/deb/usr/share/bash-completion/completions/xfer" "$tree/share/bash-completion/completions/xfer"
install -m 644 "$work/deb/usr/share/zsh/vendor-completions/_xfer" "$tree/share/zsh/site-functions/_xfer"
install -m 644 "$work/deb/usr/share/fish/vendor_completions.d/xfer.fish" "$tree/share/fish/vendor_completions.d/xfer.fish"
install -m 644 "$repo/packaging/copyright" "$tree/copyright"
# The libraries the binary loads, by the Debian package names dpkg-shlibdeps gave.
depends="$(dpkg-deb --field "$deb" Depends | sed 's/ *([^)]*)//g; s/, adduser$//')"
echo "xfer $version for Linux $machine: copy bin/ and share/ under /usr/local (sudo cp -r bin share /usr/local/); it needs $depends (Debian's names); the .deb beside this tarball installs the same binary with the receiver's service." > "$tree/README"
chmod 644 "$tree/README" "$tree/share/man/man1/"*
tarball="$out/$top-linux-$machine.tar.gz"
tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" -cf - "$top" | gzip -9n > "$tarball"

(cd "$out" && sha256sum "$(basename "$deb")" "$(basename "$tarball")" "$(basename "$debug")" > SHA256SUMS)
(cd "$out" && sha256sum --quiet -c SHA256SUMS)
ls -l "$out"

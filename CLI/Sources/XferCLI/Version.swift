/// What `xfer --version` prints: the one place the version is written. The Debian package
/// and the release tarball are named after it (scripts/make-deb.sh and scripts/dist.sh ask
/// the binary), so it changes with the CHANGELOG's heading at each release (CHANGELOG.md,
/// "Releasing").
let xferVersion = "0.4.0"

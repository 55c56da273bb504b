import Crypto
import XferPrimitives

/// Upload URLs and download links, told apart: an upload's id names its published file
/// (`/downloads/<id>/<path>`, a link people share), so it must not also be what lets someone
/// append to the upload or delete it. The URLs that change an upload (patch's `uploadId`, tus's
/// and the IETF draft's `Location`) carry a handle instead: the id and a tag only this receiver
/// can make, an HMAC-SHA256 of the id under a key of the storage's (`HandleKeyKeeping`, one for
/// every receiver sharing the storage; a key of the process's for a storage that keeps none). A
/// download link grants reading only.
///
/// A handle is 64 lowercase hex digits: the 32 of the id, then 32 of the tag.
struct UploadHandles: Sendable {
    static let keyLength = 32
    /// The key's bytes (`SymmetricKey` is not `Sendable`; making one per use costs a copy of 32 bytes).
    private let key: [UInt8]

    init(key: [UInt8]) {
        precondition(key.count == Self.keyLength, "an upload URL key is 32 bytes")
        self.key = key
    }

    /// A key made for this process: for a storage that keeps none (`StorageComposer.handleKeys`).
    static func processKey() -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<keyLength).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
    }

    private func tag(_ id: some StringProtocol) -> String {
        Hex.lowercase(Array(HMAC<SHA256>.authenticationCode(for: Array(id.utf8), using: SymmetricKey(data: key)).prefix(16)))
    }

    /// What goes in the URLs that change upload `id`.
    func handle(for id: String) -> String { id + tag(id) }

    /// The upload id `handle` stands for; nil unless this receiver's key made it (an id alone,
    /// as a download link shows it, is nil).
    func id(of handle: String?) -> String? {
        guard let handle, handle.utf8.count == 2 * UploadID.length else { return nil }
        let id = handle.prefix(UploadID.length)
        guard UploadID.isValid(id) else { return nil }
        let expected = Array(tag(id).utf8)
        let given = Array(handle.utf8.dropFirst(UploadID.length))
        // Compared in full whatever differs: how long a refusal takes says nothing of the tag.
        guard zip(expected, given).reduce(UInt8(0), { $0 | ($1.0 ^ $1.1) }) == 0 else { return nil }
        return String(id)
    }
}

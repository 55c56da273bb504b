// Capability: a final upload made of complete partial uploads (tus's concatenation extension),
// `StorageComposer.concatenation`. Without it tus answers no `concatenation` in `Tus-Extension`
// and refuses `Upload-Concat`.

protocol OffsetUploadConcatenating: AnyObject, Sendable {
    /// `final`'s bytes from its complete `partials`, in order; durable and recorded before it
    /// returns. `crc`: the partials' CRC-32Cs combined, when every one is known. Every upload is one
    /// of this storage's offset uploads (as tusd's `AsConcatableUpload`, the storage may expect
    /// its own type); the caller holds `final`'s turn.
    func concatenate(_ partials: [any OffsetUpload], into final: any OffsetUpload, crc: UInt32?) async throws
}

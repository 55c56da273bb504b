// Capability: the key of upload handles (`UploadHandles`), kept by the storage,
// `StorageComposer.handleKeys`. Without it the receiver makes a key for the process: its upload
// URLs hold while it runs, and no longer (what a storage that forgets its uploads on restart
// needs anyway).

protocol HandleKeyKeeping: AnyObject, Sendable {
    /// 32 bytes, made once and kept where every receiver of this storage finds the same.
    func handleKey() async throws -> [UInt8]
}

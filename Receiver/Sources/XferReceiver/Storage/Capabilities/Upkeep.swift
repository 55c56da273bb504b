// Capability: memory the storage keeps of unfinished uploads between requests, let go when idle
// (`StorageComposer.upkeep`). A storage that keeps nothing between requests has no upkeep.

protocol IdleUploadDropping: AnyObject, Sendable {
    /// Unfinished uploads no request used for a while leave memory
    /// (`ReceiverLimits.idleUploadLifetime`). The receiver's upkeep calls it every half of that
    /// lifetime (at least every 30 s, at most every second).
    func dropIdle() async
}

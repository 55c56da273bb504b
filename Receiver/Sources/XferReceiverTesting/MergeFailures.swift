/// `xfer serve --fail-merge N[@INDEX]`: the first N merge checks (`isFinish.do`) of each file fail
/// as if the server could not assemble it, for every file or only for the file at INDEX (0-based,
/// in its source). Only complete files count: a file still missing fragments fails on its own.
/// The failed file's fragments are discarded, so the client must truly send them again.
/// Counts live in memory and start over when the receiver restarts.
public struct MergeFailurePlan: Sendable, Hashable {
    /// How many checks of each file fail, at least 1.
    public var count: Int
    /// The file's position in its source; nil for every file.
    public var fileIndex: Int?

    public init(count: Int, fileIndex: Int? = nil) {
        precondition(count >= 1 && (fileIndex ?? 0) >= 0, "a merge failure plan needs count >= 1 and index >= 0")
        self.count = count
        self.fileIndex = fileIndex
    }

    /// Parses `N` or `N@INDEX`; nil for anything else.
    public init?(_ text: String) {
        let parts = text.split(separator: "@", maxSplits: 1, omittingEmptySubsequences: false)
        guard let count = Int(parts[0]), count >= 1 else { return nil }
        var index: Int?
        if parts.count == 2 {
            guard let parsed = Int(parts[1]), parsed >= 0 else { return nil }
            index = parsed
        }
        self.init(count: count, fileIndex: index)
    }
}

/// Counts merges per file under a `MergeFailurePlan`: the receiver asks it before it merges a
/// complete file (`ReceiverTestHooks.failsMerge`) and discards the file's fragments when told to.
actor MergeFailures {
    private let plan: MergeFailurePlan
    private var failures: [String: Int] = [:]

    init(plan: MergeFailurePlan) {
        self.plan = plan
    }

    /// Whether this merge of upload `id`, the file at `index` of its source, is to fail.
    func fails(_ id: String, index: Int) -> Bool {
        guard plan.fileIndex == nil || plan.fileIndex == index else { return false }
        let done = failures[id, default: 0]
        guard done < plan.count else { return false }
        failures[id] = done + 1
        return true
    }
}

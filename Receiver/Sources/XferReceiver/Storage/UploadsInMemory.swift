import Synchronization

/// How much of clients' uploads one receiver keeps in memory at most, whatever they declare or
/// how many they open (Docs/cli.md, "Deploying the receiver"). Past a limit a request answers 503
/// with `Retry-After` (`ReceiverBusy`): clients retry it, and nothing is lost or held meanwhile.
public struct ReceiverLimits: Sendable, Hashable {
    /// Uploads kept in memory at once, across protocols (a few KiB each: what an upload under way
    /// needs between requests). Completed ones, and unfinished ones no request holds, give way when
    /// it is full; when every one is held, a new upload, or a request for one not in memory, is
    /// refused for a while.
    public var uploadsInMemory = 10_000
    /// Runs of received chunks (a run: chunks received one after another, ~24 bytes) held across
    /// uploads. Chunks sent in order are one run whatever their number; only a client that skips
    /// chunks makes more, each one a request it sent.
    public var chunkRunsInMemory = 1 << 20
    /// Runs of one upload: a chunk that would open another is refused for a while, until the
    /// client fills the gaps it left (any client that sends in order, with some chunks in flight,
    /// never comes near).
    public var chunkRunsPerUpload = 1 << 16
    /// An unfinished upload that no request used for this long leaves memory; the next request
    /// loads it again from the storage.
    public var idleUploadLifetime: Duration = .seconds(60)
    /// Partial uploads one tus final upload may concatenate (each named once).
    public var concatenatedPartials = 1_000

    public init() {}
}

/// The receiver is holding as much as `ReceiverLimits` lets it: the client should try again in a
/// little while (a 503 with `Retry-After` in its protocol's form).
struct ReceiverBusy: Error, CustomStringConvertible {
    let description: String
    /// Seconds.
    static let retryAfter = 5

    init(_ description: String) { self.description = description }
}

/// The one count of what a receiver holds of uploads in memory, shared by every registry of every
/// protocol (`KeyedLoads`) and by every upload's received chunks (`ChunkRunsHeld`).
final class UploadsInMemory: Sendable {
    let limits: ReceiverLimits
    private let uploads = Atomic<Int>(0)
    private let runs = Atomic<Int>(0)

    init(limits: ReceiverLimits) { self.limits = limits }

    var uploadCount: Int { uploads.load(ordering: .relaxed) }
    var runCount: Int { runs.load(ordering: .relaxed) }
    var isFull: Bool { uploadCount >= limits.uploadsInMemory }
    var busyReason: String { "this receiver holds \(limits.uploadsInMemory) uploads in memory, its limit: try again shortly" }

    func adjust(by delta: Int) { uploads.add(delta, ordering: .relaxed) }

    /// Whether one more run of received chunks fits, beside `held` of its upload's.
    func roomForRun(besides held: Int) -> ReceiverBusy? {
        if held >= limits.chunkRunsPerUpload {
            return ReceiverBusy("this upload has \(held) separate runs of chunks, the most it may: send the chunks between them first")
        }
        if runCount >= limits.chunkRunsInMemory {
            return ReceiverBusy("this receiver holds as many runs of chunks as it may: try again shortly")
        }
        return nil
    }

    fileprivate func adjustRuns(by delta: Int) { runs.add(delta, ordering: .relaxed) }
}

/// One upload's part of `UploadsInMemory`'s run count, given back when the upload leaves memory.
final class ChunkRunsHeld: Sendable {
    private let memory: UploadsInMemory?
    private let held = Atomic<Int>(0)

    init(_ memory: UploadsInMemory?) { self.memory = memory }

    var count: Int { held.load(ordering: .relaxed) }

    /// The upload now holds `runs` runs.
    func set(_ runs: Int) {
        let before = held.exchange(runs, ordering: .relaxed)
        memory?.adjustRuns(by: runs - before)
    }

    /// Whether the upload may open one more run.
    func roomForRun() -> ReceiverBusy? { memory?.roomForRun(besides: count) }

    deinit { memory?.adjustRuns(by: -held.load(ordering: .relaxed)) }
}

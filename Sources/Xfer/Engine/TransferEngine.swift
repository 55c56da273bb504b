import CMalloc
import Crypto
import Foundation
import Glibc

/// The entry point: a state directory, one HTTP transport, and the jobs
/// started from them.
///
/// ```swift
/// let engine = try TransferEngine(stateDirectory: "/var/lib/myapp/xfer")
/// let job = try await engine.push(["/data/video.mp4"], to: "https://uploads.example.com",
///                                 using: PatchBackend())
/// for await event in job.events { print(event) }
/// let report = try await job.report
/// ```
public final class TransferEngine: Sendable {
    /// The directory holding the state store and the per-job locks.
    public let stateDirectory: String
    /// How long a completed job stays listed (`jobs(includingCompleted:)`)
    /// before the next job to complete prunes it; `.zero` drops a job from
    /// the store as soon as it completes.
    public let finishedJobRetention: Duration
    let store: any JobStateStore
    let transport: HTTPTransport

    /// How long completed jobs are kept unless told otherwise: a day, long
    /// enough to look up the URLs of yesterday's pushes.
    public static let defaultFinishedJobRetention: Duration = .seconds(24 * 60 * 60)

    /// Opens (creating if needed) the state store in `stateDirectory`.
    ///
    /// - Parameters:
    ///   - stateDirectory: Where jobs are kept; created with mode 0700.
    ///   - options: How the HTTP transport connects and times out.
    ///   - finishedJobRetention: How long completed jobs stay in the store.
    public convenience init(
        stateDirectory: String, transport options: TransportOptions = TransportOptions(),
        finishedJobRetention: Duration = TransferEngine.defaultFinishedJobRetention
    ) throws(XferError) {
        try self.init(
            stateDirectory: stateDirectory, store: StateStore(directory: stateDirectory), transport: options,
            finishedJobRetention: finishedJobRetention)
    }

    /// An engine over `store` instead of the LMDB store in `stateDirectory`
    /// (which still holds the per-job locks). `package`: only the
    /// state-store benchmark uses it, to compare stores on a real push.
    package init(
        stateDirectory: String, store: any JobStateStore, transport options: TransportOptions = TransportOptions(),
        finishedJobRetention: Duration = TransferEngine.defaultFinishedJobRetention
    ) throws(XferError) {
        _ = Self.fixMallocThreshold
        self.stateDirectory = stateDirectory
        self.finishedJobRetention = max(.zero, finishedJobRetention)
        self.store = store
        do {
            transport = try HTTPTransport(options: options)
        } catch {
            throw .transferFailed("cannot start the HTTP transport: \(error)")
        }
    }

    deinit {
        transport.shutdown()
    }

    /// Chunk buffers are large and short-lived, allocated on one thread and
    /// freed on another. glibc raises its mmap threshold each time such a
    /// block is freed, after which chunk buffers come from per-thread arenas
    /// that keep freed memory: peak RSS then grew with the file's size
    /// (measured: 72 MB for 64 MiB, 98 MB for 1 GiB at 8 MiB × 4). A fixed
    /// threshold keeps every chunk buffer in its own mapping, returned to the
    /// kernel when freed, and memory flat (72 MB for both).
    private static let fixMallocThreshold: Void = {
        _ = mallopt(M_MMAP_THRESHOLD, 256 << 10)
    }()

    /// The id a push of `files` to `target` with `backend` gets: the same
    /// push always maps to the same job, which is how a re-run resumes.
    public static func jobID(backend: String, target: String, files: [String]) -> JobID {
        var hash = SHA256()
        hash.update(data: Array("xfer-job-v1\0\(backend)\0\(target)".utf8))
        for file in files { hash.update(data: Array("\0\(file)".utf8)) }
        return JobID(rawValue: String(Checksums.hex(Array(hash.finalize())).prefix(16)))
    }

    /// Starts pushing `files` to `target`, or resumes the unfinished job for
    /// the same files, backend and target.
    ///
    /// Everything that can be checked before sending is checked here, so a
    /// bad path or URL fails at once without touching the job's state.
    ///
    /// - Parameters:
    ///   - files: Local paths, in the order the server should see them.
    ///   - target: The server's root URL (http or https).
    ///   - backend: The server's upload protocol.
    ///   - options: Chunk size, concurrency, retries, headers, credentials.
    ///   - restart: Forget saved progress of the same push and start over.
    /// - Returns: The running job; await its `report`.
    public func push(
        _ files: [String], to target: String, using backend: any UploadBackend,
        options: TransferOptions = TransferOptions(), restart: Bool = false
    ) async throws(XferError) -> TransferJob {
        try await push(files, to: target, using: backend, options: options, restart: restart, resuming: nil)
    }

    /// `push`, or with `resuming` set, only the continuation of that existing
    /// unfinished job: checked under the job's lock, so a job completed or
    /// cancelled by another process meanwhile is never started afresh.
    func push(
        _ files: [String], to target: String, using backend: any UploadBackend,
        options: TransferOptions, restart: Bool, resuming expected: JobID?
    ) async throws(XferError) -> TransferJob {
        guard !files.isEmpty else { throw .invalidInput("no files to push") }
        let normalized: String
        do { normalized = try backend.normalizedTarget(target) } catch { throw .invalidInput(error.description) }
        let target = normalized
        let traits = backend.traits
        let requestedChunkSize = options.chunkSize ?? traits.defaultChunkSize
        guard (1...TransferOptions.maximumChunkSize).contains(requestedChunkSize) else {
            throw .invalidInput("chunk size must be between 1 byte and 1 GiB, not \(requestedChunkSize)")
        }
        let concurrency = options.concurrency ?? traits.defaultConcurrency
        guard (1...TransferOptions.maximumConcurrency).contains(concurrency) else {
            throw .invalidInput("concurrency must be between 1 and \(TransferOptions.maximumConcurrency), not \(concurrency)")
        }

        let paths = files.map { URL(fileURLWithPath: $0).standardizedFileURL.path }
        if Set(paths).count != paths.count {
            throw .invalidInput("the same file is named twice; name each file once")
        }
        let localFiles = try paths.map { path throws(XferError) in try LocalFile(path: path) }

        let id = Self.jobID(backend: backend.name, target: target, files: paths)
        let lock = try JobLock(stateDirectory: stateDirectory, job: id)
        if let expected {
            guard expected == id, let existing = try store.job(id) else { throw .unknownJob(expected.rawValue) }
            guard existing.phase != .completed else {
                throw .invalidInput("job \(id) is already complete; nothing to resume")
            }
        }

        var record: JobRecord
        var resumed = false
        if let existing = try store.job(id), !restart, existing.phase != .completed {
            for (stored, local) in zip(existing.files, localFiles) where stored.identity != local.identity {
                throw .fileChanged(path: local.path, detail: Self.describeChange(from: stored.identity, to: local.identity))
            }
            record = existing
            record.concurrency = concurrency
            resumed = true
        } else {
            if try store.job(id) != nil {
                try await store.commit(.deleteJob(id))
            }
            let now = Date()
            record = JobRecord(
                id: id, backend: backend.name, target: target, createdAt: now, updatedAt: now,
                concurrency: concurrency,
                files: localFiles.map { file in
                    FileRecord(
                        path: file.path, identity: file.identity,
                        chunkSize: max(1, backend.chunkSize(forFileOfSize: file.identity.size, requested: requestedChunkSize)))
                })
            let context = JobRunner.jobContext(record: record, traits: traits, credentials: options.credentials)
            record.handles = backend.makeJobHandles(for: context)
            try await store.commit(.putJob(record))
            try store.sync()
        }

        let runner = JobRunner(
            record: record, files: localFiles, backend: backend, options: options, concurrency: concurrency,
            store: store, transport: transport, lock: lock, resumed: resumed)
        let session = JobSession(
            id: id, store: store, lock: lock, stateDirectory: stateDirectory, retention: finishedJobRetention,
            rerun: { [store, transport] () throws(XferError) -> JobRunner in
                // A run after pause(): the record moved on (handles, opened
                // files), so it is read back rather than reused.
                guard let current = try store.job(id) else {
                    throw .transferFailed("the state of job \(id) vanished while it was paused")
                }
                for (stored, file) in zip(current.files, localFiles) {
                    let now = try file.currentIdentity()
                    if now != stored.identity {
                        throw .fileChanged(path: file.path, detail: Self.describeChange(from: stored.identity, to: now))
                    }
                }
                return JobRunner(
                    record: current, files: localFiles, backend: backend, options: options, concurrency: concurrency,
                    store: store, transport: transport, lock: lock, resumed: true)
            })
        return TransferJob(runner: runner, session: session)
    }

    static func describeChange(from old: FileIdentity, to new: FileIdentity) -> String {
        if old.size != new.size { return "size \(old.size) → \(new.size) bytes" }
        if old.modificationTimeNanoseconds != new.modificationTimeNanoseconds { return "modification time changed" }
        return "it was replaced by another file"
    }
}

/// A running job: its events, its outcome, and ways to pause, resume or
/// stop it.
///
/// The job holds its lock from `push` until it ends, paused time included,
/// so no other process can run it meanwhile.
public final class TransferJob: Sendable {
    /// The job's id, as `TransferEngine.jobs()` and the CLI show it.
    public let id: JobID
    /// Progress and milestones. Finishes when the job ends.
    public let events: AsyncStream<TransferEvent>
    private let task: Task<Result<JobReport, XferError>, Never>
    private let control: JobControl

    init(runner: JobRunner, session: JobSession) {
        id = runner.jobID
        let (stream, continuation) = AsyncStream.makeStream(of: TransferEvent.self, bufferingPolicy: .bufferingNewest(4096))
        events = stream
        let control = JobControl(job: runner.jobID)
        self.control = control
        task = Task {
            let result = await control.drive(first: runner, session: session, events: continuation)
            switch result {
            case .success(let report): continuation.yield(.completed(report))
            case .failure(let error): continuation.yield(.failed(error))
            }
            continuation.finish()
            return result
        }
    }

    deinit {
        // Nobody is left to resume a paused job: end it (state kept) rather
        // than leave it holding its lock for the life of the process. A
        // running job is left to finish, as before.
        control.abandonIfPaused()
    }

    /// Waits for the job to end.
    public var report: JobReport {
        get async throws(XferError) {
            try await task.value.get()
        }
    }

    /// Stops sending until `resume()`: nothing new is scheduled, requests in
    /// flight are abandoned (their chunks are sent again later), and every
    /// acknowledged chunk is committed. Returns once the job is paused (it
    /// then emits `.paused`) or has ended.
    ///
    /// The job keeps its lock while paused; `report` waits through the pause.
    public func pause() async {
        await control.pause()
    }

    /// Continues a paused job in this process: the server is asked what it
    /// holds (where the protocol can tell) and the missing chunks follow. A
    /// `pause()` still in progress is called off. Does nothing to a job that
    /// is not paused.
    public func resume() {
        control.resume()
    }

    /// Stops the job: no new requests, in-flight ones abandoned, state
    /// committed. `report` then throws `XferError.interrupted`. The job
    /// stays resumable (pushing the same files again, or
    /// `TransferEngine.resume(_:using:options:)`); to drop it for good, use
    /// `TransferEngine.cancelJob(_:using:options:)`.
    public func cancel() {
        control.cancel()
        task.cancel()
    }
}

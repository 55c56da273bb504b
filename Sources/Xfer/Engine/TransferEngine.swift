import CMalloc
import Crypto
import FoundationEssentials
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
        try options.validate()
        do {
            transport = try HTTPTransport(options: options)
        } catch {
            throw .transferFailed("cannot start the HTTP transport: \(error)")
        }
    }

    deinit {
        transport.shutdown()
    }

    /// Chunk buffers (a stream's chunks, held in memory) are large and
    /// short-lived, allocated on one thread and freed on another. glibc raises
    /// its mmap threshold each time such a block is freed, after which chunk
    /// buffers come from per-thread arenas that keep freed memory: peak RSS
    /// then grew with the file's size (measured: 72 MB for 64 MiB, 98 MB for
    /// 1 GiB at 8 MiB × 4). A fixed threshold keeps every chunk buffer in its
    /// own mapping, returned to the kernel when freed, and memory flat.
    ///
    /// It sits above the blocks a digest pass reads (`ChunkBytes.passBlock`,
    /// 256 KiB and the array's header) and curl's upload buffer (512 KiB): at
    /// 256 KiB each pass's block was a fresh mapping, whose pages the kernel
    /// zeroed as the first read filled them (3 % of a multipart push's CPU,
    /// `clear_page_erms` under `pread`); from the heap they are reused.
    private static let fixMallocThreshold: Void = {
        _ = mallopt(M_MMAP_THRESHOLD, 1 << 20)
    }()

    /// The id a push of `paths` to `target` with `backend` gets: the same
    /// push always maps to the same job, which is how a re-run resumes.
    public static func jobID(backend: String, target: String, files paths: [String]) -> JobID {
        var hash = SHA256()
        hash.update(data: Array("xfer-job-v1\0\(backend)\0\(target)".utf8))
        for path in paths { hash.update(data: Array("\0\(path)".utf8)) }
        return JobID(rawValue: String(Checksums.hex(Array(hash.finalize())).prefix(16)))
    }

    /// Starts pushing `paths` (files and directories, mixed) to `target`,
    /// or resumes the unfinished job for the same paths, backend and target.
    ///
    /// A directory is walked recursively in a stable order and its files
    /// reach the server under their paths relative to it (see
    /// `FileSelection` for what is taken). Resuming walks the directories
    /// again: files added since join the job, files changed since are sent
    /// again from their start, and files gone since fail on their own
    /// without stopping the others.
    ///
    /// Everything that can be checked before sending is checked here, so a
    /// bad path or URL fails at once without touching the job's state.
    ///
    /// - Parameters:
    ///   - paths: Local files and directories, in the order the server should see them.
    ///   - target: The server's root URL (http or https), or the backend's own form.
    ///   - backend: The server's upload protocol.
    ///   - options: Chunk size, concurrency, retries, headers, credentials.
    ///   - selection: Which files of the directories to take.
    ///   - restart: Forget saved progress of the same push and start over.
    /// - Returns: The running job; await its `report`.
    public func push(
        _ paths: [String], to target: String, using backend: any UploadBackend,
        options: TransferOptions = TransferOptions(), selection: FileSelection = FileSelection(), restart: Bool = false
    ) async throws(XferError) -> TransferJob {
        try await push(paths, to: target, using: backend, options: options, selection: selection, restart: restart, resuming: nil)
    }

    /// `push`, or with `resuming` set, only the continuation of that existing
    /// unfinished job: checked under the job's lock, so a job completed or
    /// cancelled by another process meanwhile is never started afresh.
    func push(
        _ paths: [String], to target: String, using backend: any UploadBackend,
        options: TransferOptions, selection: FileSelection, restart: Bool, resuming expected: JobID?
    ) async throws(XferError) -> TransferJob {
        guard !paths.isEmpty else { throw .invalidInput("no files to push") }
        let normalized: String
        do { normalized = try backend.target(normalizing: target) } catch { throw .invalidInput(error.description) }
        let target = normalized
        let traits = backend.traits
        try options.validate()
        // A backend's defaults are held to the same bounds.
        let requestedChunkSize = options.chunkSize ?? traits.defaultChunkSize
        try TransferOptions.check(chunkSize: requestedChunkSize)
        if let large = traits.largeFileChunkSize { try TransferOptions.check(chunkSize: large) }
        let concurrency = options.concurrency ?? traits.defaultConcurrency
        try TransferOptions.check(concurrency: concurrency)

        let roots = paths.map { URL(fileURLWithPath: $0).standardizedFileURL.path }
        if Set(roots).count != roots.count {
            throw .invalidInput("the same path is named twice; name each file or directory once")
        }
        // Every root must exist before anything is stored (a typo is exit 2, not a failed job).
        let walker = try FileTreeWalker(roots: roots, selection: selection)

        let id = Self.jobID(backend: backend.name, target: target, files: roots)
        let lock = try JobLock(stateDirectory: stateDirectory, job: id)
        if let expected {
            guard expected == id, let existing = try store.job(id) else { throw .unknownJob(expected.rawValue) }
            guard existing.phase != .completed else {
                throw .invalidInput("job \(id) is already complete; nothing to resume")
            }
        }

        let chunkSize = backend.chunkSizes(named: options.chunkSize)
        var record: JobRecord
        var resumed = false
        if let existing = try store.job(id), !restart {
            // A completed job still kept is re-run too: what is new or changed
            // in its directories is sent, what is on the server already is not.
            record = existing
            record.concurrency = concurrency
            record.rules = selection.rules
            record.phase = .unfinished
            resumed = true
        } else {
            if let existing = try store.job(id) {
                // --restart: what the server holds of the unfinished job goes
                // with it (a multipart upload is billed until aborted).
                if existing.phase != .completed, existing.backend == backend.name {
                    _ = try await dropOnServer(existing, using: backend, options: options)
                }
                try await store.commit(.deleteJob(id))
            }
            let now = Date()
            record = JobRecord(
                id: id, backend: backend.name, target: target, createdAt: now, updatedAt: now, concurrency: concurrency,
                rootCount: roots.count, firstRoot: roots[0], rules: selection.rules)
            record.handles = backend.inventedHandles(
                for: record.context(files: JobFiles([]), credentials: options.credentials, namedFile: walker.namedFile))
            // The header first: a push killed while its files are being recorded
            // is a job whose re-run walks the tree again and records the rest.
            try await store.commit(.createJob(record, roots: roots))
            try store.sync()
        }
        // Files found on a re-run join the job, unless the protocol fixed the job's
        // files in its job-level step already (multipart's preLoad.do).
        let closed = record.isStarted && traits.filesFixedAtStart
        let notes = try await recordFiles(walker, job: id, chunkSize: chunkSize, closedTo: closed ? backend.name : nil)
        if !resumed, try store.counters(id).fileCount == 0 {
            try await store.commit(.deleteJob(id))
            lock.removeFile()
            throw .invalidInput("nothing to push: \(paths.count == 1 ? paths[0] : "the paths named") hold\(paths.count == 1 ? "s" : "") no file to send")
        }
        record.updatedAt = Date()
        try await store.commit(.putJob(record))

        // The backend's steps, resolved once for every run of the job.
        let steps = BackendSteps(backend)
        let make: @Sendable (JobRecord, Bool, [TransferEvent]) -> JobRunner = { [store, transport] record, resumed, notes in
            JobRunner(
                record: record, direction: .push(steps, notes: notes), options: options, concurrency: concurrency,
                chunkSize: chunkSize, store: store, transport: transport, lock: lock, resumed: resumed)
        }
        let runner = make(record, resumed, notes)
        let session = JobSession(
            id: id, store: store, lock: lock, stateDirectory: stateDirectory, retention: finishedJobRetention,
            rerun: { [store] () throws(XferError) -> any JobRun in
                // A run after pause(): the record moved on (handles, opened
                // files), so it is read back rather than reused.
                guard let current = try store.job(id) else {
                    throw .transferFailed("the state of job \(id) vanished while it was paused")
                }
                return make(current, true, [])
            })
        return TransferJob(runner: runner, session: session)
    }

    /// At most this many skipped paths are reported one by one (then a count).
    static let maximumNotes = 1000

    /// Walks the roots and records every file the job does not hold yet, in
    /// batches (a file found again keeps its record and its progress).
    /// Returns what the walk skipped, as events for the run to report.
    private func recordFiles(
        _ walker: FileTreeWalker, job: JobID, chunkSize: @Sendable (Int64) -> Int, closedTo backend: String?
    ) async throws(XferError) -> [TransferEvent] {
        var next = try store.counters(job).fileCount
        var batch: [(index: Int, record: FileRecord)] = []
        var notes: [TransferEvent] = []
        var skipped = 0
        for entry in walker {
            let found: FileRecord
            switch entry {
            case .file(let file):
                found = FileRecord(
                    path: file.path, relativePath: file.relativePath, root: file.root, identity: file.identity,
                    chunkSize: chunkSize(file.identity.size))
            case .failed(let path, let relativePath, let root, let reason):
                found = FileRecord(
                    path: path, relativePath: relativePath, root: root,
                    identity: FileIdentity(size: 0, modificationTimeNanoseconds: 0, inode: 0, device: 0), chunkSize: 1,
                    failure: reason)
            case .skipped(let path, let reason):
                skipped += 1
                if notes.count < Self.maximumNotes { notes.append(.fileSkipped(path: path, reason: reason)) }
                continue
            }
            guard try store.fileIndex(job: job, root: found.root, relativePath: found.relativePath) == nil else { continue }
            if let backend {
                throw .invalidInput(
                    "\(found.path) is new since this job started, and the '\(backend)' protocol cannot add files to an upload "
                        + "it started", remedy: .startOver)
            }
            batch.append((next, found))
            next += 1
            if batch.count == 512 {
                try await store.commit(.putFiles(job: job, files: batch))
                batch.removeAll(keepingCapacity: true)
            }
        }
        if !batch.isEmpty { try await store.commit(.putFiles(job: job, files: batch)) }
        if skipped > notes.count {
            notes.append(.fileSkipped(path: "…", reason: .andMore(skipped - notes.count)))
        }
        return notes
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

    init(runner: any JobRun, session: JobSession) {
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

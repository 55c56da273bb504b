import FoundationEssentials
import XferPrimitives

/// Where a job stands, as listings show it.
public enum JobState: String, Sendable, Hashable, Codable, CaseIterable {
    /// A live process (perhaps this one) holds the job's lock.
    case running
    /// Created or interrupted; resuming continues it.
    case unfinished
    /// Stopped on an error retries did not fix; resuming continues it.
    case failed
    /// Every file is on the server; kept until the retention ends.
    case completed
}

/// One line of a job listing. Holds nothing secret: tokens and headers are
/// never stored, and the target is shown without credentials or query.
public struct JobSummary: Sendable, Hashable {
    /// The job's id (16 hex digits).
    public let id: JobID
    /// The `UploadBackend.name` the job was pushed with.
    public let backend: String
    /// The server's root URL, with any password and query redacted.
    public let target: String
    /// The local paths the user named (files and directories), in order.
    public let paths: [String]
    /// How many files the job holds.
    public let fileCount: Int
    /// How many of them are complete on the server.
    public let completedFiles: Int
    /// How many of them failed in the last run.
    public let failedFiles: Int
    /// The size of all files together.
    public let totalBytes: Int64
    /// Bytes the server acknowledged, as the state store records them.
    public let doneBytes: Int64
    /// Running, unfinished, failed or completed.
    public let state: JobState
    /// The pid of the process running the job, when it is running.
    public let runningProcess: Int32?
    /// When the job was created.
    public let createdAt: Date
    /// When the job's record last changed (for a completed job: when it completed).
    public let updatedAt: Date
    /// The error that stopped the last run, if it failed.
    public let lastError: String?
    /// Whether the job pushes files (`backend` is an `UploadBackend`'s name,
    /// `target` the server) or pulls objects (`backend` is a
    /// `DownloadSource`'s name, `paths` the locations, `target` the destination).
    public let direction: TransferDirection
}

/// Which way a job moves bytes.
public enum TransferDirection: String, Sendable, Hashable, Codable {
    /// Files to a server (`TransferEngine.push`).
    case push
    /// Objects from a server (`TransferEngine.pull`).
    case pull
    /// A directory made the same on a server (`TransferEngine.sync`):
    /// `paths` is the directory, `target` the destination, the files those
    /// the plan copies.
    case sync
}

/// Everything the state store knows about one job, secrets redacted.
public struct JobDetails: Sendable, Hashable {
    /// One file of the job.
    public struct File: Sendable, Hashable {
        /// Position in the job (0-based).
        public let index: Int
        /// The local path.
        public let path: String
        /// The file's size in bytes.
        public let size: Int64
        /// The chunk size in force for the file.
        public let chunkSize: Int
        /// The number of chunks the file is cut into.
        public let chunkCount: Int
        /// Chunks the server acknowledged.
        public let chunksDone: Int
        /// Bytes the server acknowledged.
        public let doneBytes: Int64
        /// Whether the server has opened the file (its handles are stored).
        public let isOpen: Bool
        /// The file's URL on the server, once it is complete.
        public let url: String?
        /// Server handles of the file, with secret values replaced by `<redacted>`.
        public let handles: [String: String]
        /// The path relative to the directory named (the name when the file was named).
        public let relativePath: String
        /// Why the file failed in the last run, if it did.
        public let failure: String?
    }

    /// The job's listing line.
    public let summary: JobSummary
    /// Job-level server handles, with secret values replaced by `<redacted>`.
    public let handles: [String: String]
    /// Requests in flight at once when the job last ran.
    public let concurrency: Int
    /// The files asked for (see `details(of:files:)`), in push order.
    public let files: [File]
    /// The files whose last run failed (at most `failureLimit` of them).
    public let failedFiles: [File]
}

/// Which files `TransferEngine.details(of:files:)` describes one by one.
public enum FileListing: Sendable, Hashable {
    /// Every file (a job may hold 100,000).
    case all
    /// The first `n` files.
    case first(Int)
}

/// What `TransferEngine.cancelJob` did.
public struct CancellationReport: Sendable, Hashable {
    /// One request that asked the server to drop what it holds.
    public struct Request: Sendable, Hashable {
        /// The HTTP method, e.g. `DELETE`.
        public let method: String
        /// The URL without its query (which may hold secrets).
        public let url: String
        /// The server's status code, when it answered.
        public let status: Int?
        /// Why no answer came, when none did.
        public let error: String?

        /// Whether the server confirmed, or no longer knew the upload (404, 410).
        public var succeeded: Bool {
            guard let status else { return false }
            return (200..<300).contains(status) || status == 404 || status == 410
        }
    }

    /// The job that was cancelled; its local state is gone.
    public let job: JobID
    /// The requests sent to the server, in order; empty when there were none.
    public let requests: [Request]
    /// Why the server was not asked, when it was not (an unknown backend,
    /// a completed job).
    public let serverNotAsked: String?
}

extension TransferEngine {
    /// Every job in the state store, oldest first.
    ///
    /// Cheap with many jobs: per job it reads a compact summary, and per file
    /// a counter and one bitmap segment, however many chunks the files have;
    /// whether a job runs is read from its lock file.
    ///
    /// - Parameter includingCompleted: Also list completed jobs still kept
    ///   (see `finishedJobRetention`).
    public func jobs(includingCompleted: Bool = false) throws(XferError) -> [JobSummary] {
        // Many jobs share a target; parsing each once is a tenth of the listing's time.
        var shownTargets: [String: String] = [:]
        var result: [JobSummary] = []
        for listing in try store.listings() where includingCompleted || listing.record.phase != .completed {
            var listing = listing
            if let shown = shownTargets[listing.record.target] {
                listing.record.target = shown
            } else {
                let shown = Self.displayURL(listing.record.target)
                shownTargets[listing.record.target] = shown
                listing.record.target = shown
            }
            let paths = listing.record.rootCount == 1 ? [listing.record.firstRoot] : try store.roots(listing.record.id)
            result.append(summary(of: listing, paths: paths, targetIsShown: true))
        }
        return result.sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
    }

    /// The id of the job `text` names: a whole id, or a prefix of exactly
    /// one job's id (as `git` accepts abbreviated hashes).
    public func jobID(matching text: String) throws(XferError) -> JobID {
        let needle = text.trimmingSpacesAndTabs().lowercased()
        let shown = String(text.prefix(40))
        guard !needle.isEmpty, needle.utf8.count <= 16,
            needle.utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) })
        else { throw .unknownJob(shown) }
        let ids = try store.jobIDs(withPrefix: needle)
        if let exact = ids.first(where: { $0.rawValue == needle }) { return exact }
        switch ids.count {
        case 0: throw .unknownJob(shown)
        case 1: return ids[0]
        default: throw .invalidInput("'\(shown)' matches \(ids.count) jobs; give more of the job id")
        }
    }

    /// What the state store knows about job `id`: its totals, the files
    /// `files` asks for, and the files that failed.
    ///
    /// Costs O(files asked for): `.first(n)` keeps it small for a job of
    /// 100,000 files.
    ///
    /// - Parameter backends: Candidates; the one whose `name` the job was
    ///   pushed with says how its files are cut (an empty file is one chunk
    ///   for some protocols). Without it, an empty file counts no chunk.
    public func details(
        of id: JobID, files listing: FileListing = .all, failureLimit: Int = 100, using backends: [any UploadBackend] = []
    ) throws(XferError) -> JobDetails {
        guard let record = try store.job(id) else {
            throw .unknownJob(id.rawValue)
        }
        let traits = backends.first { $0.name == record.backend }?.traits
        let counters = try store.counters(id)
        let summary = summary(of: JobListing(record: record, counters: counters), paths: try store.roots(id))
        let limit: Int
        switch listing {
        case .all: limit = Int.max
        case .first(let n): limit = max(0, n)
        }
        var files: [JobDetails.File] = []
        var start = 0
        while files.count < limit {
            let page = try store.files(job: id, from: start, limit: min(4096, limit - files.count))
            for (index, file) in page { files.append(try fileDetails(index, file, record: record, traits: traits)) }
            guard let last = page.last else { break }
            start = last.index + 1
        }
        let failed = try store.failedFiles(job: id, limit: failureLimit).map { entry throws(XferError) in
            try fileDetails(entry.index, entry.record, record: record, traits: traits)
        }
        return JobDetails(
            summary: summary, handles: record.handles.redacted, concurrency: record.concurrency, files: files,
            failedFiles: failed)
    }

    private func fileDetails(_ index: Int, _ file: FileRecord, record: JobRecord, traits: BackendTraits?) throws(XferError)
        -> JobDetails.File
    {
        let plan = traits.map(file.chunkPlan) ?? ChunkPlan(fileSize: file.size, chunkSize: max(1, file.chunkSize))
        let done = try store.fileProgress(job: record.id, file: index)
        let complete = record.phase == .completed || file.isComplete
        return JobDetails.File(
            index: index, path: file.path, size: file.size, chunkSize: file.chunkSize, chunkCount: plan.count,
            chunksDone: complete ? plan.count : min(done.chunksDone, plan.count),
            doneBytes: complete ? file.size : min(done.bytesDone, file.size),
            isOpen: file.isOpen, url: file.url, handles: file.handles.redacted, relativePath: file.relativePath,
            failure: file.failure)
    }

    /// Continues unfinished (or failed) job `id` from its saved state.
    ///
    /// The push is rebuilt from the job's record: files, target, chunk
    /// sizes and server handles. Credentials and extra headers are never
    /// stored, so pass them again in `options`; `options.chunkSize` is
    /// ignored (the job keeps its chunk sizes) and `options.concurrency`
    /// defaults to the job's.
    ///
    /// - Parameter backends: Candidates; the one whose `name` the job was
    ///   pushed with is used.
    /// - Throws: `.unknownJob`, `.invalidInput` (completed job, backend not
    ///   given), `.jobLocked`, `.fileChanged`, and what `push` throws.
    public func resume(
        _ id: JobID, using backends: [any UploadBackend], options: TransferOptions = TransferOptions()
    ) async throws(XferError) -> TransferJob {
        guard let record = try store.job(id) else { throw .unknownJob(id.rawValue) }
        guard record.phase != .completed else {
            throw .invalidInput("job \(id) is already complete; nothing to resume")
        }
        guard !record.isDownload else {
            throw .invalidInput("job \(id) is a pull; resume it with a download source (resumePull)")
        }
        guard !record.isSync else {
            throw .invalidInput("job \(id) is a sync; resume it with resumeSync (or run the same sync again)")
        }
        guard !record.isStream else {
            throw .invalidInput(
                "job \(id) pushed a stream, which cannot be read again; push the stream again (what the job left on the server is dropped first) or cancel the job")
        }
        let backend = try Self.backend(named: record.backend, in: backends, for: id)
        var options = options
        if options.concurrency == nil { options.concurrency = record.concurrency }
        return try await push(
            try store.roots(id), to: record.target, using: backend, options: options, selection: try FileSelection(record.rules),
            restart: false, resuming: id)
    }

    /// Continues the unfinished pull `id` with the source in `sources` whose
    /// `name` it was made with. Files an earlier run recorded keep their
    /// ranges; a prefix listed in full is not listed again.
    public func resumePull(
        _ id: JobID, from sources: [any DownloadSource], options: TransferOptions = TransferOptions()
    ) async throws(XferError) -> TransferJob {
        guard let record = try store.job(id) else { throw .unknownJob(id.rawValue) }
        guard record.isDownload else { throw .invalidInput("job \(id) is a push; resume it with its backend") }
        guard record.phase != .completed else { throw .invalidInput("job \(id) is already complete; nothing to resume") }
        guard let source = sources.first(where: { $0.name == record.backend }) else {
            throw .invalidInput("job \(id) pulls with the '\(record.backend)' source, which was not given")
        }
        var options = options
        if options.concurrency == nil { options.concurrency = record.concurrency }
        return try await pull(
            try store.roots(id), to: record.target, from: source, options: options,
            pull: PullOptions(selection: try FileSelection(record.rules)), restart: false, resuming: id)
    }

    /// Drops job `id` for good: asks the server to drop what it holds (the
    /// backend's `cancelRequests`, best-effort: each tried up to three times
    /// on a transient failure, answers reported, failures not fatal), then
    /// deletes the job's local state.
    ///
    /// A completed job's files stay on the server; only its local record
    /// goes. When no backend in `backends` matches the job's, the server is
    /// not asked and the report says so.
    ///
    /// - Throws: `.unknownJob`; `.jobLocked` when a live process runs the job
    ///   (stop it first); `.stateUnavailable`.
    public func cancelJob(
        _ id: JobID, using backends: [any UploadBackend] = [], options: TransferOptions = TransferOptions()
    ) async throws(XferError) -> CancellationReport {
        guard try store.job(id) != nil else { throw .unknownJob(id.rawValue) }
        let lock = try JobLock(stateDirectory: stateDirectory, job: id)
        // Another process may have cancelled or pruned it before we got the lock.
        guard let record = try store.job(id) else {
            lock.removeFile()
            throw .unknownJob(id.rawValue)
        }
        var requests: [CancellationReport.Request] = []
        var notAsked: String?
        if record.isDownload {
            // A pull leaves nothing on the server; its partial files are its own.
            if record.phase != .completed { try discardPartialFiles(of: id) }
            notAsked = record.phase == .completed
                ? "the pull is complete; its files stay where they are"
                : "a pull holds nothing on the server; its partial files were deleted"
        } else if record.phase == .completed {
            notAsked = "the job is complete; its files stay on the server"
        } else if let backend = backends.first(where: { $0.name == record.backend }) {
            requests = try await dropOnServer(record, using: backend, options: options)
            if requests.isEmpty {
                notAsked = "the '\(record.backend)' protocol has no call to drop an upload; only the local state was removed"
            }
        } else {
            notAsked = "the '\(record.backend)' backend is not available here, so the server was not asked to drop the upload"
        }
        try await store.commit(.deleteJob(id))
        try store.sync()
        lock.removeFile()
        return CancellationReport(job: id, requests: requests, serverNotAsked: notAsked)
    }

    /// Sends the backend's `cancelRequests` for the job `record` describes,
    /// each tried up to three times on a transient failure
    /// (`RetryLoop.sendCleanup`), and reports their answers: what the server holds of
    /// an unfinished job goes (`cancel`, `--restart`, the next push of a
    /// stream). The caller holds the job's lock.
    func dropOnServer(
        _ record: JobRecord, using backend: any UploadBackend, options: TransferOptions
    ) async throws(XferError) -> [CancellationReport.Request] {
        // With receipts: chunks may be uploads of their own (tus's partial uploads), named by them.
        let context = try UploadSteps.wholeJobContext(record, store: store, traits: backend.traits, options: options, withReceipts: true)
        var requests: [CancellationReport.Request] = []
        for unprepared in backend.requestsToCancel(context) {
            let request = unprepared.prepared(adding: options.extraHeaders, for: backend, in: context)
            let shown = Self.displayURL(request.url)
            switch await RetryLoop.sendCleanup(request, through: transport) {
            case .success(let response):
                requests.append(.init(method: request.method.rawValue, url: shown, status: response.status, error: nil))
            case .failure(let error):
                requests.append(.init(method: request.method.rawValue, url: shown, status: nil, error: "\(error)"))
            }
        }
        return requests
    }

    /// Deletes completed jobs older than `finishedJobRetention` and returns
    /// their ids. Completing a job does this too; call it to prune without
    /// pushing (e.g. from a maintenance task).
    public func pruneCompletedJobs() async throws(XferError) -> [JobID] {
        let cutoff = Date().addingTimeInterval(-finishedJobRetention.timeInterval)
        let pruned = try await store.pruneCompletedJobs(finishedBefore: cutoff)
        for id in pruned { JobCatalog.removeLockFile(stateDirectory: stateDirectory, job: id, store: store) }
        return pruned
    }

    // MARK: Helpers

    private func summary(of listing: JobListing, paths: [String], targetIsShown: Bool = false) -> JobSummary {
        let record = listing.record
        let counters = listing.counters
        let holder = JobLock.holder(stateDirectory: stateDirectory, job: record.id)
        let state: JobState
        var lastError = record.phase == .failed ? record.lastError : nil
        if holder != nil {
            state = .running
        } else if record.isStream, record.phase == .unfinished {
            // Its process died mid-stream: what it read is gone with it.
            state = .failed
            lastError = Self.killedStreamReason
        } else {
            switch record.phase {
            case .unfinished: state = .unfinished
            case .failed: state = .failed
            case .completed: state = .completed
            }
        }
        return JobSummary(
            id: record.id, backend: record.backend, target: targetIsShown ? record.target : Self.displayURL(record.target),
            paths: paths, fileCount: counters.fileCount, completedFiles: counters.completedFiles,
            failedFiles: counters.failedFiles, totalBytes: counters.totalBytes,
            doneBytes: record.phase == .completed ? counters.totalBytes : min(counters.doneBytes, counters.totalBytes),
            state: state, runningProcess: holder, createdAt: record.createdAt, updatedAt: record.updatedAt,
            lastError: lastError, direction: record.isDownload ? .pull : record.isSync ? .sync : .push)
    }

    /// Why a stream job no process runs is failed.
    static let killedStreamReason =
        "the push of this stream was killed; a stream cannot be read again, so it cannot be resumed. What it left on the server is dropped when the same stream is pushed again or the job is cancelled"

    static func backend(named name: String, in backends: [any UploadBackend], for id: JobID) throws(XferError)
        -> any UploadBackend
    {
        if let backend = backends.first(where: { $0.name == name }) { return backend }
        let offered = backends.isEmpty ? "none was given" : "only \(backends.map(\.name).joined(separator: ", ")) \(backends.count == 1 ? "was" : "were") given"
        throw .invalidInput("job \(id) was pushed with the '\(name)' backend, but \(offered); resume it with that backend")
    }

    /// `url` without its query and fragment, and with any password masked:
    /// listings and reports must not leak credentials put in a URL.
    static func displayURL(_ url: String) -> String {
        guard var components = URLComponents(string: url) else {
            return url.split(separator: "?", maxSplits: 1).first.map(String.init) ?? ""
        }
        let hadQuery = components.query != nil
        components.query = nil
        components.fragment = nil
        if components.password != nil { components.password = "***" }
        return (components.string ?? "") + (hadQuery ? "?…" : "")
    }
}

/// Lock-file housekeeping shared by prune and cancel.
enum JobCatalog {
    /// Removes the lock file of a job whose state is gone, when no process
    /// holds it (one that does is re-pushing the job and keeps it).
    static func removeLockFile(stateDirectory: String, job: JobID, store: any JobStateStore) {
        guard let lock = try? JobLock(stateDirectory: stateDirectory, job: job) else { return }
        if case .some(.none) = try? store.job(job) {
            lock.removeFile()
        }
    }
}

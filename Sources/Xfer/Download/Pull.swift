import FoundationEssentials
import XferPrimitives

#if canImport(Glibc)
    import Glibc
#endif

/// How a pull treats what it finds at its destination.
public struct PullOptions: Sendable, Hashable {
    /// Replace destination files that are not this pull's (else such a file
    /// fails, untouched).
    public var replacesExisting: Bool
    /// Which objects of a prefix to take (`--include`/`--exclude`, matched
    /// against the path below the prefix).
    public var selection: FileSelection

    /// Options with these values.
    public init(replacesExisting: Bool = false, selection: FileSelection = FileSelection()) {
        self.replacesExisting = replacesExisting
        self.selection = selection
    }
}

extension TransferEngine {
    /// The id a pull of `locations` into `destination` from `source` gets:
    /// the same pull always maps to the same job, which is how a re-run resumes.
    public static func pullJobID(source: String, destination: String, locations: [String]) -> JobID {
        jobID(backend: "pull\0" + source, target: destination, files: locations)
    }

    /// Starts pulling `locations` (objects, or for an `ObjectListing` source
    /// every object under a prefix) into `destination`, or resumes the
    /// unfinished pull of the same locations, source and destination.
    ///
    /// One object named with a destination that is not a directory lands at
    /// that path; otherwise `destination` is a directory (created when
    /// missing) and each object lands at its name (one object) or its path
    /// below the prefix. Bytes go to `NAME.xfer-partial` beside each
    /// destination, which appears only complete and checked.
    ///
    /// - Throws: `.invalidInput` for a location the source cannot read or a
    ///   destination that cannot be one; what listing a prefix throws.
    public func pull(
        _ locations: [String], to destination: String, from source: any DownloadSource,
        options: TransferOptions = TransferOptions(), pull pullOptions: PullOptions = PullOptions(), restart: Bool = false
    ) async throws(XferError) -> TransferJob {
        try await pull(locations, to: destination, from: source, options: options, pull: pullOptions, restart: restart, resuming: nil)
    }

    func pull(
        _ locations: [String], to destination: String, from source: any DownloadSource, options: TransferOptions,
        pull pullOptions: PullOptions, restart: Bool, resuming expected: JobID?
    ) async throws(XferError) -> TransferJob {
        guard !locations.isEmpty else { throw .invalidInput("nothing to pull: name a URL or an object") }
        guard !destination.isEmpty else { throw .invalidInput("name where the pull goes") }
        try options.validate()
        let chunkSizeAsked = options.chunkSize ?? source.traits.defaultChunkSize
        try TransferOptions.check(chunkSize: chunkSizeAsked)
        let concurrency = options.concurrency ?? source.traits.defaultConcurrency
        try TransferOptions.check(concurrency: concurrency)

        var normalized: [String] = []
        for location in locations {
            do { normalized.append(try source.normalizedLocation(location)) } catch { throw .invalidInput(error.description) }
        }
        if Set(normalized).count != normalized.count {
            throw .invalidInput("the same location is named twice; name each once")
        }
        // The source's steps, resolved once for every run of the job.
        let steps = SourceSteps(source)
        let listing = steps.listing
        let prefixes = normalized.map { listing?.isPrefix($0) ?? false }
        let root = URL(fileURLWithPath: destination).standardizedFileURL.path
        var isDirectory = false
        let exists = FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory)
        // One object into a path that is not a directory: that path. Else a directory.
        let intoDirectory = normalized.count > 1 || prefixes[0] || destination.hasSuffix("/") || (exists && isDirectory)
        if intoDirectory, exists, !isDirectory {
            throw .invalidInput("\(root) is a file; name a directory for \(normalized.count > 1 ? "several objects" : "a prefix")")
        }
        if intoDirectory, !exists { try PartialFile.makeDirectories(root) }
        if !intoDirectory {
            let parent = PathText.deletingLastComponent(of: root)
            guard FileManager.default.fileExists(atPath: parent, isDirectory: &isDirectory), isDirectory else {
                throw .invalidInput("\(parent) is not a directory")
            }
        }

        let id = Self.pullJobID(source: source.name, destination: root, locations: normalized)
        let lock = try JobLock(stateDirectory: stateDirectory, job: id)
        if let expected {
            guard expected == id, let existing = try store.job(id) else { throw .unknownJob(expected.rawValue) }
            guard existing.phase != .completed else { throw .invalidInput("job \(id) is already complete; nothing to resume") }
        }
        let traits = steps.traits
        let named = options.chunkSize
        let chunkSize: @Sendable (Int64) -> Int = { _ in max(1, named ?? traits.defaultChunkSize) }

        var record: JobRecord
        var resumed = false
        if let existing = try store.job(id), !restart {
            record = existing
            record.concurrency = concurrency
            record.phase = .unfinished
            resumed = true
        } else {
            if let existing = try store.job(id) {
                if existing.phase != .completed { try discardPartialFiles(of: id) }
                try await store.commit(.deleteJob(id))
            }
            let now = Date()
            record = JobRecord(
                id: id, backend: source.name, target: root, createdAt: now, updatedAt: now, concurrency: concurrency,
                rootCount: normalized.count, firstRoot: normalized[0], rules: pullOptions.selection.rules)
            record.isDownload = true
            try await store.commit(.createJob(record, roots: normalized))
            try store.sync()
        }
        if !record.isStarted {
            // The objects: named ones at once, a prefix's page by page. A pull killed
            // while listing lists again, keeping what it recorded.
            let job = record.context(files: JobFiles([]), credentials: options.credentials)
            for (index, location) in normalized.enumerated() {
                if prefixes[index], let listing {
                    try await recordListing(
                        of: location, root: index, into: root, job: job, steps: steps, listing: listing, options: options,
                        selection: pullOptions.selection, chunkSize: chunkSize)
                } else {
                    let name = Self.safeRelativePath(source.fileName(of: location)).flatMap { $0.contains("/") ? nil : $0 } ?? "download"
                    guard try store.fileIndex(job: id, root: index, relativePath: name) == nil else { continue }
                    let path = intoDirectory ? root + "/" + name : root
                    try await recordObjects(
                        [(index, name, path, RemoteObject(location: location, size: 0, validator: nil), false)], job: id,
                        chunkSize: chunkSize)
                }
            }
            record.isStarted = true
            record.updatedAt = Date()
            try await store.commit(.putJob(record))
        }
        if try store.counters(id).fileCount == 0 {
            try await store.commit(.deleteJob(id))
            lock.removeFile()
            throw .invalidInput("nothing to pull: \(normalized.count == 1 ? normalized[0] : "the locations named") hold\(normalized.count == 1 ? "s" : "") no object")
        }

        let make: @Sendable (JobRecord, Bool) -> JobRunner = { [store, transport] record, resumed in
            JobRunner(
                record: record, direction: .pull(steps, replacesExisting: pullOptions.replacesExisting), options: options,
                concurrency: concurrency, chunkSize: chunkSize, store: store, transport: transport, lock: lock, resumed: resumed)
        }
        let session = JobSession(
            id: id, store: store, lock: lock, stateDirectory: stateDirectory, retention: finishedJobRetention,
            rerun: { [store] () throws(XferError) -> any JobRun in
                guard let current = try store.job(id) else {
                    throw .transferFailed("the state of job \(id) vanished while it was paused")
                }
                return make(current, true)
            })
        return TransferJob(runner: make(record, resumed), session: session)
    }

    /// Records the objects under a prefix, page by page (a page is one
    /// transaction), each at its path below `root`.
    private func recordListing(
        of location: String, root index: Int, into root: String, job: JobContext, steps: SourceSteps, listing: any ObjectListing,
        options: TransferOptions, selection: FileSelection, chunkSize: @Sendable (Int64) -> Int
    ) async throws(XferError) {
        var cursor: String?
        var pages = 0
        repeat {
            let after = cursor
            let page: ObjectListingPage
            do {
                page = try await RetryLoop.run("list \(location)", policy: options.retry) { _, _, _ in } _: { () async throws -> ObjectListingPage in
                    let exchange = try listing.listObjects(under: location, after: after, in: job)
                    let request = steps.prepared(exchange.request, adding: options.extraHeaders, in: job)
                    return try exchange.interpret(try await transport.send(request))
                }
            } catch {
                switch error {
                case .failed(let failure): throw failure
                case .uploadUnknown(let message), .outOfSync(let message), .objectChanged(let message), .conflict(let message):
                    throw .transferFailed(message)
                }
            }
            var objects: [(Int, String, String, RemoteObject, Bool)] = []
            for listed in page.objects where selection.takes(listed.relativePath) {
                guard let relative = Self.safeRelativePath(listed.relativePath) else {
                    throw .transferFailed("the listing of \(location) names '\(listed.relativePath)', which is no path below a directory")
                }
                guard try store.fileIndex(job: job.id, root: index, relativePath: relative) == nil else { continue }
                objects.append((index, relative, root + "/" + relative, listed.object, true))
            }
            try await recordObjects(objects, job: job.id, chunkSize: chunkSize)
            pages += 1
            guard pages < 1_000_000 else { throw .transferFailed("the listing of \(location) never ends") }
            cursor = page.next
        } while cursor != nil
    }

    private func recordObjects(
        _ objects: [(root: Int, relativePath: String, path: String, object: RemoteObject, listed: Bool)], job: JobID,
        chunkSize: @Sendable (Int64) -> Int
    ) async throws(XferError) {
        guard !objects.isEmpty else { return }
        var next = try store.counters(job).fileCount
        var batch: [(index: Int, record: FileRecord)] = []
        for object in objects {
            let identity = FileIdentity(size: object.object.size, modificationTimeNanoseconds: 0, inode: 0, device: 0)
            batch.append(
                (next,
                 FileRecord(
                    path: object.path, relativePath: object.relativePath, root: object.root, identity: identity,
                    chunkSize: chunkSize(object.object.size), handles: DownloadHandles.handles(of: object.object, listed: object.listed))))
            next += 1
        }
        try await store.commit(.putFiles(job: job, files: batch))
    }

    /// The last segment of a location's path (a URL's, a key's), percent-decoded; `download` for none.
    static func name(of location: String) -> String {
        var path = Substring(location)
        if let scheme = path.firstRange(of: "://") { path = path[scheme.upperBound...] }
        if let query = path.firstIndex(where: { $0 == "?" || $0 == "#" }) { path = path[..<query] }
        let last = path.split(separator: "/").dropFirst().last.map(String.init) ?? ""
        let decoded = PercentEncoding.decode(last) ?? String(last)
        return safeRelativePath(decoded).flatMap { $0.contains("/") ? nil : $0 } ?? "download"
    }

    /// `path` when it names a place below a directory ('/'-separated, no
    /// empty, `.` or `..` component, no NUL); nil otherwise — a listing must
    /// not write outside the destination.
    static func safeRelativePath(_ path: String) -> String? {
        let components = path.split(separator: "/", omittingEmptySubsequences: false)
        guard !components.isEmpty, !path.contains("\0") else { return nil }
        for component in components where component.isEmpty || component == "." || component == ".." { return nil }
        return path
    }

    /// Deletes the partial files of a pull's unfinished files (a cancel, a
    /// `--restart`): they are this pull's and nobody else's.
    func discardPartialFiles(of id: JobID) throws(XferError) {
        var start = 0
        while true {
            let page = try store.files(job: id, from: start, limit: 4096)
            for (_, file) in page where !file.isComplete { unlink(file.path + PartialFile.suffix) }
            guard let last = page.last else { break }
            start = last.index + 1
        }
    }
}

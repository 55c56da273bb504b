import FoundationEssentials
import Glibc
import XferPrimitives

/// Where a sync keeps what it replaces or deletes on its destination
/// (`SyncOptions.backupDirectory`), resolved once when it starts.
enum SyncBackup: Sendable {
    /// A directory on the destination directory's file system: a file to be
    /// replaced is hard-linked there first, a file to be deleted renamed there.
    case directory(String)
    /// A target of the destination's store (normalized): objects are copied
    /// there inside the store (`ObjectBackingUp`).
    case store(any ObjectBackingUp, target: String)

    /// `named`, checked as the backup of the directory `root`: outside it,
    /// and on its file system (a move is a rename, never a copy). Made unless
    /// `creating` is false (a dry run changes nothing).
    static func directory(_ named: String, of root: String, creating: Bool) throws(XferError) -> SyncBackup {
        var path = URL(fileURLWithPath: named).standardizedFileURL.path
        if creating { try PartialFile.makeDirectories(path) }
        // Compared as the kernel resolves them: a symbolic link must not hide an overlap.
        let resolvedRoot = realpath(root, nil).map { pointer in
            defer { free(pointer) }
            return String(cString: pointer)
        } ?? root
        if let resolved = realpath(path, nil) {
            path = String(cString: resolved)
            free(resolved)
        }
        func inside(_ inner: String, _ outer: String) -> Bool { inner == outer || outer == "/" || inner.hasPrefix(outer + "/") }
        if inside(path, resolvedRoot) || inside(resolvedRoot, path) {
            throw .invalidInput(
                "--backup-dir \(named) overlaps the directory \(root): a later sync would delete or overwrite its backups; name a directory outside it")
        }
        var backupInfo = stat()
        var rootInfo = stat()
        if stat(path, &backupInfo) == 0, stat(resolvedRoot, &rootInfo) == 0, backupInfo.st_dev != rootInfo.st_dev {
            throw .invalidInput(
                "--backup-dir \(named) is on another file system than \(root): files are moved there, not copied; name a directory on the same one")
        }
        return .directory(path)
    }

    /// `SyncOptions.backupDirectory` as `backend` names it, checked against
    /// the job `probe` describes.
    static func store(_ named: String, backend: any ObjectSyncing, probe: JobContext) throws(XferError) -> SyncBackup {
        guard let backing = backend as? any ObjectBackingUp else {
            throw .invalidInput("the '\(backend.name)' backend cannot keep backups in its store (--backup-dir)")
        }
        do {
            return .store(backing, target: try backing.backupTarget(normalizing: named, in: probe))
        } catch {
            throw .invalidInput(error.description)
        }
    }

    /// The name the plan keeps (a changed backup plans anew).
    var name: String {
        switch self {
        case .directory(let path): return path
        case .store(_, let target): return target
        }
    }
}

/// A local file kept before a sync replaces or deletes it.
enum LocalBackup {
    /// Hard-links the file at `path` to `backup` if it is still what the walk
    /// saw (`condition`, `SyncRun.localCondition`): the pull's rename then
    /// replaces the name, the backup keeps the old bytes. A link already
    /// there to the same file is this backup made by a killed run; an older
    /// backup is replaced (link beside it, rename over it).
    static func link(_ path: String, to backup: String, ifStill condition: String) throws(XferError) -> BackupOutcome {
        guard LocalDeletion.conflict(at: path, expecting: condition) == nil else { return .changed }
        try makeParent(of: backup)
        if Glibc.link(path, backup) == 0 { return .copied }
        guard errno == EEXIST else { throw failure(path, backup, errno) }
        var file = stat()
        var kept = stat()
        if lstat(path, &file) == 0, lstat(backup, &kept) == 0, file.st_ino == kept.st_ino, file.st_dev == kept.st_dev { return .copied }
        let beside = backup + ".xfer-backup"
        unlink(beside)
        guard Glibc.link(path, beside) == 0 else { throw failure(path, backup, errno) }
        guard rename(beside, backup) == 0 else {
            let code = errno
            unlink(beside)
            throw failure(path, backup, code)
        }
        return .copied
    }

    /// Renames the file at `path` (checked by the caller) to `backup`, over
    /// an older backup.
    static func move(_ path: String, to backup: String) throws(XferError) {
        try makeParent(of: backup)
        guard rename(path, backup) == 0 || errno == ENOENT else { throw failure(path, backup, errno) }
    }

    private static func makeParent(of backup: String) throws(XferError) {
        guard let slash = backup.lastIndex(of: "/"), slash != backup.startIndex else { return }
        try PartialFile.makeDirectories(String(backup[..<slash]))
    }

    private static func failure(_ path: String, _ backup: String, _ code: Int32) -> XferError {
        .transferFailed("cannot keep \(path) as \(backup) (--backup-dir): \(String(cString: strerror(code)))")
    }
}

extension SyncRun {
    /// Before the first copy, keeps under the backup every object (or file)
    /// the plan replaces, and marks its file: a killed run backs up only
    /// what it had not, and nothing is replaced before every backup is made
    /// (made twice, a backup holds the same bytes). A replacement whose
    /// object changed since it was listed fails the sync here, before any
    /// copy: it would have been a conflict, and its backup would hold
    /// another version. Answers how many were kept by this run.
    func backUpReplacements() async throws(XferError) -> Int {
        guard let backup, try store.syncValue(id, "backedUp") == nil else { return 0 }
        let job = try jobContext
        var kept = 0
        var changed: [String] = []
        var start = 0
        while true {
            if Task.isCancelled { throw .interrupted }
            let page = try store.files(job: id, from: start, limit: Self.requestsInFlight)
            guard let last = page.last else { break }
            start = last.index + 1
            let replacing = page.filter { _, record in
                guard let condition = record.handles[SyncHandles.condition] else { return false }
                return condition != "*" && record.handles[SyncHandles.backedUp] == nil && !record.isComplete
            }
            let outcomes = await withTaskGroup(of: (Int, FileRecord, Result<BackupOutcome, XferError>).self) { group in
                for (index, record) in replacing {
                    group.addTask {
                        do throws(XferError) {
                            return (index, record, .success(try await self.backUp(record, to: backup, job: job)))
                        } catch {
                            return (index, record, .failure(error))
                        }
                    }
                }
                var outcomes: [(Int, FileRecord, Result<BackupOutcome, XferError>)] = []
                for await outcome in group { outcomes.append(outcome) }
                return outcomes
            }
            var marked: [(index: Int, record: FileRecord)] = []
            for (index, record, outcome) in outcomes {
                switch outcome {
                case .success(.copied):
                    kept += 1
                    var done = record
                    done.handles.set(SyncHandles.backedUp, "1")
                    marked.append((index, done))
                case .success(.absent):
                    // Nothing there to keep; the write's condition reports it.
                    var done = record
                    done.handles.set(SyncHandles.backedUp, "0")
                    marked.append((index, done))
                case .success(.changed):
                    // A local file changed since the walk is the pull's conflict to report; an object is the sync's.
                    if case .store = backup { changed.append(record.relativePath) }
                case .failure(let error):
                    throw error
                }
            }
            guard !marked.isEmpty else { continue }
            // The links on disk before the marks that let their files be replaced.
            if case .directory(let path) = backup { try Self.syncFileSystem(of: path) }
            try await store.commit(.putFiles(job: id, files: marked))
        }
        if let first = changed.first {
            throw .transferFailed(
                "\(changed.count) key\(changed.count == 1 ? "" : "s") changed on the destination since the sync listed "
                    + "\(changed.count == 1 ? "it" : "them") and \(changed.count == 1 ? "was" : "were") not backed up: \(first); "
                    + "nothing was copied (run the sync again with --restart to decide it anew)")
        }
        try store.setSyncValues(id, [("backedUp", [1])])
        return kept
    }

    private func backUp(_ record: FileRecord, to backup: SyncBackup, job: JobContext) async throws(XferError) -> BackupOutcome {
        switch backup {
        case .directory(let path):
            return try LocalBackup.link(
                FileRecord.join(root, record.relativePath), to: FileRecord.join(path, record.relativePath),
                ifStill: record.handles[SyncHandles.condition] ?? "")
        case .store(let backing, let target):
            guard let end = ends.destination else { throw .transferFailed("a backup in a store needs a destination store (this is a bug)") }
            let version = record.handles[SyncHandles.condition]
            return try await send("back up \(record.relativePath)", via: end, in: job) { () throws(BackendError) in
                try backing.backUpObject(at: record.relativePath, version: version, to: target, in: job)
            }
        }
    }

    /// Keeps `entry` under the backup before it is deleted: `.changed` when
    /// it is no longer what was listed (then neither kept nor deleted).
    func backUpBeforeDeleting(_ entry: SyncEntry, job: JobContext) async throws(XferError) -> BackupOutcome {
        switch backup {
        case nil:
            return .absent
        case .directory:
            // A rename is the move and the delete at once (`LocalDeletion.delete`).
            return .copied
        case .store(let backing, let target)?:
            guard let end = ends.destination else { throw .transferFailed("a backup in a store needs a destination store (this is a bug)") }
            return try await send("back up \(entry.key)", via: end, in: job) { () throws(BackendError) in
                try backing.backUpObject(at: entry.key, version: entry.version, to: target, in: job)
            }
        }
    }

    /// One `syncfs` for a batch of links or renames under `path`.
    static func syncFileSystem(of path: String) throws(XferError) {
        let descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { throw PartialFile.failure("cannot open \(path)", errno) }
        defer { close(descriptor) }
        guard syncFilesystem(descriptor) == 0 else { throw PartialFile.failure("cannot write \(path) to disk", errno) }
    }
}

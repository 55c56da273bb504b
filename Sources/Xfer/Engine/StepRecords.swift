import XferPrimitives
/// What a step saves before it reports its result, from the step's outcome:
/// pure, so it is tested without a store or a server
/// (Tests/XferTests/StepRecordsTests.swift). `Worker` commits what this says in
/// the step's own task (so concurrent steps share the store's group
/// commits); the scheduler's `Effects` say what is saved after the result.
/// Together the two are every write a run makes.
///
/// The invariant lives here: a chunk is marked done only with the server's
/// acknowledgement in hand, and a server's handles are saved before the
/// result that lets a chunk needing them be handed out.
enum StepRecords {
    /// `startJob` gave handles for files: merged into their records.
    static func started(job: JobID, fileHandles: [(index: Int, record: FileRecord, handles: ServerHandles)]) -> [StateChange] {
        fileHandles.map { index, record, handles in
            var record = record
            record.handles.merge(handles)
            return .putFiles(job: job, files: [(index, record)])
        }
    }

    /// `openFile` answered: the record as the upload now is, and whether it
    /// must be saved now (a protocol without an open call gave nothing to
    /// keep: the open mark goes with the file's next change, and a run that
    /// finds it missing merely "opens" the file again, which sends nothing).
    static func opened(
        job: JobID, file index: Int, record: FileRecord, opening: OpenedFile?
    ) throws(XferError) -> (record: FileRecord, changes: [StateChange]) {
        var opened = record
        if let opening {
            opened.handles.merge(opening.handles)
            if let size = opening.chunkSize, size != record.chunkSize {
                guard (1...TransferOptions.maximumChunkSize).contains(size) else {
                    throw .transferFailed("the server chose a chunk size of \(size) bytes for \(record.path), which xfer cannot use")
                }
                opened.chunkSize = size
            }
        }
        opened.isOpen = true
        opened.url = nil
        return (opened, opening == nil ? [] : [.putFiles(job: job, files: [(index, opened)])])
    }

    /// The server acknowledged a chunk: marked done, with its receipt, and
    /// the file's URL when the answer completed the file. Nothing when the
    /// scheduler left a bare acknowledgement to the file's completion
    /// (`Scheduler.terms(ofChunk:file:)`).
    static func chunkStored(
        job: JobID, file index: Int, chunk: Int, plan: ChunkPlan, record: FileRecord, receipt: String?, url: String?,
        version: String? = nil, commitsAcknowledgement: Bool
    ) -> [StateChange] {
        if receipt == nil, url == nil, !commitsAcknowledgement { return [] }
        var changes: [StateChange] = [
            .markDone(job: job, file: index, chunks: [chunk], plan: plan, receipts: receipt.map { [chunk: $0] } ?? [:])
        ]
        if let url {
            var completed = record
            completed.url = url
            if let version { completed.handles.set(SyncHandles.version, version) }
            changes.append(.putFiles(job: job, files: [(index, completed)]))
        }
        return changes
    }

    /// A file completed on the server (its digests already checked): its URL.
    static func fileCompleted(job: JobID, file index: Int, record: FileRecord, url: String, version: String? = nil) -> [StateChange] {
        var completed = record
        completed.url = url
        if let version { completed.handles.set(SyncHandles.version, version) }
        return [.putFiles(job: job, files: [(index, completed)])]
    }

    /// `finishJob` completed these files: their URLs.
    static func jobCompleted(job: JobID, files: [(index: Int, record: FileRecord, url: String)]) -> [StateChange] {
        files.flatMap { fileCompleted(job: job, file: $0.index, record: $0.record, url: $0.url) }
    }

    /// `finishJob` rolled these files back: each starts over (no URL, no
    /// chunk done), under the plan it is cut by.
    static func jobRolledBack(
        job: JobID, files: [(index: Int, record: FileRecord)], traits: BackendTraits
    ) -> (changes: [StateChange], rolledBack: [RolledBackFile]) {
        var changes: [StateChange] = []
        var rolledBack: [RolledBackFile] = []
        for (index, record) in files {
            var reset = record
            reset.url = nil
            let plan = reset.chunkPlan(traits)
            changes.append(.putFiles(job: job, files: [(index, reset)]))
            changes.append(.replaceDone(job: job, file: index, done: ChunkSet(capacity: plan.count), plan: plan, receipts: [:]))
            rolledBack.append(RolledBackFile(index: index, path: reset.path, chunks: plan.count))
        }
        return (changes, rolledBack)
    }
}

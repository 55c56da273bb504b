import FoundationEssentials
import XferPrimitives

/// One unit of work the scheduler hands out.
enum Work: Sendable, Hashable {
    case startJob
    /// Read a file's record and progress and open it (local, done at once by
    /// the runner; never counts against the job's concurrency).
    case loadFile(Int)
    case openFile(Int)
    /// Drop what the server holds of the file's earlier upload: the file
    /// changed since, and a new upload replaces it (a multipart upload left
    /// behind is billed until aborted).
    case dropUpload(Int)
    case reconcileFile(Int)
    case chunk(file: Int, chunk: Int)
    case finishFile(Int)
    case finishJob

    var file: Int? {
        switch self {
        case .loadFile(let index), .openFile(let index), .dropUpload(let index), .reconcileFile(let index), .finishFile(let index),
            .chunk(let index, _):
            return index
        case .startJob, .finishJob:
            return nil
        }
    }
}

/// A file as loading found it: its record, its acknowledged chunks (under
/// the record's plan), and what the local file looks like now.
struct LoadedFile: Sendable {
    var record: FileRecord
    var done: ChunkSet
    var identity: FileIdentity
}

/// How a piece of work ended. Results marked "committed" were made durable
/// by the worker before it reported them, as `StepRecords` says (so
/// concurrent workers share one transaction); the scheduler's `Effects`
/// carry everything else.
enum WorkResult: Sendable {
    /// Committed: the handles `startJob` gave for files, in their records.
    case started(JobStart?)
    /// The file, or why it cannot be sent (with its record, when the store has it).
    case loaded(file: Int, LoadedFile)
    case loadFailed(file: Int, record: FileRecord?, reason: String)
    /// Committed: the record with the server's handles.
    case opened(file: Int, FileRecord)
    /// Best effort, nothing committed: the earlier upload was asked to go.
    case uploadDropped(file: Int)
    /// nil: the backend trusts the state store for this file. An answer
    /// in parts arrives united, as `.serverHas`.
    case reconciled(file: Int, Reconciliation<Never>?)
    /// Committed.
    case chunkStored(file: Int, chunk: Int, bytes: Int)
    /// Committed, with the file's URL.
    case chunkStoredCompletingFile(file: Int, chunk: Int, bytes: Int, url: String)
    /// The server acknowledged the chunk; its records (`changes`) are not
    /// committed yet. `stored` (`.chunkStored` or `.chunkStoredCompletingFile`)
    /// is taken in once they are (`AnsweredChunk`).
    indirect case chunkAnswered(file: Int, chunk: Int, changes: [StateChange], stored: WorkResult)
    case chunkResync(file: Int, chunk: Int, next: Int)
    /// `.completed` is committed.
    case fileFinished(file: Int, FileFinish?)
    /// Committed: URLs of `.completed`, resets of `.rollback` (whose files'
    /// paths come along, for the error that ends the rounds).
    case jobFinished(JobFinish?, rolledBack: [RolledBackFile] = [])
    /// The server no longer knows the file's upload: it starts over (once a run).
    case uploadUnknown(file: Int, work: Work, message: String)
    /// A pulled object is another version than the file's record names (its
    /// validator changed, or the server would not answer the range asked for):
    /// the file starts over from the new version (once a run).
    case objectChanged(file: Int, work: Work, message: String)
    case outOfSync(file: Int, work: Work, message: String)
    /// The local file let the push down (unreadable, changed, vanished):
    /// that file fails, the others go on.
    case fileFailed(file: Int, work: Work, reason: String)
    /// The job cannot go on.
    case failed(Work, XferError)
}

/// A file a job-level rollback sent back (its record and progress reset).
struct RolledBackFile: Sendable, Hashable {
    var index: Int
    var path: String
    var chunks: Int
}

/// What the runner must do after the scheduler took in a result: commit
/// `changes` (then force them to disk when `sync`), emit `events`, and let
/// go of the local files in `released`. Nothing the scheduler hands out
/// afterwards may be started before `changes` are committed.
struct Effects: Sendable {
    var changes: [StateChange] = []
    var sync = false
    var events: [TransferEvent] = []
    var released: [Int] = []
    /// Answered chunks whose records the runner commits when it can, many in
    /// one transaction, and then feeds back their `stored` results. Unlike
    /// `changes`, nothing waits for them but the chunks themselves.
    var answers: [AnsweredChunk] = []
}

/// A chunk the server acknowledged, waiting for its records to be committed
/// before it counts as done (`Scheduler.apply(.chunkAnswered)`).
struct AnsweredChunk: Sendable {
    var changes: [StateChange]
    var stored: WorkResult
    /// Nothing but this chunk itself waits for its commit: its request's
    /// slot went to the next work at the answer (`Scheduler.answered`), and
    /// its file's next chunk does not wait for it (chunks in any order). Its
    /// commit may then wait for other answers (`Scheduler.commitsAnswers`),
    /// if it is small (`Configuration.smallRequestSize`).
    var mayWait: Bool
}

/// The scheduling logic of one run of a job, as a state machine: fed the
/// results of work, it hands out the next work and says what to persist.
/// It performs no I/O and never suspends, so it is unit-tested with
/// scripted results (Tests/XferTests/SchedulerTests.swift).
///
/// Cost: O(1) amortized per result and per piece of work handed out. Only
/// files in progress are held (at most about `Configuration.requestLimit`
/// of them: the concurrency, or the wider one for small requests); the
/// others stay in the store until their turn, reached through a cursor.
struct Scheduler {
    enum FilePhase: Equatable {
        case needsOpen, opening, needsReconcile, reconciling, sending, finishing
        /// Changed since its upload was opened: that upload is dropped first.
        case needsDrop, dropping
        /// The server forgot the upload; waiting for in-flight work to drain.
        case resetting
        /// The server holds another part of the file than a request assumed;
        /// waiting for in-flight work to drain, then reconciling.
        case resyncing
        /// Failed locally; waiting for in-flight work to drain.
        case failing
    }

    struct FileState {
        var record: FileRecord
        var phase: FilePhase
        var plan: ChunkPlan
        var done: ChunkSet
        var inFlight: Set<Int> = []
        var cursor = 0
        var finishRounds = 0
        var reopened = false
        /// Where the server's copy ends inside a chunk it holds the start of
        /// (`Reconciliation.serverHasPrefix`); that chunk is sent from there.
        var partial: (chunk: Int, offset: Int64)?
        var resyncs = 0
        var isQueued = false
        /// Chunks in flight above the small-request size (see `Configuration.smallRequestSize`).
        var largeInFlight: Set<Int> = []
        /// The other chunks in flight, with their lengths as handed out (a
        /// file cut anew meanwhile must not change what they count for).
        var smallInFlight: [Int: Int] = [:]
        /// Waiting for room: a large chunk's slot, or bytes of small ones (in `waitingForRoom`).
        var waitsForRoom = false
        /// Chunks in flight the server has acknowledged, whose records are
        /// being committed (see `Scheduler.answered`).
        var answered: Set<Int> = []
        var failure: String?
        /// Why the file is being reset (`reopen`), as the resend event says it.
        var resetReason: String?
        /// What the file looks like now, while its earlier upload (of other
        /// bytes, named by `record`'s handles) is being dropped.
        var changedTo: FileIdentity?
    }

    struct Configuration: Sendable {
        var traits: BackendTraits
        var concurrency: Int
        /// The chunk size the backend wants for a file of this size (a file
        /// that changed is cut anew).
        var chunkSize: @Sendable (Int64) -> Int
        /// The backend's chunk order once `startJob` has run.
        var chunkOrder: @Sendable (JobRecord) -> ChunkOrder
        /// The backend can drop one file's upload (`FileUploadCancelling`): a
        /// file that changed since its upload was opened has it dropped first.
        var dropsUploads = false
        /// Requests in flight when they are small: chunks of at most
        /// `smallRequestSize` bytes and the steps of files. Chunks above it
        /// stay within `concurrency`. Never below `concurrency`.
        var smallRequestConcurrency: Int? = nil
        /// The backend completes a file in a step of its own and can be
        /// asked what it holds of it (`BackendSteps.completesFilesAndReconciles`):
        /// a bare acknowledgement of a file's last chunk is then left to the
        /// completion's commit (see `terms(ofChunk:file:)`).
        var completesFilesAndReconciles = false

        /// The job pulls: a file reset because its object changed says so.
        var isDownload = false

        /// The steps beyond opening a file, sending its chunks and finishing
        /// it that this direction takes, resolved once for the run (as a
        /// backend's are, `BackendSteps`): the scheduler hands out no work
        /// nobody would do. A pull takes none of them: its object needs no
        /// job-wide start or end, and its ranges were durable before they
        /// were marked done, so there is nobody to ask what they hold.
        var startsJob = true
        var finishesJob = true
        var reconcilesFiles = true

        /// A chunk up to this size is a small request.
        static let smallRequestSize = 1 << 20
        /// The bytes small chunks in flight may carry together: requests of a
        /// few KiB go `smallRequestConcurrency` wide, fragments of 512 KiB or
        /// chunks of 1 MiB fewer. Each request in flight holds buffers of
        /// its own (a digest pass, curl's), and at 64 fragments of 512 KiB
        /// the client's peak RSS rose from 44 to 76 MiB; 16 MiB in flight is
        /// still 320 MB/s at a 50 ms round trip. A kill sends again at most this much.
        static let smallRequestBytes = 16 << 20

        var requestLimit: Int { max(concurrency, smallRequestConcurrency ?? concurrency) }
    }

    /// Reconciling again after `outOfSync` more often than this in one run fails the job.
    static let maximumResyncs = 8

    enum StepState { case needed, running, done }

    let configuration: Configuration
    private(set) var record: JobRecord
    private(set) var chunkOrder: ChunkOrder
    private(set) var fileCount: Int
    /// Network work in flight (loading is not counted), including `answered`.
    private(set) var inFlight = 0
    /// Chunks the server acknowledged whose records are being committed: their
    /// requests are over, so they no longer count against `requestLimit`, but
    /// they are not done (nor sent again) until the commit lands. While one
    /// transaction is written, the requests it frees go on, and the next one
    /// takes all of their answers: requests held until their own commit ended
    /// made a transaction (and an fdatasync) of about one 64 KiB chunk each.
    /// Requests and these together stay within twice `requestLimit`. Only
    /// chunks the next run would find on the server count here (see
    /// `apply(.chunkAnswered)`), so a kill still sends again at most what the
    /// requests in flight carry.
    private(set) var answered = 0
    /// Chunks in flight above `Configuration.smallRequestSize`: at most `concurrency`.
    private(set) var largeInFlight = 0
    /// Bytes of the small chunks in flight: at most `Configuration.smallRequestBytes`,
    /// unless one chunk alone is more.
    private(set) var smallBytesInFlight = 0
    /// Files whose next chunk waits for room (a large chunk's slot, or bytes of
    /// small ones); taken up again when a chunk settles.
    private var waitingForRoom = RingQueue<Int>()
    private(set) var files: [Int: FileState] = [:]
    /// Files that may have work, in turn; each appears at most once.
    private var ready = RingQueue<Int>()
    /// The next file not yet taken up by this run; files before it are
    /// active, done or failed.
    private var nextFile = 0
    /// Files to take up again before `nextFile` (a job-level rollback).
    private var reload = RingQueue<Int>()
    private var loading = false
    private var jobStart: StepState
    private var jobFinish: StepState
    private var jobFinishRounds = 0
    private(set) var settledFiles = 0
    private(set) var failedFiles = 0
    private(set) var firstFailure: (path: String, reason: String)?
    private(set) var doneBytes: Int64
    private(set) var totalBytes: Int64
    private(set) var acknowledgedThisRun: Int64 = 0

    /// A run over `record` whose store holds `counters`.
    init(record: JobRecord, counters: JobCounters, configuration: Configuration) {
        self.configuration = configuration
        self.record = record
        fileCount = counters.fileCount
        doneBytes = counters.doneBytes
        totalBytes = counters.totalBytes
        jobStart = record.isStarted || !configuration.startsJob ? .done : .needed
        jobFinish = configuration.finishesJob ? .needed : .done
        // (Asked again once `startJob` has run: no chunk is sent before.)
        chunkOrder = configuration.chunkOrder(record)
    }

    var traits: BackendTraits { configuration.traits }

    /// Every file settled, the job step done, nothing in flight.
    var isFinished: Bool {
        inFlight == 0 && files.isEmpty && nextFile >= fileCount && reload.isEmpty && !loading
            && (jobFinish == .done || failedFiles > 0)
    }

    /// Whether the runner writes the answers waiting for a transaction now
    /// (`waiting` of them, the first for `waited`; `someAwaited` when other
    /// work waits for one of them: see `AnsweredChunk.mayWait`) or lets more
    /// join them first. It writes one transaction at a time and asks again
    /// at every result (`SchedulerDriver`).
    ///
    /// A transaction costs about the same for one chunk as for eight: its
    /// pages are written and synced once (`fdatasync`, and the wake-ups of
    /// the store's thread). So answers nothing else waits for wait for
    /// `answerBatch` of them, or for as many as the requests still in flight
    /// could bring, whichever is fewer: never for an answer that cannot
    /// come, and with no request left not at all. Only their own chunks'
    /// `done` waits, and a kill meanwhile loses nothing (the next run finds
    /// those chunks on the server). Where answers come slowly (a slow link,
    /// a rate limit) nothing is saved by waiting, and progress would lag: a
    /// batch that has waited `answerWait` is written (the runner sets a timer
    /// to ask again, as no result may come for a while).
    func commitsAnswers(waiting: Int, someAwaited: Bool, waited: Duration) -> Bool {
        guard waiting > 0 else { return false }
        if someAwaited || waited >= Self.answerWait { return true }
        return waiting >= min(inFlight - answered, answerBatch)
    }

    /// How long answers wait for others at most (see `commitsAnswers`): at
    /// 8 chunks of 64 KiB in flight a batch fills in about 4 ms on loopback.
    static let answerWait = Duration.milliseconds(10)

    /// The answers a transaction waits for (see `commitsAnswers`): as many
    /// as requests may be in flight (half as many saved three quarters as
    /// much of the client's CPU, 64 KiB chunks at 8 in flight:
    /// Docs/benchmarks.md). A batch being written and the next one's
    /// answers stay within the `2 × requestLimit` that `next()` allows.
    var answerBatch: Int { configuration.requestLimit }

    // MARK: Choosing work

    /// The next work to start, or nil when nothing can start until a result
    /// comes in. `.loadFile` is for the runner to do at once.
    mutating func next() -> Work? {
        // Requests within the limit; with the answers awaiting their commit, within twice it.
        let limit = configuration.requestLimit
        guard !loading, inFlight - answered < limit, inFlight < 2 * limit else { return nil }
        switch jobStart {
        case .needed:
            jobStart = .running
            inFlight += 1
            return .startJob
        case .running:
            return nil
        case .done:
            break
        }
        // Files already taken up first, in turn; a file leaves the queue
        // when it has nothing to start, and comes back when a result changes it.
        while let index = ready.first {
            guard let work = nextWork(forFile: index) else {
                ready.removeFirst()
                if let slot = files.index(forKey: index) { files.values[slot].isQueued = false }
                continue
            }
            // Rotate, so the files in progress share the job's concurrency.
            ready.removeFirst()
            ready.append(index)
            inFlight += 1
            return work
        }
        // Nothing else to do: take up the next file.
        if let index = reload.first {
            reload.removeFirst()
            loading = true
            return .loadFile(index)
        }
        if nextFile < fileCount {
            loading = true
            defer { nextFile += 1 }
            return .loadFile(nextFile)
        }
        if files.isEmpty, inFlight == 0, failedFiles == 0, jobFinish == .needed {
            jobFinish = .running
            inFlight += 1
            return .finishJob
        }
        return nil
    }

    /// Takes the file's state out of the dictionary, changes it and puts it
    /// back: one owner while it changes, so copy-on-write copies none of its
    /// sets or its bitmap. Each `files[index]!.x = y` was a dictionary access
    /// of its own, whose accessor copies the whole state into a frame on the
    /// heap and back (`callgrind`: ~1,900 instructions each, issue 46). A
    /// change of one field goes through `files.values[slot]`, which yields the
    /// stored state itself.
    private mutating func nextWork(forFile index: Int) -> Work? {
        guard var file = files.removeValue(forKey: index) else { return nil }
        defer { files.updateValue(file, forKey: index) }
        return nextWork(for: &file, index)
    }

    private mutating func nextWork(for file: inout FileState, _ index: Int) -> Work? {
        switch file.phase {
        case .needsOpen:
            file.phase = .opening
            return .openFile(index)
        case .needsDrop:
            file.phase = .dropping
            return .dropUpload(index)
        case .needsReconcile:
            file.phase = .reconciling
            return .reconcileFile(index)
        case .sending:
            if let chunk = nextChunk(file) {
                let length = file.plan.length(of: chunk)
                let large = length > Configuration.smallRequestSize
                let full = large
                    ? largeInFlight >= configuration.concurrency
                    : smallBytesInFlight > 0 && smallBytesInFlight + length > Configuration.smallRequestBytes
                if full {
                    if !file.waitsForRoom {
                        file.waitsForRoom = true
                        waitingForRoom.append(index)
                    }
                    return nil
                }
                if large {
                    file.largeInFlight.insert(chunk)
                    largeInFlight += 1
                } else {
                    file.smallInFlight[chunk] = length
                    smallBytesInFlight += length
                }
                file.inFlight.insert(chunk)
                file.cursor = chunk + 1
                return .chunk(file: index, chunk: chunk)
            }
            if file.inFlight.isEmpty, file.done.count == file.plan.count {
                file.phase = .finishing
                return .finishFile(index)
            }
            return nil
        case .opening, .dropping, .reconciling, .finishing, .resetting, .resyncing, .failing:
            return nil
        }
    }

    private func nextChunk(_ file: FileState) -> Int? {
        switch chunkOrder {
        case .sequentialWithinFile:
            // One request of the file at a time. A chunk answered and not yet written down
            // (`answered`: only where the next run would ask the server and find it, see
            // `.chunkAnswered`) has had its answer: the next request may go while its
            // records are committed.
            guard file.inFlight.count == file.answered.count else { return nil }
            var candidate = file.done.firstMissing()
            while let chunk = candidate, file.answered.contains(chunk) {
                candidate = file.done.firstMissing(from: chunk + 1)
            }
            return candidate
        case .any:
            // The cursor only moves forward between resets, so the scan is amortized O(1) a chunk.
            var candidate = file.done.firstMissing(from: file.cursor)
            while let chunk = candidate, file.inFlight.contains(chunk) {
                candidate = file.done.firstMissing(from: chunk + 1)
            }
            return candidate
        }
    }

    private mutating func enqueue(_ index: Int) {
        // Read and set in one access to the stored state (a read through the getter copies it).
        guard let slot = files.index(forKey: index), !Self.exchange(&files.values[slot].isQueued, true) else { return }
        ready.append(index)
    }

    /// Sets `value` to `new`; returns what it was.
    private static func exchange<Value>(_ value: inout Value, _ new: Value) -> Value {
        defer { value = new }
        return value
    }

    // MARK: Taking in results

    /// Takes in `result`; throws when the job cannot go on.
    mutating func apply(_ result: WorkResult) throws(XferError) -> Effects {
        var effects = Effects()
        switch result {
        case .failed(let work, let error):
            if case .loadFile = work { loading = false } else { inFlight -= 1 }
            throw error

        case .started(let start):
            inFlight -= 1
            if let start { record.handles.merge(start.handles) }
            record.isStarted = true
            jobStart = .done
            chunkOrder = configuration.chunkOrder(record)
            effects.changes.append(.putJob(record))
            effects.sync = start != nil

        case .loaded(let index, let loaded):
            loading = false
            take(index, loaded, effects: &effects)

        case .loadFailed(let index, let stored, let reason):
            loading = false
            if let stored, stored.isComplete, stored.failure == nil {
                // Sent by an earlier run and gone (or unreadable) since: the copy
                // on the server is what a copy is for. Reported, not a failure.
                settledFiles += 1
                effects.events.append(.fileSkipped(path: stored.path, reason: .goneSinceSent(reason)))
                return effects
            }
            settle(index, failure: reason, effects: &effects, record: stored)

        case .opened(let index, let opened):
            inFlight -= 1
            // Out and back (see `nextWork(forFile:)`): one owner while it changes.
            guard var file = files.removeValue(forKey: index) else { break }
            if opened.chunkSize != file.record.chunkSize || opened.size != file.record.size {
                // The server chose another chunk size before any chunk, or (a download)
                // told the object's size: cut the file anew.
                totalBytes += opened.size - file.record.size
                doneBytes -= file.plan.bytes(of: file.done)
                file.plan = plan(opened)
                file.done = ChunkSet(capacity: file.plan.count)
            }
            file.record = opened
            file.phase = .sending
            file.cursor = 0
            files.updateValue(file, forKey: index)
            enqueue(index)

        case .uploadDropped(let index):
            inFlight -= 1
            guard var file = files[index], let now = file.changedTo else { break }
            file.changedTo = nil
            file.isQueued = false
            files[index] = nil
            // Its turn was taken by the drop: reset as any changed file, and opened anew.
            take(index, LoadedFile(record: file.record, done: file.done, identity: now), dropped: true, effects: &effects)

        case .reconciled(let index, let reconciliation):
            inFlight -= 1
            guard var file = files.removeValue(forKey: index) else { break }
            file.partial = nil
            file.cursor = 0
            files.updateValue(file, forKey: index)
            try reconcile(index, reconciliation, effects: &effects)

        case .chunkAnswered(let index, let chunk, let changes, let stored):
            // The request is over: its slot and its room go to the next work. The
            // chunk stays in flight for its file until `stored` comes back. Only
            // where a kill before the commit loses nothing: the next run asks the
            // server what it holds of the file's upload (a backend that reconciles,
            // and an upload its open step named) and finds the chunk there.
            // Elsewhere it would be sent again: multipart, sequence, a file created
            // whole by its one request, tus's partial uploads (the receipt names the
            // partial: lost, it is left on the server). Its request keeps its slot
            // until the commit, so a kill re-sends at most what the requests in
            // flight carry.
            let frees =
                configuration.reconcilesFiles && files[index]?.record.isOpen == true
                && files[index]?.record.handles.isEmpty == false
                && files[index]!.inFlight.contains(chunk) && files[index]!.answered.insert(chunk).inserted
            if frees {
                answered += 1
                releaseRoom(index, chunk)
                enqueue(index)
            }
            // Its commit may wait for others' (`commitsAnswers`) where nothing else waits
            // for it, and only for a small chunk: a large one takes far longer to send
            // than a transaction to write, and holding its `done` back for the next
            // answers would only make a slow link's progress jumpy.
            let small = (files[index]?.plan.length(of: chunk) ?? 0) <= Configuration.smallRequestSize
            effects.answers.append(
                AnsweredChunk(changes: changes, stored: stored, mayWait: frees && chunkOrder == .any && small))

        case .chunkStored(let index, let chunk, let bytes):
            inFlight -= 1
            committed(index, chunk)
            acknowledge(index, chunk, bytes, effects: &effects)
            try afterDrain(index, effects: &effects)

        case .chunkStoredCompletingFile(let index, let chunk, let bytes, let url):
            inFlight -= 1
            committed(index, chunk)
            files[index]?.record.url = url
            acknowledge(index, chunk, bytes, effects: &effects)
            try afterDrain(index, effects: &effects)

        case .chunkResync(let index, let chunk, let next):
            inFlight -= 1
            settle(index, chunk)
            guard var file = files[index] else { break }
            let count = file.plan.count
            guard next >= 0, next <= count else {
                throw .transferFailed("the server asked for chunk \(next + 1) of \(file.record.path), which has \(count)")
            }
            var done = ChunkSet(capacity: count)
            done.insertAll(below: next)
            effects.changes.append(.replaceDone(job: record.id, file: index, done: done, plan: file.plan, receipts: [:]))
            file.cursor = next
            files[index] = file
            setDone(index, done)
            try afterDrain(index, effects: &effects)

        case .fileFinished(let index, let finish):
            inFlight -= 1
            guard var file = files[index] else { break }
            switch finish {
            case nil:
                files[index] = file
                complete(index, effects: &effects)
            case .completed(let completion)?:
                file.record.url = completion.url
                files[index] = file
                complete(index, effects: &effects)
            case .missing(let chunks)?:
                file.finishRounds += 1
                guard file.finishRounds < traits.maximumFinishRounds else {
                    throw .transferFailed(
                        "the server still lacks chunks of \(file.record.path) after \(traits.maximumFinishRounds) rounds of re-sending")
                }
                let valid = chunks.filter { $0 >= 0 && $0 < file.plan.count }
                guard !valid.isEmpty else {
                    throw .transferFailed("the server reports \(file.record.path) incomplete but names no chunk it lacks")
                }
                effects.changes.append(.markNotDone(job: record.id, file: index, chunks: valid, plan: file.plan))
                var done = file.done
                for chunk in valid { done.remove(chunk) }
                file.phase = .sending
                file.cursor = 0
                files[index] = file
                setDone(index, done)
                effects.events.append(.resending(file: index, chunks: valid.count, reason: "the server lacks them"))
                enqueue(index)
            }

        case .jobFinished(let finish, let rolledBack):
            inFlight -= 1
            switch finish {
            case nil, .completed?:
                jobFinish = .done
            case .rollback(let failed)?:
                jobFinishRounds += 1
                guard jobFinishRounds < traits.maximumFinishRounds else {
                    let shown = rolledBack.prefix(5).map(\.path).joined(separator: ", ")
                    let more = rolledBack.count > 5 ? " and \(rolledBack.count - 5) more" : ""
                    throw .transferFailed(
                        "the server failed to assemble \(shown.isEmpty ? "\(failed.count) files" : shown + more) in \(traits.maximumFinishRounds) rounds")
                }
                // The worker reset their records and progress; take them up again.
                for file in rolledBack where file.index >= 0 && file.index < fileCount {
                    reload.append(file.index)
                    settledFiles -= 1
                    effects.events.append(.resending(file: file.index, chunks: file.chunks, reason: "the server failed to assemble it"))
                }
                jobFinish = .needed
            }

        case .uploadUnknown(let index, let work, let message), .objectChanged(let index, let work, let message):
            inFlight -= 1
            if case .chunk(_, let chunk) = work { settle(index, chunk) }
            try reopen(index, message: message, effects: &effects)

        case .outOfSync(let index, let work, let message):
            inFlight -= 1
            if case .chunk(_, let chunk) = work { settle(index, chunk) }
            guard var file = files[index] else { break }
            file.resyncs += 1
            guard file.resyncs <= Self.maximumResyncs else {
                throw .transferFailed("\(message) (still after asking the server \(Self.maximumResyncs) times)")
            }
            if file.phase != .resetting, file.phase != .failing { file.phase = .resyncing }
            files[index] = file
            try afterDrain(index, effects: &effects)

        case .fileFailed(let index, let work, let reason):
            inFlight -= 1
            if case .chunk(_, let chunk) = work { settle(index, chunk) }
            guard var file = files[index] else { break }
            if file.failure == nil { file.failure = reason }
            file.phase = .failing
            files[index] = file
            try afterDrain(index, effects: &effects)
        }
        return effects
    }

    // MARK: Files

    private func plan(_ record: FileRecord) -> ChunkPlan {
        record.chunkPlan(traits)
    }

    /// Takes up a loaded file: done already, changed since, or on its way.
    private mutating func take(_ index: Int, _ loaded: LoadedFile, dropped: Bool = false, effects: inout Effects) {
        var record = loaded.record
        var plan = plan(record)
        var done = loaded.done
        var changed = false
        if record.isComplete, done.count == plan.count, record.identity == loaded.identity {
            // Sent by an earlier run (or a run before a rollback's reload found it intact).
            settledFiles += 1
            effects.released.append(index)
            return
        }
        if record.identity != loaded.identity, record.isOpen, configuration.dropsUploads, !dropped {
            // The file changed since its upload was opened: that upload holds other
            // bytes and would be left on the server. It is dropped first; its record
            // (old identity, old handles) is reset only then, so a run killed before
            // the drop drops it again.
            files[index] = FileState(record: record, phase: .needsDrop, plan: plan, done: done, changedTo: loaded.identity)
            enqueue(index)
            return
        }
        if record.identity != loaded.identity {
            // The file changed since the job took it: whatever the server holds of
            // it is of other bytes. Send it again from the start, as it is now.
            let hadProgress = record.isOpen || done.count > 0 || record.isComplete
            doneBytes -= plan.bytes(of: done)
            totalBytes += loaded.identity.size - record.identity.size
            record.identity = loaded.identity
            record.chunkSize = max(1, configuration.chunkSize(loaded.identity.size))
            record.url = nil
            // Handles from `startJob` name the file, not an upload of its old bytes: they stay.
            if record.isOpen { record.handles = handlesAfterReset(record.handles) }
            // A CRC a sync read while planning is of the bytes before the change.
            record.handles.remove(SyncHandles.crc32c)
            record.isOpen = false
            plan = self.plan(record)
            done = ChunkSet(capacity: plan.count)
            effects.changes.append(.replaceDone(job: self.record.id, file: index, done: done, plan: plan, receipts: [:]))
            if hadProgress {
                let reason = configuration.isDownload ? "its partial file is gone or was replaced" : "it changed since the last run"
                effects.events.append(.resending(file: index, chunks: plan.count, reason: reason))
            }
            changed = true
        }
        if record.failure != nil {
            record.failure = nil
            changed = true
        }
        if record.url != nil, done.count != plan.count {
            // A URL without every chunk is not a completion: finish the file again.
            record.url = nil
            changed = true
        }
        if changed { effects.changes.append(.putFiles(job: self.record.id, files: [(index, record)])) }
        files[index] = FileState(record: record, phase: .needsOpen, plan: plan, done: done)
        if record.isOpen { needsReconcile(index) }
        enqueue(index)
    }

    private mutating func reconcile(_ index: Int, _ reconciliation: Reconciliation<Never>?, effects: inout Effects) throws(XferError) {
        guard var file = files[index] else { return }
        let plan = file.plan
        switch reconciliation {
        case nil:
            file.phase = .sending
            files[index] = file
        case .serverHas(let chunks, let receipts)?, .serverHasMore(let chunks, let receipts, _)?:
            // (The worker unites the parts of an answer; a part cannot arrive here alone.)
            var done = ChunkSet(capacity: plan.count)
            for chunk in chunks where chunk >= 0 && chunk < done.capacity { done.insert(chunk) }
            effects.changes.append(.replaceDone(job: record.id, file: index, done: done, plan: plan, receipts: receipts))
            file.phase = .sending
            files[index] = file
            setDone(index, done)
            effects.events.append(.reconciled(file: index, chunksOnServer: done.count, doneBytes: doneBytes))
        case .complete(let url)?:
            var done = ChunkSet(capacity: plan.count)
            done.insertAll(below: plan.count)
            file.record.url = url
            files[index] = file
            effects.changes.append(.replaceDone(job: record.id, file: index, done: done, plan: plan, receipts: [:]))
            effects.changes.append(.putFiles(job: record.id, files: [(index, file.record)]))
            setDone(index, done)
            complete(index, effects: &effects)
            return
        case .serverHasPrefix(let bytes)?:
            guard bytes >= 0, bytes <= file.record.size else {
                throw .transferFailed("the server reports \(bytes) bytes of \(file.record.path), which has \(file.record.size)")
            }
            var done = ChunkSet(capacity: plan.count)
            var chunk = 0
            while chunk < plan.count, plan.offset(of: chunk) + Int64(plan.length(of: chunk)) <= bytes { chunk += 1 }
            done.insertAll(below: chunk)
            if chunk < plan.count, bytes > plan.offset(of: chunk) { file.partial = (chunk, bytes) }
            effects.changes.append(.replaceDone(job: record.id, file: index, done: done, plan: plan, receipts: [:]))
            file.phase = .sending
            files[index] = file
            setDone(index, done)
            effects.events.append(.reconciled(file: index, chunksOnServer: done.count, doneBytes: doneBytes))
        }
        enqueue(index)
    }

    /// What a file waiting for its requests to drain does once they have.
    private mutating func afterDrain(_ index: Int, effects: inout Effects) throws(XferError) {
        guard let file = files[index] else { return }
        switch file.phase {
        case .resyncing where file.inFlight.isEmpty:
            needsReconcile(index)
        case .resetting where file.inFlight.isEmpty:
            finishReset(index, effects: &effects)
        case .failing where file.inFlight.isEmpty:
            settle(index, failure: file.failure ?? "failed", effects: &effects, record: file.record)
            return
        default:
            break
        }
        // A chunk that completed the file (its answer carried the URL) ends it.
        if let file = files[index], file.phase == .sending, file.inFlight.isEmpty, file.record.url != nil,
            file.done.count == file.plan.count
        {
            complete(index, effects: &effects)
            return
        }
        enqueue(index)
    }

    /// An open file's progress is to be reconciled with the other side, or,
    /// for a direction that never asks (`Configuration.reconcilesFiles`),
    /// taken as the store has it: what an empty answer would do.
    private mutating func needsReconcile(_ index: Int) {
        guard configuration.reconcilesFiles else {
            files[index]?.partial = nil
            files[index]?.cursor = 0
            files[index]?.phase = .sending
            return
        }
        files[index]?.phase = .needsReconcile
    }

    /// The server forgot a file's upload: once nothing of the file is in
    /// flight, clear its handles and progress and open it again (once per run).
    private mutating func reopen(_ index: Int, message: String, effects: inout Effects) throws(XferError) {
        guard var file = files[index] else { return }
        if file.phase == .resetting {
            // Another request of the file in flight learnt the same: the reset under way covers it.
            try afterDrain(index, effects: &effects)
            return
        }
        guard !file.reopened else {
            throw .transferFailed("\(message) (again after opening it anew)", remedy: .startOver)
        }
        file.reopened = true
        file.resetReason = message
        file.phase = .resetting
        files[index] = file
        try afterDrain(index, effects: &effects)
    }

    /// What a file keeps of its handles when it starts over: an upload's
    /// name an upload that is gone; a download keeps where its object is
    /// (what else it knew, the validator and digests, were of another version).
    private func handlesAfterReset(_ handles: ServerHandles) -> ServerHandles {
        // What a sync planned (the write's condition) still holds; the CRC read
        // while planning is of the bytes that changed since, so it goes.
        var kept = handles.values.filter { SyncHandles.isPlanned($0.key) && $0.key != SyncHandles.crc32c.name }
        if configuration.isDownload, let location = handles[DownloadHandles.location] { kept[DownloadHandles.location] = location }
        return ServerHandles(kept)
    }

    private mutating func finishReset(_ index: Int, effects: inout Effects) {
        guard var file = files[index] else { return }
        file.record.isOpen = false
        file.record.url = nil
        file.record.handles = handlesAfterReset(file.record.handles)
        let empty = ChunkSet(capacity: file.plan.count)
        effects.changes.append(.replaceDone(job: record.id, file: index, done: empty, plan: file.plan, receipts: [:]))
        effects.changes.append(.putFiles(job: record.id, files: [(index, file.record)]))
        effects.events.append(
            .resending(file: index, chunks: file.plan.count, reason: configuration.isDownload ? file.resetReason ?? "it changed" : "the server forgot the upload"))
        file.phase = .needsOpen
        files[index] = file
        setDone(index, empty)
    }

    /// Chunk `chunk` of file `index` is no longer in flight; a large one's
    /// slot goes to the files waiting for one.
    private mutating func settle(_ index: Int, _ chunk: Int) {
        // In place (see `nextWork(forFile:)`): this runs once per chunk.
        guard let slot = files.index(forKey: index), files.values[slot].inFlight.remove(chunk) != nil else { return }
        releaseRoom(index, chunk)
    }

    /// An answered chunk's records were committed: it no longer counts as answered.
    private mutating func committed(_ index: Int, _ chunk: Int) {
        guard let slot = files.index(forKey: index) else { return }
        if files.values[slot].answered.remove(chunk) != nil { answered -= 1 }
    }

    /// The room a chunk's request took (a large chunk's slot, or its bytes
    /// among the small ones) goes back, once: at its answer or as it settles.
    private mutating func releaseRoom(_ index: Int, _ chunk: Int) {
        let slot = files.index(forKey: index)!
        if files.values[slot].largeInFlight.remove(chunk) != nil {
            largeInFlight -= 1
        } else if let length = files.values[slot].smallInFlight.removeValue(forKey: chunk) {
            smallBytesInFlight -= length
        }
        while let waiting = waitingForRoom.first {
            waitingForRoom.removeFirst()
            guard let slot = files.index(forKey: waiting), Self.exchange(&files.values[slot].waitsForRoom, false) else { continue }
            enqueue(waiting)
        }
    }

    /// The chunk is stored: false when it was already. Changes the state where it lies.
    private static func markStored(_ chunk: Int, in file: inout FileState) -> Bool {
        if file.partial?.chunk == chunk { file.partial = nil }
        guard !file.done.contains(chunk) else { return false }
        file.done.insert(chunk)
        return true
    }

    private mutating func acknowledge(_ index: Int, _ chunk: Int, _ bytes: Int, effects: inout Effects) {
        guard files.index(forKey: index) != nil else { return }
        settle(index, chunk)
        // Looked up again: an index of a dictionary is not promised to outlive a change of it.
        guard Self.markStored(chunk, in: &files.values[files.index(forKey: index)!]) else { return }
        doneBytes += Int64(bytes)
        acknowledgedThisRun += Int64(bytes)
        effects.events.append(.chunkStored(file: index, chunk: chunk, bytes: bytes, doneBytes: doneBytes, totalBytes: totalBytes))
    }

    private mutating func setDone(_ index: Int, _ done: ChunkSet) {
        guard let plan = files[index]?.plan, let old = files[index]?.done else { return }
        doneBytes += plan.bytes(of: done) - plan.bytes(of: old)
        files[index]!.done = done
    }

    /// A file is on the server: it leaves the run.
    private mutating func complete(_ index: Int, effects: inout Effects) {
        guard let file = files.removeValue(forKey: index) else { return }
        settledFiles += 1
        effects.released.append(index)
        if let url = file.record.url {
            effects.events.append(.fileCompleted(file: index, path: file.record.path, url: url))
        }
    }

    /// A file failed locally (or could not be loaded): it leaves the run,
    /// marked failed so the next run takes it up again.
    private mutating func settle(_ index: Int, failure: String, effects: inout Effects, record failedRecord: FileRecord?) {
        let removed = files.removeValue(forKey: index)
        if let removed {
            // Its chunks still in flight will find no file: they stop counting now.
            largeInFlight -= removed.largeInFlight.count
            smallBytesInFlight -= removed.smallInFlight.values.reduce(0, +)
            answered -= removed.answered.count
        }
        settledFiles += 1
        failedFiles += 1
        if removed != nil { effects.released.append(index) }
        let path = failedRecord?.path ?? "file \(index + 1)"
        if firstFailure == nil { firstFailure = (path, failure) }
        if var stored = failedRecord {
            stored.failure = failure
            effects.changes.append(.putFiles(job: record.id, files: [(index, stored)]))
        }
        effects.events.append(.fileFailed(file: index, path: path, reason: failure))
    }

    // MARK: For the runner

    /// The file's state, for building its work.
    func file(_ index: Int) -> FileState? { files[index] }

    /// How a chunk just handed out is sent and saved.
    struct ChunkTerms: Equatable {
        /// Where to start when the server holds the chunk's beginning (else its start).
        var start: Int64?
        /// Whether the worker commits a bare acknowledgement. Not for the
        /// file's last missing chunk when the backend completes files and
        /// reconciles: the completion's commit, moments later, says every
        /// chunk is done, and a run killed in between asks the server (which
        /// answers that it holds the chunk) instead of sending it again; for a
        /// file where the backend skips the question, it re-sends that one
        /// chunk, which was in flight. One transaction (and one fdatasync)
        /// fewer per small file.
        var commitsAcknowledgement: Bool
    }

    /// The terms of `chunk` of file `index`, handed out by `next()` and in flight.
    func terms(ofChunk chunk: Int, file index: Int) -> ChunkTerms {
        guard let file = files[index] else { return ChunkTerms(start: nil, commitsAcknowledgement: true) }
        let isLastMissing = file.inFlight.count == 1 && file.done.count == file.plan.count - 1
        return ChunkTerms(
            start: file.partial.flatMap { $0.chunk == chunk ? $0.offset : nil },
            commitsAcknowledgement: !isLastMissing || !configuration.completesFilesAndReconciles)
    }

    /// Marks the job record as it ends, for the runner to commit.
    mutating func endRecord(phase: JobPhase, error: String?, at date: Date) -> JobRecord {
        record.phase = phase
        record.lastError = error
        record.updatedAt = date
        return record
    }

    /// Stamps the header's time (the runner does so before committing it).
    mutating func touch(_ date: Date) { record.updatedAt = date }
}


/// A first-in first-out queue with O(1) amortized operations at both ends
/// it needs (append at the back, remove at the front).
struct RingQueue<Element> {
    private var storage: [Element?] = []
    private var head = 0

    var isEmpty: Bool { head == storage.count }
    var count: Int { storage.count - head }
    var first: Element? { isEmpty ? nil : storage[head] }

    mutating func append(_ element: Element) { storage.append(element) }

    mutating func removeFirst() {
        guard !isEmpty else { return }
        storage[head] = nil
        head += 1
        // Compact once the dead prefix is half the storage: amortized O(1).
        if head > 32, head * 2 >= storage.count {
            storage.removeFirst(head)
            head = 0
        }
    }
}

import Foundation
import XCTest

@testable import Xfer

/// The scheduler as the state machine it is: scripted results in, work and
/// effects out, no network, no store, no files.
final class SchedulerTests: XCTestCase {
    private let id = JobID(rawValue: "00000000000000ab")
    /// What an open step names for a file the server can be asked about.
    private let upload: ServerHandles = [HandleKey("url"): "http://127.0.0.1:1/uploads/1"]

    private func identity(_ size: Int64, time: Int64 = 1) -> FileIdentity {
        FileIdentity(size: size, modificationTimeNanoseconds: time, inode: 7, device: 1)
    }

    private func fileRecord(_ index: Int, size: Int64 = 25, chunkSize: Int = 10) -> FileRecord {
        FileRecord(
            path: "/data/f\(index)", relativePath: "f\(index)", root: 0, identity: identity(size), chunkSize: chunkSize)
    }

    private func scheduler(
        files: Int, size: Int64 = 25, concurrency: Int = 2, started: Bool = true,
        order: ChunkOrder = .any, emptyFileHasOneChunk: Bool = false, doneBytes: Int64 = 0, dropsUploads: Bool = false,
        smallRequestConcurrency: Int? = nil, completesFilesAndReconciles: Bool = false, pull: Bool = false
    ) -> Scheduler {
        var record = JobRecord(
            id: id, backend: "test", target: "http://127.0.0.1:1", createdAt: Date(), updatedAt: Date(),
            concurrency: concurrency, rootCount: 1, firstRoot: "/data")
        record.isStarted = started
        var counters = JobCounters()
        counters.fileCount = files
        counters.totalBytes = Int64(files) * size
        counters.doneBytes = doneBytes
        let traits = BackendTraits(
            defaultChunkSize: 10, defaultConcurrency: concurrency, authentication: .authorizationHeader,
            emptyFileHasOneChunk: emptyFileHasOneChunk)
        return Scheduler(
            record: record, counters: counters,
            configuration: Scheduler.Configuration(
                traits: traits, concurrency: concurrency, chunkSize: { _ in 10 }, chunkOrder: { _ in order },
                dropsUploads: dropsUploads, smallRequestConcurrency: smallRequestConcurrency,
                completesFilesAndReconciles: completesFilesAndReconciles,
                // A pull's terms, as `DownloadSteps.configuration` gives them.
                isDownload: pull, startsJob: !pull, finishesJob: !pull, reconcilesFiles: !pull))
    }

    /// Loads and opens file 0 of `s`. `withAnUpload`: its open step names an upload the server can
    /// be asked about; else it names none (skipped: a file created by its one request, tus's
    /// partial uploads, a sequence's blocks).
    private func open(_ s: inout Scheduler, size: Int64, withAnUpload: Bool = true) throws {
        XCTAssertEqual(s.next(), .loadFile(0))
        _ = try s.apply(.loaded(file: 0, loaded(fileRecord(0, size: size))))
        XCTAssertEqual(s.next(), .openFile(0))
        var record = s.file(0)!.record
        record.isOpen = true
        if withAnUpload { record.handles = upload }
        _ = try s.apply(.opened(file: 0, record))
    }

    private func loaded(_ record: FileRecord, done: [Int] = [], now: FileIdentity? = nil, capacity: Int? = nil) -> LoadedFile {
        let plan = ChunkPlan(fileSize: record.size, chunkSize: record.chunkSize)
        var set = ChunkSet(capacity: capacity ?? plan.count)
        for chunk in done { set.insert(chunk) }
        return LoadedFile(record: record, done: set, identity: now ?? record.identity)
    }

    /// Plays a server that answers every request at once, in the order
    /// started (FIFO), until the scheduler has nothing left; returns the
    /// work seen. `answer` may script special answers.
    @discardableResult
    private func drive(
        _ scheduler: inout Scheduler, records: (Int) -> FileRecord, done: (Int) -> [Int] = { _ in [] },
        maximumHeld: inout Int, answer: (Work, inout Scheduler) -> WorkResult? = { _, _ in nil }
    ) throws -> [Work] {
        var seen: [Work] = []
        var pending: [Work] = []
        var guardCount = 0
        while true {
            guardCount += 1
            XCTAssertLessThan(guardCount, 1_000_000, "the scheduler does not converge")
            if guardCount > 1_000_000 { break }
            if let work = scheduler.next() {
                seen.append(work)
                if case .loadFile(let index) = work {
                    _ = try scheduler.apply(.loaded(file: index, loaded(records(index), done: done(index))))
                    maximumHeld = max(maximumHeld, scheduler.files.count)
                } else {
                    pending.append(work)
                }
                continue
            }
            guard !pending.isEmpty else { break }
            let work = pending.removeFirst()
            let result = answer(work, &scheduler) ?? perfectAnswer(work, scheduler)
            _ = try scheduler.apply(result)
        }
        return seen
    }

    private func perfectAnswer(_ work: Work, _ scheduler: Scheduler) -> WorkResult {
        switch work {
        case .startJob: return .started(nil)
        case .openFile(let index):
            var record = scheduler.file(index)!.record
            record.isOpen = true
            return .opened(file: index, record)
        case .reconcileFile(let index): return .reconciled(file: index, nil)
        case .dropUpload(let index): return .uploadDropped(file: index)
        case .chunk(let index, let chunk):
            return .chunkStored(file: index, chunk: chunk, bytes: scheduler.file(index)!.plan.length(of: chunk))
        case .finishFile(let index): return .fileFinished(file: index, .completed(url: "u\(index)"))
        case .finishJob: return .jobFinished(nil)
        case .loadFile: fatalError("loaded inline")
        }
    }

    // MARK: Tests

    /// A pull's steps are opening a file, its ranges and finishing it: the
    /// scheduler hands out no job-wide step, no reconciliation (a range was
    /// durable before it was marked done) and no drop, and still ends; a
    /// file in progress goes on from its missing ranges.
    func testPullIsHandedOnlyItsOwnSteps() throws {
        var s = scheduler(files: 2, started: false, doneBytes: 10, pull: true)
        var held = 0
        var open = fileRecord(1)
        open.isOpen = true
        let seen = try drive(
            &s, records: { $0 == 1 ? open : self.fileRecord($0) }, done: { $0 == 1 ? [0] : [] }, maximumHeld: &held)
        for work in seen {
            switch work {
            case .startJob, .finishJob, .reconcileFile, .dropUpload: XCTFail("a pull was handed \(work)")
            case .loadFile, .openFile, .chunk, .finishFile: break
            }
        }
        XCTAssertEqual(seen.filter { $0.file == 0 }, [.loadFile(0), .openFile(0), .chunk(file: 0, chunk: 0), .chunk(file: 0, chunk: 1), .chunk(file: 0, chunk: 2), .finishFile(0)])
        XCTAssertEqual(seen.filter { $0.file == 1 }, [.loadFile(1), .chunk(file: 1, chunk: 1), .chunk(file: 1, chunk: 2), .finishFile(1)])
        XCTAssertTrue(s.isFinished)
        XCTAssertEqual(s.doneBytes, 50)
    }

    /// An object that changed under a pull has its file start over, opened
    /// anew (the new version described), once a run, saying why.
    func testPulledObjectThatChangedStartsItsFileOver() throws {
        var s = scheduler(files: 1, pull: true)
        var held = 0
        var changes = 0
        let seen = try drive(&s, records: { self.fileRecord($0) }, maximumHeld: &held) { work, _ in
            guard case .chunk(0, 1) = work, changes == 0 else { return nil }
            changes += 1
            return .objectChanged(file: 0, work: work, message: "s3://b/k changed on the server")
        }
        XCTAssertEqual(seen.filter { $0 == .openFile(0) }.count, 2, "the file is opened anew")
        XCTAssertTrue(s.isFinished)
        XCTAssertEqual(s.doneBytes, 25)
        // A second change in the same run fails the job instead of looping.
        var t = scheduler(files: 1, pull: true)
        XCTAssertThrowsError(
            try drive(&t, records: { self.fileRecord($0) }, maximumHeld: &held) { work, _ in
                guard case .chunk = work else { return nil }
                return .objectChanged(file: 0, work: work, message: "s3://b/k changed on the server")
            })
    }

    /// A chunk the server acknowledged frees its request's slot at once, but
    /// counts as done only when its records come back committed: meanwhile it
    /// is neither sent again nor lets its file finish, and no more chunks
    /// wait uncommitted than the job has requests.
    func testAnAnsweredChunkFreesItsSlotButIsDoneOnlyOnceCommitted() throws {
        var s = scheduler(files: 1, size: 40, concurrency: 1)
        try open(&s, size: 40)
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 0))
        XCTAssertNil(s.next(), "one request at a time")
        let change = StateChange.putJob(s.record)
        let stored0 = WorkResult.chunkStored(file: 0, chunk: 0, bytes: 10)
        let effects = try s.apply(.chunkAnswered(file: 0, chunk: 0, changes: [change], stored: stored0))
        XCTAssertEqual(effects.answers.count, 1, "the runner is handed the records to commit")
        XCTAssertTrue(effects.events.isEmpty, "nothing is reported before the commit")
        XCTAssertEqual(s.doneBytes, 0)
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 1), "the answered request's slot goes to the next chunk")
        XCTAssertNil(s.next(), "a request and an answer awaiting its commit: twice the limit of one")
        // Chunk 1 is answered too while chunk 0's commit is written: neither is done, neither is sent again.
        _ = try s.apply(.chunkAnswered(file: 0, chunk: 1, changes: [change], stored: .chunkStored(file: 0, chunk: 1, bytes: 10)))
        XCTAssertNil(s.next(), "requests and uncommitted answers stay within twice the limit")
        _ = try s.apply(stored0)
        XCTAssertEqual(s.doneBytes, 10)
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 2))
        _ = try s.apply(.chunkStored(file: 0, chunk: 1, bytes: 10))
        _ = try s.apply(.chunkStored(file: 0, chunk: 2, bytes: 10))
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 3))
        _ = try s.apply(.chunkAnswered(file: 0, chunk: 3, changes: [change], stored: .chunkStored(file: 0, chunk: 3, bytes: 10)))
        XCTAssertNil(s.next(), "the file is not finished while its last chunk's commit is written")
        _ = try s.apply(.chunkStored(file: 0, chunk: 3, bytes: 10))
        XCTAssertEqual(s.next(), .finishFile(0))
        _ = try s.apply(.fileFinished(file: 0, .completed(url: "u0")))
        XCTAssertEqual(s.next(), .finishJob)
        _ = try s.apply(.jobFinished(nil))
        XCTAssertTrue(s.isFinished)
        XCTAssertEqual(s.doneBytes, 40)
        XCTAssertEqual(s.answered, 0)
    }

    /// Answers nothing else waits for are written together: a transaction
    /// waits for as many answers as requests may be in flight, or for all
    /// the requests still out, never for an answer that cannot come. An
    /// answer something waits for (its request's slot, or its file's next
    /// chunk in a sequential order), or a large chunk's, is written at once.
    func testAnswersWaitForOthersOnlyWhileMoreCanCome() throws {
        var s = scheduler(files: 1, size: 100, concurrency: 4)
        try open(&s, size: 100)
        for chunk in 0..<4 { XCTAssertEqual(s.next(), .chunk(file: 0, chunk: chunk)) }
        XCTAssertEqual(s.answerBatch, 4)
        var waiting: [AnsweredChunk] = []
        for chunk in 0..<3 {
            let effects = try s.apply(
                .chunkAnswered(file: 0, chunk: chunk, changes: [], stored: .chunkStored(file: 0, chunk: chunk, bytes: 10)))
            XCTAssertEqual(effects.answers.map(\.mayWait), [true])
            waiting += effects.answers
            // As the runner asks: once the freed slot has gone to the next work.
            XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 4 + chunk), "the answer's slot goes on")
            XCTAssertFalse(s.commitsAnswers(waiting: waiting.count, someAwaited: false, waited: .zero), "\(waiting.count) answers, 4 requests out")
        }
        waiting += try s.apply(.chunkAnswered(file: 0, chunk: 3, changes: [], stored: .chunkStored(file: 0, chunk: 3, bytes: 10))).answers
        XCTAssertTrue(s.commitsAnswers(waiting: waiting.count, someAwaited: false, waited: .zero), "a batch of the request limit")
        XCTAssertFalse(s.commitsAnswers(waiting: 0, someAwaited: false, waited: .zero), "nothing to write")
        XCTAssertTrue(s.commitsAnswers(waiting: 1, someAwaited: true, waited: .zero), "something waits for it")
        XCTAssertTrue(s.commitsAnswers(waiting: 1, someAwaited: false, waited: Scheduler.answerWait), "answers come slowly")
        // The batch is written (its chunks stored); the last requests come back: with none left out, one answer is written alone.
        for chunk in 0..<4 { _ = try s.apply(.chunkStored(file: 0, chunk: chunk, bytes: 10)) }
        for chunk in 4..<7 { _ = try s.apply(.chunkStored(file: 0, chunk: chunk, bytes: 10)) }
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 7))
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 8))
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 9))
        XCTAssertNil(s.next())
        _ = try s.apply(.chunkStored(file: 0, chunk: 8, bytes: 10))
        _ = try s.apply(.chunkStored(file: 0, chunk: 9, bytes: 10))
        let last = try s.apply(.chunkAnswered(file: 0, chunk: 7, changes: [], stored: .chunkStored(file: 0, chunk: 7, bytes: 10)))
        XCTAssertTrue(s.commitsAnswers(waiting: last.answers.count, someAwaited: false, waited: .zero), "no request left to bring another answer")

        // In a sequential order the file's next chunk waits for the commit: it is not held back.
        var ordered = scheduler(files: 1, size: 100, concurrency: 4, order: .sequentialWithinFile)
        XCTAssertEqual(ordered.next(), .loadFile(0))
        _ = try ordered.apply(.loaded(file: 0, loaded({ var r = fileRecord(0, size: 100); r.isOpen = true; r.handles = upload; return r }())))
        XCTAssertEqual(ordered.next(), .reconcileFile(0))
        _ = try ordered.apply(.reconciled(file: 0, nil))
        XCTAssertEqual(ordered.next(), .chunk(file: 0, chunk: 0))
        let answer = try ordered.apply(.chunkAnswered(file: 0, chunk: 0, changes: [], stored: .chunkStored(file: 0, chunk: 0, bytes: 10)))
        XCTAssertEqual(answer.answers.map(\.mayWait), [false])

        // A large chunk's answer is written at once: its request took far longer than the transaction.
        let mib = 1 << 20
        var large = scheduler(files: 1, size: Int64(4 * mib), concurrency: 4)
        XCTAssertEqual(large.next(), .loadFile(0))
        _ = try large.apply(
            .loaded(file: 0, loaded({ var r = fileRecord(0, size: Int64(4 * mib), chunkSize: 2 * mib); r.isOpen = true; r.handles = upload; return r }())))
        XCTAssertEqual(large.next(), .reconcileFile(0))
        _ = try large.apply(.reconciled(file: 0, nil))
        XCTAssertEqual(large.next(), .chunk(file: 0, chunk: 0))
        let big = try large.apply(.chunkAnswered(file: 0, chunk: 0, changes: [], stored: .chunkStored(file: 0, chunk: 0, bytes: 2 * mib)))
        XCTAssertEqual(big.answers.map(\.mayWait), [false])
        XCTAssertEqual(large.answered, 1, "its slot went on all the same")
    }

    /// Where the next run could not find an answered chunk on the server (a
    /// backend that does not reconcile, or a file not opened: created whole in
    /// one request), its request keeps its slot until the commit, so a kill
    /// sends again no more than the requests in flight.
    func testAnAnsweredChunkTheServerCannotBeAskedAboutKeepsItsSlot() throws {
        var s = scheduler(files: 1, size: 40, concurrency: 1, pull: false)
        XCTAssertEqual(s.next(), .loadFile(0))
        _ = try s.apply(.loaded(file: 0, loaded(fileRecord(0, size: 40))))
        XCTAssertEqual(s.next(), .openFile(0))
        _ = try s.apply(.opened(file: 0, s.file(0)!.record))  // opened, but no upload to ask about
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 0))
        let effects = try s.apply(.chunkAnswered(file: 0, chunk: 0, changes: [], stored: .chunkStored(file: 0, chunk: 0, bytes: 10)))
        XCTAssertEqual(effects.answers.count, 1, "committed with the others all the same")
        XCTAssertEqual(effects.answers.map(\.mayWait), [false], "and at once: its slot waits for it")
        XCTAssertEqual(s.answered, 0)
        XCTAssertNil(s.next(), "the slot is held until the commit")
        _ = try s.apply(.chunkStored(file: 0, chunk: 0, bytes: 10))
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 1))

        // Opened, but its open step named no upload (it was skipped: a file created
        // by its one request, tus's partial uploads): nothing to ask the server about.
        var skipped = scheduler(files: 1, size: 40, concurrency: 1)
        try open(&skipped, size: 40, withAnUpload: false)
        XCTAssertEqual(skipped.next(), .chunk(file: 0, chunk: 0))
        let answer = try skipped.apply(
            .chunkAnswered(file: 0, chunk: 0, changes: [], stored: .chunkStored(file: 0, chunk: 0, bytes: 10)))
        XCTAssertEqual(answer.answers.map(\.mayWait), [false])
        XCTAssertEqual(skipped.answered, 0)
        XCTAssertNil(skipped.next(), "the slot is held until the commit")
    }

    /// A file that fails while one of its chunks waits for its commit leaves
    /// no answered chunk counted: the job's room is whole again.
    func testAFileThatFailsGivesBackItsAnsweredChunks() throws {
        var s = scheduler(files: 2, size: 20, concurrency: 2)
        var handed: [Work] = []
        while let work = s.next() {
            switch work {
            case .loadFile(let index): _ = try s.apply(.loaded(file: index, loaded(fileRecord(index, size: 20))))
            case .openFile(let index):
                var record = s.file(index)!.record
                record.isOpen = true
                record.handles = upload
                _ = try s.apply(.opened(file: index, record))
            default: handed.append(work)
            }
            if handed.count == 2 { break }
        }
        XCTAssertEqual(handed, [.chunk(file: 0, chunk: 0), .chunk(file: 0, chunk: 1)])
        _ = try s.apply(.chunkAnswered(file: 0, chunk: 0, changes: [], stored: .chunkStored(file: 0, chunk: 0, bytes: 10)))
        XCTAssertEqual(s.answered, 1)
        _ = try s.apply(.fileFailed(file: 0, work: .chunk(file: 0, chunk: 1), reason: "changed"))
        XCTAssertEqual(s.failedFiles, 0, "the file waits for its chunk in flight")
        _ = try s.apply(.chunkStored(file: 0, chunk: 0, bytes: 10))
        XCTAssertEqual(s.failedFiles, 1)
        XCTAssertEqual(s.answered, 0)
    }

    func testFreshJobRunsEveryStepInOrderAndEnds() throws {
        var s = scheduler(files: 2, started: false)
        var held = 0
        let seen = try drive(&s, records: { self.fileRecord($0) }, maximumHeld: &held)
        XCTAssertEqual(seen.first, .startJob)
        XCTAssertEqual(seen.last, .finishJob)
        for file in 0..<2 {
            let steps = seen.filter { $0.file == file }
            XCTAssertEqual(steps.first, .loadFile(file))
            XCTAssertEqual(steps[1], .openFile(file))
            XCTAssertEqual(Set(steps.filter { if case .chunk = $0 { return true } else { return false } }).count, 3)
            XCTAssertEqual(steps.last, .finishFile(file))
        }
        XCTAssertTrue(s.isFinished)
        XCTAssertEqual(s.doneBytes, 50)
        XCTAssertEqual(s.failedFiles, 0)
    }

    func testNothingStartsBeforeTheJobStepAnswered() throws {
        var s = scheduler(files: 3, started: false)
        XCTAssertEqual(s.next(), .startJob)
        XCTAssertNil(s.next(), "no file may be touched before startJob's handles are committed")
        let effects = try s.apply(.started(JobStart(handles: ServerHandles(["source": "1"]))))
        guard case .putJob(let record)? = effects.changes.first else { return XCTFail("\(effects.changes)") }
        XCTAssertEqual(record.handles["source"], "1")
        XCTAssertTrue(record.isStarted)
        XCTAssertTrue(effects.sync, "job handles are forced to disk before any file is opened")
        XCTAssertEqual(s.next(), .loadFile(0))
    }

    func testFilesInProgressStayBoundedWhateverTheirNumber() throws {
        var s = scheduler(files: 3_000, size: 5, concurrency: 4)
        var held = 0
        let seen = try drive(&s, records: { self.fileRecord($0, size: 5) }, maximumHeld: &held)
        XCTAssertTrue(s.isFinished)
        XCTAssertEqual(seen.filter { if case .finishFile = $0 { return true } else { return false } }.count, 3_000)
        XCTAssertLessThanOrEqual(held, 5, "only the files in progress are held")
        XCTAssertTrue(s.files.isEmpty)
    }

    /// Small requests go wide; chunks above 1 MiB stay within the job's
    /// concurrency, and a file whose next chunk waited for a slot gets one.
    func testSmallRequestsGoWideWhileLargeChunksKeepTheConcurrency() throws {
        let mebibyte = 1 << 20
        var s = scheduler(files: 40, size: 0, concurrency: 2, smallRequestConcurrency: 8)
        // Files 0, 10, 20, 30: three chunks of 2 MiB; the others: one chunk of 100 bytes.
        let record = { (index: Int) -> FileRecord in
            index % 10 == 0
                ? self.fileRecord(index, size: Int64(6 * mebibyte), chunkSize: 2 * mebibyte)
                : self.fileRecord(index, size: 100, chunkSize: 2 * mebibyte)
        }
        var held = 0, most = 0, mostLarge = 0
        let seen = try drive(&s, records: record, maximumHeld: &held) { _, scheduler in
            most = max(most, scheduler.inFlight)
            mostLarge = max(mostLarge, scheduler.largeInFlight)
            return nil
        }
        XCTAssertTrue(s.isFinished)
        XCTAssertEqual(most, 8, "small requests fill the wider limit")
        XCTAssertEqual(mostLarge, 2, "large chunks stay within the concurrency")
        XCTAssertEqual(s.largeInFlight, 0)
        for large in [0, 10, 20, 30] {
            XCTAssertEqual(seen.filter { if case .chunk(large, _) = $0 { return true } else { return false } }.count, 3)
        }
        XCTAssertEqual(seen.filter { if case .finishFile = $0 { return true } else { return false } }.count, 40)
    }

    /// Small chunks go wide only as far as their bytes allow: 4 KiB files fill
    /// the wide limit, 512 KiB fragments stop at `smallRequestBytes` together.
    func testSmallChunksInFlightCarryAtMostTheirByteBudget() throws {
        let budget = Scheduler.Configuration.smallRequestBytes
        for (size, expected) in [(4096, 64), (512 << 10, budget / (512 << 10)), (1 << 20, budget / (1 << 20))] {
            var s = scheduler(files: 200, size: 0, concurrency: 4, smallRequestConcurrency: 64)
            var held = 0, most = 0, mostBytes = 0
            try drive(&s, records: { self.fileRecord($0, size: Int64(size), chunkSize: size) }, maximumHeld: &held) { _, scheduler in
                most = max(most, scheduler.inFlight)
                mostBytes = max(mostBytes, scheduler.smallBytesInFlight)
                return nil
            }
            XCTAssertTrue(s.isFinished)
            XCTAssertLessThanOrEqual(mostBytes, budget, "\(size)-byte chunks")
            XCTAssertGreaterThanOrEqual(most, expected, "\(size)-byte chunks go as wide as the budget allows")
            XCTAssertEqual(s.smallBytesInFlight, 0, "every byte counted out again")
        }
    }

    func testSequentialOrderKeepsOneChunkOfAFileInFlight() throws {
        var s = scheduler(files: 1, size: 100, concurrency: 4, order: .sequentialWithinFile)
        XCTAssertEqual(s.next(), .loadFile(0))
        _ = try s.apply(.loaded(file: 0, loaded({ var r = fileRecord(0, size: 100); r.isOpen = true; return r }())))
        XCTAssertEqual(s.next(), .reconcileFile(0))
        _ = try s.apply(.reconciled(file: 0, .serverHas(chunks: [0, 1])))
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 2))
        XCTAssertNil(s.next(), "the file's next chunk waits for this one")
        _ = try s.apply(.chunkStored(file: 0, chunk: 2, bytes: 10))
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 3))
    }

    /// Where the next run would ask the server about the file's upload, a chunk's answer lets the
    /// file's next chunk go while its records are committed; elsewhere the next one waits for
    /// the commit.
    func testSequentialOrderGoesOnAtAnAnswerOnlyWhereTheServerCanBeAsked() throws {
        var s = scheduler(files: 1, size: 40, concurrency: 4, order: .sequentialWithinFile)
        try open(&s, size: 40)
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 0))
        XCTAssertNil(s.next(), "one request of the file at a time")
        _ = try s.apply(.chunkAnswered(file: 0, chunk: 0, changes: [], stored: .chunkStored(file: 0, chunk: 0, bytes: 10)))
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 1), "the answer came: the next chunk goes during the commit")
        XCTAssertNil(s.next(), "and only it")
        _ = try s.apply(.chunkAnswered(file: 0, chunk: 1, changes: [], stored: .chunkStored(file: 0, chunk: 1, bytes: 10)))
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 2), "two commits may be under way")
        _ = try s.apply(.chunkStored(file: 0, chunk: 0, bytes: 10))
        _ = try s.apply(.chunkStored(file: 0, chunk: 1, bytes: 10))
        XCTAssertNil(s.next(), "chunk 2 is still out")
        _ = try s.apply(.chunkStored(file: 0, chunk: 2, bytes: 10))
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 3))
        _ = try s.apply(.chunkStored(file: 0, chunk: 3, bytes: 10))
        XCTAssertEqual(s.next(), .finishFile(0))

        // A file opened without an upload to ask about (a sequence's blocks, say): the commit first.
        var t = scheduler(files: 1, size: 40, concurrency: 4, order: .sequentialWithinFile)
        try open(&t, size: 40, withAnUpload: false)
        XCTAssertEqual(t.next(), .chunk(file: 0, chunk: 0))
        _ = try t.apply(.chunkAnswered(file: 0, chunk: 0, changes: [], stored: .chunkStored(file: 0, chunk: 0, bytes: 10)))
        XCTAssertNil(t.next(), "the next chunk waits for the commit")
        _ = try t.apply(.chunkStored(file: 0, chunk: 0, bytes: 10))
        XCTAssertEqual(t.next(), .chunk(file: 0, chunk: 1))
    }

    func testACompletedFileOfAnEarlierRunIsNotTouched() throws {
        var s = scheduler(files: 2, doneBytes: 25)
        var complete = fileRecord(0)
        complete.isOpen = true
        complete.url = "u0"
        var held = 0
        let seen = try drive(
            &s, records: { $0 == 0 ? complete : self.fileRecord($0) }, done: { $0 == 0 ? [0, 1, 2] : [] },
            maximumHeld: &held)
        XCTAssertTrue(seen.filter { $0.file == 0 }.allSatisfy { $0 == .loadFile(0) })
        XCTAssertTrue(s.isFinished)
    }

    func testACompletedFileIsLetGoAtOnce() throws {
        // The runner opened it to compare its identity: it must close it again,
        // or a re-run of 100,000 sent files runs out of descriptors.
        var s = scheduler(files: 1, doneBytes: 25)
        var complete = fileRecord(0)
        complete.isOpen = true
        complete.url = "u0"
        XCTAssertEqual(s.next(), .loadFile(0))
        let effects = try s.apply(.loaded(file: 0, loaded(complete, done: [0, 1, 2])))
        XCTAssertEqual(effects.released, [0])
        XCTAssertTrue(s.files.isEmpty)
    }

    func testAFileChangedSinceTheLastRunIsSentAgainFromItsStart() throws {
        var s = scheduler(files: 1, doneBytes: 20)
        var record = fileRecord(0)
        record.isOpen = true
        record.handles.set("uploadId", "old")
        XCTAssertEqual(s.next(), .loadFile(0))
        let effects = try s.apply(.loaded(file: 0, loaded(record, done: [0, 1], now: identity(31, time: 2))))
        assertResetForItsNewBytes(s, effects)
        XCTAssertEqual(s.next(), .openFile(0))
    }

    /// File 0's record reset for its new 31 bytes: nothing done, not open, the old upload's handles gone.
    private func assertResetForItsNewBytes(_ s: Scheduler, _ effects: Effects, line: UInt = #line) {
        XCTAssertEqual(s.doneBytes, 0, line: line)
        XCTAssertEqual(s.totalBytes, 31, line: line)
        guard case .putFiles(_, let files)? = effects.changes.last, let stored = files.first?.record else {
            return XCTFail("\(effects.changes)", line: line)
        }
        XCTAssertEqual(stored.identity.size, 31, line: line)
        XCTAssertFalse(stored.isOpen, line: line)
        XCTAssertNil(stored.handles["uploadId"], "the old upload's handles are not reused", line: line)
        XCTAssertTrue(
            effects.changes.contains { if case .replaceDone(_, 0, let done, _, _) = $0 { return done.count == 0 } else { return false } },
            line: line)
    }

    /// With a backend that can drop an upload, a changed file's earlier
    /// upload is dropped before anything else, and its record (old identity,
    /// old handles) is reset only after: a run killed in between drops it again.
    func testAChangedFilesEarlierUploadIsDroppedBeforeItIsOpenedAgain() throws {
        var s = scheduler(files: 1, doneBytes: 20, dropsUploads: true)
        var record = fileRecord(0)
        record.isOpen = true
        record.handles.set("uploadId", "old")
        XCTAssertEqual(s.next(), .loadFile(0))
        let loadedEffects = try s.apply(.loaded(file: 0, loaded(record, done: [0, 1], now: identity(31, time: 2))))
        XCTAssertTrue(loadedEffects.changes.isEmpty, "nothing is reset before the drop: \(loadedEffects.changes)")
        XCTAssertEqual(s.next(), .dropUpload(0))
        XCTAssertEqual(s.file(0)?.record.handles["uploadId"], "old", "the drop is told the earlier upload")
        XCTAssertNil(s.next(), "nothing of the file goes while its earlier upload is dropped")
        let effects = try s.apply(.uploadDropped(file: 0))
        assertResetForItsNewBytes(s, effects)
        XCTAssertEqual(s.next(), .openFile(0))
    }

    /// A file never opened has no upload to drop.
    func testAChangedFileWithoutAnUploadIsNotDropped() throws {
        var s = scheduler(files: 1, dropsUploads: true)
        XCTAssertEqual(s.next(), .loadFile(0))
        _ = try s.apply(.loaded(file: 0, loaded(fileRecord(0), now: identity(31, time: 2))))
        XCTAssertEqual(s.next(), .openFile(0))
    }

    func testAFileThatCannotBeLoadedFailsAloneAndTheJobStepIsSkipped() throws {
        var s = scheduler(files: 3, concurrency: 1)
        var held = 0
        var seen: [Work] = []
        var failures = 0
        while let work = s.next() {
            seen.append(work)
            switch work {
            case .loadFile(1):
                let effects = try s.apply(.loadFailed(file: 1, record: fileRecord(1), reason: "cannot be read (gone)"))
                failures += effects.events.filter { if case .fileFailed = $0 { return true } else { return false } }.count
                guard case .putFiles(_, let files)? = effects.changes.first else { return XCTFail("failure not recorded") }
                XCTAssertEqual(files.first?.record.failure, "cannot be read (gone)")
            case .loadFile(let index):
                _ = try s.apply(.loaded(file: index, loaded(fileRecord(index))))
                held = max(held, s.files.count)
            default:
                _ = try s.apply(perfectAnswer(work, s))
            }
        }
        XCTAssertEqual(failures, 1)
        XCTAssertEqual(s.failedFiles, 1)
        XCTAssertEqual(s.firstFailure?.path, "/data/f1")
        XCTAssertTrue(s.isFinished)
        XCTAssertFalse(seen.contains(.finishJob), "a job with a failed file is not finished on the server")
        XCTAssertTrue(seen.contains(.finishFile(2)), "the files after the failed one are sent")
    }

    func testAFileThatChangesDuringThePushFailsOnceItsRequestsDrained() throws {
        var s = scheduler(files: 1, size: 40, concurrency: 3)
        XCTAssertEqual(s.next(), .loadFile(0))
        var record = fileRecord(0, size: 40)
        record.isOpen = true
        _ = try s.apply(.loaded(file: 0, loaded(record)))
        XCTAssertEqual(s.next(), .reconcileFile(0))
        _ = try s.apply(.reconciled(file: 0, nil))
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 0))
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 1))
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 2))
        var effects = try s.apply(.fileFailed(file: 0, work: .chunk(file: 0, chunk: 0), reason: "it changed"))
        XCTAssertTrue(effects.changes.isEmpty, "not settled while chunks are in flight")
        XCTAssertNil(s.next(), "nothing more of a failing file")
        _ = try s.apply(.chunkStored(file: 0, chunk: 1, bytes: 10))
        effects = try s.apply(.chunkStored(file: 0, chunk: 2, bytes: 10))
        XCTAssertEqual(effects.released, [0])
        XCTAssertEqual(s.failedFiles, 1)
        XCTAssertNil(s.next())
        XCTAssertTrue(s.isFinished)
    }

    func testAForgottenUploadIsOpenedAgainOnceAndThenFailsTheJob() throws {
        var s = scheduler(files: 1, concurrency: 2)
        var record = fileRecord(0)
        record.isOpen = true
        record.handles.set("uploadId", "x")
        XCTAssertEqual(s.next(), .loadFile(0))
        _ = try s.apply(.loaded(file: 0, loaded(record)))
        XCTAssertEqual(s.next(), .reconcileFile(0))
        let effects = try s.apply(.uploadUnknown(file: 0, work: .reconcileFile(0), message: "gone"))
        XCTAssertTrue(effects.changes.contains { if case .putFiles(_, let f) = $0 { return f[0].record.handles.isEmpty && !f[0].record.isOpen } else { return false } })
        XCTAssertEqual(s.next(), .openFile(0))
        _ = try s.apply(.opened(file: 0, { var r = record; r.handles = ServerHandles(["uploadId": "y"]); return r }()))
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 0))
        XCTAssertThrowsError(try s.apply(.uploadUnknown(file: 0, work: .chunk(file: 0, chunk: 0), message: "gone again")))
    }

    func testTwoRequestsInFlightLearningTheUploadIsGoneResetItOnce() throws {
        var s = scheduler(files: 1, concurrency: 2)
        var record = fileRecord(0, size: 30)
        record.isOpen = true
        XCTAssertEqual(s.next(), .loadFile(0))
        _ = try s.apply(.loaded(file: 0, loaded(record)))
        XCTAssertEqual(s.next(), .reconcileFile(0))
        _ = try s.apply(.reconciled(file: 0, nil))
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 0))
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 1))
        _ = try s.apply(.uploadUnknown(file: 0, work: .chunk(file: 0, chunk: 0), message: "changed"))
        XCTAssertNil(s.next(), "nothing new while the other request drains")
        // The second answer says the same thing: one reset, not a failure of the job.
        let effects = try s.apply(.uploadUnknown(file: 0, work: .chunk(file: 0, chunk: 1), message: "changed"))
        XCTAssertTrue(effects.events.contains { if case .resending = $0 { return true } else { return false } })
        XCTAssertEqual(s.next(), .openFile(0))
    }

    /// Loads file 0 (`size` bytes, opened by an earlier run) and answers its
    /// reconciliation: the server holds its first `held` bytes.
    private func loadOpenFile(of size: Int64, into s: inout Scheduler, serverHolds held: Int64) throws {
        var record = fileRecord(0, size: size)
        record.isOpen = true
        XCTAssertEqual(s.next(), .loadFile(0))
        _ = try s.apply(.loaded(file: 0, loaded(record)))
        XCTAssertEqual(s.next(), .reconcileFile(0))
        _ = try s.apply(.reconciled(file: 0, .serverHasPrefix(bytes: held)))
    }

    func testOutOfSyncAsksTheServerAgainOnceTheFileDrained() throws {
        var s = scheduler(files: 1, size: 30, concurrency: 2)
        try loadOpenFile(of: 30, into: &s, serverHolds: 15)
        // Chunk 1 holds byte 15: it is sent from there.
        XCTAssertEqual(s.file(0)?.partial?.offset, 15)
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 1))
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 2))
        _ = try s.apply(.outOfSync(file: 0, work: .chunk(file: 0, chunk: 1), message: "409"))
        XCTAssertNil(s.next(), "waits for chunk 2")
        _ = try s.apply(.chunkStored(file: 0, chunk: 2, bytes: 10))
        XCTAssertEqual(s.next(), .reconcileFile(0))
    }

    /// The terms a chunk goes out with are decided here, not by the runner:
    /// where it starts, and whether its bare acknowledgement is committed.
    func testAChunksTermsNameItsStartAndLeaveTheLastAcknowledgementToTheCompletion() throws {
        var s = scheduler(files: 1, size: 30, concurrency: 1, completesFilesAndReconciles: true)
        try loadOpenFile(of: 30, into: &s, serverHolds: 15)
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 1))
        XCTAssertEqual(s.terms(ofChunk: 1, file: 0), Scheduler.ChunkTerms(start: 15, commitsAcknowledgement: true))
        _ = try s.apply(.chunkStored(file: 0, chunk: 1, bytes: 10))
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 2))
        XCTAssertEqual(s.terms(ofChunk: 2, file: 0), Scheduler.ChunkTerms(start: nil, commitsAcknowledgement: false))

        // A backend that cannot be asked what it holds has every acknowledgement committed.
        var plain = scheduler(files: 1, size: 10, concurrency: 1)
        XCTAssertEqual(plain.next(), .loadFile(0))
        _ = try plain.apply(.loaded(file: 0, loaded(fileRecord(0, size: 10))))
        XCTAssertEqual(plain.next(), .openFile(0))
        _ = try plain.apply(.opened(file: 0, { var r = self.fileRecord(0, size: 10); r.isOpen = true; return r }()))
        XCTAssertEqual(plain.next(), .chunk(file: 0, chunk: 0))
        XCTAssertEqual(plain.terms(ofChunk: 0, file: 0), Scheduler.ChunkTerms(start: nil, commitsAcknowledgement: true))
    }

    func testMissingChunksAtFinishAreSentAgain() throws {
        var s = scheduler(files: 1, concurrency: 1)
        var held = 0
        var rounds = 0
        try drive(&s, records: { self.fileRecord($0) }, maximumHeld: &held) { work, _ in
            if case .finishFile(0) = work, rounds == 0 {
                rounds += 1
                return .fileFinished(file: 0, .missing([1]))
            }
            return nil
        }
        XCTAssertTrue(s.isFinished)
        XCTAssertEqual(s.doneBytes, 25)
    }

    /// The edges a backend author asks about (Docs/backend-guide.md):
    /// `FileFinish.missing([])` and chunk numbers past the file's end.
    func testAFinishNamingNoChunkOrOnlyChunksPastTheEndFailsTheJob() throws {
        for missing in [[], [3, 99, -1]] {
            var s = scheduler(files: 1, concurrency: 1)
            var held = 0
            XCTAssertThrowsError(try drive(&s, records: { self.fileRecord($0) }, maximumHeld: &held) { work, _ in
                if case .finishFile(0) = work { return .fileFinished(file: 0, .missing(missing)) }
                return nil
            }, "\(missing)") { error in
                XCTAssertTrue("\(error)".contains("names no chunk it lacks"), "\(error)")
            }
        }
        // Past the end among real ones: those are sent again, the others ignored.
        var s = scheduler(files: 1, concurrency: 1)
        var held = 0
        var rounds = 0
        let work = try drive(&s, records: { self.fileRecord($0) }, maximumHeld: &held) { work, _ in
            if case .finishFile(0) = work, rounds == 0 {
                rounds += 1
                return .fileFinished(file: 0, .missing([2, 3, 99]))
            }
            return nil
        }
        XCTAssertTrue(s.isFinished)
        XCTAssertEqual(work.filter { $0 == .chunk(file: 0, chunk: 2) }.count, 2, "chunk 2 (the last) went twice")
    }

    func testAReconcileNamingChunksPastTheEndCountsOnlyTheFilesOwn() throws {
        var s = scheduler(files: 1, size: 30, concurrency: 1)
        var record = fileRecord(0, size: 30)
        record.isOpen = true
        XCTAssertEqual(s.next(), .loadFile(0))
        _ = try s.apply(.loaded(file: 0, loaded(record)))
        XCTAssertEqual(s.next(), .reconcileFile(0))
        _ = try s.apply(.reconciled(file: 0, .serverHas(chunks: [0, 7, 1_000, -3])))
        XCTAssertEqual(s.doneBytes, 10, "only chunk 0 is the file's")
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 1))
    }

    func testARollbackTakesTheFailedFilesUpAgain() throws {
        var s = scheduler(files: 2, concurrency: 2)
        var held = 0
        var rolledBack = false
        let seen = try drive(&s, records: { self.fileRecord($0) }, maximumHeld: &held) { work, _ in
            if case .finishJob = work, !rolledBack {
                rolledBack = true
                return .jobFinished(.rollback(files: [1]), rolledBack: [RolledBackFile(index: 1, path: "/data/f1", chunks: 3)])
            }
            return nil
        }
        XCTAssertTrue(s.isFinished)
        XCTAssertEqual(seen.filter { $0 == .loadFile(1) }.count, 2)
        XCTAssertEqual(seen.filter { $0 == .finishJob }.count, 2)
    }

    func testResyncMovesTheFileBack() throws {
        var s = scheduler(files: 1, size: 50, concurrency: 1, order: .sequentialWithinFile)
        var record = fileRecord(0, size: 50)
        record.isOpen = true
        XCTAssertEqual(s.next(), .loadFile(0))
        _ = try s.apply(.loaded(file: 0, loaded(record, done: [0, 1, 2])))
        XCTAssertEqual(s.next(), .reconcileFile(0))
        _ = try s.apply(.reconciled(file: 0, nil))
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 3))
        let effects = try s.apply(.chunkResync(file: 0, chunk: 3, next: 1))
        guard case .replaceDone(_, 0, let done, _, _)? = effects.changes.first else { return XCTFail("\(effects.changes)") }
        XCTAssertEqual(done.members, [0])
        XCTAssertEqual(s.next(), .chunk(file: 0, chunk: 1))
    }

    func testAFailureIsThrownAndCountsStayRight() throws {
        var s = scheduler(files: 1)
        XCTAssertEqual(s.next(), .loadFile(0))
        _ = try s.apply(.loaded(file: 0, loaded(fileRecord(0))))
        XCTAssertEqual(s.next(), .openFile(0))
        XCTAssertThrowsError(try s.apply(.failed(.openFile(0), .transferFailed("refused")))) { error in
            XCTAssertEqual(error as? XferError, .transferFailed("refused"))
        }
        XCTAssertEqual(s.inFlight, 0)
    }

    func testAMillionChunkFileIsScheduledChunkByChunk() throws {
        // One chunk at a time through the whole file: every step must be O(1).
        var s = scheduler(files: 1, size: 1_000_000, concurrency: 8)
        var record = fileRecord(0, size: 1_000_000, chunkSize: 1)
        record.isOpen = true
        XCTAssertEqual(s.next(), .loadFile(0))
        _ = try s.apply(.loaded(file: 0, loaded(record)))
        XCTAssertEqual(s.next(), .reconcileFile(0))
        _ = try s.apply(.reconciled(file: 0, nil))
        var acknowledged = 0
        var inFlight: [Int] = []
        while true {
            while let work = s.next() {
                guard case .chunk(_, let chunk) = work else {
                    XCTAssertEqual(work, .finishFile(0))
                    XCTAssertEqual(acknowledged, 1_000_000)
                    return
                }
                inFlight.append(chunk)
            }
            guard !inFlight.isEmpty else { return XCTFail("stalled") }
            let chunk = inFlight.removeFirst()
            _ = try s.apply(.chunkStored(file: 0, chunk: chunk, bytes: 1))
            acknowledged += 1
        }
    }
}

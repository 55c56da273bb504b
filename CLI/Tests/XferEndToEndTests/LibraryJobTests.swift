import Foundation
import XCTest
import Xfer
import XferPatch
import XferTestSupport

/// The engine as a library: pause and resume a live job, cancel it, resume
/// it by id. Real libcurl and LMDB against a real `xfer serve`.
final class LibraryJobTests: XCTestCase {
    var work: TemporaryDirectory!
    var server: ServeProcess!

    override func setUpWithError() throws {
        work = TemporaryDirectory("xfer-library")
        server = try ServeProcess(root: work.file("server"))
    }

    override func tearDown() {
        server = nil
        work = nil
    }

    private var state: String { work.file("state") }
    private let options = TransferOptions(chunkSize: 64 << 10, concurrency: 2)

    func testPauseStopsTheJobAndResumeFinishesItByteIdentical() async throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 8 << 20, seed: 5)
        let engine = try TransferEngine(stateDirectory: state, finishedJobRetention: .zero)
        let job = try await engine.push([file], to: server.url, using: PatchBackend(), options: options)

        var events: [TransferEvent] = []
        var committedAtPause: Int64?
        var stateWhilePaused: JobState?
        for await event in job.events {
            events.append(event)
            guard committedAtPause == nil, case .chunkStored = event else { continue }
            await job.pause()
            let details = try engine.details(of: job.id)
            committedAtPause = details.summary.doneBytes
            stateWhilePaused = details.summary.state
            job.resume()
        }
        let report = try await job.report

        XCTAssertEqual(stateWhilePaused, .running, "a paused job keeps its lock")
        let paused = try XCTUnwrap(events.firstIndex(of: .paused(.init(job: job.id))), "no paused event")
        XCTAssertEqual(events.filter { $0 == .paused(.init(job: job.id)) }.count, 1)
        // Progress never runs ahead of what is committed. (It may lag: an
        // acknowledgement committed as the pause cancelled its neighbour is
        // not reported by the stopping run, but the next run starts from it.)
        let lastBefore = try XCTUnwrap(events[..<paused].compactMap { event -> Int64? in
            if case .chunkStored(let stored) = event { return stored.doneBytes }
            return nil
        }.last)
        XCTAssertLessThanOrEqual(lastBefore, try XCTUnwrap(committedAtPause))
        // Nothing happens between the pause and the resumed run's start.
        guard case .started(let started) = events[paused + 1] else {
            return XCTFail("after .paused came \(events[paused + 1])")
        }
        let (id, total, done, resumed) = (started.job, started.totalBytes, started.doneBytes, started.resumed)
        XCTAssertEqual(id, job.id)
        XCTAssertEqual(total, 8 << 20)
        XCTAssertEqual(done, committedAtPause)
        XCTAssertTrue(resumed)
        XCTAssertEqual(events.last, .completed(report))

        XCTAssertEqual(report.files.map(\.path), [file])
        XCTAssertEqual(try downloadSHA256(report.files[0].url, into: work), try sha256sum(file))
        // Zero retention: the completed job left the store, lock file and all.
        XCTAssertFalse(try engine.jobs(includingCompleted: true).contains { $0.id == job.id })
        XCTAssertFalse(FileManager.default.fileExists(atPath: state + "/locks/\(job.id).lock"))
    }

    /// A push run again after it completed (its job still kept): the stored
    /// URLs back at once, nothing sent; a file changed since is a new
    /// upload; `restart` sends everything again.
    func testAPushRunAgainAfterItCompletedSendsOnlyWhatChanged() async throws {
        let a = work.file("a.bin"), b = work.file("b.bin")
        try makeTestFile(at: a, size: 300_000, seed: 1)
        try makeTestFile(at: b, size: 200_000, seed: 2)
        let engine = try TransferEngine(stateDirectory: state)
        func push(restart: Bool = false) async throws -> (started: TransferEvent?, report: JobReport) {
            let job = try await engine.push([a, b], to: server.url, using: PatchBackend(), options: options, restart: restart)
            var started: TransferEvent?
            for await event in job.events where started == nil {
                if case .started = event { started = event }
            }
            return (started, try await job.report)
        }
        let first = try await push()
        XCTAssertEqual(first.report.bytesSent, 500_000)

        let again = try await push()
        guard case .started(let started)? = again.started else { return XCTFail("\(String(describing: again.started))") }
        let (total, done, resumed) = (started.totalBytes, started.doneBytes, started.resumed)
        XCTAssertTrue(resumed)
        XCTAssertEqual(done, total, "everything is on the server already")
        XCTAssertEqual(again.report.bytesSent, 0)
        XCTAssertEqual(again.report.files.map(\.url), first.report.files.map(\.url))

        try makeTestFile(at: b, size: 210_000, seed: 3)
        let changed = try await push()
        XCTAssertEqual(changed.report.bytesSent, 210_000, "only the changed file")
        XCTAssertEqual(changed.report.files[0].url, first.report.files[0].url)
        XCTAssertEqual(try downloadSHA256(changed.report.files[1].url, into: work), try sha256sum(b))

        let restarted = try await push(restart: true)
        XCTAssertEqual(restarted.report.bytesSent, 510_000)
    }

    func testCancelWhilePausedKeepsStateAndResumeByIDFinishes() async throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 4 << 20, seed: 6)
        let engine = try TransferEngine(stateDirectory: state)
        let job = try await engine.push([file], to: server.url, using: PatchBackend(), options: options)
        var sawChunk = false
        for await event in job.events {
            if case .chunkStored = event, !sawChunk {
                sawChunk = true
                await job.pause()
                await job.pause()  // a second pause is harmless
                job.cancel()
            }
        }
        do {
            _ = try await job.report
            XCTFail("a cancelled job must not report success")
        } catch {
            XCTAssertEqual(error, .interrupted)
        }

        let listed = try XCTUnwrap(try engine.jobs().first { $0.id == job.id })
        XCTAssertEqual(listed.state, .unfinished, "the job ended, its lock is free")
        XCTAssertGreaterThan(listed.doneBytes, 0)
        XCTAssertEqual(try engine.details(of: job.id).files.first?.isOpen, true)

        do {
            _ = try await engine.resume(job.id, using: [])
            XCTFail("resuming without the job's backend must fail")
        } catch {
            XCTAssertTrue(error.description.contains("'patch' backend"), error.description)
        }
        let resumed = try await engine.resume(job.id, using: [PatchBackend()])
        var started: TransferEvent?
        for await event in resumed.events where started == nil { started = event }
        let report = try await resumed.report
        guard case .started(let run)? = started, run.resumed else { return XCTFail("\(String(describing: started))") }
        let done = run.doneBytes
        XCTAssertEqual(done, listed.doneBytes, "the resumed run starts from what was committed")
        XCTAssertEqual(try downloadSHA256(report.files[0].url, into: work), try sha256sum(file))
        XCTAssertEqual(try engine.jobs(includingCompleted: true).first { $0.id == job.id }?.state, .completed)
    }

    func testPauseBeforeTheFirstRequestAndResume() async throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 4 << 20, seed: 8)
        let engine = try TransferEngine(stateDirectory: state)
        let job = try await engine.push([file], to: server.url, using: PatchBackend(), options: options)
        await job.pause()
        let summary = try XCTUnwrap(try engine.jobs().first { $0.id == job.id })
        XCTAssertEqual(summary.state, .running)
        job.resume()
        job.resume()  // resuming a running job does nothing
        let report = try await job.report
        XCTAssertEqual(try downloadSHA256(report.files[0].url, into: work), try sha256sum(file))
        var events: [TransferEvent] = []
        for await event in job.events { events.append(event) }
        XCTAssertEqual(events.filter { $0 == .paused(.init(job: job.id)) }.count, 1)
        XCTAssertEqual(events.last, .completed(report))
    }
}

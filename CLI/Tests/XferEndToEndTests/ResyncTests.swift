import Foundation
import XCTest
import Xfer
import XferPatch
import XferTestSupport

/// A backend that reads one stored chunk's answer as `.outOfSync` — as tus
/// does with a 409 after a PATCH whose answer was lost — and otherwise
/// speaks patch. The engine must ask the server again and go on.
private struct LosesOneAnswer: UploadBackend, FileOpening, FileReconciling, FileFinishing {
    let base = PatchBackend()
    let chunk: Int
    let lost = LockedFlag()
    var name: String { base.name }
    var traits: BackendTraits { base.traits }

    func openFile(_ file: FileContext, in job: JobContext) -> Step<OpenedFile> { base.openFile(file, in: job) }
    func reconcileFile(_ file: FileContext, in job: JobContext) throws(BackendError) -> Step<Reconciliation<Never>> {
        try base.reconcileFile(file, in: job)
    }
    func finishFile(_ file: FileContext, in job: JobContext) throws(BackendError) -> Step<FileFinish> {
        try base.finishFile(file, in: job)
    }
    func uploadChunk(_ payload: ChunkPayload, of file: FileContext, in job: JobContext) throws(BackendError) -> Exchange<ChunkOutcome> {
        let exchange = try base.uploadChunk(payload, of: file, in: job)
        guard payload.index == chunk else { return exchange }
        let lost = self.lost
        return Exchange(exchange.request) { response throws(BackendError) in
            let outcome = try exchange.interpret(response)
            if lost.setOnce() { throw .outOfSync("the answer to chunk \(payload.number) was lost") }
            return outcome
        }
    }
}

private final class LockedFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var set = false
    /// True the first time only.
    func setOnce() -> Bool {
        lock.lock()
        defer { lock.unlock() }
        if set { return false }
        set = true
        return true
    }
}

final class ResyncTests: XCTestCase {
    func testOutOfSyncMakesTheEngineAskTheServerAgainAndGoOn() async throws {
        let work = TemporaryDirectory("xfer-resync")
        let server = try ServeProcess(root: work.file("server"))
        let file = work.file("a.bin")
        let size = 40 * (64 << 10) + 9
        try makeTestFile(at: file, size: size, seed: 11)
        let engine = try TransferEngine(stateDirectory: work.file("state"))
        let job = try await engine.push(
            [file], to: server.url, using: LosesOneAnswer(chunk: 5), options: TransferOptions(chunkSize: 64 << 10, concurrency: 3))
        var reconciledMidRun = false
        for await event in job.events {
            if case .reconciled(let reconciled) = event {
                let onServer = reconciled.chunksOnServer
                reconciledMidRun = true
                XCTAssertTrue(onServer >= 6, "the server holds chunks 1-6 by then, not \(onServer)")
            }
        }
        let report = try await job.report
        XCTAssertTrue(reconciledMidRun, "the engine did not ask the server again")
        // The chunk whose answer was lost is not sent twice: the server said it had it.
        XCTAssertEqual(report.bytesSent, Int64(size))
        XCTAssertEqual(try downloadSHA256(report.files[0].url, into: work), try sha256sum(file))
    }
}

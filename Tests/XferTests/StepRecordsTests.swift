import Foundation
import Testing

@testable import Xfer

/// What a step saves before it reports, from its outcome alone.
@Suite struct StepRecordsTests {
    let job = JobID(rawValue: "00000000000000ab")
    let record = FileRecord(
        path: "/data/a.bin", relativePath: "a.bin", root: 0,
        identity: FileIdentity(size: 25, modificationTimeNanoseconds: 1, inode: 7, device: 1), chunkSize: 10)
    var plan: ChunkPlan { ChunkPlan(fileSize: 25, chunkSize: 10) }

    @Test func anAcknowledgementIsMarkedDoneWithItsReceiptAndTheURLItCarries() {
        let changes = StepRecords.chunkStored(
            job: job, file: 3, chunk: 1, plan: plan, record: record, receipt: "etag", url: "http://h/a.bin",
            commitsAcknowledgement: false)
        #expect(changes.count == 2)
        guard case .markDone(_, 3, [1], _, let receipts) = changes[0] else { Issue.record("\(changes)"); return }
        #expect(receipts == [1: "etag"])
        guard case .putFiles(_, let files) = changes[1] else { Issue.record("\(changes)"); return }
        #expect(files[0].record.url == "http://h/a.bin")
    }

    @Test func aBareAcknowledgementLeftToTheCompletionSavesNothing() {
        #expect(
            StepRecords.chunkStored(
                job: job, file: 0, chunk: 2, plan: plan, record: record, receipt: nil, url: nil, commitsAcknowledgement: false
            ).isEmpty)
        #expect(
            StepRecords.chunkStored(
                job: job, file: 0, chunk: 2, plan: plan, record: record, receipt: nil, url: nil, commitsAcknowledgement: true
            ).count == 1)
    }

    @Test func anOpenSavesTheServersHandlesBeforeAnyChunkAndRefusesAnUnusableChunkSize() throws {
        let opening = OpenedFile(handles: ServerHandles(["uploadId": "u1"]), chunkSize: 4)
        let (opened, changes) = try StepRecords.opened(job: job, file: 0, record: record, opening: opening)
        #expect(opened.isOpen && opened.handles["uploadId"] == "u1" && opened.chunkSize == 4)
        #expect(changes.count == 1)
        let (bare, none) = try StepRecords.opened(job: job, file: 0, record: record, opening: nil)
        #expect(bare.isOpen && none.isEmpty)
        #expect(throws: XferError.self) {
            try StepRecords.opened(
                job: job, file: 0, record: record, opening: OpenedFile(handles: ServerHandles(), chunkSize: 0))
        }
    }

    @Test func aRollbackStartsEachFileOver() {
        var sent = record
        sent.url = "http://h/a.bin"
        let (changes, rolledBack) = StepRecords.jobRolledBack(
            job: job, files: [(2, sent)], traits: BackendTraits(defaultChunkSize: 10, defaultConcurrency: 1, authentication: .authorizationHeader))
        #expect(rolledBack == [RolledBackFile(index: 2, path: "/data/a.bin", chunks: 3)])
        guard case .putFiles(_, let files) = changes[0], case .replaceDone(_, 2, let done, _, _) = changes[1] else {
            Issue.record("\(changes)")
            return
        }
        #expect(files[0].record.url == nil && done.count == 0)
    }
}

import Crypto
import Testing
import XferPrimitives

@testable import Xfer

/// A server's report of a completed file is checked against the bytes sent,
/// by the one check files and streams share (`Worker.verify`).
@Suite struct StepContentTests {
    static let bytes: [UInt8] = Array("the quick brown fox jumps over the lazy dog".utf8)
    static let sha = Checksums.hex(Array(SHA256.hash(data: bytes)))
    static var crc: UInt32 {
        var crc = CRC32C()
        bytes.withUnsafeBytes { crc.update($0) }
        return crc.value
    }

    @Test func aReportThatMatchesTheBytesSentPasses() async throws {
        let finish = FileFinish.completed(url: "u", sha256: Self.sha.uppercased(), crc32c: Self.crc)
        try await Worker.verify(finish, of: "a.bin", against: BytesInMemory(bytes: Self.bytes))
        var running = RunningDigests(sha256: true)
        running.update(Array(Self.bytes[..<10]))
        running.update(Array(Self.bytes[10...]))
        try await Worker.verify(finish, of: "a.bin", against: running)
    }

    @Test func aReportOfOtherBytesFailsVerification() async {
        let other = Array("the quick brown fox jumps over the lazy cat".utf8)
        for content in [BytesInMemory(bytes: other)] {
            await #expect(throws: XferError.self) {
                try await Worker.verify(.completed(url: "u", crc32c: Self.crc), of: "a.bin", against: content)
            }
            await #expect(throws: XferError.self) {
                try await Worker.verify(.completed(url: "u", sha256: Self.sha), of: "a.bin", against: content)
            }
        }
        var running = RunningDigests(sha256: true)
        running.update(other)
        do {
            try await Worker.verify(.completed(url: "u", crc32c: Self.crc), of: "a.bin", against: running)
            Issue.record("a CRC-32C of other bytes passed")
        } catch {
            guard error.kind == .verificationFailed, let message = error.reason else { Issue.record("\(error)"); return }
            #expect(message.contains("CRC-32C of a.bin"))
        }
    }

    @Test func aSHA256TheStreamDidNotComputeIsRefusedNotPassed() async {
        var running = RunningDigests(sha256: false)
        running.update(Self.bytes)
        await #expect(throws: XferError.self) {
            try await Worker.verify(.completed(url: "u", sha256: Self.sha), of: "a.bin", against: running)
        }
    }

    @Test func aCompletionWithoutDigestsOrAMissingAnswerIsNotChecked() async throws {
        try await Worker.verify(.completed(url: "u"), of: "a.bin", against: BytesInMemory(bytes: []))
        try await Worker.verify(.missing([0]), of: "a.bin", against: BytesInMemory(bytes: []))
        try await Worker.verify(nil, of: "a.bin", against: BytesInMemory(bytes: []))
    }

    @Test func aRangeOfBytesInMemoryIsThatRange() {
        let content = BytesInMemory(bytes: Self.bytes)
        let chunk = content.chunk(offset: 4, length: 5, feedingHash: false)
        #expect(chunk.offset == 4 && chunk.length == 5)
        var buffer = [UInt8](repeating: 0, count: 5)
        let read = buffer.withUnsafeMutableBytes { try? chunk.read(into: $0, at: 0) }
        #expect(read == 5 && buffer == Array("quick".utf8))
    }
}

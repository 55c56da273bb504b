import Crypto
import Glibc
import Foundation
import Testing
import XferPrimitives
import XferTestSupport
@testable import Xfer

/// The pure parts of a pull: which answers a range writer takes and where
/// their bytes go, the digests servers offer and how they are kept, the
/// whole-file check, and the scheduler learning an object's size.
@Suite struct DownloadTests {
    private func partial(size: Int) throws -> (TemporaryDirectory, PartialFile) {
        let directory = TemporaryDirectory("xfer-download-tests")
        let file = PartialFile(destination: directory.file("out.bin"))
        _ = try file.create(size: Int64(size), durableEntry: false)
        return (directory, file)
    }

    private func contents(_ path: String) throws -> [UInt8] {
        Array(try Data(contentsOf: URL(fileURLWithPath: path)))
    }

    // MARK: Range writer

    @Test func aRangeIsWrittenAtItsOffsetOnlyFromTheMatchingPartialAnswer() throws {
        let (directory, file) = try partial(size: 10)
        _ = directory
        let writer = RangeWriter(descriptor: file.descriptor, offset: 4, length: 3, acceptsWholeObject: false)
        #expect(!writer.accepts(status: 206, headers: [.init(name: "Content-Range", value: "bytes 0-2/10")]))
        #expect(writer.serverFault != nil, "another range is the server's fault")

        let right = RangeWriter(descriptor: file.descriptor, offset: 4, length: 3, acceptsWholeObject: false)
        #expect(right.accepts(status: 206, headers: [.init(name: "content-range", value: "bytes 4-6/10")]))
        #expect([UInt8]([1, 2]).withUnsafeBytes { right.write($0) })
        #expect(!right.isComplete)
        #expect([UInt8]([3]).withUnsafeBytes { right.write($0) })
        #expect(right.isComplete)
        #expect(![UInt8]([9]).withUnsafeBytes { right.write($0) }, "never a byte past the range")
        #expect(try contents(file.path) == [0, 0, 0, 0, 1, 2, 3, 0, 0, 0])
        #expect(right.crc32c.value == CRC32C.of([1, 2, 3]))
    }

    @Test func aWholeAnswerIsTakenOnlyForTheWholeObject() throws {
        let (directory, file) = try partial(size: 4)
        _ = directory
        let ranged = RangeWriter(descriptor: file.descriptor, offset: 0, length: 2, acceptsWholeObject: false)
        #expect(!ranged.accepts(status: 200, headers: []))
        #expect(ranged.refusedStatus == 200, "a 200 to a range: the engine decides what it means")

        let whole = RangeWriter(descriptor: file.descriptor, offset: 0, length: 4, acceptsWholeObject: true, hashes: [.md5])
        #expect(whole.accepts(status: 200, headers: []))
        #expect([UInt8]([5, 6, 7, 8]).withUnsafeBytes { whole.write($0) })
        #expect(whole.digests.contains(.md5(Array(Insecure.MD5.hash(data: [5, 6, 7, 8])))))
    }

    // MARK: Digests

    @Test func reprDigestMembersAreRead() {
        let sha = Array(SHA256.hash(data: Array("abc".utf8)))
        let headers: HTTPHeaders = [
            "Repr-Digest": "sha-256=:\(Data(sha).base64EncodedString()):, crc32c=:\(Data(CRC32.bigEndianBytes(0xDEAD_BEEF)).base64EncodedString()):, unixsum=:AAA=:, crc32c=bad"
        ]
        #expect(ObjectDigest.representationDigests(in: headers) == [.sha256(sha), .crc32c(0xDEAD_BEEF)])
    }

    @Test func handlesKeepTheObjectAcrossRuns() {
        let object = RemoteObject(
            location: "https://example.com/a.bin", size: 42, validator: .etag("\"v1\""),
            digests: [.crc32c(7), .md5(Array(repeating: 1, count: 16)), .sha256(Array(repeating: 2, count: 32)), .crc32(9)],
            acceptsRanges: false)
        let record = FileRecord(
            path: "/tmp/a.bin", relativePath: "a.bin", root: 0,
            identity: FileIdentity(size: 42, modificationTimeNanoseconds: 0, inode: 0, device: 0), chunkSize: 8,
            handles: DownloadHandles.handles(of: object, listed: false))
        #expect(DownloadHandles.object(of: record) == object)
        #expect(DownloadHandles.decodeValidator("date:Tue, 01 Jan 2030 00:00:00 GMT") == .lastModified("Tue, 01 Jan 2030 00:00:00 GMT"))
    }

    @Test func theWholeFileIsCheckedFromTheChunksCRCsWithoutReadingIt() throws {
        let (directory, file) = try partial(size: 10)
        _ = directory
        let bytes: [UInt8] = Array(0..<10)
        let plan = ChunkPlan(fileSize: 10, chunkSize: 4)
        var receipts: [Int: String] = [:]
        for chunk in 0..<plan.count {
            let range = plan.range(of: chunk)
            receipts[chunk] = CRC32.hex(CRC32C.of(bytes[Int(range.lowerBound)..<Int(range.upperBound)]))
        }
        // The partial file holds zeros: a CRC combined from the receipts never reads it.
        #expect(try DownloadWorker.check(file, plan: plan, receipts: receipts, against: [.crc32c(CRC32C.of(bytes))]) == nil)
        #expect(try DownloadWorker.check(file, plan: plan, receipts: receipts, against: [.crc32c(1)]) != nil)

        // An MD5 is checked by reading the file once.
        #expect(try DownloadWorker.check(file, plan: plan, receipts: [:], against: [.md5(Array(Insecure.MD5.hash(data: [UInt8](repeating: 0, count: 10))))]) == nil)
        #expect(try DownloadWorker.check(file, plan: plan, receipts: [:], against: [.md5(Array(Insecure.MD5.hash(data: bytes)))]) != nil)
        #expect(try DownloadWorker.check(file, plan: plan, receipts: [:], against: []) == nil, "nothing offered, nothing to check")
    }

    /// Receipts of 24 hex digits carry a range's CRC64NVME after its
    /// CRC-32C: the whole file's CRC64NVME (S3's default checksum) is
    /// combined from them as the CRC-32C is, without reading the file.
    @Test func aCRC64NVMEIsCombinedFromTheRangesReceiptsToo() throws {
        let (directory, file) = try partial(size: 1_000)
        _ = directory
        let bytes = (0..<1_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let plan = ChunkPlan(fileSize: 1_000, chunkSize: 300)
        var receipts: [Int: String] = [:]
        for chunk in 0..<plan.count {
            let range = plan.range(of: chunk)
            let slice = bytes[Int(range.lowerBound)..<Int(range.upperBound)]
            receipts[chunk] = CRC32.hex(CRC32C.of(slice)) + CRC64NVME.hex(CRC64NVME.of(slice))
        }
        let whole = CRC64NVME.of(bytes)
        // The partial file holds zeros: a match can only come from the receipts.
        #expect(try DownloadWorker.check(file, plan: plan, receipts: receipts, against: [.crc64nvme(whole)]) == nil)
        let wrong = try DownloadWorker.check(file, plan: plan, receipts: receipts, against: [.crc64nvme(whole ^ 1)])
        #expect(wrong?.contains("CRC64NVME") == true)
        // Receipts from before (the CRC-32C alone) still check a CRC-32C, and a CRC64NVME by reading the file.
        var old = receipts
        for (chunk, receipt) in receipts { old[chunk] = String(receipt.prefix(8)) }
        #expect(try DownloadWorker.check(file, plan: plan, receipts: old, against: [.crc32c(CRC32C.of(bytes))]) == nil)
        #expect(try DownloadWorker.check(file, plan: plan, receipts: old, against: [.crc64nvme(whole)]) != nil, "read back: zeros")
        #expect(try DownloadWorker.check(file, plan: plan, receipts: old, against: [.crc64nvme(CRC64NVME.of([UInt8](repeating: 0, count: 1_000)))]) == nil)
        // Kept with the file's record across runs.
        let digests: [ObjectDigest] = [
            .crc64nvme(whole), .composite(CompositeChecksum(algorithm: .crc32c, digest: [1, 2, 3, 4], partCount: 3)), .crc32c(5),
        ]
        #expect(DownloadHandles.decodeDigests(DownloadHandles.encode(digests)) == digests)
    }

    /// A composite checksum (S3's `BASE64-N`) is checked through the parts
    /// the server lists: each part against its listed checksum, the checksum
    /// of them all against the object's; from the ranges' receipts where a
    /// part is whole ranges, else read back.
    @Test func aCompositeChecksumIsCheckedPartByPart() throws {
        let (directory, file) = try partial(size: 1_000)
        _ = directory
        let bytes = (0..<1_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) }
        _ = bytes.withUnsafeBytes { pwrite(file.descriptor, $0.baseAddress, 1_000, 0) }
        let plan = ChunkPlan(fileSize: 1_000, chunkSize: 200)
        var receipts: [Int: String] = [:]
        for chunk in 0..<plan.count {
            let range = plan.range(of: chunk)
            receipts[chunk] = CRC32.hex(CRC32C.of(bytes[Int(range.lowerBound)..<Int(range.upperBound)]))
        }
        func parts(_ sizes: [Int], algorithm: CompositeChecksum.Algorithm) -> ([ObjectPartsPage.Part], CompositeChecksum) {
            var listed: [ObjectPartsPage.Part] = []
            var ofParts: [UInt8] = []
            var start = 0
            for (index, size) in sizes.enumerated() {
                let slice = bytes[start..<(start + size)]
                let digest = algorithm == .crc32c ? CRC32.bigEndianBytes(CRC32C.of(slice)) : Array(SHA256.hash(data: Array(slice)))
                listed.append(.init(number: index + 1, size: Int64(size), checksum: digest))
                ofParts += digest
                start += size
            }
            let whole = algorithm == .crc32c ? CRC32.bigEndianBytes(CRC32C.of(ofParts)) : Array(SHA256.hash(data: ofParts))
            return (listed, CompositeChecksum(algorithm: algorithm, digest: whole, partCount: sizes.count))
        }
        // Parts of whole ranges (from the receipts), and parts that cut ranges (read back), in two pages.
        for (sizes, algorithm) in [([400, 400, 200], CompositeChecksum.Algorithm.crc32c), ([300, 300, 400], .crc32c), ([500, 500], .sha256)] {
            let (listed, composite) = parts(sizes, algorithm: algorithm)
            var check = DownloadWorker.CompositeCheck(composite, plan: plan, receipts: receipts, partial: file)
            #expect(try check.add(Array(listed.prefix(1))) == nil)
            #expect(try check.add(Array(listed.dropFirst())) == nil)
            #expect(check.finish() == nil, "\(sizes)")
            // A part whose listed checksum differs is named.
            var bad = listed
            bad[1].checksum = [UInt8](repeating: 0, count: algorithm.digestLength)
            var failing = DownloadWorker.CompositeCheck(composite, plan: plan, receipts: receipts, partial: file)
            #expect(try failing.add(bad)?.contains("part 2") == true)
            // Unlisted part checksums: the object's checksum of them still decides.
            var wrong = composite
            wrong.digest[0] ^= 1
            var unlisted = DownloadWorker.CompositeCheck(wrong, plan: plan, receipts: receipts, partial: file)
            #expect(try unlisted.add(listed.map { .init(number: $0.number, size: $0.size, checksum: nil) }) == nil)
            #expect(unlisted.finish() != nil)
        }
        // Parts that do not add up to the file, or skip a number, are a mismatch.
        let (listed, composite) = parts([400, 400, 200], algorithm: .crc32c)
        var short = DownloadWorker.CompositeCheck(composite, plan: plan, receipts: receipts, partial: file)
        #expect(try short.add(Array(listed.prefix(2))) == nil)
        #expect(short.finish() != nil)
        var skipping = DownloadWorker.CompositeCheck(composite, plan: plan, receipts: receipts, partial: file)
        #expect(try skipping.add([listed[0], listed[2]]) != nil)
        // A receipt-made part's CRC-32C is the one reading it gives.
        #expect(DownloadWorker.combinedCRC32C(offset: 200, length: 400, plan: plan, receipts: receipts) == CRC32C.of(bytes[200..<600]))
        #expect(DownloadWorker.combinedCRC32C(offset: 100, length: 400, plan: plan, receipts: receipts) == nil)
    }

    // MARK: Paths and records

    @Test func namesAndListedPathsStayBelowTheDestination() {
        #expect(TransferEngine.name(of: "https://h/x/y/video%20one.mp4?sig=1") == "video one.mp4")
        #expect(TransferEngine.name(of: "https://h/") == "download")
        #expect(TransferEngine.name(of: "https://h/a/..") == "download")
        #expect(TransferEngine.safeRelativePath("a/b.txt") == "a/b.txt")
        for bad in ["", "/etc/passwd", "a/../b", "./a", "a//b", "a/"] { #expect(TransferEngine.safeRelativePath(bad) == nil, "\(bad)") }
    }

    @Test func aPullsRecordSaysItIsOne() throws {
        var record = JobRecord(
            id: JobID(rawValue: "0123456789abcdef"), backend: "http", target: "/tmp/out", createdAt: Date(timeIntervalSince1970: 1),
            updatedAt: Date(timeIntervalSince1970: 2), concurrency: 4, rootCount: 1, firstRoot: "https://h/a")
        record.isDownload = true
        let decoded = try #require(JobRecord(id: record.id, decoding: record.encoded))
        #expect(decoded.isDownload && !decoded.isStream)
        record.isDownload = false
        #expect(JobRecord(id: record.id, decoding: record.encoded)?.isDownload == false)
    }

    @Test func openingTellsTheSchedulerTheObjectsSize() throws {
        let record = JobRecord(
            id: JobID(rawValue: "0123456789abcdef"), backend: "http", target: "/tmp/out", createdAt: Date(), updatedAt: Date(),
            concurrency: 2, isStarted: true, rootCount: 1, firstRoot: "https://h/a")
        var counters = JobCounters()
        counters.fileCount = 1
        var scheduler = Scheduler(
            record: record, counters: counters,
            configuration: Scheduler.Configuration(
                traits: BackendTraits(defaultChunkSize: 4, defaultConcurrency: 2, authentication: .authorizationHeader),
                concurrency: 2, chunkSize: { _ in 4 }, chunkOrder: { _ in .any }, isDownload: true))
        let unknown = FileRecord(
            path: "/tmp/out", relativePath: "out", root: 0, identity: FileIdentity(size: 0, modificationTimeNanoseconds: 0, inode: 0, device: 0),
            chunkSize: 4, handles: ServerHandles([DownloadHandles.location: "https://h/a"]))
        #expect(scheduler.next() == .loadFile(0))
        _ = try scheduler.apply(.loaded(file: 0, LoadedFile(record: unknown, done: ChunkSet(capacity: 0), identity: unknown.identity)))
        #expect(scheduler.next() == .openFile(0))
        var opened = unknown
        opened.identity.size = 10
        opened.isOpen = true
        _ = try scheduler.apply(.opened(file: 0, opened))
        #expect(scheduler.totalBytes == 10)
        #expect(scheduler.next() == .chunk(file: 0, chunk: 0))
        #expect(scheduler.next() == .chunk(file: 0, chunk: 1))
        #expect(scheduler.file(0)?.plan.count == 3, "10 bytes in 4-byte ranges")
    }
}

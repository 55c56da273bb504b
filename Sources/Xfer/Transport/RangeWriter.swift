import FoundationEssentials
import Crypto
import Glibc
import XferPrimitives
import XferWire

/// Where a download's body goes: straight to its range of the partial file,
/// as curl hands the bytes over, so no buffer of the range's size exists
/// (memory stays bounded whatever the chunk size × concurrency).
///
/// Only the final answer's body is written, and only when its status says it
/// is the range asked for: `206` whose `Content-Range` is exactly
/// `offset…offset+length-1`, or `200` when the range is the whole object
/// (`acceptsWholeObject`). Any other 2xx stops the transfer at its first
/// byte (nothing is written; the answer's status and headers come back with
/// an empty body for the engine to read); an error status's body is
/// collected as for any request. Never a byte is written past the range.
///
/// Touched on the transport's loop thread while the transfer runs and read
/// by the caller after it ended (the completion hand-off orders the two).
final class RangeWriter: @unchecked Sendable {
    let descriptor: Int32
    let offset: Int64
    let length: Int64
    let acceptsWholeObject: Bool
    /// Digests beyond the CRC-32C wanted of these bytes (the whole object's, when they are all of it).
    let hashes: Set<DigestAlgorithm>

    private(set) var written: Int64 = 0
    private(set) var crc32c = CRC32C()
    /// Kept when the object's digests include a CRC64NVME (S3's default
    /// since 2025), so the whole file's is combined from the ranges' as
    /// the CRC-32C is, without reading the file again.
    private(set) var crc64nvme: CRC64NVME?
    private var md5: Insecure.MD5?
    private var sha256: SHA256?
    /// Why writing stopped: a local failure (a full disk) ends the job; a
    /// body longer than the range, or a 206 for another range, is the server's.
    private(set) var localFailure: XferError?
    private(set) var serverFault: String?
    /// The status of an answer whose body was not the range (a 200 to a
    /// ranged request): the transfer stopped at its first byte.
    private(set) var refusedStatus: Int?

    init(
        descriptor: Int32, offset: Int64, length: Int64, acceptsWholeObject: Bool, hashes: Set<DigestAlgorithm> = [],
        computesCRC64NVME: Bool = false
    ) {
        self.descriptor = descriptor
        self.offset = offset
        self.length = length
        self.acceptsWholeObject = acceptsWholeObject
        self.hashes = hashes
        if computesCRC64NVME { crc64nvme = CRC64NVME() }
        if hashes.contains(.md5) { md5 = Insecure.MD5() }
        if hashes.contains(.sha256) { sha256 = SHA256() }
    }

    /// Whether the answer with `status` and `headers` carries the range's
    /// bytes; decided at its first body byte.
    func accepts(status: Int, headers: [HTTPHeaders.Field]) -> Bool {
        switch status {
        case 206:
            let value = headers.last { $0.name.caseInsensitiveEquals("Content-Range") }?.value ?? ""
            guard let range = ContentRange(value), range.first == offset, range.last == offset + length - 1 else {
                serverFault = "the server answered another range (\(value.isEmpty ? "no Content-Range" : value))"
                return false
            }
            return true
        case 200 where acceptsWholeObject:
            return true
        default:
            refusedStatus = status
            return false
        }
    }

    /// Writes `bytes` at their place; false stops the transfer.
    func write(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard Int64(bytes.count) <= length - written else {
            serverFault = "the server sent more than the \(length) bytes asked for"
            return false
        }
        var done = 0
        while done < bytes.count {
            let result = pwrite(
                descriptor, bytes.baseAddress! + done, bytes.count - done, off_t(offset + written + Int64(done)))
            if result < 0 {
                if errno == EINTR { continue }
                localFailure = PartialFile.failure("cannot write the download", errno)
                return false
            }
            done += result
        }
        crc32c.update(bytes)
        crc64nvme?.update(bytes)
        md5?.update(bufferPointer: bytes)
        sha256?.update(bufferPointer: bytes)
        written += Int64(bytes.count)
        return true
    }

    /// Whether every byte of the range arrived.
    var isComplete: Bool { written == length }

    /// The digests of the bytes written (the CRC-32C always).
    var digests: [ObjectDigest] {
        var found: [ObjectDigest] = [.crc32c(crc32c.value)]
        if let crc64nvme { found.append(.crc64nvme(crc64nvme.value)) }
        if let md5 { found.append(.md5(Array(md5.finalize()))) }
        if let sha256 { found.append(.sha256(Array(sha256.finalize()))) }
        return found
    }
}

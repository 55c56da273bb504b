import Crypto
import NIOCore
import XferPrimitives

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A digest computed while a body streams past: what a protocol checks a body against (patch's
/// Content-MD5, multipart's fragmentMd5, sequence's crc, tus's Upload-Checksum), or what the
/// store keeps of it (a single small chunk's SHA-256).
struct StreamingDigest {
    enum Algorithm: Sendable, Equatable {
        case md5, sha1, sha256, crc32, crc32c
    }

    private enum State {
        case md5(Insecure.MD5)
        case sha1(Insecure.SHA1)
        case sha256(SHA256)
        case crc32(CRC32)
        case crc32c(CRC32C)
    }

    private var state: State

    init(_ algorithm: Algorithm) {
        switch algorithm {
        case .md5: state = .md5(Insecure.MD5())
        case .sha1: state = .sha1(Insecure.SHA1())
        case .sha256: state = .sha256(SHA256())
        case .crc32: state = .crc32(CRC32())
        case .crc32c: state = .crc32c(CRC32C())
        }
    }

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        switch state {
        case .md5(var hasher):
            hasher.update(bufferPointer: bytes)
            state = .md5(hasher)
        case .sha1(var hasher):
            hasher.update(bufferPointer: bytes)
            state = .sha1(hasher)
        case .sha256(var hasher):
            hasher.update(bufferPointer: bytes)
            state = .sha256(hasher)
        case .crc32(var crc):
            crc.update(bytes)
            state = .crc32(crc)
        case .crc32c(var crc):
            crc.update(bytes)
            state = .crc32c(crc)
        }
    }

    /// The digest's bytes; a CRC-32's are its value big-endian, as it is written in hex.
    func finalize() -> [UInt8] {
        switch state {
        case .md5(let hasher): Array(hasher.finalize())
        case .sha1(let hasher): Array(hasher.finalize())
        case .sha256(let hasher): Array(hasher.finalize())
        case .crc32(let crc): Self.bytes(crc32: crc.value)
        case .crc32c(let crc): Self.bytes(crc32: crc.value)
        }
    }

    static func bytes(crc32 value: UInt32) -> [UInt8] { CRC32.bigEndianBytes(value) }

    static func crc32(bytes: [UInt8]) -> UInt32 {
        bytes.reduce(0) { $0 << 8 | UInt32($1) }
    }
}

/// The one way a request body (or a form part's content) reaches a file: patch chunks, multipart
/// fragments and sequence blocks (through `Upload.writeChunk`), tus PATCHes and creations with
/// data (`OffsetUpload.write`), and raw PUTs.
///
/// Each buffer is written into the page cache with `pwrite` as it arrives (a memcpy, cheaper
/// inline than a thread hop per buffer) and fed to the digests on the way, so a body is never
/// held in memory beyond one network read. What makes the bytes durable differs by caller (`Sync`).
struct BodyWriter {
    enum Failure: Error {
        /// The body holds more than `limit` bytes; nothing after the buffer that went past was read.
        case tooLarge(limit: Int)
        /// The body ended before `limit` bytes where it must fill them (`exactLength`).
        case tooShort(received: Int, expected: Int)
        /// The bytes do not match `check`.
        case digestMismatch(actual: [UInt8])
        /// The body could not be read to its end: the client went away, a malformed chunked
        /// encoding, or (a form part's content) a form cut short or malformed after it. Whatever
        /// arrived before is in the file, not durable.
        case interrupted(any Error)
    }

    /// A digest the body must have.
    struct Check: Sendable {
        var algorithm: StreamingDigest.Algorithm
        var expected: [UInt8]
    }

    /// Where the bytes go.
    enum Destination {
        /// Opened at the first byte, so a body without any touches no file (a finished tus
        /// upload's data file has moved to downloads/).
        case path(String)
        /// Opened (and closed) by the caller: raw creates its file before the body, so an empty
        /// one exists; `Upload` opens a chunk's before reading a byte of it.
        case file(POSIXFile)
    }

    /// How the written bytes become durable before `write` returns.
    enum Sync {
        /// Not here: `Upload` appends the record of a chunk right after the sync round that made
        /// its bytes durable (`Durability.sync(then:)`), which only its commit can ask for.
        case byCaller
        /// The store's next group-commit round, when anything was written (tus).
        case round(Durability)
        /// `fdatasync` of this one file on the blocking pool, with or without bytes (raw, the
        /// benchmarks' bar of one plain stream, syncs as a plain server would).
        case fileData(BlockingIO)
    }

    struct Written {
        var count: Int
        /// The digest of `hashing`, when asked for.
        var digest: [UInt8]?
        /// Set when the body was cut and `keepsCutBody` kept what arrived.
        var cutBy: (any Error)?
    }

    /// The most bytes the body may hold.
    var limit: Int
    /// The body must hold exactly `limit` bytes (a chunk, a fragment, a block).
    var exactLength = false
    var check: Check? = nil
    /// A digest to compute and return, checked against nothing.
    var hashing: StreamingDigest.Algorithm? = nil
    /// A cut body counts as far as it arrived (tus without a checksum: the client resumes from
    /// the offset); otherwise it is `Failure.interrupted`. Never with `check`: a digest covers a
    /// whole body.
    var keepsCutBody = false
    var sync: Sync
    /// Told of every buffer read, before it is checked: what clients really sent, refused and
    /// partial bodies included.
    var counted: (Int) -> Void

    /// A long body's bytes start for the disk every this many bytes as they arrive: the sync that
    /// makes it durable then waits for at most this much, not for the whole body. A protocol
    /// that sends one request at a time per file (sequence, ietf, tus in order) waits for that
    /// sync in every round trip: a 32 MiB block's fdatasync took ~0.15 s here, 1/8 of the
    /// block's time on a 200 Mbit/s link. 1 MiB, not 4: with 4 MiB left to write at each sync,
    /// 1 GiB in 8 MiB sequence blocks went 12–22 % slower, patch's 8 MiB chunks 10 %
    /// (Docs/benchmarks.md). A call a MiB costs the receiver 3–8 % more CPU per GiB than one
    /// every 4; 2 MiB saved some of it but slowed sequence again (777 -> 714 MiB/s).
    static let writebackStep = 1 << 20

    /// Streams `body` to `destination` from `offset` and returns once it is checked and, as
    /// `sync` says, durable. `trailer` runs after the last byte passed every check and before the
    /// sync: what must follow the bytes (sequence's closing boundary), its error
    /// `Failure.interrupted`. A nil `destination` takes no byte (`limit` 0): an empty part is
    /// only checked. Other errors are the storage's.
    func write<Body: AsyncSequence>(
        _ body: Body, to destination: Destination?, at offset: Int, trailer: (() async throws -> Void)? = nil
    ) async throws -> Written where Body.Element == ByteBuffer {
        precondition(destination != nil || limit == 0, "bytes need somewhere to go")
        precondition(!(keepsCutBody && check != nil), "a checked body counts whole or not at all")
        var file: POSIXFile?
        if case .file(let open) = destination { file = open }
        var openedHere = false
        defer { if openedHere { file?.close() } }
        // MD5 is the most expensive thing done per byte (one core hashes ~600 MB/s here): only
        // what is checked or asked for is computed.
        var checked = check.map { StreamingDigest($0.algorithm) }
        var hashed = hashing.map { StreamingDigest($0) }
        var written = 0
        var writtenBack = 0
        var cutBy: (any Error)?
        var iterator = body.makeAsyncIterator()
        while true {
            let next: ByteBuffer?
            do {
                next = try await iterator.next()
            } catch {
                guard keepsCutBody else { throw Failure.interrupted(error) }
                cutBy = error
                break
            }
            guard let buffer = next else { break }
            let count = buffer.readableBytes
            counted(count)
            guard count <= limit - written else { throw Failure.tooLarge(limit: limit) }
            guard count > 0 else { continue }
            if file == nil, case .path(let path) = destination {
                file = try POSIXFile.open(path, O_WRONLY)
                openedHere = true
            }
            let output = file!
            try buffer.withUnsafeReadableBytes { bytes in
                try output.pwriteAll(bytes, at: offset + written)
                checked?.update(bytes)
                hashed?.update(bytes)
            }
            written += count
            if written - writtenBack >= Self.writebackStep {
                output.startWriteback(offset: offset + writtenBack, count: written - writtenBack)
                writtenBack = written
            }
        }
        if cutBy == nil {
            if exactLength, written != limit { throw Failure.tooShort(received: written, expected: limit) }
            if let check, let actual = checked?.finalize(), actual != check.expected { throw Failure.digestMismatch(actual: actual) }
            if let trailer {
                do {
                    try await trailer()
                } catch {
                    throw Failure.interrupted(error)
                }
            }
        }
        if let file {
            switch sync {
            case .byCaller: break
            case .round(let durability): if written > 0 { try await durability.sync() }
            case .fileData(let io): try await io.run { try file.syncData() }
            }
        }
        return Written(count: written, digest: hashed?.finalize(), cutBy: cutBy)
    }
}

import Crypto
import Synchronization
import XferPrimitives

/// A file a request body reads from while it is sent (the engine's
/// `LocalFile`): the transport copies a range of it straight into curl's
/// buffer, so no buffer of the chunk's size exists.
package protocol BodyFile: AnyObject, Sendable {
    /// The path, for messages.
    var path: String { get }
    /// Fills `buffer` from `offset`; a short count means the file ends there.
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(XferError) -> Int
    /// Throws `.fileChanged` when the file is no longer the one the job
    /// recorded (checked once a range was read, so changed bytes are never
    /// the end of a request).
    func checkUnchanged() throws(XferError)
}

/// One chunk's bytes as a request body carries them: a range of a file read
/// when sent (and for a digest, read once before; a chunk of one read block,
/// up to `passBlock`, is then sent from that read), or bytes in memory (a
/// stream's, a backend's tests). Digests are computed on first use and kept,
/// so a step built again for a retry does not read the chunk again.
package final class ChunkBytes: Sendable, Hashable {
    package enum Source: Sendable {
        case memory([UInt8])
        case file(any BodyFile)
    }

    package let source: Source
    package let offset: Int64
    package let length: Int
    /// Sees the chunk's bytes, in order, the first time a digest pass reads
    /// them (the engine's whole-file hash, fed without a pass of its own).
    private let observer: (@Sendable (Int64, [UInt8]) throws(XferError) -> Void)?
    private let state = Mutex(State())
    /// Held through a digest pass, so that a pass begun ahead of the chunk's
    /// request (`whenSent`, `FileOnDisk.readAhead`) is waited for, not repeated.
    private let pass = Mutex(())

    private struct State {
        // Not `[:]`: an empty literal builds its (empty) array of pairs, whose type
        // the runtime looks up on every chunk.
        var digests = [Digest: [UInt8]]()
        var observed = false
        var failure: XferError?
        /// A chunk of one block, as its first digest pass read (and checked)
        /// it: what the request then sends, instead of reading the range a
        /// second time. At most `passBlock` per chunk in flight.
        var held: [UInt8]?
        /// What to do once the request has taken the chunk's bytes up to `sentMark`.
        var whenSent: (@Sendable () -> Void)?
        var sentMark = Int.max
    }

    /// The digests a chunk can give.
    package enum Digest: Sendable, Hashable {
        case md5, sha1, sha256, crc32, crc32c, crc64nvme
    }

    /// Bytes read per step of a digest pass: small enough that passes of
    /// every chunk in flight together stay a few MiB.
    static let passBlock = 256 << 10

    package init(bytes: [UInt8], offset: Int64) {
        source = .memory(bytes)
        self.offset = offset
        length = bytes.count
        observer = nil
    }

    package init(
        file: any BodyFile, offset: Int64, length: Int,
        observer: (@Sendable (Int64, [UInt8]) throws(XferError) -> Void)? = nil
    ) {
        source = .file(file)
        self.offset = offset
        self.length = length
        self.observer = observer
    }

    package static func == (lhs: ChunkBytes, rhs: ChunkBytes) -> Bool { lhs === rhs }
    package func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }

    /// Copies up to `buffer.count` of the chunk's bytes from `position`
    /// (relative to the chunk) into `buffer`: what the transport sends.
    /// Throws `.fileChanged` when the file ends before the chunk does.
    package func read(into buffer: UnsafeMutableRawBufferPointer, at position: Int) throws(XferError) -> Int {
        let want = min(buffer.count, length - position)
        guard want > 0 else { return 0 }
        switch source {
        case .memory(let bytes):
            bytes.withUnsafeBytes {
                UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want])
                    .copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[position..<(position + want)]))
            }
            return want
        case .file(let file):
            if let held = state.withLock({ $0.held }) {
                held.withUnsafeBytes {
                    UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want])
                        .copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[position..<(position + want)]))
                }
                return want
            }
            let got = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]), at: offset + Int64(position))
            guard got == want else { throw .fileChanged(path: file.path, detail: "it is shorter than when the job began") }
            return got
        }
    }

    /// Throws when the chunk's file is no longer the one the job recorded.
    /// A chunk sent from the bytes its digest pass read (`held`) asks
    /// nothing: the pass checked the file once it had read them, and what
    /// the file holds since is not what was sent (one `fstat` a small file).
    package func checkUnchanged() throws(XferError) {
        guard case .file(let file) = source, state.withLock({ $0.held == nil }) else { return }
        try file.checkUnchanged()
    }

    /// Calls `body` with the chunk's bytes in order, a block at a time.
    package func forEachBlock(_ body: ([UInt8]) throws(XferError) -> Void) throws(XferError) {
        switch source {
        case .memory(let bytes):
            try body(bytes)
        case .file(let file):
            var position = 0
            // Not zeroed first (that was 2 % of a 64 KiB chunk's CPU): only bytes a read filled are used.
            let size = min(Self.passBlock, max(length, 1))
            var block = [UInt8](unsafeUninitializedCapacity: size) { _, count in count = size }
            while position < length {
                let want = min(block.count, length - position)
                var got = 0
                var failure: XferError?
                block.withUnsafeMutableBytes { buffer in
                    do throws(XferError) {
                        got = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]), at: offset + Int64(position))
                    } catch {
                        failure = error
                    }
                }
                if let failure { throw failure }
                guard got == want else { throw .fileChanged(path: file.path, detail: "it is shorter than when the job began") }
                try body(want == block.count ? block : Array(block[0..<want]))
                position += want
            }
            try file.checkUnchanged()
        }
    }

    /// The chunk's bytes in one array (for small bodies and tests).
    package func materialized() throws(XferError) -> [UInt8] {
        if case .memory(let bytes) = source { return bytes }
        var all: [UInt8] = []
        all.reserveCapacity(length)
        try forEachBlock { all += $0 }
        return all
    }

    /// Why reading the chunk for a digest failed (the file changed or
    /// cannot be read), if it did: the engine then fails the request before
    /// it is sent, instead of sending a digest of nothing.
    package var failure: XferError? { state.withLock { $0.failure } }

    /// `digest` of the chunk, computed by one pass on first use. Empty when
    /// the chunk cannot be read (see `failure`).
    package func digest(_ digest: Digest) -> [UInt8] {
        if let known = state.withLock({ $0.digests[digest] }) { return known }
        return pass.withLock { _ in
            if let known = state.withLock({ $0.digests[digest] }) { return known }
            do throws(XferError) {
                let value = try compute(digest)
                state.withLock { $0.digests[digest] = value }
                return value
            } catch {
                state.withLock { if $0.failure == nil { $0.failure = error } }
                return []
            }
        }
    }

    /// The digests computed so far.
    package var computedDigests: [Digest] { state.withLock { Array($0.digests.keys) } }

    /// `action` runs once, when a request has taken the chunk's bytes up to
    /// `mark` (by default all of them, `sendingEnded`: the chunk's reads are
    /// over, and what is left of the request is the server's answer). A retry
    /// that sends the chunk again does not run it again.
    package func whenSent(upTo mark: Int? = nil, _ action: @escaping @Sendable () -> Void) {
        state.withLock {
            $0.whenSent = action
            $0.sentMark = min(mark ?? length, length)
        }
    }

    /// Called by the transport once the body has taken the chunk's bytes
    /// up to `position`; runs `whenSent`'s action the first time they reach its mark.
    package func sent(upTo position: Int) {
        state.withLock { state -> (@Sendable () -> Void)? in
            guard position >= state.sentMark, let action = state.whenSent else { return nil }
            state.whenSent = nil
            return action
        }?()
    }

    /// Called by the transport once the body has taken the chunk's last
    /// byte (and the file was found unchanged); runs `whenSent`'s action,
    /// the first time only.
    package func sendingEnded() {
        sent(upTo: length)
    }

    /// A digest by any of swift-crypto's hash functions (e.g. SHA-512), not kept.
    package func digest<Hash: HashFunction>(by type: Hash.Type) -> [UInt8] {
        var hash = Hash()
        do {
            try forEachBlock { hash.update(data: $0) }
        } catch {
            state.withLock { if $0.failure == nil { $0.failure = error } }
            return []
        }
        return Array(hash.finalize())
    }

    private func compute(_ digest: Digest) throws(XferError) -> [UInt8] {
        let feeds = observer != nil && !state.withLock { $0.observed }
        var md5 = Insecure.MD5()
        var sha1 = Insecure.SHA1()
        var sha256 = SHA256()
        var crc = CRC32()
        var crcC = CRC32C()
        var crc64 = CRC64NVME()
        var position = offset
        var single: [UInt8]?
        try forEachBlock { block throws(XferError) in
            if block.count == length, single == nil, case .file = source { single = block }
            switch digest {
            case .md5: md5.update(data: block)
            case .sha1: sha1.update(data: block)
            case .sha256: sha256.update(data: block)
            case .crc32: crc.update(block)
            case .crc32c: crcC.update(block)
            case .crc64nvme: crc64.update(block)
            }
            if feeds { try observer?(position, block) }
            position += Int64(block.count)
        }
        state.withLock {
            if feeds { $0.observed = true }
            if let single, $0.held == nil { $0.held = single }
        }
        switch digest {
        case .md5: return Array(md5.finalize())
        case .sha1: return Array(sha1.finalize())
        case .sha256: return Array(sha256.finalize())
        case .crc32: return CRC32.bigEndianBytes(crc.value)
        case .crc32c: return CRC32.bigEndianBytes(crcC.value)
        case .crc64nvme: return CRC64NVME.bigEndianBytes(crc64.value)
        }
    }

    /// Feeds the observer if no digest pass did (one pass, nothing computed).
    package func feedObserverIfNeeded() throws(XferError) {
        guard let observer, !state.withLock({ $0.observed }) else { return }
        var position = offset
        try forEachBlock { block throws(XferError) in
            try observer(position, block)
            position += Int64(block.count)
        }
        state.withLock { $0.observed = true }
    }
}

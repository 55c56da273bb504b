import Synchronization

/// A thread-safe running total shared between the loop thread (which adds)
/// and anyone reading metrics.
final class TransferByteCounter: Sendable {
    private let total = Atomic<Int>(0)

    var value: Int { total.load(ordering: .relaxed) }

    func add(_ count: Int) {
        total.add(count, ordering: .relaxed)
    }
}

/// The state one transfer's C callbacks read and write: the request body
/// being streamed out and the response being collected.
///
/// Touched only on the loop thread (curl calls back from inside
/// `curl_multi_perform`), so it needs no locking and is not Sendable.
final class TransferContext {
    private let body: RequestBody
    /// The next byte of the body curl asks for.
    private var position = 0
    /// Whether the chunk's file was found unchanged after its range was read.
    private var checkedUnchanged = false
    /// Why the body could not be read (the file changed or is unreadable):
    /// the transfer was aborted before its body was complete, so the server
    /// never holds mixed bytes.
    private(set) var bodyFailure: XferError?
    private let bodyBytesSent: TransferByteCounter
    /// The caller's own count of this request's body bytes, when it keeps one.
    private let requestBytesSent: TransferByteCounter?

    /// The transport's send budget when it has a rate limit; the body then
    /// goes out only as fast as `allowance` is granted.
    let throttle: SendThrottle?
    /// The request's id, as the throttle's queue knows it.
    let requestID: UInt64
    /// Body bytes the throttle granted and the request has not sent yet.
    var allowance = 0

    let responseLimit: Int
    private(set) var responseBody: [UInt8] = []
    private(set) var exceededResponseLimit = false
    private(set) var headerFields: [HTTPHeaders.Field] = []

    /// Header values of the request; curl's messages are scrubbed of them.
    let requestHeaderValues: [String]

    /// A download's range: its body goes to the file, not to `responseBody`.
    let rangeWriter: RangeWriter?
    /// The status of the answer being received (from its status line).
    private var status = 0
    /// Whether the current answer's body goes to `rangeWriter`, once its first byte decided it.
    private var bodyGoesToFile: Bool?

    init(
        request: HTTPRequest, id: UInt64, responseLimit: Int, bodyBytesSent: TransferByteCounter, throttle: SendThrottle? = nil,
        requestBytesSent: TransferByteCounter? = nil, rangeWriter: RangeWriter? = nil
    ) {
        self.rangeWriter = rangeWriter
        body = request.body
        requestID = id
        self.responseLimit = max(0, responseLimit)
        self.bodyBytesSent = bodyBytesSent
        self.requestBytesSent = requestBytesSent
        self.throttle = throttle
        requestHeaderValues = request.headers.map(\.value)
    }

    deinit {
        inlineBody?.deallocate()
    }

    // MARK: Request body handed over whole

    /// The body in one piece, for curl to send with the request's headers
    /// (`CURLOPT_POSTFIELDS`); it stays valid as long as this context.
    private(set) var inlineBody: UnsafeMutableRawBufferPointer?

    /// Nil when the body's file cannot be read (see `bodyFailure`).
    func makeInlineBody() -> UnsafeRawBufferPointer? {
        if let inlineBody { return UnsafeRawBufferPointer(inlineBody) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, body.count), alignment: 1)
        let count = copyBody(from: 0, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<body.count]))
        guard count == body.count else {
            buffer.deallocate()
            return nil
        }
        inlineBody = buffer
        return UnsafeRawBufferPointer(rebasing: buffer[0..<count])
    }

    /// Counts an inline body as sent (curl read it from memory, not through
    /// `readBody`): whole when the transfer succeeded, else the `uploaded`
    /// bytes curl reports for it (none when it never connected).
    func noteInlineBodySent(uploaded: Int? = nil) {
        if inlineBody != nil {
            let count = min(body.count, uploaded ?? body.count)
            bodyBytesSent.add(count)
            requestBytesSent?.add(count)
        }
    }

    /// Moves the collected body out, so the response does not share (and
    /// later copy) the context's buffer.
    func takeResponseBody() -> [UInt8] {
        defer { responseBody = [] }
        return responseBody
    }

    // MARK: Request body

    /// What a read of the body gave curl.
    enum BodyRead: Equatable {
        /// This many bytes; 0 means the body is complete.
        case bytes(Int)
        /// None until the throttle grants more (the request waits in its queue).
        case paused
        /// The body cannot be read: the transfer must abort (see `bodyFailure`).
        case failed
    }

    /// Fills as much of `buffer` as the body has left and the throttle allows.
    func readBody(into buffer: UnsafeMutableRawBufferPointer) -> BodyRead {
        guard bodyFailure == nil else { return .failed }
        var room = buffer.count
        if let throttle, position < body.count {
            guard allowance > 0 else {
                throttle.budget.wait(requestID, need: Int64(body.count - position))
                return .paused
            }
            room = min(room, allowance)
        }
        let written = copyBody(from: position, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<room]))
        if bodyFailure != nil { return .failed }
        position += written
        allowance = max(0, allowance - written)
        bodyBytesSent.add(written)
        requestBytesSent?.add(written)
        return .bytes(written)
    }

    /// Repositions the body stream. curl rewinds when it must resend a body,
    /// e.g. after a reused connection turned out to be closed.
    func seekBody(to offset: Int) -> Bool {
        guard offset >= 0, offset <= body.count else { return false }
        position = offset
        return true
    }

    /// Copies the body's bytes from `start` into `buffer`: the framing from
    /// memory, a chunk's bytes straight from its file. Once the chunk's range
    /// has been read, the file is checked unchanged, so a file written to
    /// during the request fails it before its last byte is handed over.
    private func copyBody(from start: Int, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        var written = 0
        var at = start
        let before = body.framingBefore.count
        let contentEnd = before + body.content.count
        while written < buffer.count, at < body.count {
            let room = buffer.count - written
            let target = UnsafeMutableRawBufferPointer(rebasing: buffer[written..<buffer.count])
            let copied: Int
            if at < before {
                copied = min(room, before - at)
                body.framingBefore.withUnsafeBytes {
                    target.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[at..<(at + copied)]))
                }
            } else if at < contentEnd {
                let local = at - before
                let want = min(room, contentEnd - at)
                switch body.content {
                case .bytes(let bytes):
                    bytes.withUnsafeBytes {
                        target.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[local..<(local + want)]))
                    }
                    copied = want
                case .chunk(let chunk):
                    do {
                        copied = try chunk.read(into: UnsafeMutableRawBufferPointer(rebasing: target[0..<want]), at: local)
                        if local + copied < chunk.length { chunk.sent(upTo: local + copied) }
                        if local + copied == chunk.length, !checkedUnchanged {
                            try chunk.checkUnchanged()
                            checkedUnchanged = true
                            chunk.sendingEnded()
                        }
                    } catch {
                        bodyFailure = error
                        return written
                    }
                }
            } else {
                let local = at - contentEnd
                copied = min(room, body.framingAfter.count - local)
                body.framingAfter.withUnsafeBytes {
                    target.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[local..<(local + copied)]))
                }
            }
            written += copied
            at += copied
        }
        return written
    }

    // MARK: Response

    /// Takes a piece of the answer's body: a download's range goes to its
    /// file (see `RangeWriter` for which answers qualify), anything else is
    /// collected. False makes curl fail the transfer (CURLE_WRITE_ERROR).
    func receiveBody(_ bytes: UnsafeRawBufferPointer) -> BodyWrite {
        guard let rangeWriter else { return appendResponseBody(bytes) ? .taken : .failed }
        if bodyGoesToFile == nil {
            // An error's body (412, 416, 503…) is read as any answer's; a 2xx that is
            // not the range stops here, before a byte of it is written anywhere.
            if (200..<300).contains(status) {
                guard rangeWriter.accepts(status: status, headers: headerFields) else { return .failed }
                bodyGoesToFile = true
            } else {
                bodyGoesToFile = false
            }
        }
        guard bodyGoesToFile == true else { return appendResponseBody(bytes) ? .taken : .failed }
        if let throttle {
            // The rate limit holds for a download's bytes too: paused until the budget
            // grants more. A piece is taken whole once any allowance is left (curl hands
            // it over again, whole, after a pause); the debt is paid before the next.
            guard allowance > 0 else {
                throttle.budget.wait(requestID, need: rangeWriter.length - rangeWriter.written)
                return .paused
            }
            allowance -= bytes.count
        }
        return rangeWriter.write(bytes) ? .taken : .failed
    }

    /// What became of a piece of an answer's body.
    enum BodyWrite {
        case taken
        /// Not taken until the throttle grants more (curl hands it over again).
        case paused
        /// The transfer must stop (CURLE_WRITE_ERROR).
        case failed
    }

    /// Returns false (making curl fail the transfer with CURLE_WRITE_ERROR)
    /// once the body would exceed the limit.
    private func appendResponseBody(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard bytes.count <= responseLimit - responseBody.count else {
            exceededResponseLimit = true
            return false
        }
        responseBody.append(contentsOf: bytes)
        return true
    }

    /// Consumes one header line as curl delivers it (always a complete line,
    /// CRLF included). A status line starts a new response, so headers of
    /// interim 1xx responses and of proxy CONNECT replies are forgotten and
    /// only the final response's remain; an interim response's are not even
    /// read (the IETF draft's 104 brings five of them to every creation).
    /// Read in place: the line is curl's buffer, and only a field kept
    /// becomes a `String`.
    func receiveHeaderLine(_ bytes: UnsafeRawBufferPointer) {
        var end = bytes.count
        while end > 0, bytes[end - 1] == UInt8(ascii: "\n") || bytes[end - 1] == UInt8(ascii: "\r") {
            end -= 1
        }
        guard end > 0 else { return }
        let line = bytes[0..<end]
        if line.starts(with: "HTTP/".utf8) {
            headerFields.removeAll(keepingCapacity: true)
            responseBody.removeAll(keepingCapacity: true)
            bodyGoesToFile = nil
            status = Self.statusCode(of: line)
            return
        }
        if (100..<200).contains(status) { return }
        let first = line[line.startIndex]
        if first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") {
            // Obsolete line folding: a continuation of the previous value.
            guard var last = headerFields.popLast() else { return }
            let continuation = Self.trimmingWhitespace(line)
            if !continuation.isEmpty {
                last.value += (last.value.isEmpty ? "" : " ") + String(decoding: continuation, as: UTF8.self)
            }
            headerFields.append(last)
            return
        }
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { return }
        let name = Self.trimmingWhitespace(line[..<colon])
        guard !name.isEmpty else { return }
        let value = Self.trimmingWhitespace(line[(colon + 1)...])
        headerFields.append(HTTPHeaders.Field(
            name: String(decoding: name, as: UTF8.self),
            value: String(decoding: value, as: UTF8.self)
        ))
    }

    /// The code of a status line (`HTTP/1.1 206 Partial Content`, `HTTP/2 200`); 0 when unreadable.
    private static func statusCode(of line: Slice<UnsafeRawBufferPointer>) -> Int {
        guard let space = line.firstIndex(of: UInt8(ascii: " ")) else { return 0 }
        var code = 0
        var digits = 0
        for byte in line[(space + 1)...] {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { break }
            code = code * 10 + Int(byte - UInt8(ascii: "0"))
            digits += 1
        }
        return digits == 3 ? code : 0
    }

    private static func trimmingWhitespace(_ bytes: Slice<UnsafeRawBufferPointer>) -> Slice<UnsafeRawBufferPointer> {
        var start = bytes.startIndex
        var end = bytes.endIndex
        while start < end, bytes[start] == UInt8(ascii: " ") || bytes[start] == UInt8(ascii: "\t") { start += 1 }
        while end > start, bytes[end - 1] == UInt8(ascii: " ") || bytes[end - 1] == UInt8(ascii: "\t") { end -= 1 }
        return bytes[start..<end]
    }
}

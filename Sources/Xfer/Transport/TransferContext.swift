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
    private var segmentIndex = 0
    private var segmentOffset = 0
    private let bodyBytesSent: TransferByteCounter

    let responseLimit: Int
    private(set) var responseBody: [UInt8] = []
    private(set) var exceededResponseLimit = false
    private(set) var headerFields: [HTTPHeaders.Field] = []

    /// Header values of the request; curl's messages are scrubbed of them.
    let requestHeaderValues: [String]

    init(request: HTTPRequest, responseLimit: Int, bodyBytesSent: TransferByteCounter) {
        body = request.body
        self.responseLimit = max(0, responseLimit)
        self.bodyBytesSent = bodyBytesSent
        requestHeaderValues = request.headers.map(\.value)
    }

    deinit {
        inlineBody?.deallocate()
    }

    // MARK: Request body handed over whole

    /// The body in one piece, for curl to send with the request's headers
    /// (`CURLOPT_POSTFIELDS`); it stays valid as long as this context.
    private(set) var inlineBody: UnsafeMutableRawBufferPointer?

    func makeInlineBody() -> UnsafeRawBufferPointer {
        if let inlineBody { return UnsafeRawBufferPointer(inlineBody) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, body.count), alignment: 1)
        var offset = 0
        for segment in body.segments {
            segment.withUnsafeBytes { source in
                UnsafeMutableRawBufferPointer(rebasing: buffer[offset..<(offset + source.count)]).copyMemory(from: source)
            }
            offset += segment.count
        }
        inlineBody = buffer
        return UnsafeRawBufferPointer(rebasing: buffer[0..<offset])
    }

    /// Counts an inline body as sent (curl read it from memory, not through `readBody`).
    func noteInlineBodySent() {
        if inlineBody != nil { bodyBytesSent.add(body.count) }
    }

    /// Moves the collected body out, so the response does not share (and
    /// later copy) the context's buffer.
    func takeResponseBody() -> [UInt8] {
        defer { responseBody = [] }
        return responseBody
    }

    // MARK: Request body

    /// Fills as much of `buffer` as the remaining segments allow; 0 means
    /// the body is complete.
    func readBody(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        var written = 0
        while written < buffer.count, segmentIndex < body.segments.count {
            let segment = body.segments[segmentIndex]
            let available = segment.count - segmentOffset
            if available == 0 {
                segmentIndex += 1
                segmentOffset = 0
                continue
            }
            let count = min(available, buffer.count - written)
            segment.withUnsafeBytes { source in
                UnsafeMutableRawBufferPointer(rebasing: buffer[written..<(written + count)])
                    .copyMemory(from: UnsafeRawBufferPointer(rebasing: source[segmentOffset..<(segmentOffset + count)]))
            }
            segmentOffset += count
            written += count
        }
        bodyBytesSent.add(written)
        return written
    }

    /// Repositions the body stream. curl rewinds when it must resend a body,
    /// e.g. after a reused connection turned out to be closed.
    func seekBody(to offset: Int) -> Bool {
        guard offset >= 0 else { return false }
        var remaining = offset
        for (index, segment) in body.segments.enumerated() {
            if remaining < segment.count {
                segmentIndex = index
                segmentOffset = remaining
                return true
            }
            remaining -= segment.count
        }
        guard remaining == 0 else { return false }
        segmentIndex = body.segments.count
        segmentOffset = 0
        return true
    }

    // MARK: Response

    /// Returns false (making curl fail the transfer with CURLE_WRITE_ERROR)
    /// once the body would exceed the limit.
    func appendResponseBody(_ bytes: UnsafeRawBufferPointer) -> Bool {
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
    /// only the final response's remain.
    func receiveHeaderLine(_ bytes: UnsafeRawBufferPointer) {
        let line = Self.trimmingLineEnd(bytes)
        guard let first = line.first else { return }
        if line.starts(with: "HTTP/".utf8) {
            headerFields.removeAll(keepingCapacity: true)
            responseBody.removeAll(keepingCapacity: true)
            return
        }
        if first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") {
            // Obsolete line folding: a continuation of the previous value.
            guard var last = headerFields.popLast() else { return }
            let continuation = Self.trimmingWhitespace(line[...])
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

    private static func trimmingLineEnd(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
        var end = bytes.count
        while end > 0, bytes[end - 1] == UInt8(ascii: "\n") || bytes[end - 1] == UInt8(ascii: "\r") {
            end -= 1
        }
        return Array(bytes[0..<end])
    }

    private static func trimmingWhitespace(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        let isWhitespace = { (byte: UInt8) in byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        guard let start = bytes.firstIndex(where: { !isWhitespace($0) }),
              let end = bytes.lastIndex(where: { !isWhitespace($0) })
        else { return [] }
        return bytes[start...end]
    }
}

import Foundation
import Hummingbird
import NIOCore

/// JSON bodies for every protocol's answers. Errors are always `{"error": "..."}` so clients can show
/// the reason without knowing which endpoint failed.
enum JSONResponse {
    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        // Sorted keys keep answers byte-stable, which makes logs and tests diffable;
        // unescaped slashes keep URLs readable.
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    static func make(_ status: HTTPResponse.Status, _ value: some Encodable, headers: HTTPFields = [:]) -> Response {
        let data: Data
        do {
            data = try encoder.encode(value)
        } catch {
            // Only our own fixed types come through here; a failure is a programming error.
            return Response(status: .internalServerError)
        }
        var headers = headers
        headers[.contentType] = "application/json; charset=utf-8"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// `value` as `make` encodes it, with its empty array member `key` filled with `integers`.
    ///
    /// For answers that list every chunk an upload holds: a million numbers through JSONEncoder
    /// take half a second, written directly a few milliseconds. `value` must encode `key` as `[]`;
    /// inside a JSON string the member's quotes would be escaped, so only the member itself matches.
    static func make(_ status: HTTPResponse.Status, _ value: some Encodable, filling key: String, with integers: [Int]) -> Response {
        guard let data = try? encoder.encode(value) else { return Response(status: .internalServerError) }
        let marker = Array("\"\(key)\":[]".utf8)
        let bytes = [UInt8](data)
        guard let at = bytes.firstRange(of: marker) else { return Response(status: .internalServerError) }
        var buffer = ByteBuffer()
        buffer.reserveCapacity(bytes.count + integers.count * 8)
        buffer.writeBytes(bytes[..<(at.upperBound - 1)])
        for (index, integer) in integers.enumerated() {
            if index > 0 { buffer.writeInteger(UInt8(ascii: ",")) }
            buffer.writeString(String(integer))
        }
        buffer.writeBytes(bytes[(at.upperBound - 1)...])
        return Response(status: status, headers: [.contentType: "application/json; charset=utf-8"], body: ResponseBody(byteBuffer: buffer))
    }

    static func error(_ status: HTTPResponse.Status, _ message: String) -> Response {
        make(status, ["error": message])
    }

    static func decode<T: Decodable>(_ type: T.Type, from buffer: ByteBuffer) throws -> T {
        try JSONDecoder().decode(type, from: Data(buffer.readableBytesView))
    }
}

/// Collects a small JSON request body; the limit keeps a hostile client from making us buffer a file.
enum SmallBody {
    static let limit = 64 * 1024

    enum Failure: Error {
        case tooLarge
        case unreadable
    }

    static func collect(_ request: Request) async throws(Failure) -> ByteBuffer {
        do {
            return try await request.body.collect(upTo: limit)
        } catch is NIOTooManyBytesError {
            throw .tooLarge
        } catch {
            throw .unreadable
        }
    }
}

/// Gives unknown routes the same `{"error": ...}` body as every other refusal; Hummingbird's own
/// not-found answer is empty.
struct JSONNotFoundMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound {
            return JSONResponse.error(.notFound, "no such endpoint")
        }
    }
}

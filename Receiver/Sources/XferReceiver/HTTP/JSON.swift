import XferPrimitives
import XferWire
import FoundationEssentials
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

    /// An answer whose JSON body XferWire wrote (each protocol's answers are its wire's).
    static func make(_ status: HTTPResponse.Status, body: [UInt8], headers: HTTPFields = [:]) -> Response {
        var headers = headers
        headers[.contentType] = "application/json; charset=utf-8"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: body)))
    }

    static func error(_ status: HTTPResponse.Status, _ message: String) -> Response {
        make(status, body: ErrorBody.error(message))
    }

    static func decode<T: Decodable>(_ type: T.Type, from buffer: ByteBuffer) throws -> T {
        try JSONDecoder().decode(type, from: Data(buffer.readableBytesView))
    }
}

extension JSONWriter {
    /// An answer with this body. Written directly, for the answers and records every file goes
    /// through: `JSONEncoder` costs more than the rest of such a request's own work. Output
    /// matches what `JSONResponse.make` writes (sorted keys, slashes unescaped).
    func response(_ status: HTTPResponse.Status, headers: HTTPFields = [:]) -> Response {
        JSONResponse.make(status, body: bytes, headers: headers)
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

import XferPrimitives
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

    /// `value` as `make` encodes it, with each of its empty array members named in `arrays`
    /// filled with the elements given (JSON text, without the brackets).
    ///
    /// For answers that list chunks: a million numbers through JSONEncoder take half a second,
    /// written directly a few milliseconds. `value` must encode each key as `[]`; inside a JSON
    /// string the member's quotes would be escaped, so only the member itself matches.
    static func make(_ status: HTTPResponse.Status, _ value: some Encodable, filling arrays: KeyValuePairs<String, [UInt8]>) -> Response {
        guard let data = try? encoder.encode(value) else { return Response(status: .internalServerError) }
        var text = [UInt8](data)
        for (key, elements) in arrays {
            let marker = Array("\"\(key)\":[]".utf8)
            guard let at = text.firstRange(of: marker) else { return Response(status: .internalServerError) }
            text.insert(contentsOf: elements, at: at.upperBound - 1)
        }
        let buffer = ByteBuffer(bytes: text)
        return Response(status: status, headers: [.contentType: "application/json; charset=utf-8"], body: ResponseBody(byteBuffer: buffer))
    }

    /// `1,2,3`: numbers as the elements of a JSON array.
    static func elements(_ numbers: [Int]) -> [UInt8] {
        var text: [UInt8] = []
        text.reserveCapacity(numbers.count * 8)
        for (index, number) in numbers.enumerated() {
            if index > 0 { text.append(UInt8(ascii: ",")) }
            appendDecimal(number, to: &text)
        }
        return text
    }

    /// `[1,5],[7,7]`: runs of chunk numbers as the elements of a JSON array of pairs.
    static func elements(_ runs: some Collection<ClosedRange<Int>>) -> [UInt8] {
        var text: [UInt8] = []
        text.reserveCapacity(runs.count * 16)
        for (index, run) in runs.enumerated() {
            text += Array(index > 0 ? ",[".utf8 : "[".utf8)
            appendDecimal(run.lowerBound, to: &text)
            text.append(UInt8(ascii: ","))
            appendDecimal(run.upperBound, to: &text)
            text.append(UInt8(ascii: "]"))
        }
        return text
    }

    /// `value`'s decimal digits appended to `text`, with no String made per number.
    static func appendDecimal(_ value: Int, to text: inout [UInt8]) {
        if value < 0 { text.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        var divisor: UInt = 1
        while divisor <= magnitude / 10 { divisor *= 10 }
        while true {
            text.append(UInt8(ascii: "0") + UInt8(magnitude / divisor))
            magnitude %= divisor
            if divisor == 1 { return }
            divisor /= 10
        }
    }

    static func error(_ status: HTTPResponse.Status, _ message: String) -> Response {
        make(status, ["error": message])
    }

    static func decode<T: Decodable>(_ type: T.Type, from buffer: ByteBuffer) throws -> T {
        try JSONDecoder().decode(type, from: Data(buffer.readableBytesView))
    }
}

/// JSON written directly, for the answers and records every file goes through: `JSONEncoder`
/// costs more than the rest of such a request's own work. Output matches what `JSONResponse.make`
/// writes (sorted keys, slashes unescaped) so answers stay byte-stable.
struct JSONText {
    private(set) var bytes: [UInt8] = []

    init() {
        bytes.reserveCapacity(128)
    }

    /// Appends `text` as it is (punctuation, numbers, keys known to need no escaping).
    mutating func raw(_ text: String) {
        bytes.append(contentsOf: text.utf8)
    }

    /// Appends `text` as a JSON string: `"` and `\` escaped, control characters as `\u00XX`,
    /// everything else (non-ASCII included) as its UTF-8.
    mutating func string(_ text: String) {
        let hex = Array("0123456789abcdef".utf8)
        bytes.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                bytes.append(UInt8(ascii: "\\"))
                bytes.append(byte)
            case 0x0A:
                bytes.append(contentsOf: "\\n".utf8)
            case 0x0D:
                bytes.append(contentsOf: "\\r".utf8)
            case 0x09:
                bytes.append(contentsOf: "\\t".utf8)
            case 0..<0x20:
                bytes.append(contentsOf: "\\u00".utf8)
                bytes.append(hex[Int(byte >> 4)])
                bytes.append(hex[Int(byte & 0xF)])
            default:
                bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// An answer with this body.
    func response(_ status: HTTPResponse.Status, headers: HTTPFields = [:]) -> Response {
        var headers = headers
        headers[.contentType] = "application/json; charset=utf-8"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }
}

/// A JSON object of strings and integers only (`{"fileName":"a.bin","size":3}`), read without
/// `JSONDecoder`, which costs more than the rest of a small request's own work. Anything else
/// (nested values, fractions, exponents, leading zeros, repeated keys, lone surrogates) gives nil:
/// callers then decode with `JSONDecoder`, so what is accepted and refused stays exactly its.
struct FlatJSONObject {
    enum Value: Equatable {
        case string(String)
        case integer(Int)
    }

    let members: [String: Value]

    init?(_ buffer: ByteBuffer) {
        guard let members = buffer.withUnsafeReadableBytes({ Self.parse($0) }) else { return nil }
        self.members = members
    }

    func string(_ key: String) -> String? {
        if case .string(let value)? = members[key] { return value }
        return nil
    }

    func integer(_ key: String) -> Int? {
        if case .integer(let value)? = members[key] { return value }
        return nil
    }

    private static func parse(_ bytes: UnsafeRawBufferPointer) -> [String: Value]? {
        var index = 0
        func skipSpace() {
            while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x09 || bytes[index] == 0x0A || bytes[index] == 0x0D {
                index += 1
            }
        }
        func take(_ byte: UInt8) -> Bool {
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
            return true
        }
        func string() -> String? {
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { return nil }
            return try? JSONStringLiteral.read(bytes, at: &index)
        }
        func integer() -> Int? {
            let negative = take(UInt8(ascii: "-"))
            let start = index
            var value = 0
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
                let (times, overflow1) = value.multipliedReportingOverflow(by: 10)
                let (sum, overflow2) = times.addingReportingOverflow(Int(bytes[index] - UInt8(ascii: "0")))
                guard !overflow1, !overflow2 else { return nil }
                value = sum
                index += 1
            }
            let digits = index - start
            guard digits > 0, digits == 1 || bytes[start] != UInt8(ascii: "0") else { return nil }
            // A fraction or an exponent follows: not an integer this parser vouches for.
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") || bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                return nil
            }
            return negative ? -value : value
        }

        var members: [String: Value] = [:]
        skipSpace()
        guard take(UInt8(ascii: "{")) else { return nil }
        skipSpace()
        if !take(UInt8(ascii: "}")) {
            while true {
                skipSpace()
                guard let key = string(), members[key] == nil else { return nil }
                skipSpace()
                guard take(UInt8(ascii: ":")) else { return nil }
                skipSpace()
                guard index < bytes.count else { return nil }
                if bytes[index] == UInt8(ascii: "\"") {
                    guard let value = string() else { return nil }
                    members[key] = .string(value)
                } else {
                    guard let value = integer() else { return nil }
                    members[key] = .integer(value)
                }
                skipSpace()
                if take(UInt8(ascii: ",")) { continue }
                guard take(UInt8(ascii: "}")) else { return nil }
                break
            }
        }
        skipSpace()
        return index == bytes.count ? members : nil
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

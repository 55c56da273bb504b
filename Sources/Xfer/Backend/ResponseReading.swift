import FoundationEssentials
import XferPrimitives
import XferWire

extension HTTPResponse {
    /// Accepts the listed statuses; turns the rest into the error the engine
    /// should act on: 5xx, 408 and 429 are transient (honouring
    /// `Retry-After`), other statuses are refusals carrying the server's message.
    public func require(_ accepted: Int..., for operation: String) throws(BackendError) {
        if accepted.contains(status) { return }
        throw unexpectedStatus(operation)
    }

    /// Whether the status says "try again later": 5xx, 408 (the server timed the request out) and
    /// 429 (too many requests). The one rule every retry of the engine follows.
    public var isTransientStatus: Bool { HTTPAnswerRules.isTransient(status) }

    /// The error for a status the caller did not expect (see `require`).
    public func unexpectedStatus(_ operation: String) -> BackendError {
        let detail = serverMessage.map { ": \($0)" } ?? ""
        if isTransientStatus {
            return .transient("\(operation): HTTP \(status)\(detail)", retryAfter: retryAfter)
        }
        if status == 413 {
            // Often a proxy's body limit (nginx's default is 1 MiB) below the chunks of a large
            // file (8 MiB and more by default): name the body, the thing the user can change.
            return .rejected("\(operation): HTTP 413, the server refuses a request body this large\(detail)")
        }
        return .rejected("\(operation): HTTP \(status)\(detail)")
    }

    /// The server's `Retry-After`, in seconds or as an HTTP date.
    public var retryAfter: Duration? { headers["Retry-After"].flatMap { HTTPAnswerRules.retryAfter($0) } }

    /// An HTTP date (RFC 9110's IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`),
    /// as in `Retry-After` and `Last-Modified`; nil for anything else.
    public static func httpDate(_ text: String) -> Date? { HTTPAnswerRules.date(text) }

    /// A short, single-line message from the body: a JSON `error`, `msg` or
    /// `message` field, else the start of a text body. Nil when there is none.
    public var serverMessage: String? {
        // Every refusal form the receiver writes (XferWire's `ErrorBody`), and other servers'.
        if let json = try? JSONValue.parse(body), let text = ErrorBody.message(in: json) { return Self.oneLine(text) }
        let type = headers["Content-Type"]?.lowercased() ?? ""
        guard type.hasPrefix("text/plain") || type.hasPrefix("application/json") else {
            return body.isEmpty ? nil : "\(type.isEmpty ? "unexpected" : type) answer of \(body.count) bytes"
        }
        let text = Self.oneLine(String(decoding: body.prefix(200), as: UTF8.self))
        return text.isEmpty ? nil : text
    }

    /// The body decoded as JSON `T`. A body that does not decode is treated
    /// as transient: a proxy or an overloaded server can cut an answer short.
    public func decode<T: Decodable>(_ type: T.Type, for operation: String) throws(BackendError) -> T {
        do {
            return try JSONDecoder().decode(T.self, from: Data(body))
        } catch {
            throw .transient("\(operation): the server's answer is not the expected JSON")
        }
    }

    /// The array of non-negative integers under the top-level member `key` of a JSON body; nil
    /// when the body does not have that shape.
    ///
    /// For answers that list every chunk a server holds (half a million numbers): read by
    /// XferWire's JSON reader, the project's one, which sums plain integers from their digits
    /// (JSONDecoder took ~350 ms for such a list in a release build, most of a resume's wait).
    public func integers(inArrayNamed key: String) -> [Int]? {
        guard let elements = (try? JSONValue.parse(body))?[key]?.arrayValue else { return nil }
        var values: [Int] = []
        values.reserveCapacity(elements.count)
        for element in elements {
            guard let value = element.strictInteger, value >= 0 else { return nil }
            values.append(value)
        }
        return values
    }

    /// The body as a JSON value (see `decode` for what a bad body means).
    public func json(for operation: String) throws(BackendError) -> JSONValue {
        do {
            return try JSONValue.parse(body)
        } catch {
            throw .transient("\(operation): the server's answer is not JSON")
        }
    }

    static func oneLine(_ text: String) -> String {
        // Control and format characters (what Foundation's `controlCharacters` holds) become spaces.
        let flattened = String(String.UnicodeScalarView(text.unicodeScalars.map {
            switch $0.properties.generalCategory {
            case .control, .format: " "
            default: $0
            }
        }))
        let trimmed = flattened.trimmingSpacesAndTabs()
        return trimmed.count > 200 ? String(trimmed.prefix(200)) + "…" : trimmed
    }
}

extension RequestBody {
    /// A JSON document.
    public static func json(_ value: JSONValue) -> RequestBody { RequestBody(value.encoded) }

    /// An `application/x-www-form-urlencoded` body.
    public static func form(_ fields: [(String, String)]) -> RequestBody {
        RequestBody(Array(FormEncoding.encode(fields).utf8))
    }
}

enum FormEncoding {
    static func escape(_ text: String) -> String {
        PercentEncoding.encode(text)
    }

    static func encode(_ fields: [(String, String)]) -> String {
        fields.map { "\(escape($0.0))=\(escape($0.1))" }.joined(separator: "&")
    }
}

extension String {
    /// The string percent-encoded for use as one URL path segment.
    public var percentEncodedPathSegment: String { FormEncoding.escape(self) }
}

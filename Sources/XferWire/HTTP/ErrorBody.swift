/// The bodies a refusal takes, written by the receiver and read by the clients: `{"error"}`
/// (patch, tus, raw PUT, downloads), RFC 9457 problem details (the IETF draft), and the
/// envelope's `msg` (multipart, sequence: `Envelope`).
public enum ErrorBody {
    /// `{"error": message}`.
    public static func error(_ message: String) -> [UInt8] {
        var body = JSONWriter()
        body.raw("{\"error\":")
        body.string(message)
        body.raw("}")
        return body.bytes
    }

    /// The media type of problem details.
    public static let problemMediaType = "application/problem+json"

    /// RFC 9457 problem details: `{"type","title","status",members...}`, the title being the
    /// refusal's message and the members the integers a problem type defines (the IETF
    /// draft's `expected-offset`, say).
    public static func problem(type: String?, title: String, status: Int, members: [(name: String, value: Int)] = []) -> [UInt8] {
        var body = JSONWriter()
        body.raw("{\"type\":")
        body.string(type ?? "about:blank")
        body.raw(",\"title\":")
        body.string(title)
        body.raw(",\"status\":")
        body.integer(status)
        for member in members {
            body.raw(",")
            body.string(member.name)
            body.raw(":")
            body.integer(member.value)
        }
        body.raw("}")
        return body.bytes
    }

    /// The message of a refusal in any of these forms, and in those other servers use: the
    /// first non-empty string of `error`, `msg`, `message`, `detail`, `title`.
    public static func message(in json: JSONValue) -> String? {
        for key in ["error", "msg", "message", "detail", "title"] {
            if let text = json[key]?.stringValue, !text.isEmpty { return text }
        }
        return nil
    }
}

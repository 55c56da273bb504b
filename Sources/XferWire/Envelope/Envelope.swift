/// The answer of the `multipart` and `sequence` protocols: `{"code","data","msg"}`, with HTTP
/// 200 whatever happened (the outcome is `code`; the protocols' clients read nothing else).
/// The receiver writes it, the backends read it, both through this type.
public struct Envelope: Sendable, Equatable {
    /// The outcome: each protocol has its own codes (`MultipartCode`, `SequenceCode`).
    public var code: Int
    /// A one-line message for people.
    public var msg: String
    /// What the answer carries; `{}` when nothing.
    public var data: JSONValue

    public init(code: Int, msg: String, data: JSONValue = .object([:])) {
        self.code = code
        self.msg = msg
        self.data = data
    }

    /// The answer's body (keys sorted: answers stay byte-stable).
    public var body: [UInt8] {
        JSONValue.object(["code": .int(code), "msg": .string(msg), "data": data]).encoded(.utf8)
    }

    /// Why an answer is not an envelope.
    public struct Malformed: Error, Sendable, CustomStringConvertible {
        public var description: String { "the answer has no code" }
    }

    /// Reads an answer: `code` must be there (a number, or a string holding one: servers mix
    /// them); a missing `msg` is empty, a missing `data` `{}`.
    public init(parsing json: JSONValue) throws(Malformed) {
        guard let code = json["code"]?.intValue else { throw Malformed() }
        self.init(code: code, msg: json["msg"]?.stringValue ?? "", data: json["data"] ?? .object([:]))
    }
}

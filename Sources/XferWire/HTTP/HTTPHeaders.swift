// The header fields of a request or an answer, one type for every module that describes HTTP:
// the engine's requests and answers (`Xfer.HTTPHeaders` names it), S3's requests and answers
// (XferS3Core, which sends nothing itself), and the wire of every protocol.

/// An ordered list of header fields; names compare case-insensitively.
public struct HTTPHeaders: Sendable, Hashable, Sequence, ExpressibleByDictionaryLiteral {
    /// One header field.
    public struct Field: Sendable, Hashable {
        /// The field's name, as sent.
        public var name: String
        /// The field's value.
        public var value: String
        /// A field `name: value`.
        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    /// The fields, in the order they are sent.
    public private(set) var fields: [Field]

    /// No fields.
    public init() { fields = [] }
    /// These fields, in order.
    public init(_ fields: [Field]) { self.fields = fields }
    /// Fields from a literal, in its order.
    public init(dictionaryLiteral elements: (String, String)...) {
        fields = elements.map { Field(name: $0.0, value: $0.1) }
    }

    /// The first value of `name`, or nil.
    public subscript(name: String) -> String? {
        fields.first { Self.sameName($0.name, name) }?.value
    }

    /// All values of `name`, in order.
    public func values(for name: String) -> [String] {
        fields.filter { Self.sameName($0.name, name) }.map(\.value)
    }

    /// Appends a field, keeping any existing fields of the same name.
    public mutating func add(_ name: String, _ value: String) {
        fields.append(Field(name: name, value: value))
    }

    /// Replaces every field named `name` with one field.
    public mutating func set(_ name: String, _ value: String) {
        remove(name)
        fields.append(Field(name: name, value: value))
    }

    /// Removes every field named `name`.
    public mutating func remove(_ name: String) {
        fields.removeAll { Self.sameName($0.name, name) }
    }

    /// Whether a field named `name` is present.
    public func contains(_ name: String) -> Bool { self[name] != nil }

    /// The fields, in order.
    public func makeIterator() -> IndexingIterator<[Field]> { fields.makeIterator() }

    /// Names compare without regard to ASCII case (HTTP's rule); different lengths never match.
    static func sameName(_ a: String, _ b: String) -> Bool {
        a.utf8.count == b.utf8.count && a.lowercased() == b.lowercased()
    }
}

/// The name of a handle a backend keeps, and whether its value is secret.
///
/// A backend declares its keys once (`static let uploadID = HandleKey("uploadId")`)
/// and reads and writes handles only through them, so a key cannot be
/// misspelled in one step, and a secret is redacted wherever it is shown.
public struct HandleKey: Sendable, Hashable, CustomStringConvertible {
    /// The name stored with the job (keep it stable: resumed jobs read it).
    public let name: String
    /// Whether the value is shown redacted (e.g. a token that lets anyone
    /// write into the upload).
    public let isSecret: Bool

    /// A key named `name`.
    public init(_ name: String, secret: Bool = false) {
        self.name = name
        self.isSecret = secret
    }

    public var description: String { name }
}

/// Values a server handed out that the client must keep and echo: upload
/// ids, tokens, echo parameters. They are committed to the state store before
/// the first request that needs them.
///
/// Keys marked secret are shown redacted wherever handles are displayed.
public struct ServerHandles: Sendable, Hashable, Codable, ExpressibleByDictionaryLiteral {
    /// Every handle by name, secrets included: for backends, never for display.
    public private(set) var values: [String: String]
    /// The names whose values are shown redacted.
    public private(set) var secretKeys: Set<String>

    /// No handles.
    public init() {
        values = [:]
        secretKeys = []
    }

    /// Handles with these values.
    public init(dictionaryLiteral elements: (HandleKey, String)...) {
        self.init()
        for (key, value) in elements { set(key, value) }
    }

    /// Handles as stored (the engine's and the state store's view).
    package init(_ values: [String: String], secretKeys: Set<String> = []) {
        self.values = values
        self.secretKeys = secretKeys
    }

    /// The value of `key`, or nil.
    public subscript(key: HandleKey) -> String? { values[key.name] }

    /// The value stored under `name`, or nil (the engine's view).
    package subscript(name: String) -> String? { values[name] }

    /// The value of `key`.
    ///
    /// - Throws: `BackendError.uploadUnknown` when it is missing: the state
    ///   no longer holds what the upload needs, so the engine opens the file
    ///   afresh (or, for a job's handle, fails the job).
    public func require(_ key: HandleKey) throws(BackendError) -> String {
        guard let value = values[key.name], !value.isEmpty else {
            throw .uploadUnknown("the job's state holds no \(key.name) for this upload")
        }
        return value
    }

    /// Whether there are no handles.
    public var isEmpty: Bool { values.isEmpty }

    /// Sets `key` (redacted in displays when the key is secret).
    public mutating func set(_ key: HandleKey, _ value: String) {
        values[key.name] = value
        if key.isSecret { secretKeys.insert(key.name) } else { secretKeys.remove(key.name) }
    }

    /// Sets the handle named `name` (the engine's and the store's view).
    package mutating func set(_ name: String, _ value: String, secret: Bool = false) {
        set(HandleKey(name, secret: secret), value)
    }

    /// Removes `key`.
    public mutating func remove(_ key: HandleKey) {
        values[key.name] = nil
        secretKeys.remove(key.name)
    }

    /// Adds every value of `other`, replacing equal keys.
    public mutating func merge(_ other: ServerHandles) {
        for (name, value) in other.values {
            values[name] = value
            if other.secretKeys.contains(name) { secretKeys.insert(name) } else { secretKeys.remove(name) }
        }
    }

    /// The values with secrets replaced by a fixed mask, for display.
    public var redacted: [String: String] {
        values.reduce(into: [:]) { result, pair in
            result[pair.key] = secretKeys.contains(pair.key) ? "<redacted>" : pair.value
        }
    }
}

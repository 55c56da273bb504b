/// Values a server handed out that the client must keep and echo: upload
/// ids, tokens, echo parameters. They are committed to the state store before
/// the first request that needs them.
///
/// Keys marked secret are shown redacted wherever handles are displayed.
public struct ServerHandles: Sendable, Hashable, Codable {
    /// Every handle by key, secrets included: for backends, never for display.
    public private(set) var values: [String: String]
    /// The keys whose values are shown redacted.
    public private(set) var secretKeys: Set<String>

    /// Handles with these values, `secretKeys` among them secret.
    public init(_ values: [String: String] = [:], secretKeys: Set<String> = []) {
        self.values = values
        self.secretKeys = secretKeys
    }

    /// The value of `key`, or nil.
    public subscript(key: String) -> String? { values[key] }

    /// Whether there are no handles.
    public var isEmpty: Bool { values.isEmpty }

    /// Sets `key`; `secret` marks it for redaction in displays.
    public mutating func set(_ key: String, _ value: String, secret: Bool = false) {
        values[key] = value
        if secret { secretKeys.insert(key) } else { secretKeys.remove(key) }
    }

    /// Removes `key` and its secret mark.
    public mutating func remove(_ key: String) {
        values[key] = nil
        secretKeys.remove(key)
    }

    /// Adds every value of `other`, replacing equal keys.
    public mutating func merge(_ other: ServerHandles) {
        for (key, value) in other.values { set(key, value, secret: other.secretKeys.contains(key)) }
    }

    /// The values with secrets replaced by a fixed mask, for display.
    public var redacted: [String: String] {
        values.reduce(into: [:]) { result, pair in
            result[pair.key] = secretKeys.contains(pair.key) ? "<redacted>" : pair.value
        }
    }
}

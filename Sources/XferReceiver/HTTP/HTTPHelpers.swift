import Foundation
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers

/// Builds the absolute URLs the protocols hand out (Location, download url).
///
/// The request's own authority wins: a client that reached us as `localhost:8080` (or through a
/// port forward) can use what it gets back. The bound address is the fallback for Host-less requests.
final class BaseURL: Sendable {
    private let bound = NIOLockedValueBox<String?>(nil)
    private let configuredHost: String

    init(configuredHost: String) {
        self.configuredHost = configuredHost
    }

    func setBoundPort(_ port: Int) -> String {
        let url = "http://\(Self.hostForURL(configuredHost)):\(port)"
        bound.withLockedValue { $0 = url }
        return url
    }

    func resolve(for request: Request) -> String {
        if let authority = request.head.authority, Self.isPlausibleAuthority(authority) {
            return "http://" + authority
        }
        return bound.withLockedValue { $0 } ?? "http://\(Self.hostForURL(configuredHost))"
    }

    static func hostForURL(_ host: String) -> String {
        host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
    }

    /// Host headers are reflected into URLs: only accept characters a host[:port] can hold.
    private static func isPlausibleAuthority(_ authority: String) -> Bool {
        !authority.isEmpty && authority.utf8.count <= 255
            && authority.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "-"),
                    UInt8(ascii: ":"), UInt8(ascii: "["), UInt8(ascii: "]"), UInt8(ascii: "_"):
                    true
                default:
                    false
                }
            }
    }
}

/// `Content-Range: bytes first-last/total`, as sent with a chunk.
struct ContentRange: Equatable {
    var first: Int
    var last: Int
    var total: Int

    init(first: Int, last: Int, total: Int) {
        self.first = first
        self.last = last
        self.total = total
    }

    /// Nil for anything but the complete form: unknown totals (`*`) and unsatisfied ranges have no
    /// meaning for a chunk.
    init?(header: String) {
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = trimmed.dropFirst("bytes ".count).trimmingCharacters(in: .whitespaces)
        let parts = spec.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        let bounds = parts[0].split(separator: "-", omittingEmptySubsequences: false)
        guard bounds.count == 2,
            let first = Self.number(bounds[0]), let last = Self.number(bounds[1]), let total = Self.number(parts[1]),
            first <= last, last < total
        else { return nil }
        self.init(first: first, last: last, total: total)
    }

    private static func number(_ text: Substring) -> Int? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
        return Int(text)
    }
}

extension HTTPField.Name {
    static let contentMD5 = HTTPField.Name("Content-MD5")!
}

/// Decodes `Content-MD5` (base64 of the 16-byte digest); nil when malformed.
func decodeContentMD5(_ header: String) -> [UInt8]? {
    guard let data = Data(base64Encoded: header.trimmingCharacters(in: .whitespaces)), data.count == 16 else { return nil }
    return Array(data)
}

import Logging
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
        if let parsed = Self.parseASCII(header) {
            self = parsed
            return
        }
        // Anything but plain ASCII digits and spaces: Foundation's trimming and lowercasing.
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

    /// `bytes a-b/total` with ASCII spaces or tabs around, read byte by byte (this header comes
    /// with every chunk); nil for anything else, which the general parser then reads.
    private static func parseASCII(_ header: String) -> ContentRange? {
        var utf8 = Substring(header).utf8[...]
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }
        while let first = utf8.first, isSpace(first) { utf8 = utf8.dropFirst() }
        while let last = utf8.last, isSpace(last) { utf8 = utf8.dropLast() }
        let unit = Array("bytes".utf8)
        guard utf8.count > unit.count, zip(utf8.prefix(unit.count), unit).allSatisfy({ $0 | 0x20 == $1 }),
            utf8[utf8.index(utf8.startIndex, offsetBy: unit.count)] == 0x20
        else { return nil }
        utf8 = utf8.dropFirst(unit.count)
        while let first = utf8.first, isSpace(first) { utf8 = utf8.dropFirst() }
        var numbers: [Int] = []
        var current: Int?
        var separators: [UInt8] = []
        for byte in utf8 {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"):
                let (times, overflow1) = (current ?? 0).multipliedReportingOverflow(by: 10)
                let (sum, overflow2) = times.addingReportingOverflow(Int(byte - UInt8(ascii: "0")))
                guard !overflow1, !overflow2 else { return nil }
                current = sum
            case UInt8(ascii: "-"), UInt8(ascii: "/"):
                guard let value = current else { return nil }
                numbers.append(value)
                separators.append(byte)
                current = nil
            default:
                return nil
            }
        }
        guard let total = current, separators == [UInt8(ascii: "-"), UInt8(ascii: "/")] else { return nil }
        let (first, last) = (numbers[0], numbers[1])
        guard first <= last, last < total else { return nil }
        return ContentRange(first: first, last: last, total: total)
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
    // ASCII spaces trimmed without Foundation's general trimming (this runs for every chunk).
    var utf8 = Substring(header).utf8[...]
    while let first = utf8.first, first == 0x20 || first == 0x09 { utf8 = utf8.dropFirst() }
    while let last = utf8.last, last == 0x20 || last == 0x09 { utf8 = utf8.dropLast() }
    let trimmed = utf8.allSatisfy({ $0 < 0x80 }) ? String(Substring(utf8)) : header.trimmingCharacters(in: .whitespaces)
    guard let data = Data(base64Encoded: trimmed), data.count == 16 else { return nil }
    return Array(data)
}

/// The one way a route answers a failure of the receiver's own storage: the
/// details (paths, errno) go to the operator's log, never to the client, who
/// gets `answer`, its protocol's 500 (clients retry it).
func storageFailure(_ error: any Error, logger: Logger, answer: Response) -> Response {
    logger.warning("Storage failure", metadata: ["error": "\(error)"])
    return answer
}

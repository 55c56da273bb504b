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
    /// `http`, or `https` when the receiver speaks TLS itself.
    private let scheme: String

    init(configuredHost: String, scheme: String = "http") {
        self.configuredHost = configuredHost
        self.scheme = scheme
    }

    func setBoundPort(_ port: Int) -> String {
        let url = "\(scheme)://\(Self.hostForURL(configuredHost)):\(port)"
        bound.withLockedValue { $0 = url }
        return url
    }

    func resolve(for request: Request) -> String {
        if let authority = request.head.authority, Self.isPlausibleAuthority(authority) {
            return scheme + "://" + authority
        }
        return bound.withLockedValue { $0 } ?? "\(scheme)://\(Self.hostForURL(configuredHost))"
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

/// The one way a failure of the receiver's own storage is answered (`RefusalMiddleware`): the
/// details (paths, errno) go to the operator's log, never to the client, who
/// gets `answer`, its protocol's 500 (clients retry it).
func storageFailure(_ error: any Error, logger: Logger, answer: Response) -> Response {
    logger.warning("Storage failure", metadata: ["error": "\(error)"])
    return answer
}

import AsyncHTTPClient
import Crypto
import FoundationEssentials
import Hummingbird
import Logging
import NIOCore
import Synchronization
import XferPrimitives
import XferS3Core

extension ObjectStoreLocation {
    /// How many claim lifetimes `expireAfter` must be at least. A live append shows the store it
    /// is alive only by renewing its claim (every third of a lifetime, more often after a failed
    /// renewal): an expiry near the lifetime could drop an upload whose body is still streaming.
    public static let expiryToClaimLifetimeRatio = 4

    /// Settings that cannot hold together.
    public struct Misconfiguration: Error, CustomStringConvertible, Sendable {
        /// The least `expireAfter` the `claimLifetime` allows.
        public let minimumExpiry: Duration
        public var description: String {
            "an object store's expiry must be at least \(ObjectStoreLocation.expiryToClaimLifetimeRatio) times its claim lifetime (here at least \(minimumExpiry)), so that no upload whose append is alive ever expires"
        }
    }

    /// Throws when the settings cannot hold together: the expiry of uploads in this store (the
    /// receiver's `expireAfter`, given) not well above the `claimLifetime`
    /// (`expiryToClaimLifetimeRatio`).
    public func validate(expireAfter: Duration?) throws(Misconfiguration) {
        let minimum = claimLifetime * Self.expiryToClaimLifetimeRatio
        if let expireAfter = expiry ?? expireAfter, expireAfter < minimum { throw Misconfiguration(minimumExpiry: minimum) }
    }
}

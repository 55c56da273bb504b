import FoundationEssentials

/// The server requests go to, and how a bucket is named in its URLs.
public struct S3Endpoint: Sendable, Hashable {
    /// Path style `https://HOST/BUCKET/KEY` or virtual-hosted `https://BUCKET.HOST/KEY`.
    public enum Addressing: String, Sendable, Hashable, CaseIterable {
        case path, virtual
    }

    /// `scheme://host[:port]`, without a trailing slash.
    public var base: String
    public var addressing: Addressing

    public init(base: String, addressing: Addressing) {
        self.base = base
        self.addressing = addressing
    }

    /// AWS's own endpoint for `region`, virtual-hosted.
    public static func aws(region: String) -> S3Endpoint {
        S3Endpoint(base: "https://s3.\(region).amazonaws.com", addressing: .virtual)
    }

    /// Where requests go and the region they are signed for: as given, else
    /// the configuration's region (else us-east-1) and AWS's endpoint in it.
    /// The `s3` backend and `S3ObjectRequests` resolve alike, so one set of
    /// settings names the same store for both.
    public static func resolved(
        _ endpoint: S3Endpoint?, region: String?, configuration: AWSConfiguration
    ) -> (endpoint: S3Endpoint, region: String) {
        let region = region ?? configuration.region ?? "us-east-1"
        return (endpoint ?? .aws(region: region), region)
    }

    /// Virtual-hosted addressing needs a bucket name that is a DNS label
    /// (and, over TLS, one without dots, which certificates do not cover).
    package func effectiveAddressing(for bucket: String) -> Addressing {
        guard addressing == .virtual else { return .path }
        if bucket.contains("."), base.lowercased().hasPrefix("https:") { return .path }
        return .virtual
    }

    /// The URL of `key` in `bucket` (the bucket itself when `key` is empty),
    /// with `query` (already encoded) appended.
    public func url(bucket: String, key: String, query: String = "") -> String {
        let encodedKey = SignatureV4.uriEncode(key, keepSlash: true)
        var url: String
        switch effectiveAddressing(for: bucket) {
        case .path:
            url = "\(base)/\(bucket)" + (key.isEmpty ? "" : "/\(encodedKey)")
        case .virtual:
            let schemeEnd = base.firstRange(of: "://")!.upperBound
            url = base[..<schemeEnd] + bucket + "." + base[schemeEnd...] + "/" + encodedKey
        }
        return query.isEmpty ? url : url + "?" + query
    }
}

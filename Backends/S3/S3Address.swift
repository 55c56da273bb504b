import Foundation
import Xfer

/// Where objects go: `s3://BUCKET/PREFIX` from `--to`.
///
/// PREFIX is a folder: each file becomes the object `PREFIX/NAME`, so one
/// push of several files never writes two of them to one key.
public struct S3Location: Sendable, Hashable {
    public var bucket: String
    /// Without leading or trailing slashes; empty for the bucket's root.
    public var prefix: String

    public init(bucket: String, prefix: String) {
        self.bucket = bucket
        self.prefix = prefix
    }

    /// Parses `s3://BUCKET[/PREFIX]`.
    public init(parsing target: String) throws(BackendError) {
        // By hand: Foundation's trimming bridges through NSString, and this
        // runs for every request.
        var trimmed = Substring(target).drop(while: { $0 == " " || $0 == "\t" })
        while let last = trimmed.last, last == " " || last == "\t" { trimmed.removeLast() }
        guard trimmed.prefix(5).lowercased() == "s3://" else {
            throw .rejected("the s3 backend pushes to s3://BUCKET/PREFIX, not '\(trimmed.prefix(200))'")
        }
        let rest = trimmed.dropFirst(5)
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        let bucket = String(rest[..<slash])
        var prefix = rest[slash...].drop(while: { $0 == "/" })
        while prefix.hasSuffix("/") { prefix.removeLast() }
        try Self.check(bucket: bucket)
        if prefix.contains(where: { $0 == "?" || $0 == "#" }) {
            throw .rejected("the prefix in '\(trimmed.prefix(200))' has '?' or '#'; S3 keys may, but xfer keeps them out of targets")
        }
        self.bucket = bucket
        self.prefix = String(prefix)
    }

    /// `s3://BUCKET/PREFIX`, as stored with the job.
    public var normalized: String { prefix.isEmpty ? "s3://\(bucket)" : "s3://\(bucket)/\(prefix)" }

    /// The key of the object a file at `name` (a relative path) becomes.
    public func key(forFileNamed name: String) -> String { prefix.isEmpty ? name : "\(prefix)/\(name)" }

    /// S3's rules for bucket names (3–63 of a-z, 0-9, '.', '-'; a letter or digit at each end).
    static func check(bucket: String) throws(BackendError) {
        let allowed = bucket.utf8.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
        }
        guard (3...63).contains(bucket.utf8.count), allowed, let first = bucket.first, let last = bucket.last,
            first.isLetter || first.isNumber, last.isLetter || last.isNumber
        else {
            throw .rejected(
                "'\(bucket.prefix(100))' is not a valid S3 bucket name (3 to 63 characters: a-z, 0-9, '.', '-', starting and ending with a letter or digit)")
        }
    }
}

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

    /// `--endpoint` checked: an http(s) URL with a host and no path.
    public static func parse(_ text: String, addressing: Addressing) throws(BackendError) -> S3Endpoint {
        let normalized = try HTTPTarget.normalized(text)
        guard let components = URLComponents(string: normalized), components.path.isEmpty || components.path == "/",
            components.query == nil, components.user == nil
        else {
            throw .rejected("an S3 endpoint is http(s)://HOST[:PORT], without a path or query")
        }
        return S3Endpoint(base: normalized, addressing: addressing)
    }

    /// Virtual-hosted addressing needs a bucket name that is a DNS label
    /// (and, over TLS, one without dots, which certificates do not cover).
    func effectiveAddressing(for bucket: String) -> Addressing {
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
            let schemeEnd = base.range(of: "://")!.upperBound
            url = base[..<schemeEnd] + bucket + "." + base[schemeEnd...] + "/" + encodedKey
        }
        return query.isEmpty ? url : url + "?" + query
    }
}

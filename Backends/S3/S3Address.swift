import FoundationEssentials
import Xfer
import XferS3Core

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

extension S3Endpoint {
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
}

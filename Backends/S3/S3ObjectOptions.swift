import FoundationEssentials
import Xfer
import XferS3Core

/// What S3 keeps with each object besides its bytes: the headers of
/// `PutObject` and `CreateMultipartUpload` (signed like every header). A job
/// keeps the options it was created with, in its handles, so a resume sends
/// the same.
public struct S3ObjectOptions: Sendable, Hashable {
    /// `Content-Type` for every object; nil for each file's by its extension.
    public var contentType: String?
    /// User metadata, `x-amz-meta-NAME: value` (names lowercase, values printable ASCII).
    public var metadata: [String: String] = [:]
    /// `x-amz-storage-class`, e.g. `STANDARD_IA`, `GLACIER_IR`.
    public var storageClass: String?
    public var cacheControl: String?
    public var contentDisposition: String?
    /// A canned ACL, `x-amz-acl`, e.g. `private`, `public-read`.
    public var acl: String?
    /// Object tags, `x-amz-tagging`.
    public var tags: [String: String] = [:]
    public var encryption: Encryption?
    /// A checksum of the whole object for S3 to check and keep, multipart
    /// uploads included (`FULL_OBJECT`): each part carries its CRC, the
    /// completion the whole object's, combined from the parts' (see
    /// `S3FullObjectChecksum`). Nil: as `S3PartChecksum` says. Set after
    /// `init`, as any option may be.
    public var checksum: S3FullObjectChecksum?

    /// Server-side encryption, `x-amz-server-side-encryption`.
    public enum Encryption: Sendable, Hashable {
        /// `AES256`: keys S3 manages.
        case s3Managed
        /// `aws:kms`, with a KMS key (nil: the account's default key).
        case kms(keyID: String?)
    }

    public init(
        contentType: String? = nil, metadata: [String: String] = [:], storageClass: String? = nil, cacheControl: String? = nil,
        contentDisposition: String? = nil, acl: String? = nil, tags: [String: String] = [:], encryption: Encryption? = nil
    ) {
        self.contentType = contentType
        self.metadata = metadata
        self.storageClass = storageClass
        self.cacheControl = cacheControl
        self.contentDisposition = contentDisposition
        self.acl = acl
        self.tags = tags
        self.encryption = encryption
    }

    // MARK: Kept with the job

    private static let prefix = "object."
    private static let metadataPrefix = prefix + "meta."

    /// The options as job handles (only what is set).
    var handles: ServerHandles {
        var handles = ServerHandles()
        func set(_ name: String, _ value: String?) { if let value { handles.set(HandleKey(Self.prefix + name), value) } }
        set("contentType", contentType)
        set("storageClass", storageClass)
        set("cacheControl", cacheControl)
        set("contentDisposition", contentDisposition)
        set("acl", acl)
        set("tagging", tags.isEmpty ? nil : Self.tagging(tags))
        switch encryption {
        case .s3Managed?: set("sse", "AES256")
        case .kms(let keyID)?:
            set("sse", "aws:kms")
            set("sseKmsKeyId", keyID)
        case nil: break
        }
        for (name, value) in metadata { handles.set(HandleKey(Self.metadataPrefix + name), value) }
        set("checksum", checksum?.rawValue)
        return handles
    }

    /// The job's full-object checksum, if it asked for one.
    static func checksum(from handles: ServerHandles) -> S3FullObjectChecksum? {
        handles[HandleKey(prefix + "checksum")].flatMap(S3FullObjectChecksum.init(rawValue:))
    }

    /// The headers for a new object, from a job's handles (what it was created with).
    static func headers(from handles: ServerHandles) -> [(name: String, value: String)] {
        var headers: [(String, String)] = []
        let fixed: [(String, String)] = [
            ("storageClass", "x-amz-storage-class"), ("cacheControl", "Cache-Control"),
            ("contentDisposition", "Content-Disposition"), ("acl", "x-amz-acl"), ("tagging", "x-amz-tagging"),
            ("sse", "x-amz-server-side-encryption"), ("sseKmsKeyId", "x-amz-server-side-encryption-aws-kms-key-id"),
        ]
        for (name, header) in fixed {
            if let value = handles[HandleKey(prefix + name)] { headers.append((header, value)) }
        }
        for (key, value) in handles.values.sorted(by: { $0.key < $1.key }) where key.hasPrefix(metadataPrefix) {
            headers.append(("x-amz-meta-" + key.dropFirst(metadataPrefix.count), value))
        }
        return headers
    }

    /// The job's chosen Content-Type, if any.
    static func contentType(from handles: ServerHandles) -> String? {
        handles[HandleKey(prefix + "contentType")]
    }

    /// `k1=v1&k2=v2`, each part URL-encoded, in key order.
    static func tagging(_ tags: [String: String]) -> String {
        tags.sorted { $0.key < $1.key }
            .map { SignatureV4.uriEncode($0.key, keepSlash: false) + "=" + SignatureV4.uriEncode($0.value, keepSlash: false) }
            .joined(separator: "&")
    }
}

import ArgumentParser
import Xfer
import XferS3
import XferPrimitives

/// What S3 keeps with each object of a push (`S3ObjectOptions`): push only,
/// since a job keeps the options it was created with.
struct S3ObjectArguments: ParsableArguments {
    @Option(help: "s3: the Content-Type of every object (default: each file's by its extension, from /etc/mime.types).")
    var contentType: String?

    @Option(name: .customLong("metadata"), help: ArgumentHelp("s3: user metadata NAME=VALUE (repeatable; x-amz-meta-NAME).", valueName: "NAME=VALUE"))
    var metadata: [String] = []

    @Option(help: "s3: the storage class, e.g. STANDARD_IA, INTELLIGENT_TIERING, GLACIER_IR.")
    var storageClass: String?

    @Option(help: "s3: the objects' Cache-Control.")
    var cacheControl: String?

    @Option(help: "s3: the objects' Content-Disposition.")
    var contentDisposition: String?

    @Option(help: "s3: a canned ACL, e.g. private, public-read, bucket-owner-full-control.")
    var acl: String?

    @Option(help: ArgumentHelp("s3: object tags, KEY=VALUE&KEY=VALUE (URL-encoded as S3 wants them).", valueName: "TAGS"))
    var tagging: String?

    @Option(help: "s3: server-side encryption, AES256 or aws:kms.")
    var sse: String?

    @Option(help: "s3: the KMS key for --sse aws:kms (default: the account's).")
    var sseKmsKeyId: String?

    @Option(help: ArgumentHelp("s3: a checksum of each whole object for S3 to check and keep, multipart uploads included (FULL_OBJECT): crc32c, crc64nvme, or none for a store that refuses or ignores them (default: none; the parts then carry --part-checksum's check).", valueName: "crc32c|crc64nvme|none"))
    var checksumAlgorithm: String?

    var isEmpty: Bool {
        contentType == nil && metadata.isEmpty && storageClass == nil && cacheControl == nil && contentDisposition == nil
            && acl == nil && tagging == nil && sse == nil && sseKmsKeyId == nil && checksumAlgorithm == nil
    }

    /// The options, checked: each becomes a signed header, so no line breaks or
    /// control characters, and the forms S3 takes.
    func options() throws(XferError) -> S3ObjectOptions {
        var options = S3ObjectOptions()
        if let checksumAlgorithm, checksumAlgorithm != "none" {
            guard let parsed = S3FullObjectChecksum(rawValue: checksumAlgorithm) else {
                throw .invalidInput("--checksum-algorithm must be crc32c, crc64nvme or none, not '\(checksumAlgorithm.prefix(40))'")
            }
            options.checksum = parsed
        }
        func checked(_ value: String?, _ flag: String) throws(XferError) -> String? {
            guard let value else { return nil }
            let trimmed = value.trimmingSpacesAndTabs()
            guard !trimmed.isEmpty, trimmed.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value < 0x7F }) else {
                throw .invalidInput("\(flag) must be printable ASCII, not '\(value.prefix(40))'")
            }
            return trimmed
        }
        if let type = try checked(contentType, "--content-type") {
            guard type.contains("/"), !type.hasPrefix("/"), !type.hasSuffix("/") else {
                throw .invalidInput("--content-type must look like type/subtype (e.g. text/plain), not '\(type.prefix(40))'")
            }
            options.contentType = type
        }
        for pair in metadata {
            guard let equals = pair.firstIndex(of: "="), let value = try checked(String(pair[pair.index(after: equals)...]), "--metadata")
            else { throw .invalidInput("--metadata must look like NAME=VALUE, not '\(pair.prefix(40))'") }
            let name = pair[..<equals].lowercased()
            guard !name.isEmpty, name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else {
                throw .invalidInput("--metadata NAME must be letters, digits, - and _, not '\(name.prefix(40))'")
            }
            options.metadata[name] = value
        }
        options.storageClass = try checked(storageClass, "--storage-class")
        options.cacheControl = try checked(cacheControl, "--cache-control")
        options.contentDisposition = try checked(contentDisposition, "--content-disposition")
        options.acl = try checked(acl, "--acl")
        if let tagging = try checked(tagging, "--tagging") {
            for pair in tagging.split(separator: "&", omittingEmptySubsequences: false) {
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                guard parts.count == 2, !parts[0].isEmpty,
                    let key = PercentEncoding.decode(parts[0]), let value = PercentEncoding.decode(parts[1])
                else { throw .invalidInput("--tagging must look like KEY=VALUE&KEY=VALUE, not '\(tagging.prefix(40))'") }
                options.tags[key] = value
            }
        }
        switch try checked(sse, "--sse") {
        case nil:
            if sseKmsKeyId != nil { throw .invalidInput("--sse-kms-key-id goes with --sse aws:kms") }
        case "AES256"?:
            if sseKmsKeyId != nil { throw .invalidInput("--sse-kms-key-id goes with --sse aws:kms") }
            options.encryption = .s3Managed
        case "aws:kms"?:
            options.encryption = .kms(keyID: try checked(sseKmsKeyId, "--sse-kms-key-id"))
        case let other?:
            throw .invalidInput("--sse must be AES256 or aws:kms, not '\(other.prefix(40))'")
        }
        return options
    }
}

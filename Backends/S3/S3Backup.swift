import FoundationEssentials
import Xfer
import XferPrimitives
import XferS3Core

/// `xfer sync … s3://BUCKET/PREFIX --backup-dir s3://BUCKET2/PREFIX2`: what
/// a sync would replace or delete is first copied inside the store
/// (`ObjectBackingUp`), with one `CopyObject` per object: the bytes never
/// pass through this machine, and the object keeps its metadata (its
/// `mtime` among them, `x-amz-metadata-directive: COPY`).
///
/// The copy is conditional on the version listed (`x-amz-copy-source-if-match`:
/// AWS honours it, Ceph 16 ignores it); a 412 is `.changed`, a missing
/// object `.absent`. An object above 5 GiB (S3's limit for one copy) is
/// refused by the store and fails the sync before anything is replaced.
extension S3Backend: ObjectBackingUp {
    public func backupTarget(normalizing backup: String, in job: JobContext) throws(BackendError) -> String {
        let session = Session(self, job)
        let (bare, endpoint) = Self.splitTarget(backup)
        if let endpoint, endpoint.lowercased() != session.endpoint.base.lowercased() {
            throw .rejected("--backup-dir \(bare.prefix(200)) is on \(endpoint), not the destination's endpoint: backups are copied inside one store")
        }
        let location = try S3Location(parsing: bare)
        let target = session.location
        if location.bucket == target.bucket, Self.overlaps(location.prefix, target.prefix) {
            throw .rejected(
                "--backup-dir s3://\(location.bucket)/\(location.prefix) overlaps the destination s3://\(target.bucket)/\(target.prefix): "
                    + "a later sync would delete or overwrite its backups; name a prefix outside it")
        }
        return location.prefix.isEmpty ? "s3://\(location.bucket)" : "s3://\(location.bucket)/\(location.prefix)"
    }

    public func backUpObject(at relativePath: String, version: String?, to backup: String, in job: JobContext) throws(BackendError)
        -> Exchange<BackupOutcome>
    {
        let session = Session(self, job)
        let source = session.location.key(forFileNamed: relativePath)
        let place = try S3Location(parsing: Self.splitTarget(backup).location)
        let key = place.key(forFileNamed: relativePath)
        var request = HTTPRequest(method: .put, url: session.endpoint.url(bucket: place.bucket, key: key))
        request.headers.set("x-amz-copy-source", "/\(session.location.bucket)/\(SignatureV4.uriEncode(source, keepSlash: true))")
        if let version { request.headers.set("x-amz-copy-source-if-match", "\"\(version)\"") }
        request.headers.set("x-amz-metadata-directive", "COPY")
        let operation = "back up s3://\(session.location.bucket)/\(source) to s3://\(place.bucket)/\(key)"
        return Exchange(request) { response throws(BackendError) in
            switch response.status {
            case 412: return .changed
            case 404 where AWSResponse(response).s3Error?.code == "NoSuchKey": return .absent
            case 200:
                // As CompleteMultipartUpload, a copy may answer 200 and report its failure in the body.
                guard let document = S3XML(response.body), document.root == "CopyObjectResult" else {
                    throw session.failure(response, operation)
                }
                return .copied
            default:
                throw session.failure(response, operation)
            }
        }
    }

    /// Whether one prefix holds the other (the bucket's root holds all).
    static func overlaps(_ first: String, _ second: String) -> Bool {
        if first.isEmpty || second.isEmpty || first == second { return true }
        return first.hasPrefix(second + "/") || second.hasPrefix(first + "/")
    }
}

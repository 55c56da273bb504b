import FoundationEssentials
import Xfer
import XferPrimitives
import XferS3Core

/// `xfer sync DIR s3://BUCKET/PREFIX`: what the `s3` backend adds for a sync
/// (`ObjectSyncing`).
///
/// - Each object keeps its file's modification time as `x-amz-meta-mtime`
///   (seconds and nanoseconds, `1700000000.123456789`: rclone's name and
///   form, so either tool reads the other's), and the sync's write token as
///   `x-amz-meta-xfer-write`; with `--checksum`, the file's CRC-32C as
///   `x-amz-meta-xfer-crc32c` (8 hex digits), which stores without
///   checksums of their own (Ceph 16) keep too.
/// - Writes are conditional on what the plan saw: `If-None-Match: *` for a
///   new key, `If-Match: ETAG` (unquoted: Ceph 16 refuses the quoted form)
///   for a replacement, on `PutObject` and `CompleteMultipartUpload`. A 412
///   is a conflict: the file fails, nothing is overwritten. Ceph 16 honours
///   both on `PutObject` and ignores them on `CompleteMultipartUpload`.
/// - Deletes are `DeleteObject` with `If-Match: ETAG` (AWS honours it on
///   general-purpose buckets since 2025; a store that ignores it deletes).
extension S3Backend: ObjectSyncing {
    /// User metadata names (after `x-amz-meta-`).
    static let modificationTimeMetadata = "mtime"
    static let writeTokenMetadata = "xfer-write"
    static let crc32cMetadata = "xfer-crc32c"

    public func listObjects(after cursor: String?, in job: JobContext) throws(BackendError) -> Exchange<StoredObjectPage> {
        listObjects(after: cursor, startingAfter: nil, in: job)
    }

    /// A page from after a continuation token (`cursor`) or after a key below the prefix (`relativePath`).
    private func listObjects(after cursor: String?, startingAfter relativePath: String?, in job: JobContext) -> Exchange<StoredObjectPage> {
        let session = Session(self, job)
        let prefix = session.location.prefix.isEmpty ? "" : session.location.prefix + "/"
        let query = S3ObjectRequests.listQuery(
            prefix: prefix, delimiter: nil, continuationToken: cursor, maxKeys: 1000, urlEncodedKeys: true,
            startAfter: relativePath.map { prefix + $0 })
        let request = HTTPRequest(method: .get, url: session.endpoint.url(bucket: session.location.bucket, key: "", query: query))
        let operation = "list s3://\(session.location.bucket)/\(prefix)"
        return Exchange(request) { response throws(BackendError) in
            let page: S3ObjectPage
            do throws(S3Failure) {
                page = try S3Answer.objectPage(AWSResponse(response), operation: operation, continuationToken: cursor)
            } catch {
                throw session.failure(error)
            }
            var objects: [StoredObject] = []
            objects.reserveCapacity(page.objects.count)
            for summary in page.objects {
                // A key no file can be at (a folder marker, `a//b`, `..`) is
                // neither compared nor deleted: a sync never touches what it cannot map.
                guard let path = Self.relativePath(ofKey: summary.key, under: prefix) else { continue }
                objects.append(
                    StoredObject(
                        relativePath: path, size: summary.size, version: summary.etag?.unquoted,
                        lastModifiedNanoseconds: summary.lastModified.map(Self.nanoseconds)))
            }
            return StoredObjectPage(objects: objects, next: page.nextContinuationToken)
        }
    }

    public func describeObject(at relativePath: String, in job: JobContext) throws(BackendError) -> Exchange<StoredObject?> {
        let session = Session(self, job)
        let key = session.location.key(forFileNamed: relativePath)
        var request = HTTPRequest(method: .head, url: session.endpoint.url(bucket: session.location.bucket, key: key))
        request.headers.set("x-amz-checksum-mode", "ENABLED")
        let operation = "look up s3://\(session.location.bucket)/\(key)"
        return Exchange(request) { response throws(BackendError) in
            let outcome: S3HeadOutcome
            do throws(S3Failure) {
                outcome = try S3Answer.head(AWSResponse(response), operation: operation)
            } catch {
                throw session.failure(error)
            }
            switch outcome {
            case .found(let metadata):
                let meta = metadata.userMetadata
                // xfer's own CRC-32C, else the store's full-object checksums (composite ones do not
                // compare with a file's).
                let stored = S3ObjectChecksum.checksums(in: AWSResponse(response)).filter { $0.kind == .fullObject }
                let crc = meta[Self.crc32cMetadata].flatMap { UInt32($0, radix: 16) }
                    ?? stored.first { $0.algorithm == .crc32c }.flatMap(\.crc).map { UInt32(truncatingIfNeeded: $0) }
                let crc64 = stored.first { $0.algorithm == .crc64nvme }.flatMap(\.crc)
                return StoredObject(
                    relativePath: relativePath, size: metadata.size ?? metadata.contentLength, version: metadata.etag?.unquoted,
                    lastModifiedNanoseconds: metadata.lastModified.map(Self.nanoseconds),
                    modificationTimeNanoseconds: meta[Self.modificationTimeMetadata].flatMap(ModificationTimeText.nanoseconds),
                    crc32c: crc, crc64nvme: crc64, writeToken: meta[Self.writeTokenMetadata])
            case .notFound:
                return nil
            case .preconditionFailed:
                throw .transient("\(operation): HTTP 412 to a request without a condition")
            }
        }
    }

    public func deleteObject(_ object: StoredObject, in job: JobContext) throws(BackendError) -> Exchange<DeletionOutcome> {
        let session = Session(self, job)
        let key = session.location.key(forFileNamed: object.relativePath)
        var request = HTTPRequest(method: .delete, url: session.endpoint.url(bucket: session.location.bucket, key: key))
        if let version = object.version { request.headers.set("If-Match", version) }
        let operation = "delete s3://\(session.location.bucket)/\(key)"
        return Exchange(request) { response throws(BackendError) in
            switch response.status {
            case 200, 204, 404: return .deleted
            case 412: return .changed
            default: throw session.failure(response, operation)
            }
        }
    }

    // MARK: Helpers

    /// A sync's metadata on a new object (see above).
    static func describeSyncedObject(_ file: FileContext, in request: inout HTTPRequest) {
        if let time = file.modificationTimeNanoseconds {
            request.headers.set(S3ObjectMetadata.userPrefix + modificationTimeMetadata, ModificationTimeText.text(nanoseconds: time))
        }
        if let token = file.writeToken { request.headers.set(S3ObjectMetadata.userPrefix + writeTokenMetadata, token) }
        if let crc = file.plannedCRC32C { request.headers.set(S3ObjectMetadata.userPrefix + crc32cMetadata, String(crc, radix: 16)) }
    }

    /// A sync's condition on the request that makes an object.
    static func setCondition(_ condition: WriteCondition?, on request: inout HTTPRequest) {
        switch condition {
        case .absent?: request.headers.set("If-None-Match", "*")
        case .version(let version)?: request.headers.set("If-Match", version)
        case nil: break
        }
    }

    static func conflict(_ operation: String) -> BackendError {
        .conflict(
            "\(operation): the key changed on the destination since the sync listed it (HTTP 412); it was not overwritten "
                + "(run the sync again with --restart to decide it anew)")
    }

    /// `key` less `prefix`, when it can be a path below a directory.
    static func relativePath(ofKey key: String, under prefix: String) -> String? {
        guard key.hasPrefix(prefix) else { return nil }
        let path = String(key.dropFirst(prefix.count))
        guard !path.isEmpty else { return nil }
        for component in path.split(separator: "/", omittingEmptySubsequences: false) {
            if component.isEmpty || component == "." || component == ".." || component.utf8.contains(0) { return nil }
        }
        return path
    }

    static func nanoseconds(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded()) * 1_000_000
    }
}

/// S3's `start-after`: a re-run lists its destination as key ranges at once.
extension S3Backend: KeyRangeSyncing {
    public func listObjects(startingAfter relativePath: String, in job: JobContext) throws(BackendError) -> Exchange<StoredObjectPage> {
        listObjects(after: nil, startingAfter: relativePath, in: job)
    }
}

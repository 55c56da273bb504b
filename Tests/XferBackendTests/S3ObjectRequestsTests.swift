import Foundation
import XCTest
import Xfer
import XferPrimitives
@testable import XferS3
@testable import XferS3Core

/// `S3ObjectRequests` is sans-IO: these tests check the requests it
/// describes (method, URL, headers, signatures against vectors computed
/// elsewhere) and how it reads literal answers, Ceph's quirks included,
/// with no network. (Against a real Ceph gateway: S3ObjectRequestsCephTests
/// in the CLI package.)
final class S3ObjectRequestsTests: XCTestCase {
    /// The keys of AWS's Signature V4 examples, and their day.
    private let exampleKeys = AWSCredentialProvider(
        fixed: AWSCredentials(accessKeyID: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        source: "test")
    private let exampleDate = Date(timeIntervalSince1970: 1_369_353_600)  // 2013-05-24T00:00:00Z
    private let emptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    /// A gateway as the tests' Ceph one is reached: plain http, path-style.
    private var store: S3ObjectRequests {
        S3ObjectRequests(
            bucket: "bkt", endpoint: S3Endpoint(base: "http://127.0.0.1:7480", addressing: .path), region: "us-east-1",
            credentials: exampleKeys, now: { [exampleDate] in exampleDate })
    }

    private func xml(_ text: String) -> [UInt8] { Array(("<?xml version=\"1.0\" encoding=\"UTF-8\"?>" + text).utf8) }

    private func signature(_ request: AWSRequest) -> String? {
        request.headers["Authorization"]?.components(separatedBy: "Signature=").last
    }

    private func signedHeaders(_ request: AWSRequest) -> [String] {
        let authorization = request.headers["Authorization"] ?? ""
        let list = authorization.components(separatedBy: "SignedHeaders=").last?.components(separatedBy: ",").first ?? ""
        return list.split(separator: ";").map(String.init)
    }

    private func assertFailure(
        _ body: @autoclosure () throws -> some Any, retryable: Bool, code: String?, line: UInt = #line
    ) {
        XCTAssertThrowsError(try body(), line: line) { error in
            guard let failure = error as? S3Failure else { return XCTFail("\(error)", line: line) }
            XCTAssertEqual(failure.isRetryable, retryable, "\(failure)", line: line)
            XCTAssertEqual(failure.code, code, "\(failure)", line: line)
        }
    }

    // MARK: Signatures

    /// The S3 documentation's GetObject example ("Signature Calculations for
    /// the Authorization Header: Transferring Payload in a Single Chunk"),
    /// described through the new vocabulary: same request, same signature.
    func testRangedGetIsTheDocumentationsSignedExample() {
        let aws = S3ObjectRequests(
            bucket: "examplebucket", endpoint: S3Endpoint(base: "https://s3.amazonaws.com", addressing: .virtual), region: "us-east-1",
            credentials: exampleKeys, now: { [exampleDate] in exampleDate })
        let request = aws.getObject(key: "test.txt", range: 0...9).request
        XCTAssertEqual(request.method, "GET")
        XCTAssertEqual(request.url, "https://examplebucket.s3.amazonaws.com/test.txt")
        XCTAssertEqual(request.headers["Range"], "bytes=0-9")
        XCTAssertEqual(request.headers["x-amz-content-sha256"], emptyHash)
        XCTAssertEqual(
            request.headers["Authorization"],
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        )
    }

    /// Signatures botocore 1.x (`S3SigV4Auth`, the AWS CLI's signer) gives
    /// the same requests with the same keys and date, payload unsigned:
    /// an UploadPart whose body the caller streams, with and without its CRC-32C.
    func testUploadPartIsSignedWithoutItsBodyAsBotocoreSignsIt() {
        let plain = store.uploadPart(key: "in/a b.bin", uploadID: "U+1/2", partNumber: 3, length: 5 << 20).request
        XCTAssertEqual(plain.method, "PUT")
        XCTAssertEqual(plain.url, "http://127.0.0.1:7480/bkt/in/a%20b.bin?partNumber=3&uploadId=U%2B1%2F2")
        XCTAssertTrue(plain.body.isEmpty, "the caller attaches the body")
        XCTAssertEqual(plain.headers["Content-Length"], "5242880")
        XCTAssertEqual(plain.headers["x-amz-content-sha256"], "UNSIGNED-PAYLOAD", "even over http: the body is not here to hash")
        XCTAssertEqual(signedHeaders(plain), ["content-length", "host", "x-amz-content-sha256", "x-amz-date"])
        XCTAssertEqual(signature(plain), "3429ea5974cb5086fe6782f27471145b5b2d300e5ca6529cbea70a86f3acbef1")

        let checked = store.uploadPart(key: "in/a b.bin", uploadID: "U+1/2", partNumber: 3, length: 5 << 20, crc32c: 0xC994_65AA).request
        XCTAssertEqual(checked.headers["x-amz-checksum-crc32c"], "yZRlqg==", "its four bytes, big-endian, in base64")
        XCTAssertEqual(checked.headers["x-amz-sdk-checksum-algorithm"], "CRC32C")
        XCTAssertEqual(signature(checked), "4f7b1f7a2c37f168a1d075d71f9c8aad41e7a161cda3f24eef6c4213cb058edf")
    }

    /// A PutObject whose body streams from elsewhere (the receiver's single chunks and staged
    /// pieces) is signed as UploadPart is: without its body, with its length.
    func testStreamedPutIsSignedWithoutItsBody() {
        let request = store.putObjectStreamed(key: "files/u/a b.bin", length: 4096).request
        XCTAssertEqual(request.method, "PUT")
        XCTAssertEqual(request.url, "http://127.0.0.1:7480/bkt/files/u/a%20b.bin")
        XCTAssertTrue(request.body.isEmpty, "the caller attaches the body")
        XCTAssertEqual(request.headers["Content-Length"], "4096")
        XCTAssertEqual(request.headers["x-amz-content-sha256"], "UNSIGNED-PAYLOAD")
        XCTAssertEqual(signedHeaders(request), ["content-length", "content-type", "host", "x-amz-content-sha256", "x-amz-date"])
        let etag = try? store.putObjectStreamed(key: "k", length: 1).interpret(HTTPResponse(status: 200, headers: ["ETag": "\"abc\""]))
        XCTAssertEqual(etag, S3ETag("abc"))
    }

    func testConditionalPutSendsIfMatchUnquotedAndIsSignedAsBotocoreSignsIt() throws {
        let etag = S3ETag("\"9dd4e461268c8034f5c8564e155c67a6\"")
        let request = store.putObject(
            key: "state/u 1.json", bytes: Array(#"{"offset":5}"#.utf8), condition: .onlyIfCurrent(etag), contentType: "application/json"
        ).request
        XCTAssertEqual(request.method, "PUT")
        XCTAssertEqual(request.url, "http://127.0.0.1:7480/bkt/state/u%201.json")
        XCTAssertEqual(request.headers["If-Match"], "9dd4e461268c8034f5c8564e155c67a6", "Ceph 16 refuses the quoted form on PutObject")
        XCTAssertNil(request.headers["If-None-Match"])
        XCTAssertEqual(request.headers["x-amz-content-sha256"], "c437a311cd157dfdc498903e01440bb90ee5daf669c1829777e84acca2b72301")
        XCTAssertNil(request.headers["Content-MD5"], "over http the signed SHA-256 is the body's one check")
        XCTAssertEqual(signedHeaders(request), ["content-type", "host", "if-match", "x-amz-content-sha256", "x-amz-date"])
        XCTAssertEqual(signature(request), "916c36de7b3de6bfe00bf2e65a7e427e7757f2bbd5f4a138c2925d2a635a207b")
    }

    // MARK: Requests

    func testCreateOnlyPutAndOverHTTPSItsBodysMD5() {
        let create = store.putObject(key: "k", bytes: [1, 2, 3], condition: .onlyIfAbsent).request
        XCTAssertEqual(create.headers["If-None-Match"], "*")
        XCTAssertNil(create.headers["If-Match"])
        XCTAssertEqual(create.headers["Content-Type"], "application/octet-stream")
        XCTAssertTrue(signedHeaders(create).contains("if-none-match"))
        XCTAssertEqual(create.body, [1, 2, 3])

        let tls = S3ObjectRequests(
            bucket: "bkt", endpoint: S3Endpoint(base: "https://store.example", addressing: .path), region: "eu-west-1",
            credentials: exampleKeys)
        let overTLS = tls.putObject(key: "k", bytes: Array("hello".utf8)).request
        XCTAssertEqual(overTLS.headers["x-amz-content-sha256"], "UNSIGNED-PAYLOAD")
        XCTAssertEqual(overTLS.headers["Content-MD5"], "XUFAKrxLKna5cZ2REBfFkg==", "the store still checks the bytes")
        XCTAssertTrue(signedHeaders(overTLS).contains("content-md5"))
        XCTAssertTrue(overTLS.headers["Authorization"]!.contains("/eu-west-1/s3/aws4_request"))
    }

    func testGetHeadAndDeleteRequests() {
        let etag = S3ETag("abc")
        let get = store.getObject(key: "a/b c", range: 5...9, ifMatch: etag).request
        XCTAssertEqual(get.url, "http://127.0.0.1:7480/bkt/a/b%20c")
        XCTAssertEqual(get.headers["Range"], "bytes=5-9")
        XCTAssertEqual(get.headers["If-Match"], "\"abc\"", "quoted, as GET takes it on Ceph and AWS")
        XCTAssertTrue(signedHeaders(get).contains("if-match"))
        let whole = store.getObject(key: "k").request
        XCTAssertNil(whole.headers["Range"])
        XCTAssertNil(whole.headers["If-Match"])

        let head = store.headObject(key: "k").request
        XCTAssertEqual(head.method, "HEAD")
        XCTAssertEqual(head.url, "http://127.0.0.1:7480/bkt/k")
        let delete = store.deleteObject(key: "k").request
        XCTAssertEqual(delete.method, "DELETE")
        XCTAssertEqual(delete.url, "http://127.0.0.1:7480/bkt/k")
        XCTAssertNotNil(delete.headers["Authorization"])
    }

    func testMultipartRequests() throws {
        let create = store.createMultipartUpload(key: "in/x", contentType: "video/mp4", partsCarryCRC32C: true).request
        XCTAssertEqual(create.method, "POST")
        XCTAssertEqual(create.url, "http://127.0.0.1:7480/bkt/in/x?uploads")
        XCTAssertEqual(create.headers["Content-Type"], "video/mp4")
        XCTAssertEqual(create.headers["x-amz-checksum-algorithm"], "CRC32C")
        XCTAssertNil(store.createMultipartUpload(key: "in/x").request.headers["x-amz-checksum-algorithm"])

        let copy = store.uploadPartCopy(
            key: "in/x", uploadID: "U", partNumber: 2, sourceKey: "tails/u 1", range: 0...1023, sourceETag: S3ETag("t")
        ).request
        XCTAssertEqual(copy.method, "PUT")
        XCTAssertEqual(copy.url, "http://127.0.0.1:7480/bkt/in/x?partNumber=2&uploadId=U")
        XCTAssertEqual(copy.headers["x-amz-copy-source"], "/bkt/tails/u%201")
        XCTAssertEqual(copy.headers["x-amz-copy-source-range"], "bytes=0-1023")
        XCTAssertEqual(copy.headers["x-amz-copy-source-if-match"], "\"t\"")
        XCTAssertTrue(signedHeaders(copy).contains("x-amz-copy-source-range"), "S3 refuses unsigned x-amz-* headers")
        let elsewhere = store.uploadPartCopy(key: "k", uploadID: "U", partNumber: 1, sourceKey: "s", sourceBucket: "other").request
        XCTAssertEqual(elsewhere.headers["x-amz-copy-source"], "/other/s")
        XCTAssertNil(elsewhere.headers["x-amz-copy-source-range"])

        let complete = store.completeMultipartUpload(
            key: "in/x", uploadID: "U/1",
            parts: [S3CompletedPart(number: 2, etag: S3ETag("e2"), crc32c: 1), S3CompletedPart(number: 1, etag: S3ETag("\"e1\""))]
        ).request
        XCTAssertEqual(complete.method, "POST")
        XCTAssertEqual(complete.url, "http://127.0.0.1:7480/bkt/in/x?uploadId=U%2F1")
        XCTAssertEqual(complete.headers["Content-Type"], "application/xml")
        let body = String(decoding: complete.body, as: UTF8.self)
        XCTAssertEqual(
            body,
            "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                + "<Part><PartNumber>1</PartNumber><ETag>&quot;e1&quot;</ETag></Part>"
                + "<Part><PartNumber>2</PartNumber><ETag>&quot;e2&quot;</ETag><ChecksumCRC32C>AAAAAQ==</ChecksumCRC32C></Part>"
                + "</CompleteMultipartUpload>", "in part order, each ETag quoted as S3 gave it")
        XCTAssertEqual(complete.headers["x-amz-content-sha256"], SignatureV4.payloadHash(complete.body), "a body in hand is signed")

        let abort = store.abortMultipartUpload(key: "in/x", uploadID: "U+1").request
        XCTAssertEqual(abort.method, "DELETE")
        XCTAssertEqual(abort.url, "http://127.0.0.1:7480/bkt/in/x?uploadId=U%2B1")
    }

    func testListRequestNamesItsPrefixDelimiterTokenAndPageSize() {
        let first = store.listObjects(prefix: "up loads/", maxKeys: 2).request
        XCTAssertEqual(first.method, "GET")
        XCTAssertEqual(first.url, "http://127.0.0.1:7480/bkt?list-type=2&max-keys=2&prefix=up%20loads%2F")
        let next = store.listObjects(prefix: "p", delimiter: "/", continuationToken: "1/a+b=", maxKeys: 5000).request
        XCTAssertEqual(next.url, "http://127.0.0.1:7480/bkt?list-type=2&max-keys=1000&prefix=p&delimiter=%2F&continuation-token=1%2Fa%2Bb%3D")
        XCTAssertEqual(store.listObjects().request.url, "http://127.0.0.1:7480/bkt?list-type=2&max-keys=1000")
    }

    func testEveryOperationIsSignedAfreshWhenDescribedAgain() {
        let clock = Clock()
        let requests = S3ObjectRequests(
            bucket: "bkt", endpoint: S3Endpoint(base: "http://127.0.0.1:7480", addressing: .path), region: "us-east-1",
            credentials: exampleKeys, now: { clock.now })
        let first = requests.headObject(key: "k").request
        clock.advance(by: 61)
        let second = requests.headObject(key: "k").request
        XCTAssertEqual(first.headers["x-amz-date"], "20130524T000000Z")
        XCTAssertEqual(second.headers["x-amz-date"], "20130524T000101Z")
        XCTAssertNotEqual(signature(first), signature(second))
    }

    // MARK: Answers

    /// What a sync compares a local file with: the full-object checksum a
    /// HEAD asked with `x-amz-checksum-mode: ENABLED` reports, read sans-IO.
    func testAHeadAskedForChecksumsReportsTheObjectsFullObjectChecksum() throws {
        let head = store.headObject(key: "k", checksums: true)
        XCTAssertEqual(head.request.headers["x-amz-checksum-mode"], "ENABLED")
        XCTAssertTrue(head.request.headers["Authorization"]!.contains("x-amz-checksum-mode"), "signed")
        XCTAssertNil(store.headObject(key: "k").request.headers["x-amz-checksum-mode"])
        // AWS since 2025: a multipart object with its CRC64NVME (of "123456789") and a composite CRC-32C.
        let answer = HTTPResponse(
            status: 200,
            headers: [
                "Content-Length": "9", "ETag": "\"abc-2\"", "x-amz-checksum-crc64nvme": "rosUhgp5mIg=",
                "x-amz-checksum-crc32c": "4waSgw==-2",
            ])
        guard case .found(let metadata) = try head.interpret(answer) else { return XCTFail("not found") }
        XCTAssertEqual(
            metadata.checksums,
            [
                S3ObjectChecksum(algorithm: .crc32c, digest: [0xE3, 0x06, 0x92, 0x83], kind: .composite(partCount: 2)),
                S3ObjectChecksum(algorithm: .crc64nvme, digest: CRC64NVME.bigEndianBytes(0xAE8B_1486_0A79_9888), kind: .fullObject),
            ])
        let full = try XCTUnwrap(S3ObjectChecksum.fullObject(in: AWSResponse(answer)))
        XCTAssertEqual(full.algorithm, .crc64nvme)
        XCTAssertEqual(full.crc, 0xAE8B_1486_0A79_9888)
        XCTAssertEqual(full.headerValue, "rosUhgp5mIg=")
        XCTAssertEqual(S3ObjectChecksum.checksums(in: AWSResponse(answer)).first?.headerValue, "4waSgw==-2")
        // A full-object CRC-32C is preferred: the cheapest to compute of a local file.
        let both = AWSResponse(
            status: 200, headers: ["x-amz-checksum-crc64nvme": "rosUhgp5mIg=", "x-amz-checksum-crc32c": "4waSgw==", "x-amz-checksum-type": "FULL_OBJECT"])
        XCTAssertEqual(S3ObjectChecksum.fullObject(in: both)?.algorithm, .crc32c)
        XCTAssertNil(S3ObjectChecksum.fullObject(in: AWSResponse(status: 200, headers: ["ETag": "\"abc\""])))
    }

    func testPutAnswersAreTheNewETagOrPreconditionFailed() throws {
        let put = store.putObject(key: "k", bytes: [1], condition: .onlyIfAbsent)
        XCTAssertEqual(try put.interpret(HTTPResponse(status: 200, headers: ["ETag": "\"e1\""])), .stored(S3ETag("e1")))
        let refused = HTTPResponse(
            status: 412, body: xml("<Error><Code>PreconditionFailed</Code><Message>At least one of the pre-conditions you specified did not hold</Message></Error>"))
        XCTAssertEqual(try put.interpret(refused), .preconditionFailed)
        XCTAssertEqual(try put.interpret(HTTPResponse(status: 412)), .preconditionFailed, "a 412 without a body too")
        assertFailure(try put.interpret(HTTPResponse(status: 200)), retryable: true, code: nil)
        assertFailure(try put.interpret(HTTPResponse(status: 503, body: xml("<Error><Code>SlowDown</Code></Error>"))), retryable: true, code: "SlowDown")
        assertFailure(
            try put.interpret(HTTPResponse(status: 409, body: xml("<Error><Code>ConditionalRequestConflict</Code></Error>"))), retryable: true,
            code: "ConditionalRequestConflict")
        assertFailure(try put.interpret(HTTPResponse(status: 404, body: xml("<Error><Code>NoSuchBucket</Code></Error>"))), retryable: false, code: "NoSuchBucket")
    }

    func testETagsCompareWhateverTheirQuotes() {
        XCTAssertEqual(S3ETag("\"AbC\""), S3ETag(" abc "))
        XCTAssertEqual(S3ETag("\"abc\"").unquoted, "abc")
        XCTAssertEqual(S3ETag("abc").quoted, "\"abc\"")
        XCTAssertEqual(Set([S3ETag("\"x\""), S3ETag("x")]).count, 1)
    }

    func testGetAnswersWholeRangedMissingStaleAndUnsatisfiable() throws {
        let get = store.getObject(key: "k", range: 2...4, ifMatch: S3ETag("e"))
        let partial = HTTPResponse(
            status: 206,
            headers: [
                "Content-Length": "3", "Content-Range": "bytes 2-4/10", "ETag": "\"e\"", "Last-Modified": "Fri, 24 May 2013 00:00:00 GMT",
                "Content-Type": "text/plain",
            ], body: [2, 3, 4])
        let metadata = S3ObjectMetadata(
            etag: S3ETag("e"), contentLength: 3, size: 10, range: 2...4, lastModified: exampleDate, contentType: "text/plain")
        XCTAssertEqual(try get.interpret(partial), .found(S3ObjectContent(metadata: metadata, body: [2, 3, 4])))

        let whole = HTTPResponse(status: 200, headers: ["Content-Length": "2", "ETag": "\"e\""], body: [7, 8])
        guard case .found(let content) = try store.getObject(key: "k").interpret(whole) else { return XCTFail() }
        XCTAssertEqual(content.metadata.size, 2)
        XCTAssertNil(content.metadata.range)
        XCTAssertEqual(content.body, [7, 8])

        let missing = HTTPResponse(status: 404, body: xml("<Error><Code>NoSuchKey</Code><Message>none</Message></Error>"))
        XCTAssertEqual(try get.interpret(missing), .notFound)
        XCTAssertEqual(try get.interpret(HTTPResponse(status: 412)), .preconditionFailed)
        XCTAssertEqual(try get.interpret(HTTPResponse(status: 416, headers: ["Content-Range": "bytes */10"])), .rangeNotSatisfiable(objectSize: 10))
        XCTAssertEqual(try get.interpret(HTTPResponse(status: 416)), .rangeNotSatisfiable(objectSize: nil))
        // A missing bucket is not a missing object; a body cut short is not the object.
        assertFailure(try get.interpret(HTTPResponse(status: 404, body: xml("<Error><Code>NoSuchBucket</Code></Error>"))), retryable: false, code: "NoSuchBucket")
        let cut = HTTPResponse(status: 200, headers: ["Content-Length": "5"], body: [1, 2])
        assertFailure(try get.interpret(cut), retryable: true, code: nil)
        assertFailure(try get.interpret(HTTPResponse(status: 206, headers: ["Content-Length": "3"], body: [1, 2, 3])), retryable: true, code: nil)
        assertFailure(try get.interpret(HTTPResponse(status: 500)), retryable: true, code: nil)
    }

    func testHeadAnswers() throws {
        let head = store.headObject(key: "k")
        let found = HTTPResponse(
            status: 200, headers: ["Content-Length": "15728640", "ETag": "\"0a1b-3\"", "Last-Modified": "Fri, 24 May 2013 00:00:00 GMT"])
        XCTAssertEqual(
            try head.interpret(found),
            .found(S3ObjectMetadata(etag: S3ETag("0a1b-3"), contentLength: 15_728_640, size: 15_728_640, lastModified: exampleDate)))
        XCTAssertEqual(try head.interpret(HTTPResponse(status: 404)), .notFound)
        XCTAssertEqual(try head.interpret(HTTPResponse(status: 412)), .preconditionFailed)
        assertFailure(try head.interpret(HTTPResponse(status: 403)), retryable: false, code: nil)
        assertFailure(try head.interpret(HTTPResponse(status: 200)), retryable: true, code: nil)
    }

    func testDeleteOfAnythingGoneIsDone() throws {
        let delete = store.deleteObject(key: "k")
        XCTAssertNoThrow(try delete.interpret(HTTPResponse(status: 204)))
        XCTAssertNoThrow(try delete.interpret(HTTPResponse(status: 404, body: xml("<Error><Code>NoSuchKey</Code></Error>"))))
        assertFailure(try delete.interpret(HTTPResponse(status: 403, body: xml("<Error><Code>AccessDenied</Code></Error>"))), retryable: false, code: "AccessDenied")
    }

    func testCreateAndPartAnswers() throws {
        let create = store.createMultipartUpload(key: "k")
        let created = xml("<InitiateMultipartUploadResult><Bucket>bkt</Bucket><Key>k</Key><UploadId>2~abc</UploadId></InitiateMultipartUploadResult>")
        XCTAssertEqual(try create.interpret(HTTPResponse(status: 200, body: created)), "2~abc")
        assertFailure(try create.interpret(HTTPResponse(status: 200, body: xml("<Error><Code>InternalError</Code></Error>"))), retryable: true, code: "InternalError")
        assertFailure(try create.interpret(HTTPResponse(status: 200, body: [])), retryable: true, code: nil)

        let part = store.uploadPart(key: "k", uploadID: "U", partNumber: 1, length: 3, crc32c: 1)
        XCTAssertEqual(try part.interpret(HTTPResponse(status: 200, headers: ["ETag": "\"p1\""])), S3ETag("p1"))
        XCTAssertEqual(
            try part.interpret(HTTPResponse(status: 200, headers: ["ETag": "\"p1\"", "x-amz-checksum-crc32c": "AAAAAQ=="])), S3ETag("p1"))
        // The store computed another CRC-32C than was sent: those are not the bytes.
        assertFailure(
            try part.interpret(HTTPResponse(status: 200, headers: ["ETag": "\"p1\"", "x-amz-checksum-crc32c": "AAAAAg=="])), retryable: true,
            code: nil)
        assertFailure(
            try part.interpret(HTTPResponse(status: 400, body: xml("<Error><Code>BadDigest</Code></Error>"))), retryable: true, code: "BadDigest")
        assertFailure(
            try part.interpret(HTTPResponse(status: 404, body: xml("<Error><Code>NoSuchUpload</Code></Error>"))), retryable: false,
            code: "NoSuchUpload")
    }

    func testPartCopyReadsCopyPartResultAndAnErrorInA200() throws {
        let copy = store.uploadPartCopy(key: "k", uploadID: "U", partNumber: 2, sourceKey: "s")
        let copied = xml("<CopyPartResult><LastModified>2013-05-24T00:00:00.000Z</LastModified><ETag>\"c2\"</ETag></CopyPartResult>")
        XCTAssertEqual(try copy.interpret(HTTPResponse(status: 200, body: copied)), S3ETag("c2"))
        assertFailure(
            try copy.interpret(HTTPResponse(status: 200, body: xml("<Error><Code>InternalError</Code><Message>x</Message></Error>"))),
            retryable: true, code: "InternalError")
        assertFailure(try copy.interpret(HTTPResponse(status: 200, body: Array("<CopyPartResult><ETag>".utf8))), retryable: true, code: nil)
        assertFailure(
            try copy.interpret(HTTPResponse(status: 412, body: xml("<Error><Code>PreconditionFailed</Code></Error>"))), retryable: false,
            code: "PreconditionFailed")
        assertFailure(
            try copy.interpret(HTTPResponse(status: 416, body: xml("<Error><Code>InvalidRange</Code></Error>"))), retryable: false,
            code: "InvalidRange")
    }

    func testCompletionReadsCephsEmptyETagAndAnErrorInA200() throws {
        let complete = store.completeMultipartUpload(key: "k", uploadID: "U", parts: [S3CompletedPart(number: 1, etag: S3ETag("e1"))])
        let aws = xml("<CompleteMultipartUploadResult><Location>x</Location><Bucket>bkt</Bucket><Key>k</Key><ETag>\"m-2\"</ETag></CompleteMultipartUploadResult>")
        XCTAssertEqual(try complete.interpret(HTTPResponse(status: 200, body: aws)), .completed(etag: S3ETag("m-2")))
        // Ceph's gateway (16) answers an empty ETag; HEAD has the right one.
        let ceph = xml("<CompleteMultipartUploadResult><Location>x</Location><Bucket>bkt</Bucket><Key>k</Key><ETag></ETag></CompleteMultipartUploadResult>")
        XCTAssertEqual(try complete.interpret(HTTPResponse(status: 200, body: ceph)), .completed(etag: nil))
        // S3 answers 200 at once and may report a failure in the body minutes later.
        let late = xml("\n    \n    <Error><Code>InternalError</Code><Message>We encountered an internal error.</Message></Error>")
        XCTAssertThrowsError(try complete.interpret(HTTPResponse(status: 200, body: late))) { error in
            guard let failure = error as? S3Failure else { return XCTFail("\(error)") }
            XCTAssertTrue(failure.isRetryable)
            XCTAssertTrue(failure.isErrorInSuccess)
            XCTAssertEqual(failure.description, "CompleteMultipartUpload s3://bkt/k: HTTP 200 with an error: InternalError (We encountered an internal error.)")
        }
        assertFailure(try complete.interpret(HTTPResponse(status: 200, body: Array("   ".utf8))), retryable: true, code: nil)
        XCTAssertEqual(
            try complete.interpret(HTTPResponse(status: 404, body: xml("<Error><Code>NoSuchUpload</Code></Error>"))), .uploadUnknown)
        assertFailure(
            try complete.interpret(HTTPResponse(status: 400, body: xml("<Error><Code>EntityTooSmall</Code></Error>"))), retryable: false,
            code: "EntityTooSmall")
        assertFailure(
            try complete.interpret(HTTPResponse(status: 400, body: xml("<Error><Code>InvalidPart</Code></Error>"))), retryable: false,
            code: "InvalidPart")
    }

    func testAbortOfAnUploadAlreadyGoneIsNotAFailure() throws {
        let abort = store.abortMultipartUpload(key: "k", uploadID: "U")
        XCTAssertEqual(try abort.interpret(HTTPResponse(status: 204)), .aborted)
        XCTAssertEqual(try abort.interpret(HTTPResponse(status: 404, body: xml("<Error><Code>NoSuchUpload</Code></Error>"))), .alreadyGone)
        assertFailure(try abort.interpret(HTTPResponse(status: 503)), retryable: true, code: nil)
    }

    func testListPagesCarryObjectsPrefixesAndTheNextToken() throws {
        let page = xml(
            """
            <ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bkt</Name><Prefix>up/</Prefix>\
            <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken><KeyCount>3</KeyCount>\
            <MaxKeys>3</MaxKeys><Delimiter>/</Delimiter><IsTruncated>true</IsTruncated>\
            <Contents><Key>up/a &amp; b</Key><LastModified>2013-05-24T00:00:00.000Z</LastModified><ETag>&quot;e1&quot;</ETag>\
            <Size>5</Size><StorageClass>STANDARD</StorageClass><Owner><ID>x</ID></Owner></Contents>\
            <Contents><Key>up/c</Key><LastModified>2013-05-24T00:00:00Z</LastModified><ETag>"e2-3"</ETag><Size>15728640</Size></Contents>\
            <CommonPrefixes><Prefix>up/d/</Prefix></CommonPrefixes></ListBucketResult>
            """)
        let list = store.listObjects(prefix: "up/", delimiter: "/", maxKeys: 3)
        XCTAssertEqual(
            try list.interpret(HTTPResponse(status: 200, body: page)),
            S3ObjectPage(
                objects: [
                    S3ObjectSummary(key: "up/a & b", size: 5, etag: S3ETag("e1"), lastModified: exampleDate),
                    S3ObjectSummary(key: "up/c", size: 15_728_640, etag: S3ETag("e2-3"), lastModified: exampleDate),
                ], commonPrefixes: ["up/d/"], nextContinuationToken: "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="))

        let last = xml("<ListBucketResult><Name>bkt</Name><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>")
        XCTAssertEqual(try list.interpret(HTTPResponse(status: 200, body: last)), S3ObjectPage(objects: [], nextContinuationToken: nil))
        // Truncated with no way on would list the same page forever.
        let stuck = xml("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>")
        assertFailure(try list.interpret(HTTPResponse(status: 200, body: stuck)), retryable: false, code: nil)
        assertFailure(try list.interpret(HTTPResponse(status: 200, body: Array("<ListBucketResult>".utf8))), retryable: true, code: nil)
        assertFailure(
            try list.interpret(HTTPResponse(status: 404, body: xml("<Error><Code>NoSuchBucket</Code></Error>"))), retryable: false,
            code: "NoSuchBucket")
    }

    // MARK: Failures

    /// One classification for the backend and these operations: by code
    /// first, then by status; S3's echo of the string to sign and the key
    /// id never reaches a message.
    func testFailuresAreClassifiedByCodeThenStatusAndKeepNoSecrets() {
        func failure(_ status: Int, _ code: String?, headers: HTTPHeaders = [:]) -> S3Failure {
            let body = code.map { xml("<Error><Code>\($0)</Code><Message>m</Message></Error>") } ?? []
            return S3Failure(HTTPResponse(status: status, headers: headers, body: body), operation: "op")
        }
        for code in ["SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "BadDigest", "XAmzContentSHA256Mismatch"] {
            XCTAssertTrue(failure(400, code).isRetryable, code)
        }
        for status in [500, 502, 503, 408, 429] { XCTAssertTrue(failure(status, nil).isRetryable, "\(status)") }
        for code in ["AccessDenied", "SignatureDoesNotMatch", "NoSuchBucket", "NoSuchUpload", "InvalidPart", "EntityTooSmall"] {
            XCTAssertFalse(failure(400, code).isRetryable, code)
        }
        XCTAssertFalse(failure(503, "AccessDenied").isRetryable, "a final code is final whatever the status")
        XCTAssertFalse(failure(403, nil).isRetryable)
        XCTAssertEqual(failure(503, "SlowDown", headers: ["Retry-After": "3"]).retryAfter, .seconds(3))
        XCTAssertEqual(failure(503, "SlowDown").description, "op: HTTP 503: SlowDown (m)")
        XCTAssertEqual(failure(503, "SlowDown").backendError, .transient("op: HTTP 503: SlowDown (m)"))
        XCTAssertEqual(failure(403, "AccessDenied").backendError, .rejected("op: HTTP 403: AccessDenied (m)"))

        let keys = AWSCredentialProvider(
            fixed: AWSCredentials(accessKeyID: "AKIDSECRETLEAK", secretAccessKey: "s3cr3t-value"), source: "test")
        let requests = S3ObjectRequests(
            bucket: "bkt", endpoint: S3Endpoint(base: "http://127.0.0.1:7480", addressing: .path), region: "us-east-1", credentials: keys)
        let put = requests.putObject(key: "k", bytes: [1])
        let signature = put.request.headers["Authorization"]!.components(separatedBy: "Signature=").last!
        let refusal = HTTPResponse(
            status: 403,
            body: xml(
                "<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match</Message>"
                    + "<AWSAccessKeyId>AKIDSECRETLEAK</AWSAccessKeyId><StringToSign>AWS4-HMAC-SHA256 \(signature)</StringToSign>"
                    + "<SignatureProvided>\(signature)</SignatureProvided><CanonicalRequest>PUT /bkt/k</CanonicalRequest></Error>"))
        XCTAssertThrowsError(try put.interpret(refusal)) { error in
            let text = "\(error) \(String(reflecting: error))"
            XCTAssertTrue(text.contains("SignatureDoesNotMatch"), text)
            for secret in ["AKIDSECRETLEAK", "s3cr3t", signature, "CanonicalRequest", "PUT /bkt"] {
                XCTAssertFalse(text.contains(secret), "\(secret) in \(text)")
            }
        }
    }

    /// Temporary credentials S3 calls expired are fetched again and the
    /// request is worth retrying; long-term keys it calls expired are final.
    func testExpiredTemporaryCredentialsMakeTheFailureRetryable() throws {
        let fetches = Counter()
        let temporary = try AWSCredentialProvider(source: "sts", now: { Date() }, startInBackground: { _ in }) {
            fetches.increment()
            return AWSCredentials(accessKeyID: "ASIA\(fetches.value)", secretAccessKey: "s", sessionToken: "t", expiration: Date() + 3600)
        }
        let requests = S3ObjectRequests(
            bucket: "bkt", endpoint: S3Endpoint(base: "http://127.0.0.1:7480", addressing: .path), region: "us-east-1", credentials: temporary)
        let expired = HTTPResponse(status: 400, body: xml("<Error><Code>ExpiredToken</Code><Message>expired</Message></Error>"))
        let head = requests.headObject(key: "k")
        XCTAssertEqual(head.request.headers["x-amz-security-token"], "t")
        XCTAssertTrue(head.request.headers["Authorization"]!.contains("Credential=ASIA1/"))
        assertFailure(try requests.getObject(key: "k").interpret(expired), retryable: true, code: "ExpiredToken")
        XCTAssertTrue(
            requests.headObject(key: "k").request.headers["Authorization"]!.contains("Credential=ASIA2/"),
            "the next request signs with new credentials")

        assertFailure(try store.getObject(key: "k").interpret(expired), retryable: false, code: "ExpiredToken")
    }
}

/// A clock the test moves.
private final class Clock: @unchecked Sendable {
    // @unchecked: read and moved on the test's thread only.
    private(set) var now = Date(timeIntervalSince1970: 1_369_353_600)
    func advance(by seconds: TimeInterval) { now += seconds }
}

private final class Counter: @unchecked Sendable {
    // @unchecked: the provider fetches on the calling thread here (no background start).
    private(set) var value = 0
    func increment() { value += 1 }
}

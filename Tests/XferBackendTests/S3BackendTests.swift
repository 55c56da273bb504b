import Crypto
import Foundation
import XCTest
import Xfer
import XferBackendTesting
import XferPrimitives
@testable import XferS3
@testable import XferS3Core

/// The s3 backend is sans-IO: these tests check the signatures it computes,
/// the requests it builds and how it reads S3's answers, with no network.
/// (End to end against a real S3 server: S3PushTests.)
final class S3BackendTests: XCTestCase {
    // MARK: Signature V4: the examples of the S3 documentation ("Signature
    // Calculations for the Authorization Header: Transferring Payload in a
    // Single Chunk"), whose keys and expected signatures AWS publishes.

    private let exampleCredentials = AWSCredentials(
        accessKeyID: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    private let exampleDate = Date(timeIntervalSince1970: 1_369_353_600)  // 2013-05-24T00:00:00Z
    private let emptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    private func signed(_ request: HTTPRequest, payloadHash: String) -> HTTPRequest {
        var request = request
        SignatureV4(credentials: exampleCredentials, region: "us-east-1").sign(&request, payloadHash: payloadHash, at: exampleDate)
        return request
    }

    func testSignatureOfTheDocumentationsGetObjectExample() {
        let request = signed(
            HTTPRequest(method: .get, url: "https://examplebucket.s3.amazonaws.com/test.txt", headers: ["Range": "bytes=0-9"]),
            payloadHash: emptyHash)
        XCTAssertEqual(
            request.headers["Authorization"],
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        )
        XCTAssertEqual(request.headers["x-amz-date"], "20130524T000000Z")
        XCTAssertEqual(request.headers["Host"], "examplebucket.s3.amazonaws.com")
    }

    func testSignatureOfTheDocumentationsPutObjectExample() {
        let body = RequestBody(Array("Welcome to Amazon S3.".utf8))
        let hash = SignatureV4.payloadHash(body)
        XCTAssertEqual(hash, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072")
        let request = signed(
            HTTPRequest(
                method: .put, url: "https://examplebucket.s3.amazonaws.com/test%24file.text",
                headers: ["Date": "Fri, 24 May 2013 00:00:00 GMT", "x-amz-storage-class": "REDUCED_REDUNDANCY"], body: body),
            payloadHash: hash)
        XCTAssertEqual(
            request.headers["Authorization"],
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class,Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"
        )
    }

    func testSignatureOfTheDocumentationsGetBucketLifecycleExample() {
        let request = signed(HTTPRequest(method: .get, url: "https://examplebucket.s3.amazonaws.com/?lifecycle"), payloadHash: emptyHash)
        XCTAssertEqual(
            request.headers["Authorization"],
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;x-amz-content-sha256;x-amz-date,Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"
        )
    }

    func testSignatureOfTheDocumentationsListObjectsExample() {
        let request = signed(
            HTTPRequest(method: .get, url: "https://examplebucket.s3.amazonaws.com/?max-keys=2&prefix=J"), payloadHash: emptyHash)
        XCTAssertEqual(
            request.headers["Authorization"],
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;x-amz-content-sha256;x-amz-date,Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
        )
    }

    func testCanonicalQuerySortsAndEncodesTheAWSWay() {
        XCTAssertEqual(SignatureV4.canonicalQuery("uploads"), "uploads=")
        XCTAssertEqual(SignatureV4.canonicalQuery("uploadId=a%2Fb+c&partNumber=2"), "partNumber=2&uploadId=a%2Fb%2Bc")
        XCTAssertEqual(SignatureV4.uriEncode("a b/ü~", keepSlash: true), "a%20b/%C3%BC~")
        XCTAssertEqual(SignatureV4.uriEncode("a/b", keepSlash: false), "a%2Fb")
    }

    func testSessionTokenIsSignedAndCredentialsNeverPrintTheSecret() {
        let credentials = AWSCredentials(accessKeyID: "AKIDEXAMPLE1234", secretAccessKey: "s3cr3t-value", sessionToken: "tok")
        var request = HTTPRequest(method: .get, url: "http://127.0.0.1:9000/b/k")
        SignatureV4(credentials: credentials, region: "eu-west-1").sign(&request, payloadHash: emptyHash, at: exampleDate)
        XCTAssertEqual(request.headers["x-amz-security-token"], "tok")
        XCTAssertTrue(request.headers["Authorization"]!.contains("SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token,"))
        XCTAssertEqual(request.headers["Host"], "127.0.0.1:9000")
        XCTAssertFalse("\(credentials)".contains("s3cr3t"))
        XCTAssertFalse(String(reflecting: credentials).contains("s3cr3t") && "\(credentials)".contains("s3cr3t"))
    }

    // MARK: Addressing and part sizes

    func testTargetsAndKeys() throws {
        let location = try S3Location(parsing: "s3://my-bucket/some/prefix/")
        XCTAssertEqual(location.normalized, "s3://my-bucket/some/prefix")
        XCTAssertEqual(location.key(forFileNamed: "a b.bin"), "some/prefix/a b.bin")
        XCTAssertEqual(try S3Location(parsing: "s3://my-bucket").key(forFileNamed: "x"), "x")
        for bad in ["http://host/b", "s3://", "s3://ab", "s3://Upper", "s3://-dash", "s3://under_score/x", "s3://b?x"] {
            XCTAssertThrowsError(try S3Location(parsing: bad), bad)
        }
        let path = S3Endpoint(base: "http://127.0.0.1:9000", addressing: .path)
        XCTAssertEqual(path.url(bucket: "bkt", key: "p/a b.bin", query: "uploads"), "http://127.0.0.1:9000/bkt/p/a%20b.bin?uploads")
        let virtual = S3Endpoint.aws(region: "eu-west-1")
        XCTAssertEqual(virtual.url(bucket: "bkt", key: "k"), "https://bkt.s3.eu-west-1.amazonaws.com/k")
        // Dotted buckets do not match AWS's wildcard certificate: path style then.
        XCTAssertEqual(virtual.url(bucket: "b.k.t", key: "k"), "https://s3.eu-west-1.amazonaws.com/b.k.t/k")
        XCTAssertThrowsError(try S3Endpoint.parse("http://h:9000/path", addressing: .path))
    }

    func testTargetNamesTheEndpointUnlessItIsAWSs() throws {
        let local = S3Backend(configuration: configuration, endpoint: S3Endpoint(base: "http://127.0.0.1:9000", addressing: .path))
        XCTAssertEqual(try local.normalizedTarget("s3://bkt/a b"), "s3://bkt/a b at http://127.0.0.1:9000")
        // A trailing slash says "a folder" even for one file: kept, so it is another push.
        XCTAssertEqual(try local.normalizedTarget("s3://bkt/a b//"), "s3://bkt/a b/ at http://127.0.0.1:9000")
        XCTAssertEqual(try local.normalizedTarget("s3://bkt/"), "s3://bkt at http://127.0.0.1:9000")
        // A stored target keeps its endpoint, whatever the resuming backend's.
        XCTAssertEqual(try S3Backend(configuration: configuration).normalizedTarget("s3://bkt/a b at http://127.0.0.1:9000"),
                       "s3://bkt/a b at http://127.0.0.1:9000")
        XCTAssertEqual(try S3Backend(configuration: configuration).normalizedTarget("s3://bkt/x"), "s3://bkt/x")
        XCTAssertEqual(S3Backend.splitTarget("s3://bkt/meet at noon").location, "s3://bkt/meet at noon")
    }

    func testPartSizeHasS3sMinimumAndGrowsToStayWithinTenThousandParts() {
        let backend = S3Backend(configuration: configuration)
        XCTAssertEqual(backend.chunkSize(forFileOfSize: 100, requested: 8 << 20), 8 << 20)
        XCTAssertEqual(backend.chunkSize(forFileOfSize: 100 << 20, requested: 1 << 20), 5 << 20)
        for size: Int64 in [80 << 30, 100 << 30, 5 << 40] {
            let part = backend.chunkSize(forFileOfSize: size, requested: 8 << 20)
            XCTAssertLessThanOrEqual((size + Int64(part) - 1) / Int64(part), 10_000, "\(size)")
            XCTAssertEqual(part % (1 << 20), 0)
        }
        XCTAssertEqual(backend.chunkSize(forFileOfSize: 100 << 30, requested: 8 << 20), 11 << 20)
    }

    // MARK: Requests and answers

    private let configuration = AWSConfiguration(
        credentials: AWSCredentials(accessKeyID: "AKID", secretAccessKey: "secret"), region: "us-east-1", source: "test")

    private func job(
        size: Int64 = 12 << 20, handles: ServerHandles = ServerHandles(), receipts: [Int: String] = [:], jobHandles: ServerHandles? = nil
    ) -> JobContext {
        let file = BackendTesting.file(
            name: "a b.bin", size: size, chunkSize: 5 << 20, emptyFileHasOneChunk: backend.traits.emptyFileHasOneChunk,
            handles: handles, receipts: receipts)
        return BackendTesting.job(target: "s3://bkt/in", handles: jobHandles ?? self.jobHandles, files: [file])
    }

    private var jobHandles: ServerHandles {
        S3Backend(configuration: configuration, endpoint: S3Endpoint(base: "http://127.0.0.1:9000", addressing: .path))
            .makeJobHandles(for: BackendTesting.job(target: "s3://bkt"))
    }

    /// The handles of a file whose multipart upload `U` was created.
    private let uploadHandles: ServerHandles = [S3Backend.uploadID: "U", S3Backend.objectKey: "in/a b.bin"]

    private func assertUploadUnknown<T>(_ expression: @autoclosure () throws -> T, line: UInt = #line) {
        XCTAssertThrowsError(try expression(), line: line) { error in
            guard case BackendError.uploadUnknown = error else { return XCTFail("\(error)", line: line) }
        }
    }

    private let backend = S3Backend(configuration: AWSConfiguration(
        credentials: AWSCredentials(accessKeyID: "AKID", secretAccessKey: "secret"), region: nil, source: "test"), listPageSize: 2)

    private func xml(_ text: String) -> [UInt8] { Array(("<?xml version=\"1.0\" encoding=\"UTF-8\"?>" + text).utf8) }

    func testJobKeepsEndpointAndRegionAndOpenCreatesTheUpload() throws {
        XCTAssertEqual(jobHandles.values, ["endpoint": "http://127.0.0.1:9000", "addressing": "path", "region": "us-east-1"])
        let job = job()
        let step = backend.openFile(job.files[0], in: job)
        let request = try XCTUnwrap(step.request)
        XCTAssertEqual(request.method, .post)
        XCTAssertEqual(request.url, "http://127.0.0.1:9000/bkt/in/a%20b.bin?uploads")
        XCTAssertNil(request.headers["Authorization"], "signed by the engine, after it adds its headers")
        let sent = backend.requestAsSent(request, in: job)
        XCTAssertTrue(sent.headers["Authorization"]!.hasPrefix("AWS4-HMAC-SHA256 Credential=AKID/"))
        let opening = try step.outcome(
            for: HTTPResponse(status: 200, body: xml("<InitiateMultipartUploadResult><Bucket>bkt</Bucket><Key>in/a b.bin</Key><UploadId>U-1/2</UploadId></InitiateMultipartUploadResult>")))
        XCTAssertEqual(opening.handles[S3Backend.uploadID], "U-1/2")
        XCTAssertEqual(opening.handles[S3Backend.objectKey], "in/a b.bin")
        XCTAssertThrowsError(try step.outcome(for: HTTPResponse(status: 200, body: []))) { error in
            guard case BackendError.transient = error else { return XCTFail("\(error)") }
        }
    }

    func testExtraHeadersAreSignedAndTheBackendsOwnHeadersWin() throws {
        let job = job()
        let request = try XCTUnwrap(backend.openFile(job.files[0], in: job).request)
        let extra: HTTPHeaders = ["x-amz-meta-owner": "qa", "Content-Type": "text/plain"]
        let sent = backend.requestAsSent(request, in: job, extraHeaders: extra)
        XCTAssertEqual(sent.headers["x-amz-meta-owner"], "qa")
        XCTAssertEqual(sent.headers["Content-Type"], "application/octet-stream")
        let authorization = try XCTUnwrap(sent.headers["Authorization"])
        let signed = authorization.components(separatedBy: "SignedHeaders=").last?.components(separatedBy: ",").first ?? ""
        XCTAssertTrue(signed.split(separator: ";").contains("x-amz-meta-owner"), authorization)
    }

    /// As `aws s3 cp`: one file named and a key without a trailing slash
    /// names the object; a trailing slash, a directory or several files make
    /// a prefix; a job made before the rule keeps its prefix naming.
    func testOneFileNamedWithAKeyIsThatObjectAsAWSCLINamesIt() throws {
        let plain = S3Backend(configuration: configuration, endpoint: S3Endpoint(base: "http://127.0.0.1:9000", addressing: .path))
        func key(target: String, namedFile: String?, relativePath: String = "a.bin", legacy: Bool = false, fileCount: Int = 1) throws
            -> String?
        {
            let normalized = try plain.normalizedTarget(target)
            let handles = legacy ? ServerHandles() : plain.makeJobHandles(for: BackendTesting.job(target: normalized, namedFile: namedFile))
            let files = (0..<fileCount).map {
                BackendTesting.file(index: $0, name: "a.bin", relativePath: $0 == 0 ? relativePath : "other\($0)", size: 3, chunkSize: 8 << 20)
            }
            let job = BackendTesting.job(target: normalized, handles: handles, files: files)
            return try plain.uploadChunk(BackendTesting.chunk(0, of: files[0]), of: files[0], in: job).request.url
        }
        let base = "http://127.0.0.1:9000/bkt/"
        XCTAssertEqual(try key(target: "s3://bkt/dir/b.bin", namedFile: "a.bin"), base + "dir/b.bin")
        XCTAssertEqual(try key(target: "s3://bkt/dir/", namedFile: "a.bin"), base + "dir/a.bin")
        XCTAssertEqual(try key(target: "s3://bkt", namedFile: "a.bin"), base + "a.bin")
        // A directory (no file named), or a job from before the rule: a prefix.
        XCTAssertEqual(try key(target: "s3://bkt/dir/b.bin", namedFile: nil), base + "dir/b.bin/a.bin")
        XCTAssertEqual(try key(target: "s3://bkt/dir/b.bin", namedFile: "a.bin", legacy: true), base + "dir/b.bin/a.bin")
        // A re-run finding a directory where the file was: never two files on one key.
        XCTAssertEqual(try key(target: "s3://bkt/k", namedFile: "a.bin", fileCount: 2), base + "k/a.bin")
        XCTAssertEqual(try key(target: "s3://bkt/k", namedFile: "a.bin", relativePath: "sub/a.bin"), base + "k/sub/a.bin")
    }

    /// One check per part: Content-MD5 over https (the body unsigned), the
    /// signed SHA-256 alone over http; `md5` asks for Content-MD5 on both.
    func testEachPartCarriesOneCheckTheServerVerifies() throws {
        let chunk = ChunkPayload(index: 0, offset: 0, bytes: Array(repeating: 7, count: 100))
        let file = BackendTesting.file(name: "a.bin", size: 100, chunkSize: 8 << 20)
        for (base, checksum, md5, signedBody) in [
            ("https://s3.example.com", S3PartChecksum.auto, true, false), ("http://127.0.0.1:9000", .auto, false, true),
            ("http://127.0.0.1:9000", .md5, true, true), ("https://s3.example.com", .md5, true, false),
        ] {
            let chosen = S3Backend(
                configuration: configuration, endpoint: S3Endpoint(base: base, addressing: .path), partChecksum: checksum)
            let job = BackendTesting.job(
                target: "s3://bkt", handles: chosen.makeJobHandles(for: BackendTesting.job(target: "s3://bkt")), files: [file])
            let request = try chosen.uploadChunk(chunk, of: file, in: job).request
            XCTAssertEqual(request.headers["Content-MD5"], md5 ? Checksums.base64(chunk.md5) : nil, "\(base) \(checksum)")
            let sent = chosen.requestAsSent(request, in: job)
            XCTAssertEqual(sent.headers["x-amz-content-sha256"], signedBody ? Checksums.hex(chunk.sha256) : "UNSIGNED-PAYLOAD")
        }
    }

    func testSmallFileIsOnePutObjectCompletingTheFile() throws {
        let job = job(size: 100)
        XCTAssertTrue(backend.openFile(job.files[0], in: job).isSkipped)
        let chunk = ChunkPayload(index: 0, offset: 0, bytes: Array(repeating: 7, count: 100))
        let exchange = try backend.uploadChunk(chunk, of: job.files[0], in: job)
        XCTAssertEqual(exchange.request.method, .put)
        XCTAssertEqual(exchange.request.url, "http://127.0.0.1:9000/bkt/in/a%20b.bin")
        // Plain http: the body is signed, and its signed SHA-256 is the one check (no MD5).
        XCTAssertNil(exchange.request.headers["Content-MD5"])
        let sent = backend.requestAsSent(exchange.request, in: job)
        XCTAssertEqual(sent.headers["x-amz-content-sha256"], Checksums.hex(chunk.sha256))
        XCTAssertEqual(
            try exchange.interpret(HTTPResponse(status: 200, headers: ["ETag": "\"abc\""])),
            .stored(stored(receipt: "\"abc\"", fileURL: "s3://bkt/in/a b.bin", version: "abc")))
        // The PutObject's answer completed it: nothing to finish, and no upload to ask about on resume.
        XCTAssertTrue(try backend.finishFile(job.files[0], in: job).isSkipped)
        XCTAssertTrue(try backend.reconcileFile(job.files[0], in: job).isSkipped)
    }

    func testPartGoesToItsNumberAndUploadAndItsETagIsTheReceipt() throws {
        let job = job(handles: [S3Backend.uploadID: "U-1/2", S3Backend.objectKey: "in/a b.bin"])
        let chunk = ChunkPayload(index: 1, offset: 5 << 20, bytes: Array(repeating: 1, count: 5 << 20))
        let exchange = try backend.uploadChunk(chunk, of: job.files[0], in: job)
        XCTAssertEqual(exchange.request.url, "http://127.0.0.1:9000/bkt/in/a%20b.bin?partNumber=2&uploadId=U-1%2F2")
        XCTAssertEqual(try exchange.interpret(HTTPResponse(status: 200, headers: ["ETag": "\"e2\""])), .stored(receipt: "\"e2\""))
        let gone = HTTPResponse(status: 404, body: xml("<Error><Code>NoSuchUpload</Code><Message>gone</Message></Error>"))
        XCTAssertThrowsError(try exchange.interpret(gone)) { error in
            guard case BackendError.uploadUnknown = error else { return XCTFail("\(error)") }
        }
        let denied = HTTPResponse(
            status: 403,
            body: xml("<Error><Code>SignatureDoesNotMatch</Code><Message>no</Message><AWSAccessKeyId>AKID</AWSAccessKeyId><StringToSign>secret-ish</StringToSign></Error>"))
        XCTAssertThrowsError(try exchange.interpret(denied)) { error in
            guard case BackendError.rejected(let message, _) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("SignatureDoesNotMatch"), message)
            XCTAssertFalse(message.contains("secret-ish"), message)
        }
        XCTAssertThrowsError(try exchange.interpret(HTTPResponse(status: 503, body: xml("<Error><Code>SlowDown</Code></Error>")))) { error in
            guard case BackendError.transient = error else { return XCTFail("\(error)") }
        }
    }

    func testReconcileListsPartsPageByPageAndSparesOnlyMatchingOnes() throws {
        // Parts 1 and 2 recorded; 3 was in flight when the run died.
        let job = job(handles: uploadHandles, receipts: [0: "\"e1\"", 1: "\"e2\""])
        let file = job.files[0]
        let first = try backend.reconcileFile(file, in: job)
        let firstURL = try XCTUnwrap(first.request?.url)
        XCTAssertTrue(firstURL.hasSuffix("?max-parts=2&uploadId=U"), firstURL)
        let page1 = HTTPResponse(
            status: 200,
            body: xml(
                "<ListPartsResult><UploadId>U</UploadId><IsTruncated>true</IsTruncated><NextPartNumberMarker>2</NextPartNumberMarker>"
                    + "<Part><PartNumber>1</PartNumber><ETag>\"e1\"</ETag><Size>5242880</Size></Part>"
                    + "<Part><PartNumber>2</PartNumber><ETag>\"other\"</ETag><Size>5242880</Size></Part></ListPartsResult>"))
        XCTAssertEqual(
            try first.outcome(for: page1), .serverHasMore(chunks: [0], receipts: [0: "\"e1\""], next: S3Backend.PartMarker(after: 2)))
        let second = try backend.continueReconciling(file, in: job, from: S3Backend.PartMarker(after: 2))
        let secondURL = try XCTUnwrap(second.request?.url)
        XCTAssertTrue(secondURL.contains("part-number-marker=2"), secondURL)
        let page2 = HTTPResponse(
            status: 200,
            body: xml(
                "<ListPartsResult><IsTruncated>false</IsTruncated>"
                    + "<Part><PartNumber>3</PartNumber><ETag>\"e3\"</ETag><Size>2097152</Size></Part></ListPartsResult>"))
        XCTAssertEqual(try second.outcome(for: page2), .serverHas(chunks: [2], receipts: [2: "\"e3\""]))
        let short = HTTPResponse(
            status: 200,
            body: xml("<ListPartsResult><IsTruncated>false</IsTruncated><Part><PartNumber>3</PartNumber><ETag>\"e3\"</ETag><Size>9</Size></Part></ListPartsResult>"))
        XCTAssertEqual(try second.outcome(for: short), .serverHas(chunks: [], receipts: [:]))
        let gone = HTTPResponse(status: 404, body: xml("<Error><Code>NoSuchUpload</Code></Error>"))
        assertUploadUnknown(try second.outcome(for: gone))
        assertUploadUnknown(try first.outcome(for: gone))

        // As the engine asks it: page after page, united.
        var server = ScriptedServer([page1, page2])
        XCTAssertEqual(try server.reconcile(file, with: backend, in: job), .serverHas(chunks: [0, 2], receipts: [0: "\"e1\"", 2: "\"e3\""]))
        XCTAssertTrue(server.isExhausted)
        XCTAssertEqual(server.requests.count, 2)
        XCTAssertTrue(server.requests[1].url.contains("part-number-marker=2"), server.requests[1].url)
        XCTAssertTrue(server.requests.allSatisfy { $0.headers["Authorization"]?.hasPrefix("AWS4-HMAC-SHA256 ") == true })
        // Without the upload's id there is nothing to list: the file is opened afresh.
        assertUploadUnknown(try backend.reconcileFile(self.job(receipts: [0: "\"e1\""]).files[0], in: self.job()))
    }

    func testReconcileOfAFullyAcknowledgedFileFirstAsksWhetherTheObjectIsWhole() throws {
        let md5s = ["\"" + String(repeating: "a", count: 32) + "\"", "\"" + String(repeating: "b", count: 32) + "\"",
                    "\"" + String(repeating: "c", count: 32) + "\""]
        let job = job(handles: uploadHandles, receipts: [0: md5s[0], 1: md5s[1], 2: md5s[2]])
        let exchange = try backend.reconcileFile(job.files[0], in: job)
        XCTAssertEqual(exchange.request?.method, .head)
        let expected = try XCTUnwrap(S3Backend.multipartETag(job.files[0]))
        XCTAssertTrue(expected.hasSuffix("-3"))
        XCTAssertEqual(try exchange.outcome(for: HTTPResponse(status: 200, headers: ["ETag": "\"\(expected)\""])), .complete(url: "s3://bkt/in/a b.bin"))
        let fromTheStart = S3Backend.PartMarker(after: 0)
        XCTAssertEqual(try exchange.outcome(for: HTTPResponse(status: 404)), .serverHasMore(chunks: [], receipts: [:], next: fromTheStart))
        XCTAssertEqual(
            try exchange.outcome(for: HTTPResponse(status: 200, headers: ["ETag": "\"x-3\""])), .serverHasMore(chunks: [], receipts: [:], next: fromTheStart))
        // Then the parts, from the first.
        let list = try XCTUnwrap(try backend.continueReconciling(job.files[0], in: job, from: fromTheStart).request)
        XCTAssertEqual(list.method, .get)
        XCTAssertTrue(list.url.hasSuffix("?max-parts=2&uploadId=U"), list.url)
    }

    func testListPartsOfAnUploadTheStoreForgotIsUploadUnknownUnderCephsCodeToo() throws {
        // Ceph's gateway, word for word, to ListParts of an aborted upload: NoSuchKey.
        let ceph = HTTPResponse(
            status: 404,
            body: xml(
                "<Error><Code>NoSuchKey</Code><Message></Message><BucketName>bkt</BucketName>"
                    + "<RequestId>tx0000-default</RequestId><HostId>1007-default-default</HostId></Error>"))
        let job = job(handles: uploadHandles, receipts: [0: "\"e1\""])
        // The file is opened afresh (a new upload), rather than the job failing on every resume.
        assertUploadUnknown(try backend.reconcileFile(job.files[0], in: job).outcome(for: ceph))
        assertUploadUnknown(try backend.continueReconciling(job.files[0], in: job, from: S3Backend.PartMarker(after: 2)).outcome(for: ceph))
        // Another 404 is no news about the upload: the bucket is gone, and the job fails saying so.
        let noBucket = HTTPResponse(status: 404, body: xml("<Error><Code>NoSuchBucket</Code></Error>"))
        XCTAssertThrowsError(try backend.reconcileFile(job.files[0], in: job).outcome(for: noBucket)) { error in
            guard case BackendError.rejected(let message, _) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("bucket 'bkt' does not exist"), message)
        }
    }

    func testCompleteListsEveryPartAndCatchesAnErrorInA200() throws {
        let job = job(handles: uploadHandles, receipts: [0: "\"e1\"", 1: "\"e2\"", 2: "\"e3\""])
        let step = try backend.finishFile(job.files[0], in: job)
        let request = try XCTUnwrap(step.request)
        XCTAssertEqual(request.method, .post)
        XCTAssertTrue(request.url.hasSuffix("?uploadId=U"))
        let body = request.bodyText
        let exchange = step.outcome(for:)
        XCTAssertTrue(body.contains("<Part><PartNumber>3</PartNumber><ETag>&quot;e3&quot;</ETag></Part>"), body)
        XCTAssertEqual(
            try exchange(HTTPResponse(status: 200, body: xml("<CompleteMultipartUploadResult><ETag>\"x-3\"</ETag></CompleteMultipartUploadResult>"))),
            .completed(completion(url: "s3://bkt/in/a b.bin", version: "x-3")))
        XCTAssertThrowsError(try exchange(HTTPResponse(status: 200, body: xml("<Error><Code>InternalError</Code><Message>We encountered an internal error.</Message></Error>")))) { error in
            guard case BackendError.transient(let message, _) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("InternalError"), message)
        }
        // Whitespace S3 sent while it worked, then nothing; or an answer cut before its root closed.
        for cut in ["   ", "   <CompleteMultipartUploadResult><ETag>\"x-3\"</ETag>"] {
            XCTAssertThrowsError(try exchange(HTTPResponse(status: 200, body: Array(cut.utf8)))) { error in
                guard case BackendError.transient = error else { return XCTFail("\(error)") }
            }
        }
        XCTAssertEqual(
            try exchange(HTTPResponse(status: 400, body: xml("<Error><Code>InvalidPart</Code></Error>"))), .missing([0, 1, 2]))
        // A retry after a lost answer: the upload is gone because it completed. The engine asks
        // reconcileFile again, whose HEAD finds the whole object, instead of uploading anew.
        XCTAssertThrowsError(try exchange(HTTPResponse(status: 404, body: xml("<Error><Code>NoSuchUpload</Code></Error>")))) { error in
            guard case BackendError.outOfSync = error else { return XCTFail("\(error)") }
        }
    }

    // MARK: --part-checksum crc32

    func testCRC32IsSentAsS3SpellsItAndKeptInTheReceipt() {
        // CRC-32's check value: "123456789" gives 0xCBF43926, big-endian in base64.
        XCTAssertEqual(S3PartChecksum.crcText(Checksums.crc32(Array("123456789".utf8))), "y/Q5Jg==")
        XCTAssertEqual(S3PartReceipt(stored: "\"e1\""), S3PartReceipt(etag: "\"e1\""))
        XCTAssertEqual(S3PartReceipt(stored: "\"e1\" crc32=y/Q5Jg=="), S3PartReceipt(etag: "\"e1\"", crc: "y/Q5Jg=="))
        XCTAssertEqual(S3PartReceipt(etag: "\"e1\"", crc: "y/Q5Jg==").stored, "\"e1\" crc32=y/Q5Jg==")
    }

    func testACRC32CJobDeclaresItSendsEachPartsCRC32CAndCompletesWithThem() throws {
        let handles = S3Backend(
            configuration: configuration, endpoint: S3Endpoint(base: "http://127.0.0.1:9000", addressing: .path), partChecksum: .crc32c
        ).makeJobHandles(for: BackendTesting.job(target: "s3://bkt"))
        XCTAssertEqual(handles[S3PartChecksum.handleKey], "crc32c")
        let job = job(handles: uploadHandles, jobHandles: handles)
        XCTAssertEqual(try XCTUnwrap(backend.openFile(job.files[0], in: job).request).headers["x-amz-checksum-algorithm"], "CRC32C")
        // CRC-32C's check value: "123456789" gives 0xE3069283.
        XCTAssertEqual(S3PartChecksum.crcText(CRC32C.of(Array("123456789".utf8))), "4waSgw==")
        let chunk = ChunkPayload(index: 0, offset: 0, bytes: Array(repeating: 7, count: 5 << 20))
        let crc = S3PartChecksum.crcText(chunk.crc32c)
        let part = try backend.uploadChunk(chunk, of: job.files[0], in: job)
        XCTAssertEqual(part.request.headers["x-amz-checksum-crc32c"], crc)
        XCTAssertNil(part.request.headers["x-amz-checksum-crc32"])
        XCTAssertEqual(
            try part.interpret(HTTPResponse(status: 200, headers: ["ETag": "\"e1\"", "x-amz-checksum-crc32c": crc])),
            .stored(receipt: "\"e1\" crc32=\(crc)"))
        var receipts: [Int: String] = [:]
        for index in 0..<3 { receipts[index] = "\"e\(index + 1)\" crc32=C\(index)==" }
        let file = BackendTesting.file(name: "a b.bin", size: 12 << 20, chunkSize: 5 << 20, handles: uploadHandles, receipts: receipts)
        let completion = try XCTUnwrap(try backend.finishFile(file, in: job).request)
        XCTAssertTrue(completion.bodyText.contains("<ChecksumCRC32C>C1==</ChecksumCRC32C>"), completion.bodyText)
    }

    private var crc32JobHandles: ServerHandles {
        S3Backend(
            configuration: configuration, endpoint: S3Endpoint(base: "http://127.0.0.1:9000", addressing: .path), partChecksum: .crc32
        ).makeJobHandles(for: BackendTesting.job(target: "s3://bkt"))
    }

    func testACRC32JobDeclaresItAtCreationSendsEachPartsCRCAndCompletesWithThem() throws {
        XCTAssertEqual(crc32JobHandles[S3PartChecksum.handleKey], "crc32")
        // The choice is the job's: `backend`, made as for a resume (md5), follows it.
        let job = job(handles: uploadHandles, jobHandles: crc32JobHandles)
        let open = try XCTUnwrap(backend.openFile(job.files[0], in: job).request)
        XCTAssertEqual(open.headers["x-amz-checksum-algorithm"], "CRC32")
        XCTAssertTrue(backend.requestAsSent(open, in: job).headers["Authorization"]!.contains("x-amz-checksum-algorithm"))

        let chunk = ChunkPayload(index: 1, offset: 5 << 20, bytes: Array(repeating: 9, count: 5 << 20))
        let crc = S3PartChecksum.crcText(chunk.crc32)
        let part = try backend.uploadChunk(chunk, of: job.files[0], in: job)
        XCTAssertEqual(part.request.headers["x-amz-checksum-crc32"], crc)
        XCTAssertNil(part.request.headers["Content-MD5"])
        XCTAssertEqual(
            try part.interpret(HTTPResponse(status: 200, headers: ["ETag": "\"e2\"", "x-amz-checksum-crc32": crc])),
            .stored(receipt: "\"e2\" crc32=\(crc)"))
        XCTAssertThrowsError(try part.interpret(HTTPResponse(status: 200, headers: ["ETag": "\"e2\"", "x-amz-checksum-crc32": "AAAAAA=="]))) { error in
            guard case BackendError.transient = error else { return XCTFail("\(error)") }
        }

        let receipts = [0: "\"e1\" crc32=AAAAAQ==", 1: "\"e2\" crc32=AAAAAg==", 2: "\"e3\" crc32=AAAAAw=="]
        let whole = self.job(handles: uploadHandles, receipts: receipts, jobHandles: crc32JobHandles)
        let finish = try XCTUnwrap(try backend.finishFile(whole.files[0], in: whole).request)
        let body = finish.bodyText
        XCTAssertTrue(
            body.contains("<Part><PartNumber>2</PartNumber><ETag>&quot;e2&quot;</ETag><ChecksumCRC32>AAAAAg==</ChecksumCRC32></Part>"), body)
        // A receipt without its CRC-32 cannot be completed: that part is sent again.
        let lacking = self.job(handles: uploadHandles, receipts: [0: receipts[0]!, 1: "\"e2\"", 2: receipts[2]!], jobHandles: crc32JobHandles)
        let resend = try backend.finishFile(lacking.files[0], in: lacking)
        XCTAssertNil(resend.request, "known without asking S3")
        XCTAssertEqual(resend.immediateAnswer, .missing([1]))
        // Likewise a part acknowledged with no receipt at all.
        let unreceipted = self.job(handles: uploadHandles, receipts: [1: "\"e2\""])
        XCTAssertEqual(try backend.finishFile(unreceipted.files[0], in: unreceipted).immediateAnswer, .missing([0, 2]))
        // The object's ETag is still the MD5 of the parts' ETags.
        let md5 = "\"" + String(repeating: "a", count: 32) + "\""
        let digests = self.job(handles: uploadHandles, receipts: [0: md5 + " crc32=AAAAAQ==", 1: md5, 2: md5])
        XCTAssertEqual(S3Backend.multipartETag(digests.files[0]), S3Backend.multipartETag(self.job(receipts: [0: md5, 1: md5, 2: md5]).files[0]))
    }

    func testACRC32JobSparesOnlyListedPartsWhoseCRCItCanCompleteWith() throws {
        let job = job(handles: uploadHandles, receipts: [0: "\"e1\" crc32=AAAAAQ=="], jobHandles: crc32JobHandles)
        let exchange = try backend.reconcileFile(job.files[0], in: job).outcome(for:)
        func page(_ parts: String) -> HTTPResponse {
            HTTPResponse(status: 200, body: xml("<ListPartsResult><IsTruncated>false</IsTruncated>\(parts)</ListPartsResult>"))
        }
        // Part 1: recorded, no CRC listed (moto lists none): the recorded one is kept.
        // Part 2: not recorded, CRC listed (AWS lists it): spared with it.
        // Part 3: not recorded, no CRC listed: sent again.
        let answer = page(
            "<Part><PartNumber>1</PartNumber><ETag>\"e1\"</ETag><Size>5242880</Size></Part>"
                + "<Part><PartNumber>2</PartNumber><ETag>\"e2\"</ETag><Size>5242880</Size><ChecksumCRC32>AAAAAg==</ChecksumCRC32></Part>"
                + "<Part><PartNumber>3</PartNumber><ETag>\"e3\"</ETag><Size>2097152</Size></Part>")
        XCTAssertEqual(
            try exchange(answer),
            .serverHas(chunks: [0, 1], receipts: [0: "\"e1\" crc32=AAAAAQ==", 1: "\"e2\" crc32=AAAAAg=="]))
        // Another CRC than recorded: other bytes.
        let other = page("<Part><PartNumber>1</PartNumber><ETag>\"e1\"</ETag><Size>5242880</Size><ChecksumCRC32>BBBBBB==</ChecksumCRC32></Part>")
        XCTAssertEqual(try exchange(other), .serverHas(chunks: [], receipts: [:]))
    }

    // MARK: Full-object checksums (--checksum-algorithm)

    private func fullObjectJobHandles(_ checksum: S3FullObjectChecksum) -> ServerHandles {
        var options = S3ObjectOptions()
        options.checksum = checksum
        return S3Backend(
            configuration: configuration, endpoint: S3Endpoint(base: "http://127.0.0.1:9000", addressing: .path), objectOptions: options
        ).makeJobHandles(for: BackendTesting.job(target: "s3://bkt"))
    }

    private static func base64(_ bytes: [UInt8]) -> String { Data(bytes).base64EncodedString() }

    /// The upload is created FULL_OBJECT, each part carries its CRC64NVME,
    /// the completion the whole object's, combined from the receipts (as a
    /// resumed run has them) and the parts' lengths: the value AWS computes
    /// of the whole file (checked with awscrt's by the end-to-end tests).
    func testAFullObjectCRC64NVMEJobCreatesFullObjectSendsPartCRCsAndCompletesWithTheWhole() throws {
        let jobHandles = fullObjectJobHandles(.crc64nvme)
        XCTAssertEqual(jobHandles[HandleKey("object.checksum")], "crc64nvme")
        let job = job(handles: uploadHandles, jobHandles: jobHandles)
        let open = try XCTUnwrap(backend.openFile(job.files[0], in: job).request)
        XCTAssertEqual(open.headers["x-amz-checksum-algorithm"], "CRC64NVME")
        XCTAssertEqual(open.headers["x-amz-checksum-type"], "FULL_OBJECT")
        XCTAssertTrue(backend.requestAsSent(open, in: job).headers["Authorization"]!.contains("x-amz-checksum-type"))

        let bytes = (0..<(12 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        var receipts: [Int: String] = [:]
        for index in 0..<3 {
            let start = index * (5 << 20)
            let chunk = ChunkPayload(index: index, offset: Int64(start), bytes: Array(bytes[start..<min(bytes.count, start + (5 << 20))]))
            let crc = Self.base64(CRC64NVME.bigEndianBytes(CRC64NVME.of(chunk.bytes)))
            let part = try backend.uploadChunk(chunk, of: job.files[0], in: job)
            XCTAssertEqual(part.request.headers["x-amz-checksum-crc64nvme"], crc)
            XCTAssertEqual(part.request.headers["x-amz-sdk-checksum-algorithm"], "CRC64NVME")
            XCTAssertNil(part.request.headers["Content-MD5"])
            // moto and Ceph repeat nothing; AWS repeats the CRC.
            XCTAssertEqual(try part.interpret(HTTPResponse(status: 200, headers: ["ETag": "\"e\(index)\""])), .stored(receipt: "\"e\(index)\" crc32=\(crc)"))
            receipts[index] = "\"e\(index)\" crc32=\(crc)"
        }
        let whole = self.job(handles: uploadHandles, receipts: receipts, jobHandles: jobHandles)
        let finish = try backend.finishFile(whole.files[0], in: whole)
        let completion = try XCTUnwrap(finish.request)
        let expected = Self.base64(CRC64NVME.bigEndianBytes(CRC64NVME.of(bytes)))
        XCTAssertEqual(completion.headers["x-amz-checksum-crc64nvme"], expected)
        XCTAssertEqual(completion.headers["x-amz-checksum-type"], "FULL_OBJECT")
        XCTAssertTrue(completion.bodyText.contains("<ChecksumCRC64NVME>\(receipts[1]!.split(separator: "=", maxSplits: 1)[1])</ChecksumCRC64NVME>"), completion.bodyText)
        let done = "<CompleteMultipartUploadResult><ETag>\"x-3\"</ETag>"
        var completed = FileFinish.Completion(url: "s3://bkt/in/a b.bin")
        completed.version = "x-3"
        XCTAssertEqual(
            try finish.outcome(for: HTTPResponse(status: 200, body: xml(done + "<ChecksumCRC64NVME>\(expected)</ChecksumCRC64NVME></CompleteMultipartUploadResult>"))),
            .completed(completed))
        // moto and Ceph answer without it.
        XCTAssertEqual(try finish.outcome(for: HTTPResponse(status: 200, body: xml(done + "</CompleteMultipartUploadResult>"))), .completed(completed))
        // Another value than the one sent: not the object the parts make.
        XCTAssertThrowsError(
            try finish.outcome(for: HTTPResponse(status: 200, body: xml(done + "<ChecksumCRC64NVME>AAAAAAAAAAA=</ChecksumCRC64NVME></CompleteMultipartUploadResult>")))
        ) { error in
            guard case BackendError.rejected = error else { return XCTFail("\(error)") }
        }
        // A receipt without its CRC: that part is sent again, as for composite CRCs.
        let lacking = self.job(handles: uploadHandles, receipts: [0: receipts[0]!, 1: "\"e1\"", 2: receipts[2]!], jobHandles: jobHandles)
        XCTAssertEqual(try backend.finishFile(lacking.files[0], in: lacking).immediateAnswer, .missing([1]))
    }

    func testAFullObjectCRC32CCompletionCombinesThePartsCRC32Cs() throws {
        let jobHandles = fullObjectJobHandles(.crc32c)
        let bytes = (0..<(12 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 1) }
        var receipts: [Int: String] = [:]
        for index in 0..<3 {
            let start = index * (5 << 20)
            receipts[index] = "\"e\(index)\" crc32=" + S3PartChecksum.crcText(CRC32C.of(bytes[start..<min(bytes.count, start + (5 << 20))]))
        }
        let whole = job(handles: uploadHandles, receipts: receipts, jobHandles: jobHandles)
        let open = try XCTUnwrap(backend.openFile(whole.files[0], in: whole).request)
        XCTAssertEqual(open.headers["x-amz-checksum-algorithm"], "CRC32C")
        let completion = try XCTUnwrap(try backend.finishFile(whole.files[0], in: whole).request)
        XCTAssertEqual(completion.headers["x-amz-checksum-crc32c"], S3PartChecksum.crcText(CRC32C.of(bytes)))
        XCTAssertEqual(completion.headers["x-amz-checksum-type"], "FULL_OBJECT")
    }

    /// Ceph 16's gateway takes the headers and keeps nothing: its answers
    /// say so by what they lack, and the push does not go on as if the
    /// object had its checksum.
    func testAStoreThatDoesNotSayItKeepsTheChecksumFailsTheFileBeforeAnyPart() throws {
        let jobHandles = fullObjectJobHandles(.crc64nvme)
        let job = job(jobHandles: jobHandles)
        let open = try backend.openFile(job.files[0], in: job)
        let created = xml("<InitiateMultipartUploadResult><UploadId>u1</UploadId></InitiateMultipartUploadResult>")
        // AWS and moto: the answer names the type; the upload goes on.
        let kept = try open.outcome(for: HTTPResponse(status: 200, headers: ["x-amz-checksum-type": "FULL_OBJECT"], body: created))
        XCTAssertNil(kept.handles[S3Backend.checksumNotKeptKey])
        // Ceph: no type. The upload is recorded (xfer cancel drops it) and its parts refuse to go.
        let ignored = try XCTUnwrap(try open.outcome(for: HTTPResponse(status: 200, body: created)))
        XCTAssertEqual(ignored.handles[S3Backend.uploadID], "u1")
        XCTAssertEqual(ignored.handles[S3Backend.checksumNotKeptKey], "CRC64NVME")
        let unkept = self.job(handles: ignored.handles, jobHandles: jobHandles)
        let chunk = ChunkPayload(index: 0, offset: 0, bytes: Array(repeating: 1, count: 5 << 20))
        XCTAssertThrowsError(try backend.uploadChunk(chunk, of: unkept.files[0], in: unkept)) { error in
            guard case BackendError.rejected(let message, _) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("--checksum-algorithm"), message)
        }
        // One PutObject: the answer must repeat the CRC (AWS and moto do).
        let small = self.job(size: 100, jobHandles: jobHandles)
        let put = try backend.uploadChunk(ChunkPayload(index: 0, offset: 0, bytes: Array(repeating: 7, count: 100)), of: small.files[0], in: small)
        let crc = try XCTUnwrap(put.request.headers["x-amz-checksum-crc64nvme"])
        var stored = ChunkOutcome.Stored(receipt: "\"abc\" crc32=\(crc)", fileURL: "s3://bkt/in/a b.bin")
        stored.version = "abc"
        XCTAssertEqual(try put.interpret(HTTPResponse(status: 200, headers: ["ETag": "\"abc\"", "x-amz-checksum-crc64nvme": crc])), .stored(stored))
        XCTAssertThrowsError(try put.interpret(HTTPResponse(status: 200, headers: ["ETag": "\"abc\""]))) { error in
            guard case BackendError.rejected = error else { return XCTFail("\(error)") }
        }
    }

    func testAStreamsFullObjectCRCCombinesItsGrowingParts() throws {
        let jobHandles = fullObjectJobHandles(.crc64nvme)
        // Parts 1 and 2 of 6 MiB (the least a stream's first part is), then 1 MiB.
        let sizes = [6 << 20, 6 << 20, 1 << 20]
        let bytes = (0..<sizes.reduce(0, +)).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 5) }
        var receipts: [String?] = []
        var start = 0
        for size in sizes {
            receipts.append("\"e\" crc32=" + Self.base64(CRC64NVME.bigEndianBytes(CRC64NVME.of(bytes[start..<(start + size)]))))
            start += size
        }
        let file = BackendTesting.file(name: "s.tar", size: Int64(bytes.count), chunkSize: 6 << 20, handles: uploadHandles)
        let job = BackendTesting.job(target: "s3://bkt/in", handles: jobHandles, files: [file])
        let completion = try XCTUnwrap(try backend.finishStream(job.files[0], receipts: receipts, in: job).request)
        XCTAssertEqual(completion.headers["x-amz-checksum-crc64nvme"], Self.base64(CRC64NVME.bigEndianBytes(CRC64NVME.of(bytes))))
    }

    func testCancelAbortsEveryOpenUpload() {
        let job = job(handles: uploadHandles)
        let requests = backend.cancelRequests(for: job)
        XCTAssertEqual(requests.map(\.method), [.delete])
        XCTAssertEqual(requests.first?.url, "http://127.0.0.1:9000/bkt/in/a%20b.bin?uploadId=U")
    }

    // MARK: Credentials

    func testCredentialsFromEnvironmentThenProfiles() throws {
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("xfer-aws-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: home + "/.aws", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: home) }
        try "[default]\naws_access_key_id = AKDEF\naws_secret_access_key = sdef\n\n[dev]\n# comment\naws_access_key_id=AKDEV\naws_secret_access_key=sdev\naws_session_token = tdev\n"
            .write(toFile: home + "/.aws/credentials", atomically: true, encoding: .utf8)
        try "[default]\nregion = eu-central-1\n[profile dev]\nregion=ap-south-1\n".write(toFile: home + "/.aws/config", atomically: true, encoding: .utf8)

        let env = try AWSConfiguration.resolve(environment: ["AWS_ACCESS_KEY_ID": "AKENV", "AWS_SECRET_ACCESS_KEY": "senv", "AWS_REGION": "us-west-2"], home: home)
        XCTAssertEqual(env.credentials, AWSCredentials(accessKeyID: "AKENV", secretAccessKey: "senv"))
        XCTAssertEqual(env.region, "us-west-2")
        let fallback = try AWSConfiguration.resolve(environment: [:], home: home)
        XCTAssertEqual(fallback.credentials.accessKeyID, "AKDEF")
        XCTAssertEqual(fallback.region, "eu-central-1")
        let dev = try AWSConfiguration.resolve(profile: "dev", environment: ["AWS_ACCESS_KEY_ID": "AKENV", "AWS_SECRET_ACCESS_KEY": "x"], home: home)
        XCTAssertEqual(dev.credentials, AWSCredentials(accessKeyID: "AKDEV", secretAccessKey: "sdev", sessionToken: "tdev"))
        XCTAssertEqual(dev.region, "ap-south-1")
        XCTAssertEqual(try AWSConfiguration.resolve(environment: ["AWS_PROFILE": "dev"], home: home).credentials.accessKeyID, "AKDEV")
        XCTAssertThrowsError(try AWSConfiguration.resolve(profile: "nope", environment: [:], home: home))
        XCTAssertThrowsError(try AWSConfiguration.resolve(environment: ["AWS_ACCESS_KEY_ID": "AK"], home: home))
        XCTAssertThrowsError(try AWSConfiguration.resolve(environment: ["AWS_EC2_METADATA_DISABLED": "true"], home: home + "/missing")) { error in
            XCTAssertTrue("\(error)".contains("no AWS credentials"), "\(error)")
        }
    }

    /// A stream's parts double every 1,000 from the chunk size (at least
    /// 6 MiB), never pass S3's 5 GiB, and 10,000 of them hold 5 TiB.
    func testStreamPartsGrowSoTenThousandHoldFiveTebibytes() {
        let backend = S3Backend(configuration: configuration)
        for requested in [1 << 20, 5 << 20, 6 << 20, 8 << 20, 64 << 20, 1 << 30] {
            var total: Int64 = 0
            for number in 1...S3Backend.maximumPartCount {
                let size = backend.streamPartSize(ofPart: number, requested: requested)
                XCTAssertLessThanOrEqual(size, S3Backend.maximumPartSize)
                XCTAssertGreaterThanOrEqual(size, S3Backend.minimumPartSize)
                total += Int64(size)
            }
            XCTAssertGreaterThanOrEqual(total, 5 << 40, "requested \(requested)")
        }
        XCTAssertEqual(backend.streamPartSize(ofPart: 1, requested: 8 << 20), 8 << 20)
        XCTAssertEqual(backend.streamPartSize(ofPart: 1000, requested: 8 << 20), 8 << 20)
        XCTAssertEqual(backend.streamPartSize(ofPart: 1001, requested: 8 << 20), 16 << 20)
        XCTAssertEqual(backend.streamPartSize(ofPart: 10_000, requested: 8 << 20), 4 << 30)
        XCTAssertEqual(backend.streamPartSize(ofPart: 1, requested: 1 << 20), 6 << 20)
    }

    /// Part 10,001 of a stream is refused with the reason, not sent.
    func testAStreamPastTenThousandPartsIsRefused() {
        let backend = S3Backend(configuration: configuration)
        let file = BackendTesting.file(name: "s.bin", size: 1, chunkSize: 1, handles: [S3Backend.uploadID: "u"])
        let job = BackendTesting.job(target: "s3://b/p", files: [file])
        XCTAssertThrowsError(try backend.uploadStreamPart(ChunkPayload(index: 10_000, offset: 0, bytes: [1]), of: file, in: job)) { error in
            guard case BackendError.rejected(let message, _) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("10000 parts"), message)
        }
    }

    /// The chosen Content-Type is a handle of the job: a resumed job sends it
    /// even when the backend it resumes with was configured without one.
    func testTheChosenContentTypeIsKeptWithTheJob() throws {
        let chosen = S3Backend(configuration: configuration, endpoint: S3Endpoint(base: "http://127.0.0.1:9000", addressing: .path),
                               objectOptions: S3ObjectOptions(contentType: "text/x-chosen", metadata: ["k": "v"]))
        let plain = S3Backend(configuration: configuration, endpoint: S3Endpoint(base: "http://127.0.0.1:9000", addressing: .path))
        let file = BackendTesting.file(name: "a.json", size: 20 << 20, chunkSize: 8 << 20)
        let created = BackendTesting.job(target: "s3://b/p", handles: chosen.makeJobHandles(for: BackendTesting.job(target: "s3://b/p")), files: [file])
        XCTAssertEqual(plain.openFile(file, in: created).request?.headers["Content-Type"], "text/x-chosen")
        XCTAssertEqual(plain.openFile(file, in: created).request?.headers["x-amz-meta-k"], "v")
        let fresh = BackendTesting.job(target: "s3://b/p", handles: plain.makeJobHandles(for: BackendTesting.job(target: "s3://b/p")), files: [file])
        XCTAssertEqual(plain.openFile(file, in: fresh).request?.headers["Content-Type"], "application/json")
    }

    func testMediaTypesAreReadFromAMimeTypesTable() {
        let table = MediaTypes.parse("# comment\napplication/json json\ntext/plain\ttxt text # trailing\nimage/jpeg jpeg jpg\nother/jpeg jpg\n")
        XCTAssertEqual(table["json"], "application/json")
        XCTAssertEqual(table["text"], "text/plain")
        XCTAssertEqual(table["jpg"], "image/jpeg", "the first type to name an extension wins")
        XCTAssertNil(table["comment"])
        XCTAssertEqual(MediaTypes.type(forFileNamed: ".bashrc"), MediaTypes.fallback, "a leading dot is not an extension")
        XCTAssertEqual(MediaTypes.type(forFileNamed: "noext"), MediaTypes.fallback)
    }

    // MARK: Multipart uploads in progress (xfer uploads)

    private var listingBackend: S3Backend {
        S3Backend(
            configuration: configuration, endpoint: S3Endpoint(base: "http://127.0.0.1:9000", addressing: .path),
            now: { Date(timeIntervalSince1970: 1_369_353_600) })
    }

    /// The AWS documentation's example answer (owners shortened), a page
    /// of three with more after it.
    private let uploadsPage = """
        <ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Bucket>bkt</Bucket>\
        <KeyMarker></KeyMarker><UploadIdMarker></UploadIdMarker><NextKeyMarker>my-movie.m2ts</NextKeyMarker>\
        <NextUploadIdMarker>YW55IGlkZWEgd2h5IGVsdmluZydzIHVwbG9hZCBmYWlsZWQ</NextUploadIdMarker><MaxUploads>3</MaxUploads>\
        <IsTruncated>true</IsTruncated>\
        <Upload><Key>my-divisor</Key><UploadId>XMgbGlrZSBlbHZpbmcncyBub3QgaGF2aW5nIG11Y2ggbHVjaw</UploadId>\
        <Initiator><ID>arn:aws:iam::111122223333:user/user1</ID><DisplayName>user1</DisplayName></Initiator>\
        <Owner><ID>75aa57f0</ID><DisplayName>OwnerDisplayName</DisplayName></Owner>\
        <StorageClass>REDUCED_REDUNDANCY</StorageClass><Initiated>2010-11-10T20:48:33.000Z</Initiated></Upload>\
        <Upload><Key>my-movie.m2ts</Key><UploadId>VXBsb2FkIElEIGZvciBlbHZpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA</UploadId>\
        <StorageClass>STANDARD</StorageClass><Initiated>2010-11-10T20:48:33Z</Initiated></Upload>\
        <Upload><Key>my-movie.m2ts</Key><UploadId>YW55IGlkZWEgd2h5IGVsdmluZydzIHVwbG9hZCBmYWlsZWQ</UploadId>\
        <StorageClass>STANDARD</StorageClass><Initiated>yesterday</Initiated></Upload>\
        </ListMultipartUploadsResult>
        """

    /// A sync's destination listing: from a continuation token, or (`KeyRangeSyncing`) after a path below the prefix.
    func testSyncListingGoesOnFromATokenOrStartsAfterAKey() throws {
        let job = job()
        XCTAssertEqual(
            try backend.listObjects(after: "t/1=", in: job).request.url,
            "http://127.0.0.1:9000/bkt?list-type=2&max-keys=1000&encoding-type=url&prefix=in%2F&continuation-token=t%2F1%3D")
        let ranged: any KeyRangeSyncing = backend
        XCTAssertEqual(
            try ranged.listObjects(startingAfter: "d/a+b", in: job).request.url,
            "http://127.0.0.1:9000/bkt?list-type=2&max-keys=1000&encoding-type=url&prefix=in%2F&start-after=in%2Fd%2Fa%2Bb")
    }

    func testUploadListingAsksForAPageAfterItsMarkerSigned() throws {
        let listing = try listingBackend.uploads(under: "s3://bkt/in dir/", pageSize: 5000)
        XCTAssertEqual(listing.prefix, "in dir/", "the prefix as written: 'in dir' would also cover 'in dirt/'")
        XCTAssertEqual(listing.pageSize, 1000, "S3 gives 1,000 at most")
        XCTAssertEqual(try listingBackend.uploads(under: "s3://bkt").prefix, "")
        XCTAssertEqual(try listingBackend.uploads(under: "s3://bkt").target, "s3://bkt")
        XCTAssertEqual(try listingBackend.uploads(under: "s3://bkt//in").prefix, "in")
        XCTAssertThrowsError(try listingBackend.uploads(under: "s3://B_kt"))

        let first = listing.listPage(after: nil).request
        XCTAssertEqual(first.method, .get)
        XCTAssertEqual(first.url, "http://127.0.0.1:9000/bkt?uploads&max-uploads=1000&prefix=in%20dir%2F")
        XCTAssertEqual(first.headers["x-amz-date"], "20130524T000000Z")
        XCTAssertEqual(first.headers["x-amz-content-sha256"], "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        XCTAssertTrue(try XCTUnwrap(first.headers["Authorization"]).hasPrefix("AWS4-HMAC-SHA256 Credential=AKID/20130524/us-east-1/s3/"))
        let next = listing.listPage(after: S3UploadPage.Marker(key: "in dir/a+b", uploadID: "U/1")).request
        XCTAssertEqual(
            next.url, "http://127.0.0.1:9000/bkt?uploads&max-uploads=1000&prefix=in%20dir%2F&key-marker=in%20dir%2Fa%2Bb&upload-id-marker=U%2F1")
        let keyOnly = listing.listPage(after: S3UploadPage.Marker(key: "k", uploadID: "")).request
        XCTAssertEqual(keyOnly.url, "http://127.0.0.1:9000/bkt?uploads&max-uploads=1000&prefix=in%20dir%2F&key-marker=k")
    }

    func testUploadListingReadsS3sPagesAndWhereTheNextStarts() throws {
        let listing = try listingBackend.uploads(under: "s3://bkt")
        let page = try listing.listPage(after: nil).interpret(HTTPResponse(status: 200, body: xml(uploadsPage)))
        XCTAssertEqual(page.uploads.map(\.key), ["my-divisor", "my-movie.m2ts", "my-movie.m2ts"])
        XCTAssertEqual(page.uploads.first?.uploadID, "XMgbGlrZSBlbHZpbmcncyBub3QgaGF2aW5nIG11Y2ggbHVjaw")
        XCTAssertEqual(page.uploads.first?.storageClass, "REDUCED_REDUNDANCY")
        let initiated = Date(timeIntervalSince1970: 1_289_422_113)  // 2010-11-10T20:48:33Z
        XCTAssertEqual(page.uploads.map(\.initiated), [initiated, initiated, nil], "with or without milliseconds; nil when unreadable")
        XCTAssertEqual(page.next, S3UploadPage.Marker(key: "my-movie.m2ts", uploadID: "YW55IGlkZWEgd2h5IGVsdmluZydzIHVwbG9hZCBmYWlsZWQ"))

        // The last page; an empty one.
        let last = uploadsPage.replacingOccurrences(of: "<IsTruncated>true", with: "<IsTruncated>false")
        XCTAssertNil(try listing.listPage(after: nil).interpret(HTTPResponse(status: 200, body: xml(last))).next)
        let empty = "<ListMultipartUploadsResult><Bucket>bkt</Bucket><IsTruncated>false</IsTruncated></ListMultipartUploadsResult>"
        XCTAssertEqual(try listing.listPage(after: nil).interpret(HTTPResponse(status: 200, body: xml(empty))), S3UploadPage(uploads: [], next: nil))

        // Truncated without markers: on after the page's last upload; a marker that does not move is refused.
        let unmarked = uploadsPage.replacingOccurrences(of: "<NextKeyMarker>my-movie.m2ts</NextKeyMarker>", with: "")
        let marker = S3UploadPage.Marker(key: "my-movie.m2ts", uploadID: "YW55IGlkZWEgd2h5IGVsdmluZydzIHVwbG9hZCBmYWlsZWQ")
        XCTAssertEqual(try listing.listPage(after: nil).interpret(HTTPResponse(status: 200, body: xml(unmarked))).next, marker)
        XCTAssertThrowsError(try listing.listPage(after: marker).interpret(HTTPResponse(status: 200, body: xml(uploadsPage)))) { error in
            guard case BackendError.rejected(let message, _) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("not where they start"), message)
        }

        // S3's errors, by code: a missing bucket is said plainly; a 503 or a cut answer is retried.
        let missing = HTTPResponse(
            status: 404, body: xml("<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>"))
        XCTAssertThrowsError(try listing.listPage(after: nil).interpret(missing)) { error in
            XCTAssertEqual(
                error as? BackendError,
                .rejected("list the multipart uploads in s3://bkt: bucket 'bkt' does not exist at http://127.0.0.1:9000"))
        }
        for transient in [HTTPResponse(status: 503, body: []), HTTPResponse(status: 200, body: Array("<ListMultipartUploadsResult>".utf8))] {
            XCTAssertThrowsError(try listing.listPage(after: nil).interpret(transient)) { error in
                guard case BackendError.transient = error else { return XCTFail("\(error)") }
            }
        }
    }

    func testAbortingAnUploadCountsNoSuchUploadAsGone() throws {
        let listing = try listingBackend.uploads(under: "s3://bkt/in")
        let exchange = listing.abort(key: "in/a b.bin", uploadID: "U+1/2")
        XCTAssertEqual(exchange.request.method, .delete)
        XCTAssertEqual(exchange.request.url, "http://127.0.0.1:9000/bkt/in/a%20b.bin?uploadId=U%2B1%2F2")
        XCTAssertNotNil(exchange.request.headers["Authorization"])
        XCTAssertEqual(try exchange.interpret(HTTPResponse(status: 204, body: [])), .aborted)
        let gone = HTTPResponse(status: 404, body: xml("<Error><Code>NoSuchUpload</Code><Message>gone</Message></Error>"))
        XCTAssertEqual(try exchange.interpret(gone), .alreadyGone)
        let denied = HTTPResponse(status: 403, body: xml("<Error><Code>AccessDenied</Code><Message>no</Message></Error>"))
        XCTAssertThrowsError(try exchange.interpret(denied)) { error in
            guard case BackendError.rejected(let message, _) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("refused the credentials from test"), message)
        }
    }

    /// Only the jobs that sent to the same bucket at the same endpoint can
    /// own a listed upload, and a file owns it by its id and key.
    func testUploadsBelongToTheJobsOfTheirBucketAndEndpoint() throws {
        let listing = try listingBackend.uploads(under: "s3://bkt/in")
        XCTAssertTrue(listing.sharesBucket(withJobTarget: "s3://bkt/other at http://127.0.0.1:9000", handles: jobHandles))
        XCTAssertTrue(listing.sharesBucket(withJobTarget: "s3://bkt", handles: jobHandles))
        XCTAssertFalse(listing.sharesBucket(withJobTarget: "s3://bkt2/in", handles: jobHandles))
        let elsewhere = S3Backend(configuration: configuration, endpoint: S3Endpoint(base: "http://127.0.0.1:9001", addressing: .path))
            .makeJobHandles(for: BackendTesting.job(target: "s3://bkt"))
        XCTAssertFalse(listing.sharesBucket(withJobTarget: "s3://bkt/in", handles: elsewhere))
        let aws = S3Backend(configuration: configuration).makeJobHandles(for: BackendTesting.job(target: "s3://bkt"))
        XCTAssertFalse(listing.sharesBucket(withJobTarget: "s3://bkt/in", handles: aws))
        XCTAssertTrue(try S3Backend(configuration: configuration).uploads(under: "s3://bkt").sharesBucket(withJobTarget: "s3://bkt", handles: aws))

        let upload = S3MultipartUpload(key: "in/a b.bin", uploadID: "U", initiated: nil)
        XCTAssertTrue(upload.isOpened(byFileWith: uploadHandles))
        XCTAssertTrue(upload.isOpened(byFileWith: [S3Backend.uploadID: "U"]), "a file without a kept key: by its id")
        XCTAssertFalse(upload.isOpened(byFileWith: [S3Backend.uploadID: "U", S3Backend.objectKey: "in/other"]))
        XCTAssertFalse(upload.isOpened(byFileWith: [S3Backend.uploadID: "V", S3Backend.objectKey: "in/a b.bin"]))
    }

    // MARK: --backup-dir

    func testABackupPlaceMustBeOutsideTheTargetOnTheSameEndpoint() throws {
        let job = job()
        XCTAssertEqual(try backend.backupTarget(normalizing: "s3://bkt/old/", in: job), "s3://bkt/old")
        XCTAssertEqual(try backend.backupTarget(normalizing: "s3://other", in: job), "s3://other")
        XCTAssertEqual(try backend.backupTarget(normalizing: "s3://bkt/inside", in: job), "s3://bkt/inside", "a sibling, not the target's")
        for overlapping in ["s3://bkt", "s3://bkt/in", "s3://bkt/in/old", "s3://bkt/"] {
            XCTAssertThrowsError(try backend.backupTarget(normalizing: overlapping, in: job), overlapping) { error in
                XCTAssertTrue("\(error)".contains("overlaps the destination"), "\(error)")
            }
        }
        XCTAssertThrowsError(try backend.backupTarget(normalizing: "s3://bkt/old at http://elsewhere:9000", in: job)) { error in
            XCTAssertTrue("\(error)".contains("not the destination's endpoint"), "\(error)")
        }
    }

    func testABackupIsACopyInsideTheStoreConditionalOnTheVersionListed() throws {
        let exchange = try backend.backUpObject(at: "d/a b.bin", version: "abc", to: "s3://keep/old", in: job())
        XCTAssertEqual(exchange.request.method, .put)
        XCTAssertEqual(exchange.request.url, "http://127.0.0.1:9000/keep/old/d/a%20b.bin")
        XCTAssertEqual(exchange.request.headers["x-amz-copy-source"], "/bkt/in/d/a%20b.bin")
        XCTAssertEqual(exchange.request.headers["x-amz-copy-source-if-match"], "\"abc\"")
        XCTAssertEqual(exchange.request.headers["x-amz-metadata-directive"], "COPY")
        XCTAssertEqual(
            try exchange.interpret(HTTPResponse(status: 200, body: xml("<CopyObjectResult><ETag>\"e\"</ETag></CopyObjectResult>"))), .copied)
        XCTAssertEqual(try exchange.interpret(HTTPResponse(status: 412)), .changed)
        XCTAssertEqual(
            try exchange.interpret(HTTPResponse(status: 404, body: xml("<Error><Code>NoSuchKey</Code></Error>"))), .absent)
        // A 200 whose body is an error, and a missing bucket, are failures, not outcomes.
        XCTAssertThrowsError(try exchange.interpret(HTTPResponse(status: 200, body: xml("<Error><Code>InternalError</Code></Error>"))))
        XCTAssertThrowsError(try exchange.interpret(HTTPResponse(status: 404, body: xml("<Error><Code>NoSuchBucket</Code></Error>"))))
    }
}

/// A stored chunk's outcome with the version the store gave the object (what a sync remembers).
private func stored(receipt: String?, fileURL: String?, version: String?) -> ChunkOutcome.Stored {
    var stored = ChunkOutcome.Stored(receipt: receipt, fileURL: fileURL)
    stored.version = version
    return stored
}

/// A completion with the version the store gave the object.
private func completion(url: String, version: String?) -> FileFinish.Completion {
    var completion = FileFinish.Completion(url: url)
    completion.version = version
    return completion
}

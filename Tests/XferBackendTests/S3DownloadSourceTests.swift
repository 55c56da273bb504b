import Foundation
import XCTest
import Xfer
import XferBackendTesting
import XferPrimitives
@testable import XferS3
@testable import XferS3Core

/// `S3DownloadSource` is sans-IO: these tests check the requests it
/// describes (method, URL, conditions, checksum mode, Signature V4) and how
/// it reads literal HeadObject and ListObjectsV2 answers, with no network.
final class S3DownloadSourceTests: XCTestCase {
    private let configuration = AWSConfiguration(
        credentials: AWSCredentials(accessKeyID: "AKID", secretAccessKey: "secret"), region: "us-east-1", source: "test")

    /// A gateway reached as the tests' Ceph one is: plain http, path-style.
    private var source: S3DownloadSource {
        S3DownloadSource(configuration: configuration, endpoint: S3Endpoint(base: "http://127.0.0.1:9000", addressing: .path))
    }

    /// A pull's job: its target is the local destination, not a location.
    private let job = BackendTesting.job(target: "/tmp/pulled")

    private let at = " at http://127.0.0.1:9000"

    private func xml(_ text: String) -> [UInt8] { Array(("<?xml version=\"1.0\" encoding=\"UTF-8\"?>" + text).utf8) }

    private func signedHeaders(_ request: HTTPRequest) -> [String] {
        let authorization = request.headers["Authorization"] ?? ""
        let list = authorization.components(separatedBy: "SignedHeaders=").last?.components(separatedBy: ",").first ?? ""
        return list.split(separator: ";").map(String.init)
    }

    private func rejection(_ body: () throws -> some Any, line: UInt = #line) -> String? {
        do {
            _ = try body()
            XCTFail("no error", line: line)
        } catch BackendError.rejected(let message, _) {
            return message
        } catch {
            XCTFail("\(error)", line: line)
        }
        return nil
    }

    /// A HeadObject answer of a 5-byte object, with `headers` added.
    private func head(_ headers: HTTPHeaders) -> HTTPResponse {
        var all: HTTPHeaders = ["Content-Length": "5", "ETag": "\"\(md5Hex)\"", "Accept-Ranges": "bytes"]
        for field in headers { all.set(field.name, field.value) }
        return HTTPResponse(status: 200, headers: all)
    }

    private let md5Hex = "9b2cf535f27731c974343645a3985328"
    private var md5: [UInt8] { Hex.bytes(md5Hex)! }

    // MARK: Locations

    func testLocationsKeepTheTrailingSlashAndTheEndpoint() throws {
        XCTAssertEqual(try source.normalizedLocation(" s3://bkt/dir/a.bin "), "s3://bkt/dir/a.bin at http://127.0.0.1:9000")
        XCTAssertEqual(try source.normalizedLocation("s3://bkt//dir//"), "s3://bkt/dir/ at http://127.0.0.1:9000")
        XCTAssertEqual(try source.normalizedLocation("s3://bkt/"), "s3://bkt at http://127.0.0.1:9000")
        // A stored location keeps the endpoint it names, whatever this source's.
        XCTAssertEqual(try source.normalizedLocation("s3://bkt/k at https://minio.example:9000"), "s3://bkt/k at https://minio.example:9000")
        // AWS's own endpoint is not named: the region says it.
        XCTAssertEqual(try S3DownloadSource(configuration: configuration).normalizedLocation("s3://bkt/dir/"), "s3://bkt/dir/")

        XCTAssertFalse(source.isPrefix("s3://bkt/dir/a.bin at http://127.0.0.1:9000"))
        XCTAssertTrue(source.isPrefix("s3://bkt/dir/ at http://127.0.0.1:9000"))
        XCTAssertTrue(source.isPrefix("s3://bkt"))
        XCTAssertFalse(source.isPrefix("https://bkt/dir/"))

        let message = rejection { try source.normalizedLocation("https://example.com/a") }
        XCTAssertTrue(message?.contains("s3://BUCKET/KEY") == true, message ?? "")
        XCTAssertNotNil(rejection { try source.normalizedLocation("s3://No_Such_Bucket/k") })
    }

    // MARK: Describing

    func testDescriptionIsASignedHeadAskingForChecksums() throws {
        let exchange = try source.describeObject(at: try source.normalizedLocation("s3://bkt/dir/a b.bin"), in: job)
        var request = exchange.request
        XCTAssertEqual(request.method, .head)
        XCTAssertEqual(request.url, "http://127.0.0.1:9000/bkt/dir/a%20b.bin")
        XCTAssertEqual(request.headers["x-amz-checksum-mode"], "ENABLED")
        XCTAssertNil(request.headers["Authorization"], "signed by the engine, after it adds its headers")
        source.sign(&request, in: job)
        let authorization = try XCTUnwrap(request.headers["Authorization"])
        XCTAssertTrue(authorization.hasPrefix("AWS4-HMAC-SHA256 Credential=AKID/"), authorization)
        XCTAssertTrue(authorization.contains("/us-east-1/s3/aws4_request"), authorization)
        XCTAssertTrue(signedHeaders(request).contains("x-amz-checksum-mode"), authorization)
        XCTAssertFalse(authorization.contains("secret"))
    }

    func testDescriptionReadsSizeETagAndFullObjectChecksums() throws {
        let exchange = try source.describeObject(at: "s3://bkt/dir/a.bin" + at, in: job)
        let sha256 = [UInt8](repeating: 0xAB, count: 32)
        let object = try exchange.interpret(
            head([
                "x-amz-checksum-crc32c": "EjRWeA==", "x-amz-checksum-sha256": Data(sha256).base64EncodedString(),
                "x-amz-checksum-type": "FULL_OBJECT",
            ]))
        XCTAssertEqual(object.location, "s3://bkt/dir/a.bin" + at, "all a range request needs")
        XCTAssertEqual(object.size, 5)
        XCTAssertEqual(object.validator, .etag("\"\(md5Hex)\""))
        XCTAssertTrue(object.acceptsRanges)
        XCTAssertEqual(object.digests, [.crc32c(0x1234_5678), .sha256(sha256), .md5(md5)])

        // A multipart object's full-object CRC-32 (its ETag is no MD5).
        let multipart = try exchange.interpret(
            head(["ETag": "\"\(md5Hex)-3\"", "x-amz-checksum-crc32": "EjRWeA==", "x-amz-checksum-type": "FULL_OBJECT"]))
        XCTAssertEqual(multipart.digests, [.crc32(0x1234_5678)])
        XCTAssertEqual(multipart.validator, .etag("\"\(md5Hex)-3\""))
        // No type named and no part count: a single part's checksum is the object's.
        XCTAssertEqual(source.digests(in: head(["x-amz-checksum-crc32c": "EjRWeA=="])), [.crc32c(0x1234_5678), .md5(md5)])
    }

    func testCompositeChecksumsAreCheckedThroughTheParts() {
        // S3's composite checksum of a 3-part upload: a checksum of checksums, checked part by part.
        let composite = ObjectDigest.composite(CompositeChecksum(algorithm: .crc32c, digest: [0x12, 0x34, 0x56, 0x78], partCount: 3))
        XCTAssertEqual(source.digests(in: head(["ETag": "\"\(md5Hex)-3\"", "x-amz-checksum-crc32c": "EjRWeA==-3"])), [composite])
        XCTAssertEqual(
            source.digests(in: head(["x-amz-checksum-crc32c": "EjRWeA==-3", "x-amz-checksum-type": "COMPOSITE"])), [composite, .md5(md5)])
        // Said to be composite, without a part count: left out.
        XCTAssertEqual(source.digests(in: head(["x-amz-checksum-crc32c": "EjRWeA==", "x-amz-checksum-type": "COMPOSITE"])), [.md5(md5)])
        // Neither a type nor a count, of a multipart object (moto 5.2's HEAD of a composite CRC):
        // which kind cannot be told, so it is left out; a CRC64NVME is always of the whole object.
        XCTAssertEqual(source.digests(in: head(["ETag": "\"\(md5Hex)-3\"", "x-amz-checksum-crc32c": "EjRWeA=="])), [])
        XCTAssertEqual(
            source.digests(in: head(["ETag": "\"\(md5Hex)-3\"", "x-amz-checksum-crc64nvme": "rosUhgp5mIg="])), [.crc64nvme(0xAE8B_1486_0A79_9888)])
        // Not base64, or the wrong length: left out rather than checked wrongly.
        XCTAssertEqual(source.digests(in: head(["x-amz-checksum-crc32c": "abc=-3", "ETag": "\"abc\""])), [])
        XCTAssertEqual(source.digests(in: head(["x-amz-checksum-crc32c": "EjRWeBI=", "x-amz-checksum-type": "FULL_OBJECT"])), [.md5(md5)])
        XCTAssertEqual(source.digests(in: head(["x-amz-checksum-crc64nvme": "EjRWeA==", "x-amz-checksum-type": "FULL_OBJECT"])), [.md5(md5)])
    }

    /// `GetObjectAttributes` pages the parts: asked after a marker, read with
    /// their sizes and checksums by the composite's algorithm, and the ETag.
    func testPartsAreListedByGetObjectAttributesAPageAtATime() throws {
        let composite = ObjectDigest.composite(CompositeChecksum(algorithm: .crc32c, digest: [1, 2, 3, 4], partCount: 3))
        let object = RemoteObject(location: "s3://bkt/dir/a.bin", size: 12, validator: .etag("\"e-3\""), digests: [composite])
        let exchange = try source.listParts(of: object, after: 2, in: job)
        XCTAssertTrue(exchange.request.url.hasSuffix("/bkt/dir/a.bin?attributes"), exchange.request.url)
        XCTAssertEqual(exchange.request.headers["x-amz-object-attributes"], "ETag,Checksum,ObjectParts")
        XCTAssertEqual(exchange.request.headers["x-amz-part-number-marker"], "2")
        let body = xml(
            "<GetObjectAttributesResponse><ETag>e-3</ETag><Checksum><ChecksumCRC32C>AQIDBA==</ChecksumCRC32C><ChecksumType>COMPOSITE</ChecksumType></Checksum>"
                + "<ObjectParts><IsTruncated>true</IsTruncated><NextPartNumberMarker>3</NextPartNumberMarker><PartsCount>3</PartsCount>"
                + "<Part><PartNumber>3</PartNumber><Size>2</Size><ChecksumCRC32C>EjRWeA==</ChecksumCRC32C></Part></ObjectParts>"
                + "<ObjectSize>12</ObjectSize></GetObjectAttributesResponse>")
        let page = try exchange.interpret(HTTPResponse(status: 200, body: body))
        XCTAssertEqual(page.parts, [ObjectPartsPage.Part(number: 3, size: 2, checksum: [0x12, 0x34, 0x56, 0x78])])
        XCTAssertEqual(page.next, 3)
        XCTAssertEqual(page.validator, .etag("\"e-3\""))
        // moto 5.2 answers without ObjectParts: nothing to check against.
        let bare = try exchange.interpret(
            HTTPResponse(status: 200, body: xml("<GetObjectAttributesResponse><ETag>e-3</ETag><ObjectSize>12</ObjectSize></GetObjectAttributesResponse>")))
        XCTAssertEqual(bare.parts, [])
        XCTAssertNil(bare.next)
    }

    func testEncryptedObjectsETagsAreNoMD5() {
        XCTAssertEqual(source.digests(in: head(["x-amz-server-side-encryption": "aws:kms"])), [])
        XCTAssertEqual(source.digests(in: head(["x-amz-server-side-encryption": "aws:kms:dsse"])), [])
        XCTAssertEqual(source.digests(in: head(["x-amz-server-side-encryption-customer-algorithm": "AES256"])), [])
        // SSE-S3's ETags are MD5s.
        XCTAssertEqual(source.digests(in: head(["x-amz-server-side-encryption": "AES256"])), [.md5(md5)])
        // A whole GetObject's answer is read the same way.
        let get = HTTPResponse(
            status: 200,
            headers: ["Content-Length": "5", "ETag": "\"\(md5Hex)\"", "x-amz-checksum-crc32c": "EjRWeA==", "x-amz-server-side-encryption": "aws:kms"])
        XCTAssertEqual(source.digests(in: get), [.crc32c(0x1234_5678)])
    }

    func testMissingRefusedAndBusyAnswersToADescription() throws {
        let exchange = try source.describeObject(at: "s3://bkt/dir/a.bin" + at, in: job)
        XCTAssertThrowsError(try exchange.interpret(HTTPResponse(status: 404))) { error in
            XCTAssertEqual(error as? BackendError, .rejected("s3://bkt/dir/a.bin: no such object"))
        }
        // A HEAD answer has no body to name AccessDenied.
        let refused = rejection { try exchange.interpret(HTTPResponse(status: 403)) } ?? ""
        XCTAssertTrue(refused.contains("credentials from test"), refused)
        XCTAssertFalse(refused.contains("AKID") || refused.contains("secret"), refused)
        XCTAssertThrowsError(try exchange.interpret(HTTPResponse(status: 503, headers: ["Retry-After": "2"]))) { error in
            guard case BackendError.transient(_, let retryAfter) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(retryAfter, .seconds(2))
        }
        let elsewhere = rejection { try exchange.interpret(HTTPResponse(status: 301, headers: ["x-amz-bucket-region": "eu-west-1"])) } ?? ""
        XCTAssertTrue(elsewhere.contains("--region eu-west-1"), elsewhere)
        // An answer without its size is not an object of size 0.
        XCTAssertThrowsError(try exchange.interpret(HTTPResponse(status: 200, headers: ["ETag": "\"e\""]))) { error in
            guard case BackendError.transient = error else { return XCTFail("\(error)") }
        }
        XCTAssertNotNil(rejection { try source.describeObject(at: "s3://bkt/dir/" + at, in: job) })
        XCTAssertNotNil(rejection { try source.describeObject(at: "s3://bkt", in: job) })
        XCTAssertNotNil(rejection { try source.describeObject(at: "/tmp/pulled", in: job) })
    }

    // MARK: Fetching

    func testRangesAndWholeObjectsAreConditionalOnTheETag() throws {
        let object = RemoteObject(location: "s3://bkt/dir/sub/a+b.bin" + at, size: 100, validator: .etag("\"e1\""))
        let range = source.rangeRequest(10...19, of: object, in: job)
        XCTAssertEqual(range.method, .get)
        XCTAssertEqual(range.url, "http://127.0.0.1:9000/bkt/dir/sub/a%2Bb.bin")
        XCTAssertEqual(range.headers["Range"], "bytes=10-19")
        XCTAssertEqual(range.headers["If-Match"], "\"e1\"")
        XCTAssertNil(range.headers["x-amz-checksum-mode"], "S3 gives no checksum of a range")

        var whole = source.wholeObjectRequest(object, in: job)
        XCTAssertEqual(whole.method, .get)
        XCTAssertEqual(whole.url, range.url)
        XCTAssertNil(whole.headers["Range"])
        XCTAssertEqual(whole.headers["If-Match"], "\"e1\"")
        XCTAssertEqual(whole.headers["x-amz-checksum-mode"], "ENABLED")
        source.sign(&whole, in: job)
        XCTAssertEqual(signedHeaders(whole), ["host", "if-match", "x-amz-checksum-mode", "x-amz-content-sha256", "x-amz-date"])
        // A location this source never wrote is sent nowhere real.
        let unreadable = source.rangeRequest(0...1, of: RemoteObject(location: "/tmp/x", size: 2, validator: nil), in: job)
        XCTAssertTrue(unreadable.url.hasSuffix(".invalid/"), unreadable.url)
    }

    /// The S3 documentation's GetObject example ("Signature Calculations for
    /// the Authorization Header: Transferring Payload in a Single Chunk"),
    /// asked for as a range of an object without a validator: same
    /// request, same signature.
    func testRangeIsSignedAsTheDocumentationsExample() throws {
        let keys = AWSCredentialProvider(
            fixed: AWSCredentials(accessKeyID: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
            source: "test")
        let aws = S3DownloadSource(
            configuration: AWSConfiguration(credentialProvider: keys, region: "us-east-1"),
            endpoint: S3Endpoint(base: "https://s3.amazonaws.com", addressing: .virtual),
            now: { Date(timeIntervalSince1970: 1_369_353_600) })
        let location = try aws.normalizedLocation("s3://examplebucket/test.txt")
        var request = aws.rangeRequest(0...9, of: RemoteObject(location: location, size: 100, validator: nil), in: job)
        aws.sign(&request, in: job)
        XCTAssertEqual(request.url, "https://examplebucket.s3.amazonaws.com/test.txt")
        XCTAssertEqual(
            request.headers["Authorization"],
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        )
    }

    func testFailedFetchesAreReadInS3sWords() throws {
        let object = RemoteObject(location: "s3://bkt/k" + at, size: 5, validator: .etag("\"e\""))
        let busy = source.failure(
            HTTPResponse(status: 503, body: xml("<Error><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>")),
            of: object, in: job)
        guard case .transient(let message, _) = busy else { return XCTFail("\(busy)") }
        XCTAssertTrue(message.contains("SlowDown"), message)
        let denied = source.failure(
            HTTPResponse(status: 403, body: xml("<Error><Code>AccessDenied</Code><Message>Access Denied</Message><HostId>h</HostId></Error>")),
            of: object, in: job)
        guard case .rejected(let refusal, _) = denied else { return XCTFail("\(denied)") }
        XCTAssertTrue(refusal.contains("s3://bkt/k") && refusal.contains("credentials from test"), refusal)
        // S3 documents 503 SlowDown as retryable, and InvalidObjectState (an archived object) as not.
        let archived = source.failure(
            HTTPResponse(status: 403, body: xml("<Error><Code>InvalidObjectState</Code></Error>")), of: object, in: job)
        guard case .rejected = archived else { return XCTFail("\(archived)") }
    }

    // MARK: Listing

    func testListingRequestNamesThePrefixWithItsSlashAndTheCursor() throws {
        let location = try source.normalizedLocation("s3://bkt/dir/")
        let first = try source.listObjects(under: location, after: nil, in: job).request
        XCTAssertEqual(first.method, .get)
        XCTAssertEqual(first.url, "http://127.0.0.1:9000/bkt?list-type=2&max-keys=1000&encoding-type=url&prefix=dir%2F")
        let next = try source.listObjects(under: location, after: "1ueG+/x=", in: job).request
        XCTAssertTrue(next.url.hasSuffix("&continuation-token=1ueG%2B%2Fx%3D"), next.url)
        XCTAssertEqual(
            try source.listObjects(under: try source.normalizedLocation("s3://bkt"), after: nil, in: job).request.url,
            "http://127.0.0.1:9000/bkt?list-type=2&max-keys=1000&encoding-type=url")
    }

    /// `KeyRangeListing`: a sync's key range starts after a path below the prefix (S3's `start-after`, the full key).
    func testAListingStartsAfterAPathBelowThePrefix() throws {
        let location = try source.normalizedLocation("s3://bkt/dir/")
        let ranged: any KeyRangeListing = source
        let request = try ranged.listObjects(under: location, startingAfter: "a b/c+d", in: job).request
        XCTAssertEqual(
            request.url, "http://127.0.0.1:9000/bkt?list-type=2&max-keys=1000&encoding-type=url&prefix=dir%2F&start-after=dir%2Fa%20b%2Fc%2Bd")
    }

    func testListingGivesPathsBelowThePrefixSkipsFolderMarkersAndGoesOn() throws {
        let exchange = try source.listObjects(under: "s3://bkt/dir/" + at, after: nil, in: job)
        let page = try exchange.interpret(
            HTTPResponse(
                status: 200,
                body: xml(
                    """
                    <ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bkt</Name><Prefix>dir%2F</Prefix>\
                    <KeyCount>4</KeyCount><MaxKeys>4</MaxKeys><EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>\
                    <NextContinuationToken>tok/2=</NextContinuationToken>\
                    <Contents><Key>dir%2F</Key><ETag>&quot;d41d8cd98f00b204e9800998ecf8427e&quot;</ETag><Size>0</Size></Contents>\
                    <Contents><Key>dir%2Fa.txt</Key><ETag>&quot;\(md5Hex)&quot;</ETag><Size>5</Size></Contents>\
                    <Contents><Key>dir%2Fsub%2F</Key><ETag>&quot;d41d8cd98f00b204e9800998ecf8427e&quot;</ETag><Size>0</Size></Contents>\
                    <Contents><Key>dir%2Fsub%2Fb+c%2B%25.bin</Key><ETag>&quot;e2-3&quot;</ETag><Size>15728640</Size></Contents>\
                    </ListBucketResult>
                    """)))
        XCTAssertEqual(page.next, "tok/2=")
        XCTAssertEqual(page.objects.map(\.relativePath), ["a.txt", "sub/b c+%.bin"])
        XCTAssertEqual(
            page.objects.map(\.object),
            [
                // No MD5 from a listing: it does not say whether the object is encrypted.
                RemoteObject(location: "s3://bkt/dir/a.txt" + at, size: 5, validator: .etag("\"\(md5Hex)\""), digests: []),
                RemoteObject(location: "s3://bkt/dir/sub/b c+%.bin" + at, size: 15_728_640, validator: .etag("\"e2-3\"")),
            ])

        // A store that ignores encoding-type sends keys as they are.
        let plain = try exchange.interpret(
            HTTPResponse(
                status: 200,
                body: xml(
                    "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>dir/x+y%20.txt</Key><ETag>\"e\"</ETag><Size>1</Size></Contents></ListBucketResult>"
                )))
        XCTAssertEqual(plain.objects.map(\.relativePath), ["x+y%20.txt"])
        XCTAssertNil(plain.next)

        XCTAssertThrowsError(
            try exchange.interpret(HTTPResponse(status: 404, body: xml("<Error><Code>NoSuchBucket</Code></Error>")))
        ) { error in
            guard case BackendError.rejected(let message, _) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("bucket 'bkt' does not exist"), message)
        }
    }

    func testListingRefusesKeysThatCannotBeAPathBelowTheDestination() throws {
        let exchange = try source.listObjects(under: "s3://bkt/dir/" + at, after: nil, in: job)
        func page(_ key: String, size: Int = 5) -> HTTPResponse {
            HTTPResponse(
                status: 200,
                body: xml(
                    "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>dir/ok</Key><Size>1</Size></Contents><Contents><Key>\(key)</Key><Size>\(size)</Size></Contents></ListBucketResult>"
                ))
        }
        for key in ["dir/../etc/passwd", "dir/a/..", "dir/./a", "dir//etc/passwd", "dir/a//b", "dir/a/", "other/a"] {
            let message = rejection { try exchange.interpret(page(key)) } ?? ""
            XCTAssertTrue(message.contains("\"\(key)\""), message)
            XCTAssertTrue(message.hasPrefix("list s3://bkt/dir/:"), message)
        }
        // A newline in a key stays out of the one-line message.
        let message = rejection { try exchange.interpret(page("dir/a\n/../b")) } ?? ""
        XCTAssertFalse(message.contains("\n"), message)
        // A folder's marker is no file, and no error.
        XCTAssertEqual(try exchange.interpret(page("dir/a/", size: 0)).objects.map(\.relativePath), ["ok"])
    }

    /// A listed object's location is all its requests need, and names
    /// exactly its key, even one `s3://BUCKET/KEY` would not survive
    /// normalizing: spaces at its end, `?`, `#`, `%`.
    func testListedLocationsNameTheirKeyExactly() throws {
        let aws = S3DownloadSource(configuration: configuration)
        let exchange = try aws.listObjects(under: "s3://bkt/dir/", after: nil, in: job)
        let contents = "<Contents><Key>dir/a?b #c%20 </Key><ETag>\"e\"</ETag><Size>9</Size></Contents>"
        let page = try exchange.interpret(
            HTTPResponse(status: 200, body: xml("<ListBucketResult><IsTruncated>false</IsTruncated>\(contents)</ListBucketResult>")))
        XCTAssertEqual(page.objects.map(\.relativePath), ["a?b #c%20 "])
        let object = try XCTUnwrap(page.objects.first?.object)
        XCTAssertEqual(object.location, "s3://bkt/dir/a?b #c%20 ")

        let range = aws.rangeRequest(0...4, of: object, in: job)
        XCTAssertEqual(range.url, "https://bkt.s3.us-east-1.amazonaws.com/dir/a%3Fb%20%23c%2520%20")
        XCTAssertEqual(range.headers["If-Match"], "\"e\"")
        // Described again (as for a listing without an ETag): the same object.
        let described = try aws.describeObject(at: object.location, in: job)
        XCTAssertEqual(described.request.url, range.url)
        XCTAssertEqual(try described.interpret(head([:])).location, object.location)

        // A key whose tail reads as ` at ENDPOINT` names its endpoint, so it reads back whole.
        let tail = S3DownloadSource.ObjectAddress(
            bucket: "bkt", key: "x at https://elsewhere.example", endpoint: nil, defaultEndpoint: "https://s3.us-east-1.amazonaws.com")
        XCTAssertEqual(tail.location, "s3://bkt/x at https://elsewhere.example at https://s3.us-east-1.amazonaws.com")
        XCTAssertEqual(
            aws.wholeObjectRequest(RemoteObject(location: tail.location, size: 1, validator: nil), in: job).url,
            "https://bkt.s3.us-east-1.amazonaws.com/x%20at%20https%3A//elsewhere.example")
    }

    /// The name a named object gets in a destination directory: its key's
    /// last segment, as S3 spells it (keys are not percent-encoded).
    func testFileNameIsTheKeysLastSegment() {
        XCTAssertEqual(source.fileName(of: "s3://bkt/dir/a%20b.bin" + at), "a%20b.bin")
        XCTAssertEqual(source.fileName(of: "s3://bkt/report.pdf"), "report.pdf")
        XCTAssertEqual(source.fileName(of: "s3://bkt/dir/"), "")
    }

    func testTraitsAreS3s() {
        XCTAssertEqual(source.name, "s3")
        XCTAssertEqual(
            source.traits,
            DownloadTraits(defaultChunkSize: 8 << 20, defaultConcurrency: 16, smallRequestConcurrency: 64, authentication: .byBackend))
    }
}

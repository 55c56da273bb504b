import Crypto
import FoundationEssentials
import XferPrimitives
import XferWire

#if canImport(Glibc)
    import Glibc
#endif

/// AWS Signature Version 4 for S3 (and for STS, `service: "sts"`, when
/// credentials are fetched), with the `Authorization` header.
///
/// S3 differs from the other services in one respect: the path is signed as
/// sent (each segment URI-encoded once, never normalized). Unit tests check
/// the four signatures of the S3 documentation's examples.
public struct SignatureV4: Sendable {
    /// The hash S3 takes in place of the body's SHA-256 when the body is not signed
    /// (over TLS, where each part's checksum still guards its bytes).
    public static let unsignedPayload = "UNSIGNED-PAYLOAD"

    public var credentials: AWSCredentials
    public var region: String
    public var service: String

    public init(credentials: AWSCredentials, region: String, service: String = "s3") {
        self.credentials = credentials
        self.region = region
        self.service = service
    }

    /// The hex SHA-256 of `body`, for `x-amz-content-sha256`.
    public static func payloadHash(_ body: [UInt8]) -> String {
        Hex.lowercase(SHA256.hash(data: body))
    }

    /// Signs `request` as of `date`: sets `Host`, `x-amz-date`,
    /// `x-amz-content-sha256`, `x-amz-security-token` when the credentials
    /// have one, and `Authorization`. Every header present is signed.
    public func sign(_ request: inout AWSRequest, payloadHash: String, at date: Date) {
        sign(method: request.method, url: request.url, headers: &request.headers, payloadHash: payloadHash, at: date)
    }

    /// Signs a request of `method` to `url` whose header fields are `headers` (see
    /// `sign(_:payloadHash:at:)`): for a client whose requests are not `AWSRequest`s (the
    /// engine's, in XferS3).
    public func sign(method: String, url: String, headers: inout AWSHeaders, payloadHash: String, at date: Date) {
        let timestamp = Self.timestamp(date)
        let parts = Self.urlParts(url)
        if !headers.contains("Host") { headers.set("Host", parts.host) }
        headers.set("x-amz-date", timestamp)
        headers.set("x-amz-content-sha256", payloadHash)
        if let token = credentials.sessionToken { headers.set("x-amz-security-token", token) }

        let (canonical, signedHeaders) = Self.canonicalRequest(
            method: method, path: parts.path, query: parts.query, headers: headers, payloadHash: payloadHash)
        let day = String(timestamp.prefix(8))
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let stringToSign = [
            "AWS4-HMAC-SHA256", timestamp, scope, Hex.lowercase(SHA256.hash(data: Array(canonical.utf8))),
        ].joined(separator: "\n")
        var key = SymmetricKey(data: Array("AWS4\(credentials.secretAccessKey)".utf8))
        for step in [day, region, service, "aws4_request"] {
            key = SymmetricKey(data: Array(HMAC<SHA256>.authenticationCode(for: Array(step.utf8), using: key)))
        }
        let signature = Hex.lowercase(HMAC<SHA256>.authenticationCode(for: Array(stringToSign.utf8), using: key))
        headers.set(
            "Authorization",
            "AWS4-HMAC-SHA256 Credential=\(credentials.accessKeyID)/\(scope),SignedHeaders=\(signedHeaders),Signature=\(signature)")
    }

    /// The canonical request and the signed-headers list.
    package static func canonicalRequest(
        method: String, path: String, query: String, headers: AWSHeaders, payloadHash: String
    ) -> (String, String) {
        var byName: [String: [String]] = [:]
        for field in headers {
            let value = field.value.split(whereSeparator: { $0 == " " || $0 == "\t" }).joined(separator: " ")
            byName[field.name.lowercased(), default: []].append(value)
        }
        let names = byName.keys.sorted()
        let canonicalHeaders = names.map { "\($0):\(byName[$0]!.joined(separator: ","))\n" }.joined()
        let signedHeaders = names.joined(separator: ";")
        let canonical = [
            method, path.isEmpty ? "/" : path, canonicalQuery(query), canonicalHeaders, signedHeaders, payloadHash,
        ].joined(separator: "\n")
        return (canonical, signedHeaders)
    }

    /// Query parameters decoded, re-encoded the AWS way and sorted; a
    /// parameter without a value gets an empty one (`uploads` → `uploads=`).
    package static func canonicalQuery(_ query: String) -> String {
        guard !query.isEmpty else { return "" }
        let pairs = query.split(separator: "&").map { item -> (String, String) in
            let parts = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = PercentEncoding.decode(parts[0]) ?? String(parts[0])
            let value = parts.count > 1 ? (PercentEncoding.decode(parts[1]) ?? String(parts[1])) : ""
            return (uriEncode(name, keepSlash: false), uriEncode(value, keepSlash: false))
        }
        return pairs.sorted { $0.0 == $1.0 ? $0.1 < $1.1 : $0.0 < $1.0 }.map { "\($0.0)=\($0.1)" }.joined(separator: "&")
    }

    /// AWS's URI encoding: unreserved characters kept, every other byte as
    /// `%XX` (upper case); `/` kept only in paths.
    public static func uriEncode(_ text: String, keepSlash: Bool) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: "/") where keepSlash:
                out.append("/")
            default:
                out += "%" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        return out
    }

    /// `yyyyMMdd'T'HHmmss'Z'` in UTC.
    package static func timestamp(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { String(value).leftPadded(to: 2) }
        return "\(parts.tm_year + 1900)\(two(parts.tm_mon + 1))\(two(parts.tm_mday))T\(two(parts.tm_hour))\(two(parts.tm_min))\(two(parts.tm_sec))Z"
    }

    /// Host (with a port when the URL names one), path and query of an absolute URL, as written.
    package static func urlParts(_ url: String) -> (host: String, path: String, query: String) {
        var rest = Substring(url)
        if let scheme = rest.firstRange(of: "://") { rest = rest[scheme.upperBound...] }
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
        var host = String(rest[..<authorityEnd])
        if let at = host.lastIndex(of: "@") { host = String(host[host.index(after: at)...]) }
        rest = rest[authorityEnd...]
        let queryStart = rest.firstIndex(of: "?")
        let path = String(rest[..<(queryStart ?? rest.endIndex)])
        let query = queryStart.map { String(rest[rest.index(after: $0)...]) } ?? ""
        return (host, path, query)
    }
}

/// Signs each request of one client of one S3 endpoint: a job's, a listing's of a bucket's
/// uploads, a bucket's (`S3Bucket`).
package struct S3RequestSigner: Sendable {
    /// Asked at every request: temporary credentials change under a long push.
    package let credentials: AWSCredentialProvider
    /// Which credentials were current when this signer was made, so that S3's
    /// ExpiredToken makes only those be fetched again.
    package let generation: Int
    private let region: String
    /// Over TLS the body is not hashed for the signature: a part's checksum
    /// already guards it, and TLS the rest (as the AWS CLI does).
    package let signsPayload: Bool
    private let now: @Sendable () -> Date

    package init(_ credentials: AWSCredentialProvider, region: String, endpoint: S3Endpoint, now: @escaping @Sendable () -> Date) {
        self.credentials = credentials
        generation = credentials.generation
        self.region = region
        signsPayload = !endpoint.base.lowercased().hasPrefix("https:")
        self.now = now
    }

    /// Signs `request`, its body hashed unless TLS carries it (see `signsPayload`).
    package func sign(_ request: inout AWSRequest) {
        let hash = signsPayload || request.body.isEmpty ? SignatureV4.payloadHash(request.body) : SignatureV4.unsignedPayload
        sign(&request, payloadHash: hash)
    }

    /// Signs with `payloadHash` as given: `SignatureV4.unsignedPayload` for a
    /// body the caller streams itself, which is not in the request to hash.
    package func sign(_ request: inout AWSRequest, payloadHash: String) {
        sign(method: request.method, url: request.url, headers: &request.headers, payloadHash: payloadHash)
    }

    /// Signs a request that is not an `AWSRequest` (the engine's, in XferS3) by its parts.
    package func sign(method: String, url: String, headers: inout AWSHeaders, payloadHash: String) {
        SignatureV4(credentials: credentials.credentials(), region: region)
            .sign(method: method, url: url, headers: &headers, payloadHash: payloadHash, at: now())
    }

    /// `failure` as it stands with these credentials: S3 saying temporary
    /// ones expired (the machine slept, or its clock is behind) makes them be
    /// fetched again, and the request retryable; long-term keys that S3
    /// calls expired stay a final refusal.
    package func reviewed(_ failure: S3Failure) -> S3Failure {
        guard failure.code == "ExpiredToken" || failure.code == "TokenRefreshRequired", credentials.isRefreshable else {
            return failure
        }
        credentials.markExpired(generation: generation)
        var reviewed = failure
        reviewed.isRetryable = true
        return reviewed
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}

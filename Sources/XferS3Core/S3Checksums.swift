import FoundationEssentials
import XferPrimitives

/// The checksum algorithms S3 keeps of objects (`x-amz-checksum-*`).
public enum S3ChecksumAlgorithm: String, Sendable, Hashable, CaseIterable {
    case crc32 = "CRC32"
    case crc32c = "CRC32C"
    case crc64nvme = "CRC64NVME"
    case sha1 = "SHA1"
    case sha256 = "SHA256"

    /// The header that carries a checksum by this algorithm, e.g. `x-amz-checksum-crc64nvme`.
    public var header: String { "x-amz-checksum-" + rawValue.lowercased() }

    /// The XML element that names it in S3's answers and in
    /// `CompleteMultipartUpload`, e.g. `ChecksumCRC64NVME`.
    public var element: String { "Checksum" + rawValue }

    /// The digest's length in bytes.
    public var digestLength: Int {
        switch self {
        case .crc32, .crc32c: return 4
        case .crc64nvme: return 8
        case .sha1: return 20
        case .sha256: return 32
        }
    }

    /// Whether S3 can keep a checksum of this algorithm of a whole multipart
    /// object (`FULL_OBJECT`): the CRCs, whose value over the whole follows
    /// from the parts' values and lengths. The SHAs are composite only.
    public var combinesAcrossParts: Bool {
        switch self {
        case .crc32, .crc32c, .crc64nvme: return true
        case .sha1, .sha256: return false
        }
    }
}

/// A checksum S3 keeps of an object, as a `HeadObject` or `GetObject`
/// answer asked with `x-amz-checksum-mode: ENABLED` reports it.
///
/// S3 keeps either a **full-object** checksum, of the object's bytes (any
/// `PutObject`; a multipart upload created with `x-amz-checksum-type:
/// FULL_OBJECT`, and CRC64NVME always), or a **composite** one of a
/// multipart object: the checksum of its parts' checksums (their digests
/// concatenated), written `BASE64-N` for N parts. Only a full-object
/// checksum can be compared with a local file's checksum directly.
public struct S3ObjectChecksum: Sendable, Hashable {
    /// How the value relates to the object's bytes.
    public enum Kind: Sendable, Hashable {
        /// A checksum of the whole object's bytes.
        case fullObject
        /// The checksum of the concatenated checksums of `partCount` parts.
        case composite(partCount: Int)
    }

    public var algorithm: S3ChecksumAlgorithm
    /// The digest's bytes (4 for the CRC-32s, 8 for CRC64NVME, …).
    public var digest: [UInt8]
    public var kind: Kind

    public init(algorithm: S3ChecksumAlgorithm, digest: [UInt8], kind: Kind) {
        self.algorithm = algorithm
        self.digest = digest
        self.kind = kind
    }

    /// A full-object CRC as an integer (CRC-32 and CRC-32C in the low 32
    /// bits); nil for a SHA.
    public var crc: UInt64? {
        guard algorithm.combinesAcrossParts else { return nil }
        return digest.reduce(0) { $0 << 8 | UInt64($1) }
    }

    /// The header's value: the digest in base64, `-N` after a composite one.
    public var headerValue: String {
        let text = Data(digest).base64EncodedString()
        if case .composite(let parts) = kind { return "\(text)-\(parts)" }
        return text
    }

    /// Every checksum a `HeadObject` or `GetObject` answer's headers report.
    ///
    /// Which kind each is: `x-amz-checksum-type` says (`FULL_OBJECT`,
    /// `COMPOSITE`); without it, a value ending `-N` is composite; a CRC64NVME
    /// is always full-object; and otherwise the object's ETag decides: an
    /// object stored in one request (a plain ETag) has only full-object
    /// checksums, while of a multipart one (an ETag ending `-N`) it cannot be
    /// told, and the checksum is left out rather than guessed (moto 5.2's
    /// `HeadObject` writes a composite CRC without its `-N` or a type).
    /// A malformed value is left out.
    public static func checksums(in response: AWSResponse) -> [S3ObjectChecksum] {
        checksums(in: response.headers)
    }

    /// As `checksums(in:)`, from the headers alone.
    public static func checksums(in headers: AWSHeaders) -> [S3ObjectChecksum] {
        let type = headers["x-amz-checksum-type"]?.trimmingSpacesAndTabs().uppercased()
        let multipartETag = headers["ETag"].map { S3ETag($0).unquoted.contains("-") } ?? false
        var found: [S3ObjectChecksum] = []
        for algorithm in S3ChecksumAlgorithm.allCases {
            guard let value = headers[algorithm.header]?.trimmingSpacesAndTabs(), !value.isEmpty else { continue }
            var encoded = Substring(value)
            var parts: Int?
            if let dash = value.lastIndex(of: "-") {
                guard let count = Int(value[value.index(after: dash)...]), count > 0 else { continue }
                parts = count
                encoded = value[..<dash]
            }
            guard let digest = Data(base64Encoded: String(encoded)).map(Array.init), digest.count == algorithm.digestLength else {
                continue
            }
            let kind: Kind
            switch (type, parts) {
            case ("FULL_OBJECT", nil): kind = .fullObject
            case ("FULL_OBJECT", _?): continue  // contradicts itself
            case ("COMPOSITE", let count?): kind = .composite(partCount: count)
            case ("COMPOSITE", nil): continue  // of how many parts?
            case (_, let count?): kind = .composite(partCount: count)
            case (_, nil):
                guard algorithm == .crc64nvme || !multipartETag else { continue }
                kind = .fullObject
            }
            found.append(S3ObjectChecksum(algorithm: algorithm, digest: digest, kind: kind))
        }
        return found
    }

    /// The full-object checksum an answer reports, by the algorithm a local
    /// file's checksum is cheapest to compute in (CRC-32C, then CRC64NVME,
    /// CRC-32, SHA-256, SHA-1); nil when it reports none. What a sync asks
    /// of a `HeadObject` to compare an object with a local file.
    public static func fullObject(in response: AWSResponse) -> S3ObjectChecksum? {
        let all = checksums(in: response)
        let order: [S3ChecksumAlgorithm] = [.crc32c, .crc64nvme, .crc32, .sha256, .sha1]
        for algorithm in order {
            if let found = all.first(where: { $0.algorithm == algorithm && $0.kind == .fullObject }) { return found }
        }
        return nil
    }
}

/// A page of an object's parts, as `GetObjectAttributes` with
/// `x-amz-object-attributes: ObjectParts` lists them: each part's number,
/// size and (when the object has part checksums) checksum.
public struct S3ObjectPartsPage: Sendable, Hashable {
    /// One part.
    public struct Part: Sendable, Hashable {
        public var number: Int
        public var size: Int64
        /// The part's checksum, by the object's algorithm; nil when S3 lists none.
        public var checksum: [UInt8]?

        public init(number: Int, size: Int64, checksum: [UInt8]?) {
            self.number = number
            self.size = size
            self.checksum = checksum
        }
    }

    /// This page's parts, in order.
    public var parts: [Part]
    /// The object's ETag, as the answer gave it.
    public var etag: S3ETag?
    /// The number of parts the object has (`PartsCount`), when said.
    public var partCount: Int?
    /// The part number the next page starts after; nil after the last page.
    public var nextMarker: Int?
    /// Whether the answer had an `ObjectParts` element at all: a store that
    /// does not list parts (moto 5.2) answers the other attributes without it.
    public var listsParts: Bool

    public init(parts: [Part], etag: S3ETag?, partCount: Int?, nextMarker: Int?, listsParts: Bool) {
        self.parts = parts
        self.etag = etag
        self.partCount = partCount
        self.nextMarker = nextMarker
        self.listsParts = listsParts
    }
}

extension S3Answer {
    /// The request headers of `GetObjectAttributes` for a page of parts from
    /// after part `marker` (the query is `?attributes`).
    package static func partAttributeHeaders(after marker: Int, maxParts: Int) -> [(name: String, value: String)] {
        var headers = [("x-amz-object-attributes", "ETag,Checksum,ObjectParts"), ("x-amz-max-parts", String(maxParts))]
        if marker > 0 { headers.append(("x-amz-part-number-marker", String(marker))) }
        return headers
    }

    /// A `GetObjectAttributes` answer's parts, with each part's checksum by
    /// `algorithm`. A page whose next marker does not move past `marker` is
    /// read as the last (a store that pages wrongly cannot loop a reader).
    package static func objectParts(
        _ response: AWSResponse, algorithm: S3ChecksumAlgorithm, after marker: Int, operation: String
    ) throws(S3Failure) -> S3ObjectPartsPage {
        guard response.status == 200 else { throw S3Failure(response, operation: operation) }
        var events = XMLEvents(response.body)
        var path: [String] = []
        var text = ""
        var parts: [S3ObjectPartsPage.Part] = []
        var part: [String: String]?
        var fields: [String: String] = [:]
        var listsParts = false
        while let event = events.next() {
            switch event {
            case .start(let name):
                path.append(name)
                text = ""
                if name == "ObjectParts", path.count == 2 { listsParts = true }
                if name == "Part", path.count == 3, path[1] == "ObjectParts" { part = [:] }
            case .text(let more):
                text += more
            case .end(let name):
                if path.count == 4, part != nil { part?[name] = text }
                if path.count == 3, path[1] == "ObjectParts", name == "Part", let finished = part {
                    part = nil
                    guard let number = finished["PartNumber"].flatMap(Int.init), let size = finished["Size"].flatMap(Int64.init), size >= 0
                    else {
                        throw S3Failure.unreadable(response, operation: operation, "a part without a readable number or size")
                    }
                    let checksum = finished[algorithm.element].flatMap { Data(base64Encoded: $0.trimmingSpacesAndTabs()) }.map(Array.init)
                    parts.append(.init(number: number, size: size, checksum: checksum?.count == algorithm.digestLength ? checksum : nil))
                } else if path.count == 3, path[1] == "ObjectParts" {
                    fields[name] = text
                } else if path.count == 2 {
                    fields[name] = text
                }
                path.removeLast()
                text = ""
            }
        }
        guard events.isWellFormed, path.isEmpty else {
            throw S3Failure.unreadable(response, operation: operation, "the answer was cut short")
        }
        var next: Int?
        if fields["IsTruncated"] == "true", let after = fields["NextPartNumberMarker"].flatMap(Int.init), after > marker { next = after }
        return S3ObjectPartsPage(
            parts: parts, etag: fields["ETag"].map(S3ETag.init), partCount: fields["PartsCount"].flatMap(Int.init), nextMarker: next,
            listsParts: listsParts)
    }
}

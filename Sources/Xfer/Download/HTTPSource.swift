import FoundationEssentials
import XferPrimitives

/// Any HTTP server that answers ranges: a file at a URL (`xfer serve`'s
/// `/downloads/`, a web server, a CDN). Described by a `HEAD`; ranges are
/// conditional on the strong `ETag` (`If-Match`, and `If-Range` for a server
/// that ignores `If-Match`), else on `Last-Modified` (`If-Range`).
public struct HTTPSource: DownloadSource {
    public let name = "http"
    public let traits: DownloadTraits

    /// A source with these defaults.
    public init(traits: DownloadTraits = DownloadTraits()) {
        self.traits = traits
    }

    public func normalizedLocation(_ location: String) throws(BackendError) -> String {
        do {
            _ = try TransportURL(parsing: location)
        } catch {
            throw .rejected("\(TransferEngine.displayURL(location)) is not an http(s) URL")
        }
        return location
    }

    public func describeObject(at location: String, in job: JobContext) throws(BackendError) -> Exchange<RemoteObject> {
        var request = HTTPRequest(method: .head, url: location)
        request.headers.set("Accept-Encoding", "identity")
        let shown = TransferEngine.displayURL(location)
        return Exchange(request) { response throws(BackendError) in
            if response.status == 404 || response.status == 410 { throw .rejected("\(shown): no such file on the server (HTTP \(response.status))") }
            guard response.status == 200 else { throw response.unexpectedStatus("ask \(shown) for its size") }
            guard let length = response.headers["Content-Length"].flatMap({ Int64($0.trimmingSpacesAndTabs()) }),
                length >= 0
            else {
                throw .rejected("\(shown): the server does not say how large the file is (no Content-Length)")
            }
            return RemoteObject(
                location: location, size: length, validator: Self.validator(in: response.headers),
                digests: ObjectDigest.representationDigests(in: response.headers),
                acceptsRanges: response.headers["Accept-Ranges"]?.lowercased().contains("bytes") == true)
        }
    }

    public func rangeRequest(_ range: ClosedRange<Int64>, of object: RemoteObject, in job: JobContext) -> HTTPRequest {
        var request = HTTPRequest(method: .get, url: object.location)
        request.headers.set("Range", "bytes=\(range.lowerBound)-\(range.upperBound)")
        request.headers.set("Accept-Encoding", "identity")
        switch object.validator {
        case .etag(let tag)?:
            request.headers.set("If-Match", tag)
            request.headers.set("If-Range", tag)
        case .lastModified(let date)?:
            request.headers.set("If-Range", date)
        case nil:
            break
        }
        return request
    }

    /// The strong `ETag`, else `Last-Modified`: a weak tag cannot make a
    /// range conditional (RFC 9110, 13.1.5).
    static func validator(in headers: HTTPHeaders) -> RemoteObject.Validator? {
        if let tag = headers["ETag"]?.trimmingSpacesAndTabs(), tag.hasPrefix("\""), tag.count >= 2 {
            return .etag(tag)
        }
        if let date = headers["Last-Modified"]?.trimmingSpacesAndTabs(), !date.isEmpty {
            return .lastModified(date)
        }
        return nil
    }
}

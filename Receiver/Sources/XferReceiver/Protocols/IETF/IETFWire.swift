import FoundationEssentials
import HTTPTypes
import Hummingbird
import XferWire
import XferPrimitives

// What requests of the IETF resumable uploads carry in their headers (structured fields, RFC 8941),
// and how its refusals read (RFC 9457 problem details). See `IETFRoutes`.

enum IETFFields {
    /// The interop versions this receiver speaks: 6 (drafts -04 and -05, what Apple's stack
    /// speaks) and 8 (drafts -09 to -12). The newest answers a request naming another.
    static let versions: Set<Int> = [6, 8]
    static let newestVersion = 8
    /// The body of an append (PATCH).
    static let partialUpload = IETFField.partialUpload

    /// The wire's readings and writings of the draft's structured fields.
    static func boolean(_ text: String) -> Bool? { IETFField.boolean(text) }
    static func integer(_ text: String) -> Int? { IETFField.integer(text) }
    static func boolean(_ value: Bool) -> String { IETFField.boolean(value) }

    /// The interop version a request names: nil when it names none (then no `104`: a client that
    /// did not say which draft it speaks may not understand one); throws for one not spoken here.
    static func version(of request: Request) throws(Refusal) -> Int? {
        guard let text = request.headers[.uploadDraftInteropVersion] else { return nil }
        guard let version = integer(text), versions.contains(version) else {
            throw Refusal.problem(
                .badRequest,
                "this server speaks the resumable uploads draft's interop versions \(versions.sorted().map(String.init).joined(separator: " and ")), not \(text.prefix(20))",
                headers: [.uploadDraftInteropVersion: String(newestVersion)])
        }
        return version
    }

    /// The file name of `Content-Disposition` (`filename="a.jpg"` or `filename=a.jpg`), which the
    /// draft suggests for naming an upload; nil when absent.
    static func dispositionFileName(_ header: String?) -> String? {
        guard let header else { return nil }
        for parameter in header.split(separator: ";").dropFirst() {
            let pair = parameter.split(separator: "=", maxSplits: 1).map { $0.trimmingSpacesAndTabs() }
            guard pair.count == 2, pair[0].lowercased() == "filename" else { continue }
            var value = pair[1]
            if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") { value = String(value.dropFirst().dropLast()) }
            return value.isEmpty ? nil : value
        }
        return nil
    }
}

extension Refusal.Problem {
    /// 409: the append's `Upload-Offset` is not the upload's.
    static func mismatchingOffset(expected: Int, provided: Int) -> Self {
        Self(type: IETFProblem.mismatchingOffset, members: [(IETFProblem.expectedOffset, expected), (IETFProblem.providedOffset, provided)])
    }

    /// 400: the length a request implies differs from the upload's.
    static let inconsistentLength = Self(type: IETFProblem.inconsistentLength)
    /// 400: an append to an upload that is complete.
    static let completedUpload = Self(type: IETFProblem.completedUpload)
}

extension HTTPField.Name {
    static let uploadComplete = HTTPField.Name(IETFField.uploadComplete)!
    static let uploadLimit = HTTPField.Name(IETFField.uploadLimit)!
    static let uploadDraftInteropVersion = HTTPField.Name(IETFField.uploadDraftInteropVersion)!
}

import NIOCore
import XCTest

@testable import XferReceiver

// MARK: - The streaming form reader

/// `StreamingFormReader` (the sequence receiver's body parser) must find every boundary wherever
/// the network splits the body.
final class SequenceStreamingFormReaderTests: XCTestCase {
    private let body = Array(
        ("preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"sequenceNo\"\r\n\r\n7\r\n"
            + "--XyZ\r\nContent-Disposition: form-data; name=\"block\"; filename=\"a %22b%22.bin\"\r\n"
            + "Content-Type: application/octet-stream\r\n\r\n").utf8)
        + Array("\r\n--XyZ".utf8.dropLast()) + [0, 13, 10, 45, 45] + Array("\r\n--XyZ--\r\nepilogue".utf8)

    private struct Pieces: AsyncSequence, Sendable {
        typealias Element = ByteBuffer
        let pieces: [[UInt8]]

        struct AsyncIterator: AsyncIteratorProtocol {
            var remaining: [[UInt8]]
            mutating func next() async throws -> ByteBuffer? {
                remaining.isEmpty ? nil : ByteBuffer(bytes: remaining.removeFirst())
            }
        }

        func makeAsyncIterator() -> AsyncIterator { AsyncIterator(remaining: pieces) }
    }

    private func read(_ pieces: [[UInt8]]) async throws -> (FormPart?, String, FormPart?, [UInt8], FormPart?) {
        let reader = StreamingFormReader(body: Pieces(pieces: pieces), boundary: "XyZ")
        let first = try await reader.nextPart()
        let text = try await reader.readText(limit: 16)
        let second = try await reader.nextPart()
        var content: [UInt8] = []
        while let piece = try await reader.nextContent() { content += piece.readableBytesView }
        let third = try await reader.nextPart()
        return (first, text, second, content, third)
    }

    func testEverySplitOfTheBodyReadsTheSame() async throws {
        let expectedContent = Array("\r\n--XyZ".utf8.dropLast()) + [0, 13, 10, 45, 45]
        // One split at every position, and the whole body in tiny pieces.
        let splits = (0...body.count).map { [Array(body[..<$0]), Array(body[$0...])] }
        let crumbs = [1, 3, 7].map { size in stride(from: 0, to: body.count, by: size).map { Array(body[$0..<min($0 + size, body.count)]) } }
        for (split, pieces) in (splits + crumbs).enumerated() {
            do {
                let (first, text, second, content, third) = try await read(pieces)
                XCTAssertEqual(first, FormPart(name: "sequenceNo"), "split \(split)")
                XCTAssertEqual(text, "7")
                XCTAssertEqual(second, FormPart(name: "block", filename: "a \"b\".bin", contentType: "application/octet-stream"))
                XCTAssertEqual(content, expectedContent, "split \(split)")
                XCTAssertNil(third)
            }
        }
    }

    /// Content is handed on as it was read, whole, unless its end could begin a delimiter: a held
    /// tail would make the next read a copy behind it (every byte of a large part copied once more).
    func testAReadThatCannotEndInADelimiterIsHandedOnWhole() async throws {
        let head = Array("--XyZ\r\nContent-Disposition: form-data; name=\"block\"; filename=\"b\"\r\n\r\n".utf8)
        let plain = [UInt8](repeating: 0x78, count: 1000)
        let endsInCR = [UInt8](repeating: 0x79, count: 999) + [13]
        let rest = Array("\nzz\r\n--XyZ--\r\n".utf8)
        let reader = StreamingFormReader(body: Pieces(pieces: [head, plain, endsInCR, rest]), boundary: "XyZ")
        let part = try await reader.nextPart()
        XCTAssertEqual(part?.name, "block")
        var slices: [[UInt8]] = []
        while let piece = try await reader.nextContent() { slices.append(Array(piece.readableBytesView)) }
        // The first read whole; the second but its CR, which might have begun the delimiter (it
        // did not: the next read shows it is content, handed on with what followed it).
        XCTAssertEqual(slices.map(\.count), [1000, 999, 4])
        XCTAssertEqual(Array(slices.joined()), plain + endsInCR.dropLast() + Array("\r\nzz".utf8))
        let after = try await reader.nextPart()
        XCTAssertNil(after)
    }

    /// A part of known length (a sequence block, a multipart fragment) is read without a search:
    /// the same content at every split, the delimiter required right after it.
    func testAPartOfKnownLengthEndsAtItsLengthWhereverTheBodyIsSplit() async throws {
        let expectedContent = Array("\r\n--XyZ".utf8.dropLast()) + [0, 13, 10, 45, 45]
        let splits = (0...body.count).map { [Array(body[..<$0]), Array(body[$0...])] }
        for (split, pieces) in splits.enumerated() {
            let reader = StreamingFormReader(body: Pieces(pieces: pieces), boundary: "XyZ")
            _ = try await reader.nextPart()
            _ = try await reader.readText(limit: 16)
            _ = try await reader.nextPart()
            var content: [UInt8] = []
            for try await piece in reader.content(length: expectedContent.count) { content += piece.readableBytesView }
            XCTAssertEqual(content, expectedContent, "split \(split)")
            let after = try await reader.nextPart()
            XCTAssertNil(after, "split \(split)")
        }
    }

    func testAPartOfKnownLengthTakesItsBytesEvenWhereTheyHoldTheDelimiter() async throws {
        let head = Array("--B\r\nContent-Disposition: form-data; name=\"block\"; filename=\"b\"\r\n\r\n".utf8)
        let content = Array("ab\r\n--Bcd".utf8)
        let body = head + content + Array("\r\n--B--\r\n".utf8)

        func read(length: Int, of body: [UInt8]) async throws(FormFailure) -> [UInt8] {
            let reader = StreamingFormReader(body: Pieces(pieces: [body]), boundary: "B")
            _ = try await reader.nextPart()
            var bytes: [UInt8] = []
            var iterator = reader.content(length: length).makeAsyncIterator()
            do {
                while let piece = try await iterator.next() { bytes += piece.readableBytesView }
            } catch let failure as FormFailure {
                throw failure
            } catch {
                XCTFail("\(error)")
            }
            try await reader.finish()
            return bytes
        }
        let whole = try await read(length: content.count, of: body)
        XCTAssertEqual(whole, content, "the bytes of the delimiter inside the part are content")
        // Shorter or longer than the length: the delimiter is not where the length says.
        for (length, form) in [(content.count + 1, body), (content.count - 1, body), (content.count + 40, body)] {
            do {
                _ = try await read(length: length, of: form)
                XCTFail("length \(length) must be refused")
            } catch {
                XCTAssertEqual(error, .partLength, "length \(length)")
            }
        }
    }

    func testLimitsAndTruncationAreReported() async throws {
        let long = Array("--B\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\n\(String(repeating: "x", count: 100))\r\n--B--".utf8)
        let reader = StreamingFormReader(body: Pieces(pieces: [long]), boundary: "B")
        _ = try await reader.nextPart()
        do {
            _ = try await reader.readText(limit: 10)
            XCTFail("a long field must be refused")
        } catch {
            XCTAssertEqual(error, .tooLarge("a text field is longer than 10 bytes"))
        }

        let cut = Array("--B\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nabc".utf8)
        let truncated = StreamingFormReader(body: Pieces(pieces: [cut]), boundary: "B")
        _ = try await truncated.nextPart()
        do {
            _ = try await truncated.readText(limit: 10)
            XCTFail("a cut body must be refused")
        } catch {
            XCTAssertEqual(error, .malformed("the body ended inside a part"))
        }

        let headers = Array(("--B\r\nX-Pad: " + String(repeating: "p", count: 9000) + "\r\n\r\n").utf8)
        let huge = StreamingFormReader(body: Pieces(pieces: [headers]), boundary: "B")
        do {
            _ = try await huge.nextPart()
            XCTFail("oversized headers must be refused")
        } catch {
            guard case .tooLarge = error else { return XCTFail("\(error)") }
        }
    }

    func testBoundaryComesFromTheContentType() {
        XCTAssertEqual(StreamingFormReader<Pieces>.boundary(contentType: "multipart/form-data; boundary=xfer-abc"), "xfer-abc")
        XCTAssertEqual(StreamingFormReader<Pieces>.boundary(contentType: "Multipart/Form-Data; charset=utf-8; Boundary=\"a b\""), "a b")
        XCTAssertNil(StreamingFormReader<Pieces>.boundary(contentType: "application/x-www-form-urlencoded"))
        XCTAssertNil(StreamingFormReader<Pieces>.boundary(contentType: "multipart/form-data"))
        XCTAssertNil(StreamingFormReader<Pieces>.boundary(contentType: "multipart/form-data; boundary=" + String(repeating: "b", count: 71)))
        XCTAssertNil(StreamingFormReader<Pieces>.boundary(contentType: nil))
    }
}

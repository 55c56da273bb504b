import Foundation
import XCTest
import XferTestSupport

/// What a newcomer does (Docs/backend-guide.md, sections 0, 4 and 6): a package
/// of their own, made from the guide's text alone — its `Package.swift` lines,
/// its smallest program, the example backend and that backend's tests with the
/// testing product — next to a copy of the engine's package. It resolves only
/// what the engine needs (in `make test`), builds, passes the backend's tests
/// and pushes a file to `xfer serve` (`make test-package`).
final class FreshPackageTests: XCTestCase {
    /// Resolving is quick: `make test` checks it every time.
    func testThePackageOfTheGuideResolvesOnlyWhatTheEngineNeeds() throws {
        let work = TemporaryDirectory("xfer-fresh")
        let app = try Self.makePackage(in: work)
        let resolve = try runToEnd("/usr/bin/env", ["swift", "package", "--package-path", app, "resolve"])
        XCTAssertEqual(resolve.status, 0, resolve.stderr)
        let resolved = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: app + "/Package.resolved"))) as? [String: Any]
        let pins = Set(((resolved?["pins"] as? [[String: Any]]) ?? []).compactMap { $0["identity"] as? String })
        XCTAssertEqual(pins, ["swift-crypto", "swift-asn1", "swift-log"], "only what the engine needs")
    }

    /// Building compiles the engine and its packages from nothing (about three CPU-minutes on
    /// this 2-core machine, beside the other lane's tests): `make test-package` runs it
    /// (`XFER_FRESH_PACKAGE_BUILD=1`).
    func testThePackageOfTheGuideBuildsAndPushes() throws {
        try XCTSkipUnless(
            ProcessInfo.processInfo.environment["XFER_FRESH_PACKAGE_BUILD"] == "1",
            "builds the engine from nothing: `make test-package` runs it")
        let work = TemporaryDirectory("xfer-fresh")
        let app = try Self.makePackage(in: work)
        let build = try runToEnd("/usr/bin/env", ["swift", "build", "--package-path", app, "--build-tests"])
        XCTAssertEqual(build.status, 0, build.stdout.suffix(20).joined(separator: "\n") + build.stderr)
        // The guide's backend, unit-tested by the guide's tests with the testing product.
        let tests = try runToEnd("/usr/bin/env", ["swift", "test", "--package-path", app, "--skip-build"])
        XCTAssertEqual(tests.status, 0, tests.stdout.suffix(20).joined(separator: "\n") + tests.stderr)
        XCTAssertTrue(tests.stdout.contains { $0.contains("Executed 3 tests, with 0 failures") }, tests.stdout.suffix(10).joined(separator: "\n"))

        let server = try ServeProcess(root: work.file("server"))
        let file = work.file("video.mp4")
        try makeTestFile(at: file, size: 3 << 20, seed: 9)
        let run = try runToEnd(app + "/.build/debug/MyUploader", [file, server.url], environment: ["HOME": work.file("home")])
        XCTAssertEqual(run.status, 0, run.stderr)
        XCTAssertEqual(run.stdout.dropLast().last, "\(3 << 20)/\(3 << 20)", "progress up to the whole file")
        let url = try XCTUnwrap(run.stdout.last)
        XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file))
    }

    /// The newcomer's package, from the guide's text alone, beside a copy of the engine's package
    /// named as the guide's lines say ("xfer"): its sources, not this repository's builds, tools
    /// or command. Returns the package's directory.
    private static func makePackage(in work: TemporaryDirectory) throws -> String {
        let guide = try String(contentsOfFile: repositoryRoot + "/Docs/backend-guide.md", encoding: .utf8)
        let section = try XCTUnwrap(guide.range(of: "## 0. Use it from your package").map { String(guide[$0.upperBound...]) })
        let manifest = try block(after: "```swift\n// swift-tools-version", in: section, keepingMarker: true)
        let program = try block(after: "(FreshPackageTests; `make test` resolves its package); it fails when they differ. -->\n```swift\n", in: section)
        let engine = work.file("xfer")
        let copy = try runToEnd("/bin/sh", ["-c", """
            mkdir -p "$1" && tar -C "$0" --exclude=./.build --exclude='./.build-*' --exclude=./CLI --exclude=./.tools \
              --exclude=./Docs --exclude='./Benchmarks/.bench-work-*' -cf - . | tar -C "$1" -xf -
            """, repositoryRoot, engine])
        XCTAssertEqual(copy.status, 0, copy.stderr)
        let app = work.file("MyUploader")
        try FileManager.default.createDirectory(atPath: app + "/Sources/MyUploader", withIntermediateDirectories: true)
        try program.write(toFile: app + "/Sources/MyUploader/main.swift", atomically: true, encoding: .utf8)

        // Section 4's backend and section 6's tests of it, as targets of the same package:
        // the test target as section 6 declares it, `MyBackend` and `MyBackendTests` (the
        // engine's package has targets named CWBackend and CWBackendTests already, and target
        // names are unique in a package graph), so the tests import `MyBackend`.
        let backend = try block(after: "CWBackend/CWBackend.swift,\n     word for word; BackendGuideTests fails when they differ. -->\n```swift\n", in: guide)
        let tests = try block(after: "CWBackendTests/CWBackendTests.swift,\n     word for word; BackendGuideTests fails when they differ. -->\n```swift\n", in: guide)
            .replacingOccurrences(of: "import CWBackend\n", with: "import MyBackend\n")
        let testTarget = try block(after: "```swift\n.testTarget(\n", in: guide, keepingMarker: true)
        try FileManager.default.createDirectory(atPath: app + "/Sources/MyBackend", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: app + "/Tests/MyBackendTests", withIntermediateDirectories: true)
        try backend.write(toFile: app + "/Sources/MyBackend/CWBackend.swift", atomically: true, encoding: .utf8)
        try tests.write(toFile: app + "/Tests/MyBackendTests/CWBackendTests.swift", atomically: true, encoding: .utf8)
        let targetsEnd = try XCTUnwrap(manifest.range(of: "\n    ]\n)", options: .backwards), "the guide's manifest lost its shape")
        let withExample = manifest.replacingCharacters(
            in: targetsEnd,
            with: """

                    .target(name: "MyBackend", dependencies: [.product(name: "Xfer", package: "xfer")]),
                    \(testTarget.trimmingCharacters(in: .whitespacesAndNewlines))
                ]
            )
            """)
        try withExample.write(toFile: app + "/Package.swift", atomically: true, encoding: .utf8)
        return app
    }

    /// The text between `marker` and the next closing fence (with the marker's
    /// own first line when `keepingMarker`, for a block whose marker is its start).
    private static func block(after marker: String, in text: String, keepingMarker: Bool = false) throws -> String {
        let start = try XCTUnwrap(text.range(of: marker), "the guide lost \(marker.prefix(40))")
        let end = try XCTUnwrap(text.range(of: "\n```\n", range: start.upperBound..<text.endIndex))
        let from = keepingMarker ? text.index(start.lowerBound, offsetBy: "```swift\n".count) : start.upperBound
        return String(text[from..<end.lowerBound]) + "\n"
    }
}

// swift-tools-version:6.2
import PackageDescription

// The engine and the built-in backends: what an app embedding xfer depends
// on, so it needs swift-crypto and swift-log and nothing else. The `xfer`
// command and its receiver (Hummingbird, swift-argument-parser) are the
// package in CLI/, which depends on this one (Docs/backend-guide.md, section 0).
let package = Package(
    name: "xfer",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "Xfer", targets: ["Xfer"]),
        .library(name: "XferPatch", targets: ["XferPatch"]),
        .library(name: "XferMultipart", targets: ["XferMultipart"]),
        .library(name: "XferSequence", targets: ["XferSequence"]),
        .library(name: "XferS3", targets: ["XferS3"]),
        // S3 without the engine: what the receiver's object storage needs (Receiver/).
        .library(name: "XferS3Core", targets: ["XferS3Core"]),
        .library(name: "XferTus", targets: ["XferTus"]),
        .library(name: "XferIETF", targets: ["XferIETF"]),
        // For tests of a backend's steps, with no network (Docs/backend-guide.md).
        .library(name: "XferBackendTesting", targets: ["XferBackendTesting"]),
        // What the receiver in CLI/ shares with the engine (hex, CRCs, chunk sets).
        .library(name: "XferPrimitives", targets: ["XferPrimitives"]),
        // Every protocol's wire (headers, bodies, JSON), for the backends and the receiver alike.
        .library(name: "XferWire", targets: ["XferWire"]),
        // This repository's own test helpers and example, for CLI/'s end-to-end tests.
        .library(name: "XferTestSupport", targets: ["XferTestSupport"]),
        .library(name: "CWBackend", targets: ["CWBackend"]),
        .executable(name: "CWUpload", targets: ["CWUpload"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
    ],
    targets: [
        // C libraries from Debian's -dev packages.
        .systemLibrary(name: "CLMDB", path: "Sources/CLMDB", pkgConfig: "lmdb",
                       providers: [.apt(["liblmdb-dev"])]),
        .systemLibrary(name: "CCurl", path: "Sources/CCurl", pkgConfig: "libcurl",
                       providers: [.apt(["libcurl4-openssl-dev"])]),
        // Intel's ISA-L: CRC-32 and CRC-32C with the CPU's carry-less multiply
        // and CRC instructions.
        .systemLibrary(name: "CISAL", path: "Sources/CISAL", pkgConfig: "libisal",
                       providers: [.apt(["libisal-dev"])]),
        // glibc's malloc tuning (mallopt), which Swift's Glibc module leaves out.
        .systemLibrary(name: "CMalloc", path: "Sources/CMalloc"),
        // Typed wrappers around libcurl's variadic setopt/getinfo calls.
        .target(name: "CCurlShim", dependencies: ["CCurl"], path: "Sources/CCurlShim"),

        // What the engine, the backends and the receiver share (the receiver
        // does not depend on the engine): hexadecimal, CRCs (ISA-L's), chunk
        // sets and JSON string literals, written once.
        .target(name: "XferPrimitives", dependencies: ["CISAL", "CCRC64"], path: "Sources/XferPrimitives"),
        // CRC-64/NVME's bulk by carry-less multiplication: Debian's ISA-L has none.
        .target(name: "CCRC64", path: "Sources/CCRC64"),

        // Each protocol's wire written once, for both sides: its headers, bodies and answers,
        // read and written (a folder per protocol), the HTTP fields they share (Content-Range,
        // Content-Digest) and the one JSON codec. What a client backend writes, the receiver's
        // routes read with the same code, and the other way round (Docs/architecture.md).
        .target(name: "XferWire", dependencies: ["XferPrimitives"], path: "Sources/XferWire"),

        // The engine.
        .target(
            name: "Xfer",
            dependencies: [
                "XferPrimitives", "XferWire", "CLMDB", "CCurlShim", "CMalloc",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/Xfer"
        ),

        .target(name: "XferBackendTesting", dependencies: ["Xfer"], path: "Sources/XferBackendTesting"),

        // Built-in backends, written against Xfer's public API only.
        // Each speaks its protocol through XferWire, as the receiver's routes do.
        .target(name: "XferPatch", dependencies: ["Xfer", "XferWire"], path: "Backends/Patch"),
        .target(name: "XferMultipart", dependencies: ["Xfer", "XferWire"], path: "Backends/Multipart"),
        .target(name: "XferSequence", dependencies: ["Xfer", "XferWire"], path: "Backends/Sequence"),
        // S3 described and read without sending anything: Signature V4, the object and multipart
        // requests and their answers, S3's XML and errors, the AWS credentials chain (its few
        // HTTP calls through a fetcher the caller gives). Apart from the engine so that the
        // receiver, which sends with AsyncHTTPClient, links neither LMDB nor libcurl.
        .target(
            name: "XferS3Core", dependencies: ["XferPrimitives", "XferWire", .product(name: "Crypto", package: "swift-crypto")],
            path: "Sources/XferS3Core"),
        .target(
            name: "XferS3",
            dependencies: ["Xfer", "XferS3Core", "XferPrimitives", .product(name: "Crypto", package: "swift-crypto")],
            path: "Backends/S3"),
        .target(
            name: "XferTus", dependencies: ["Xfer", "XferWire", .product(name: "Crypto", package: "swift-crypto")], path: "Backends/Tus"),
        .target(name: "XferIETF", dependencies: ["Xfer", "XferWire"], path: "Backends/IETF"),

        // A backend written outside the engine against its public API only,
        // and a program embedding the engine with it (Docs/backend-guide.md).
        .target(name: "CWBackend", dependencies: ["Xfer"], path: "Examples/CustomBackend/Sources/CWBackend"),
        .executableTarget(
            name: "CWUpload", dependencies: ["Xfer", "CWBackend"], path: "Examples/CustomBackend/Sources/CWUpload"),

        // The example backend's own tests, with the testing product alone: the
        // guide's section 6 shows them word for word (BackendGuideTests).
        .testTarget(
            name: "CWBackendTests", dependencies: ["CWBackend", "Xfer", "XferBackendTesting"],
            path: "Examples/CustomBackend/Tests/CWBackendTests"),

        .target(name: "XferTestSupport", path: "Tests/XferTestSupport"),
        // The wire on its own: each protocol's round trips (what one side writes, the other
        // reads back) and the parsers' hostile inputs, in one place.
        .testTarget(name: "XferWireTests", dependencies: ["XferWire", "XferPrimitives"], path: "Tests/XferWireTests"),
        .testTarget(
            name: "XferTests",
            dependencies: [
                "Xfer", "XferPrimitives", "XferPatch", "XferMultipart", "XferSequence", "XferS3", "XferS3Core", "XferTus", "XferIETF",
                "XferTestSupport",
            ],
            path: "Tests/XferTests"
        ),
        // The built-in backends' steps, tested as a user's backend would be:
        // through Xfer's public API and XferBackendTesting, no network.
        .testTarget(
            name: "XferBackendTests",
            dependencies: [
                "Xfer", "XferBackendTesting", "XferPrimitives", "XferPatch", "XferMultipart", "XferSequence", "XferS3", "XferS3Core", "XferTus",
                "XferIETF",
            ],
            path: "Tests/XferBackendTests"
        ),

        // State-store benchmark: LMDB (the product's store) against SQLite,
        // reached through the engine's `Benchmarks` SPI. SQLite stays out of
        // the product: nothing above depends on these targets.
        .systemLibrary(name: "CSQLite", path: "Benchmarks/StateStores/CSQLite", pkgConfig: "sqlite3",
                       providers: [.apt(["libsqlite3-dev"])]),
        .executableTarget(
            name: "xfer-store-bench", dependencies: ["Xfer", "XferPatch", "CSQLite"],
            path: "Benchmarks/StateStores/XferStoreBench"),
    ]
)
